"""The restricted wild cluster bootstrap (WCR) of a mean over a few dominant clusters, and its interval by test
inversion: where a few prompts hold much of a group, `visdep_metrics.stats.crossed_intervals` takes a difference's
interval and p-value from here (docs/statistics.md says where and what the simulation measured).

The test of H0: mean = δ (MacKinnon, Nielsen & Webb 2021; Roodman, MacKinnon, Nielsen & Webb 2019 for the
inversion): the statistic is t(δ) = (ȳ − δ) / se, se the one-way cluster-robust standard error over the clusters
(with G / (G − 1)). The bootstrap imposes the null: each cluster's sum S_g − n_g δ is multiplied by a Rademacher
weight w_g (each resample flips the sign of whole clusters), and t*(δ) is the same statistic of the resampled data.
p(δ) is the share of resamples with |t*(δ)| ≥ |t(δ)|, the identity resample counted among them; where 2^G is at most
`RESAMPLES` every sign pattern is used (the exact sign-flip test). Every term of t*(δ) is linear or quadratic in δ,
so after one product of the weights with four columns per row the test at any δ costs O(resamples): the interval
{δ : p(δ) ≥ α} is found by bisection outward from ȳ, and p < α exactly when the interval excludes 0.
"""

from __future__ import annotations

import numpy as np

# Resamples of the random sign patterns (the smallest p attainable is 1 / RESAMPLES); (RESAMPLES + 1) α is an
# integer at α = 0.05 and 0.01.
RESAMPLES = 1999
_BISECTIONS = 64
# Bounds are searched within this many unrestricted standard errors of the mean: a bound past it is none.
_SEARCH_SE = 1e4
# Weights held at once (resamples * clusters).
_BATCH_ELEMENTS = 1_000_000


def _signed_sums(columns: np.ndarray) -> np.ndarray:
    """Each resample's Σ_g w_g x_g of each column of `columns` (G, k): (resamples, k). Rademacher weights, the first
    resample all ones: every sign pattern where 2^G ≤ RESAMPLES, else RESAMPLES − 1 more drawn with a fixed seed (the
    same in every call, so a report is reproducible), a batch at a time."""
    g = columns.shape[0]
    if 2**g <= RESAMPLES:
        return (1.0 - 2.0 * ((np.arange(2**g)[:, None] >> np.arange(g)) & 1)) @ columns
    rng = np.random.default_rng(g)
    step = max(1, _BATCH_ELEMENTS // g)
    found = [columns.sum(axis=0, keepdims=True)]
    for start in range(1, RESAMPLES, step):
        signs = rng.integers(0, 2, size=(min(step, RESAMPLES - start), g), dtype=np.int8)
        found.append((1.0 - 2.0 * signs) @ columns)
    return np.concatenate(found)


def wild_intervals(sums: np.ndarray, sizes: np.ndarray,
                   confidence_level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, p of H0: mean = 0) per row of `sums` (rows, G): each row's cluster sums of one quantity, `sizes`
    (G,) the clusters' question counts. A bound the test cannot reach is NaN (no interval)."""
    s = np.asarray(sums, dtype=np.float64)
    n_g = np.asarray(sizes, dtype=np.float64)
    rows, g = s.shape
    if g < 2:  # one cluster: no sign to flip against another
        return np.full(rows, np.nan), np.full(rows, np.nan), np.full(rows, np.nan)
    n = n_g.sum()
    c = g / (g - 1)
    mean = s.sum(axis=1) / n
    se = np.sqrt(c * ((s - mean[:, None] * n_g) ** 2).sum(axis=1)) / n
    # per resample b: A = Σ w S, C = Σ w n, F = Σ w S n, H = Σ w n²
    products = _signed_sums(np.concatenate([s.T, (s * n_g).T, n_g[:, None], (n_g**2)[:, None]], axis=1))
    a_sum, f_sum = products[:, :rows].T, products[:, rows:2 * rows].T  # (rows, resamples)
    c_sum, h_sum = products[:, -2], products[:, -1]
    nu = (n_g**2).sum() / n**2
    s2, sn = (s**2).sum(axis=1)[:, None], (s * n_g).sum(axis=1)[:, None]
    # the resample's residual cluster sums are α + δ β: Σ α², Σ α β, Σ β² in closed form
    quad_a = s2 - 2 * a_sum * f_sum / n + a_sum**2 * nu
    quad_b = -sn + c_sum * f_sum / n + a_sum * h_sum / n - a_sum * c_sum * nu
    quad_e = (n_g**2).sum() - 2 * c_sum * h_sum / n + c_sum**2 * nu

    def p_value(delta: np.ndarray) -> np.ndarray:
        """p(δ) per row, δ (rows,)."""
        d = delta[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            t_star = np.abs(a_sum - d * c_sum) / np.sqrt(np.maximum(c * (quad_a + 2 * d * quad_b + d**2 * quad_e), 0))
            t = np.abs(mean - delta) / se
        # the identity resample's t* is t itself: the tolerance keeps rounding from dropping it
        return (np.nan_to_num(t_star, nan=0.0, posinf=np.inf) >= t[:, None] * (1 - 1e-9)).mean(axis=1)

    alpha = 1 - confidence_level
    bounds = []
    for side in (-1.0, 1.0):
        inside, outside = mean.copy(), mean + side * _SEARCH_SE * se
        reachable = p_value(outside) < alpha
        for _ in range(_BISECTIONS):
            middle = (inside + outside) / 2
            rejected = p_value(middle) < alpha
            inside, outside = np.where(rejected, inside, middle), np.where(rejected, middle, outside)
        bounds.append(np.where(reachable & (se > 0), inside, np.nan))
    return bounds[0], bounds[1], p_value(np.zeros(rows))
