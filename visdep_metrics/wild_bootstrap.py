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

import functools
from collections.abc import Iterator

import numpy as np

# Resamples of the random sign patterns (the smallest p attainable is 1 / RESAMPLES); (RESAMPLES + 1) α is an
# integer at α = 0.05 and 0.01.
RESAMPLES = 1999
_BISECTIONS = 64
# Bounds are searched within this many unrestricted standard errors of the mean: a bound past it is none.
_SEARCH_SE = 1e4
# Weights held at once (resamples * clusters).
_BATCH_ELEMENTS = 1_000_000
# The weights of a number of clusters are kept for the next call up to this many (16 MB; the last eight counts kept).
_CACHED_ELEMENTS = 2_000_000


def _sign_batches(g: int) -> Iterator[np.ndarray]:
    """The Rademacher weights of g clusters, (resamples, g) in batches of at most _BATCH_ELEMENTS, the first resample
    all ones: every sign pattern where 2^g ≤ RESAMPLES, else RESAMPLES − 1 more drawn with a fixed seed (the same in
    every call, so a report is reproducible)."""
    if 2**g <= RESAMPLES:
        yield 1.0 - 2.0 * ((np.arange(2**g)[:, None] >> np.arange(g)) & 1)
        return
    yield np.ones((1, g))
    rng = np.random.default_rng(g)
    step = max(1, _BATCH_ELEMENTS // g)
    for start in range(1, RESAMPLES, step):
        yield 1.0 - 2.0 * rng.integers(0, 2, size=(min(step, RESAMPLES - start), g), dtype=np.int8)


@functools.lru_cache(maxsize=8)
def _signs(g: int) -> np.ndarray:
    """All of `_sign_batches(g)` at once, kept for the last few g: the audit and the bench test the same groups again
    and again, and drawing the weights cost more than using them."""
    signs = np.concatenate(list(_sign_batches(g)))
    signs.setflags(write=False)
    return signs


def _signed_sums(columns: np.ndarray) -> np.ndarray:
    """Each resample's Σ_g w_g x_g of each column of `columns` (G, k): (resamples, k)."""
    g = columns.shape[0]
    if min(2**g, RESAMPLES) * g <= _CACHED_ELEMENTS:
        return _signs(g) @ columns
    return np.concatenate([signs @ columns for signs in _sign_batches(g)])


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

    se2 = (se**2)[:, None, None]
    quad_a, quad_b2, a_sum = quad_a[:, None], 2 * quad_b[:, None], a_sum[:, None]

    def p_value(delta: np.ndarray) -> np.ndarray:
        """p(δ) per row and column of δ (rows, m). |t*| ≥ |t| is compared squared and multiplied out,
        (A − δC)² se² ≥ (ȳ − δ)² c Q(δ), Q the resample's residual quadratic (≤ 0: t* infinite, unless A = δC); the
        tolerance keeps rounding from dropping the identity resample, whose t* is t itself."""
        d = delta[:, :, None]
        lhs = (a_sum - d * c_sum) ** 2 * se2
        rhs = ((mean[:, None] - delta) ** 2 * (c * (1 - 1e-9) ** 2))[:, :, None] * (quad_a + d * (quad_b2 + d * quad_e))
        share = ((lhs >= rhs) & (lhs > 0)).mean(axis=2)
        return np.where(delta == mean[:, None], 1.0, share)  # t = 0: every resample is as extreme

    alpha = 1 - confidence_level
    # both bounds at once, bisected between the mean (kept) and _SEARCH_SE standard errors out
    inside = np.repeat(mean[:, None], 2, axis=1)
    outside = mean[:, None] + np.array([-1.0, 1.0]) * _SEARCH_SE * se[:, None]
    reachable = p_value(outside) < alpha
    for _ in range(_BISECTIONS):
        middle = (inside + outside) / 2
        rejected = p_value(middle) < alpha
        inside, outside = np.where(rejected, inside, middle), np.where(rejected, middle, outside)
    bounds = np.where(reachable & (se[:, None] > 0), inside, np.nan)
    # where nothing varies between clusters (se = 0) no t is defined: no p either
    return bounds[:, 0], bounds[:, 1], np.where(se > 0, p_value(np.zeros((rows, 1)))[:, 0], np.nan)
