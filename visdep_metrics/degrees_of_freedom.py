"""The degrees of freedom of the t (and of the (z / t)² scaling of a proportion's answers) for
`visdep_metrics.stats.crossed_intervals`: those of the variance each interval actually uses (docs/statistics.md says why
and what the simulations measured).

- The ANOVA design effect 1 + ρ_v (ν_v − 1) + ρ_p (ν_p − 1): Satterthwaite's df of its independent, video and prompt
  parts, each estimated from as many effective units as it has (N, and N / ν videos and prompts); at most N / ν − 1
  of a factor that adds at least as much as the independent part. A proportion's independent part, p (1 − p) / N,
  is no estimate and costs none. A blind accuracy, whose deff is the ANOVA one alone, has the df of that estimate,
  2 deff² / Var(deff̂), from Fisher's sampling variance of the intraclass correlation.
- A cluster-robust (sandwich) variance, Σ_g S_g² over a dimension's cluster sums S_g, has the df of those sums:
  Satterthwaite's (Σ v_g)² / Σ v_g² − 1 with v_g = Var(S_g) under the exchangeable working model whose design effect
  is the one used (Bell & McCaffrey 2002, with Imbens & Kolesár 2016's working model): v_g ∝ n_g (1 + ρ (n_g − 1)).
  G − 1 over G clusters of equal size, whatever ρ; Kish's N / ν − 1 where ρ = 0; over four prompts holding most of a
  group, about 3. The videos bound the df wherever a video holds two or more questions, for video answers and where
  the sandwich is the variance used; the prompts where they are shared (ν ≥ `stats.SHARED_NU`: over prompts nearly
  all their own, ν near 1, any excess of the deff would pass for a ρ of 1) and the sandwich is the variance used.
"""

from __future__ import annotations

import numpy as np

DF_MAX = 1e9  # degrees of freedom past which t is the normal quantile (a variance estimated from nothing)


def effective_units(units: np.ndarray) -> float:
    """Kish's effective number of units of questions labelled by `units`: N / ν = N² / Σ n_u²."""
    sizes = np.unique(np.asarray(units), return_counts=True)[1].astype(np.float64)
    return float(sizes.sum() ** 2 / (sizes**2).sum())


def effective_clusters(sizes: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """(Σ v_g)² / Σ v_g² per value of rho (rows,), v_g = n_g (1 + ρ (n_g − 1)) the variance of cluster g's sum under
    an exchangeable working model with intraclass correlation ρ: how many clusters a sum of their squares rests on."""
    n = np.asarray(sizes, dtype=np.float64)[None, :]
    v = n * (1.0 + np.clip(np.asarray(rho, dtype=np.float64), 0.0, 1.0)[:, None] * (n - 1.0))
    return v.sum(axis=1) ** 2 / (v**2).sum(axis=1)


def anova_degrees(n: int, deff: np.ndarray, factors: list[tuple[np.ndarray, float, np.ndarray]],
                  is_proportion: np.ndarray, is_robust: np.ndarray) -> np.ndarray:
    """df of the ANOVA design effect deff (rows,) over n questions; factors: (ρ, ν, Var(ρ̂)) of the videos and the
    prompts (module docstring)."""
    independent = np.where(is_proportion, 0.0, 1.0 / max(n - 1.0, 1.0))
    shared = sum((rho * nu) ** 2 / max(n / nu - 1.0, 1.0) for rho, nu, _ in factors)
    rest = 1 - sum(rho for rho, _, _ in factors)
    with np.errstate(divide="ignore"):
        df = np.minimum(deff**2 / (rest**2 * independent + shared), DF_MAX)
    # a factor that adds at least as much as the independent part rests on its own effective units alone (the t with
    # G − 1 degrees of freedom Cameron, Gelbach & Miller recommend for few clusters)
    for rho, nu, _ in factors:
        df = np.where(rho * (nu - 1) >= 1, np.minimum(df, max(n / nu - 1.0, 1.0)), df)
    # a blind accuracy estimates ρ, not a spread of cluster sums: the df of its deff, 2 deff² / Var(deff) (a scaled
    # χ² matched to the ICC's sampling variance; copies that agree leave ρ near 1 and nearly certain)
    with np.errstate(divide="ignore"):
        estimated = 2 * deff**2 / sum((nu - 1) ** 2 * variance for _, nu, variance in factors)
    return np.where(is_proportion & ~is_robust, np.minimum(estimated, DF_MAX), df)


def sandwich_degrees(df: np.ndarray, deff: np.ndarray, uses_sandwich: np.ndarray, is_robust: np.ndarray,
                     dimensions: list[tuple[np.ndarray, np.ndarray, float, bool]]) -> np.ndarray:
    """df (rows,) bounded by the effective clusters of each dimension that counts as shared, where the sandwich is
    the variance used (uses_sandwich), and for the videos (the first dimension) also wherever the answers are video
    answers (is_robust). dimensions: (unit sizes, ρ̂, ν, shared) of the videos, then the prompts where known. The
    working model's ρ for a dimension is at least the share it would need to give the deff used on its own,
    (deff − 1) / (ν − 1)."""
    for d, (sizes, rho, nu, shared) in enumerate(dimensions):
        bounded = (uses_sandwich | is_robust) if d == 0 else uses_sandwich
        if not shared or not bounded.any():
            continue
        working = np.maximum(np.nan_to_num(rho), (deff - 1.0) / max(nu - 1.0, 1e-12))
        clusters = effective_clusters(sizes, working)
        df = np.where(bounded, np.minimum(df, np.maximum(clusters - 1.0, 1.0)), df)
    return df
