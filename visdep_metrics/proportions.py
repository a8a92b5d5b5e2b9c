"""Clopper and Pearson's interval of proportions, the one every accuracy visdep reports gets
(`visdep_metrics.stats.crossed_intervals`: on the independent answers the design effect leaves, docs/statistics.md)."""

from __future__ import annotations

import numpy as np
import scipy.special
from numpy.typing import ArrayLike


def clopper_pearson(p: ArrayLike, n: ArrayLike, confidence_level: float) -> tuple[np.ndarray, np.ndarray]:
    """Clopper and Pearson's interval of a proportion p on n independent answers, n fractional as Korn and Graubard
    (1998) take it for clustered surveys: with x = p n right answers and α = 1 − confidence_level,

        low = B⁻¹(α / 2; x, n − x + 1),   high = B⁻¹(1 − α / 2; x + 1, n − x),

    B⁻¹ the quantile of the Beta distribution, low 0 where x = 0 and high 1 where x = n. Each bound is the one a
    one-sided binomial test at α / 2 would keep, so each tail (the interval wholly below the truth, wholly above it)
    is at most α / 2 on n independent answers."""
    alpha = 1 - confidence_level
    x = np.asarray(p, dtype=np.float64) * np.asarray(n, dtype=np.float64)
    size = np.broadcast_to(np.asarray(n, dtype=np.float64), x.shape)
    tiny = np.finfo(np.float64).tiny  # both Beta parameters must be positive; the np.where keeps the bound
    low = np.where(x > 0, scipy.special.betaincinv(np.maximum(x, tiny), size - x + 1, alpha / 2), 0.0)
    high = np.where(x < size, scipy.special.betaincinv(x + 1, np.maximum(size - x, tiny), 1 - alpha / 2), 1.0)
    return low, high


def proportion_bounds(mean: np.ndarray, spread: np.ndarray, size: int, n_eff: np.ndarray, df: np.ndarray,
                      confidence_level: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson's interval of proportions `mean` over `size` questions (`spread`: Σ (y − ȳ)² of each) on n_eff
    independent answers, fewer by (z / t_df)²: the variance is estimated from df effective units (Korn & Graubard
    1998)."""
    # the binomial variance p (1 - p) / n is one model's; a mean over several models' correctness varies less, by the
    # ratio of the binomial variance to its actual spread
    with np.errstate(invalid="ignore", divide="ignore"):
        binomial = np.where(spread > 0, size * mean * (1 - mean) / spread, 1.0)
    t = scipy.special.stdtrit(df, 0.5 + confidence_level / 2)
    z = scipy.special.ndtri(0.5 + confidence_level / 2)
    return clopper_pearson(mean, n_eff * np.maximum(binomial, 1.0) * (z / t) ** 2, confidence_level)
