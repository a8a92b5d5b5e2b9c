"""The interval of a difference of two binary answer vectors on the same questions (one model under two conditions:
the temporal ladder's Frame and Order Gains), for `visdep_metrics.stats.crossed_intervals(paired=...)`;
docs/statistics.md says why and what the benches measured.

Near the ceiling a condition agrees with the full video on most questions, and the few questions where the two
differ lie nearly all one way: the mean of the per-question differences d_q ∈ {−1, 0, +1} rests on a small,
right-skewed count, and a symmetric interval (a t, the prompts' sign flips) lies wholly below a real gain too often.
Tango's (1998) score interval follows that skew. Over n pairs, b of them right in the first row only (d = +1) and c
right in the second only (d = −1), Δ = p_b − p_c and Δ̂ = (b − c) / n; the score statistic of H0: Δ is

    Z(Δ) = (b − c − n Δ) / √(n (2 p̃_c + Δ (1 − Δ))),

p̃_c the maximum-likelihood estimate of p_c under the constraint p_b − p_c = Δ, the root in [0, 1] of
A p² + B p + C = 0 with A = 2n, B = −b − c + (2n − b + c) Δ, C = −c Δ (1 − Δ):
p̃_c = (√(B² − 4AC) − B) / (2A). The variance in the denominator is that of d under H0 (2 p_c + Δ (1 − Δ) =
p_b + p_c − Δ²), so it grows with Δ toward the rarer side where Δ̂'s own spread is small: the bounds are not
symmetric about Δ̂. Z(Δ) decreases in Δ, so the interval {Δ: |Z(Δ)| ≤ crit} is found by bisection on each side of Δ̂.

Questions that share videos and prompts are not n independent pairs. As for a proportion (`proportions`: Clopper and
Pearson's interval on N / deff answers, Korn & Graubard 1998) the counts are those of n / deff independent pairs, b
and c scaled alike; p̃_c is unchanged by the scaling, so Z becomes Z / √deff; and the critical value is the t of the
variance's degrees of freedom (scaling the counts by (z / t_df)² more and taking z is the same):

    {Δ: |Z(Δ)| / √deff ≤ t_df(1 − α / 2)},      p = 2 F_t,df(−|Z(0)| / √deff),   Z(0) = (b − c) / √(b + c),

McNemar's statistic on the effective counts, so p < α exactly when the interval excludes 0. deff is the variance of
the mean of d over the clusters relative to that of independent pairs (whose estimate at Δ̂ is Tango's denominator at
Δ̂, (b + c) / n − Δ̂²), estimated as `stats` does for a difference between models: the two-way cluster-robust
variance, never below the independent pairs' one; df those of that variance.
"""

from __future__ import annotations

import numpy as np
import scipy.special
from numpy.typing import ArrayLike

PAIRED = "Tango's score interval for paired answers on the design effect"
_STEPS = 64  # bisection halvings of an interval of width at most 2: below 1e-18


def checked_pairs(paired: ArrayLike | bool, combine: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`crossed_intervals`' paired as (outputs,) booleans, each paired output a difference of two binary rows: its
    contrast +1 on one value row and −1 on another, both rows 0 or 1."""
    outputs = combine.shape[0]
    flags = np.broadcast_to(np.asarray(paired, dtype=bool), (outputs,))
    for o in np.flatnonzero(flags):
        weights = combine[o][combine[o] != 0]
        rows = np.flatnonzero(combine[o])
        if sorted(weights.tolist()) != [-1.0, 1.0] or not np.isin(values[rows], (0.0, 1.0)).all():
            raise ValueError(f"paired output {o} must be +1 on one row of 0/1 answers and −1 on another (a "
                             "difference of two binary answer vectors on the same questions)")
    return flags


def tango_statistic(delta: ArrayLike, b: ArrayLike, c: ArrayLike, n: ArrayLike) -> np.ndarray:
    """Tango's score statistic Z(Δ) (module docstring) of b pairs (+1), c pairs (−1) among n, at Δ in [−1, 1]; ±inf
    where its variance is 0 and the numerator is not, 0 where both are."""
    delta, b, c, n = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (delta, b, c, n)))
    a_coefficient = 2 * n
    b_coefficient = -b - c + (2 * n - b + c) * delta
    c_coefficient = -c * delta * (1 - delta)
    root = np.sqrt(np.maximum(b_coefficient**2 - 4 * a_coefficient * c_coefficient, 0.0))
    p_c = np.clip((root - b_coefficient) / (2 * a_coefficient), 0.0, 1.0)
    numerator = b - c - n * delta
    variance = n * np.maximum(2 * p_c + delta * (1 - delta), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = numerator / np.sqrt(variance)
        return np.where(variance > 0, z, np.where(numerator == 0, 0.0, np.sign(numerator) * np.inf))


def tango_bounds(b: ArrayLike, c: ArrayLike, n: ArrayLike, critical: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The interval {Δ: |Z(Δ)| ≤ critical} of Tango's statistic (module docstring) for counts b, c of n (fractional
    counts allowed: effective ones), each element its own; by bisection, Z decreasing in Δ."""
    b, c, n, critical = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (b, c, n, critical)))
    if (b < 0).any() or (c < 0).any() or (b + c > n * (1 + 1e-12)).any() or (n <= 0).any():
        raise ValueError("paired counts need 0 <= b, c and b + c <= n, n > 0")
    if not (critical > 0).all():
        raise ValueError("the critical value must be positive")
    estimate = (b - c) / n

    def solve(lo: np.ndarray, hi: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Δ in [lo, hi] where Z(Δ) = target, Z decreasing (the end where Z never reaches it)."""
        for _ in range(_STEPS):
            middle = (lo + hi) / 2
            above = tango_statistic(middle, b, c, n) > target
            lo, hi = np.where(above, middle, lo), np.where(above, hi, middle)
        return (lo + hi) / 2

    low = np.where(tango_statistic(-1.0, b, c, n) <= critical, -1.0, solve(np.full_like(b, -1.0), estimate, critical))
    high = np.where(tango_statistic(1.0, b, c, n) >= -critical, 1.0, solve(estimate, np.ones_like(b), -critical))
    return low, high


def paired_intervals(y: np.ndarray, deff: np.ndarray, df: np.ndarray,
                     confidence_level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of y (rows, n): per-question differences in {−1, 0, +1} of two binary answer vectors, with the design
    effect and degrees of freedom of its mean: Tango's interval and McNemar's two-sided p on the n / deff effective
    pairs (module docstring). Rows without a discordant pair get NaN (nothing to scale)."""
    if not np.isin(y, (-1.0, 0.0, 1.0)).all():
        raise ValueError("paired differences must be −1, 0 or +1 per question")
    n = y.shape[1]
    b, c = (y > 0).sum(axis=1).astype(np.float64), (y < 0).sum(axis=1).astype(np.float64)
    discordant = b + c > 0
    scale = np.sqrt(np.where(discordant, np.maximum(deff, 1e-12), 1.0))
    critical = scipy.special.stdtrit(df, 0.5 + confidence_level / 2) * scale
    low, high = tango_bounds(b, c, np.full_like(b, n), critical)
    with np.errstate(invalid="ignore", divide="ignore"):
        z0 = np.where(discordant, (b - c) / np.sqrt(np.where(discordant, b + c, 1.0)), 0.0) / scale
    p = 2 * scipy.special.stdtr(df, -np.abs(z0))
    return (np.where(discordant, low, np.nan), np.where(discordant, high, np.nan), np.where(discordant, p, np.nan))
