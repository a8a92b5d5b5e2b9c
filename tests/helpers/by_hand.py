"""The audit's interval of an accuracy written out by hand, for tests to check `visdep_metrics.stats` against:
the one-way ANOVA design effect by pandas group-bys, Fisher's sampling variance of the intraclass correlation for
its degrees of freedom, and Clopper and Pearson's interval on the independent answers that leaves; and a Visual
Gain's interval over shared prompts, built from it."""

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


def _gain_variances(seen: np.ndarray, blind: np.ndarray, unit: np.ndarray,
                    blind_unit: np.ndarray) -> tuple[float, float, float, float]:
    """(Var d̄, Var b̄, Var v̄, df of the gain) over questions sharing one factor, `unit` (each question's other units
    its own): each variance s² (1 + ρ (ν − 1)) / N by pandas group-bys, the blind accuracy's over `blind_unit`; the df
    Satterthwaite's, deff² / ((1 − ρ)² / (N − 1) + (ρ ν)² / (N / ν − 1)), at most N / ν − 1 where ρ (ν − 1) ≥ 1."""
    n, gain = len(seen), seen - blind

    def variance(values: np.ndarray, over: np.ndarray) -> tuple[float, float, float]:
        rho, nu, _, _ = one_way(values, over) if len(np.unique(over)) < n else (0.0, 1.0, 0.0, n)
        return float(np.var(values, ddof=1)) * (1 + rho * (nu - 1)) / n, rho, nu

    (var_d, rho, nu), (var_b, _, _), (var_v, _, _) = variance(gain, unit), variance(blind, blind_unit), variance(
        seen, unit)
    deff = 1 + rho * (nu - 1)
    df = deff**2 / ((1 - rho) ** 2 / (n - 1) + (rho * nu) ** 2 / (n / nu - 1))
    if rho * (nu - 1) >= 1:
        df = min(df, n / nu - 1)
    return var_d, var_b, var_v, df


def _mover(d: float, slope: float, var_e: float, df: float, x: float, low_x: float,
           high_x: float) -> tuple[float, float]:
    """d's interval from x's [low_x, high_x] scaled by the slope and a t on df for the rest, added as Zou and Donner
    (2008) add uncorrelated intervals: where d rises with x its lower side is x's lower side."""
    t = scipy.stats.t.ppf(0.975, df)
    below, above = (x - low_x, high_x - x) if slope > 0 else (high_x - x, x - low_x)
    return d - np.sqrt(slope**2 * below**2 + t**2 * var_e), d + np.sqrt(slope**2 * above**2 + t**2 * var_e)


def visual_gain_interval(seen: np.ndarray, blind: np.ndarray, prompt: np.ndarray) -> tuple[float, float]:
    """95% interval of the Visual Gain mean(seen − blind) over questions each about a video of its own whose blind
    prompts are shared (one factor, the prompts), as docs/statistics.md defines it: the gain's deviation split into λ
    times the blind accuracy's and an uncorrelated rest, λ = Cov(d̄, b̄) / Var b̄ = (Var v̄ − Var d̄ − Var b̄) / (2 Var
    b̄), Var e = Var d̄ − λ² Var b̄; then where λ < 0 high = d̄ + √(λ² (b̄ − l_B)² + t² Var e), low = d̄ − √(λ² (u_B −
    b̄)² + t² Var e), [l_B, u_B] the blind accuracy's interval (`clustered_accuracy_interval`), t on the gain's df."""
    var_d, var_b, var_v, df = _gain_variances(seen, blind, prompt, prompt)
    slope = (var_v - var_d - var_b) / (2 * var_b)
    low_b, high_b = clustered_accuracy_interval(blind, prompt)
    return _mover(float(np.mean(seen - blind)), slope, max(var_d - slope**2 * var_b, 0.0), df, float(blind.mean()),
                  low_b, high_b)


def visual_gain_interval_over_videos(seen: np.ndarray, blind: np.ndarray, video: np.ndarray,
                                     seen_interval: tuple[float, float]) -> tuple[float, float]:
    """95% interval of the Visual Gain mean(seen − blind) over questions that share videos (one factor, the videos,
    of equal sizes) and no prompt, as docs/statistics.md defines it: the gain's deviation split into λ times the video
    accuracy's, λ = Cov(d̄, v̄) / Var v̄ = (Var v̄ + Var d̄ − Var b̄) / (2 Var v̄), the blind accuracy's variance on
    independent answers; then where λ > 0 low = d̄ − √(λ² (v̄ − l_V)² + t² Var e), high = d̄ + √(λ² (u_V − v̄)² + t² Var
    e), [l_V, u_V] the video accuracy's interval as reported (`seen_interval`), t on the gain's df (at most G − 1)."""
    var_d, var_b, var_v, df = _gain_variances(seen, blind, video, np.arange(len(seen)))
    slope = (var_v + var_d - var_b) / (2 * var_v)
    return _mover(float(np.mean(seen - blind)), slope, max(var_d - slope**2 * var_v, 0.0),
                  min(df, len(np.unique(video)) - 1), float(seen.mean()), *seen_interval)
