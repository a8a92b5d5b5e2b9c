"""The audit's interval of an accuracy written out by hand, for tests to check `visdep_metrics.stats` against:
the one-way ANOVA design effect by pandas group-bys, Fisher's sampling variance of the intraclass correlation for
its degrees of freedom, and Clopper and Pearson's interval on the independent answers that leaves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.special
import scipy.stats

Z = scipy.stats.norm.ppf(0.975)


def by_hand_clopper_pearson(p: float, n: float, df: float) -> tuple[float, float]:
    """Clopper and Pearson's interval on n (z / t_df)² answers, x = p n of them right, found by its definition rather
    than a Beta quantile: the lower bound is the proportion at which x or more right answers have probability 2.5%,
    P(X ≥ x) = I_low(x, n − x + 1), the upper the one at which x or fewer have, 1 − I_high(x + 1, n − x); each solved
    for by root finding on the regularised incomplete Beta function (the binomial's tails, for fractional n)."""
    n = n * (Z / scipy.stats.t.ppf(0.975, df)) ** 2
    x = p * n

    def at(a: float, b: float, level: float) -> float:
        return scipy.optimize.brentq(lambda q: scipy.special.betainc(a, b, q) - level, 0.0, 1.0, xtol=1e-14)

    low = at(x, n - x + 1, 0.025) if x > 0 else 0.0
    high = at(x + 1, n - x, 0.975) if x < n else 1.0
    return low, high


def one_way(values: np.ndarray, unit: np.ndarray) -> tuple[float, float, float, int]:
    """(ρ, ν, n₀, C): the one-way ANOVA intraclass correlation of `values` over `unit` (clipped to [0, 1]), Σ n_u² / N,
    the ANOVA's n₀ and the number of units."""
    frame = pd.DataFrame({"y": values, "unit": unit})
    n = len(frame)
    g = frame.groupby("unit")["y"]
    sizes, means = g.size(), g.mean()
    c = len(sizes)
    ssb = (sizes * (means - frame["y"].mean()) ** 2).sum()
    ssw = ((frame["y"] - g.transform("mean")) ** 2).sum()
    msb, msw = ssb / (c - 1), ssw / (n - c)
    nu = (sizes**2).sum() / n
    n0 = (n - nu) / (c - 1)
    return min(max((msb - msw) / (msb + (n0 - 1) * msw), 0.0), 1.0), nu, n0, c


def anova_design_effect(values: np.ndarray, units: dict[str, np.ndarray]) -> float:
    """1 + Σ ρ_u (ν_u − 1), ρ_u the one-way ANOVA intraclass correlation, by pandas group-bys."""
    deff = 1.0
    for unit in units.values():
        rho, nu, _, _ = one_way(values, unit)
        deff += rho * (nu - 1)
    return deff


def clustered_accuracy_interval(correct: np.ndarray, unit: np.ndarray) -> tuple[float, float]:
    """95% interval of the mean of 0/1 `correct` whose questions share `unit` (one factor): Clopper-Pearson's on N /
    deff answers with deff = 1 + ρ (ν − 1), its df 2 deff² / ((ν − 1)² Var ρ̂), Var ρ̂ = 2 (1 − ρ)² (1 + (n₀ − 1) ρ)² /
    (n₀ (n₀ − 1) (C − 1)); where every answer is equal, deff = ν on N / ν − 1 df."""
    n, p = len(correct), float(np.mean(correct))
    if correct.min() == correct.max():
        nu = (pd.Series(unit).value_counts() ** 2).sum() / n
        return by_hand_clopper_pearson(p, n / nu, max(n / nu - 1, 1))
    rho, nu, n0, c = one_way(correct, unit)
    deff = 1 + rho * (nu - 1)
    if c == n:
        return by_hand_clopper_pearson(p, n, 1e9)
    variance = 2 * (1 - rho) ** 2 * (1 + (n0 - 1) * rho) ** 2 / (n0 * (n0 - 1) * (c - 1))
    df = min(2 * deff**2 / ((nu - 1) ** 2 * variance), 1e9) if variance > 0 else 1e9
    return by_hand_clopper_pearson(p, n / deff, df)
