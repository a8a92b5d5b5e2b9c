"""A Visual Gain's interval where its questions share prompts (`visdep_metrics.stats.crossed_intervals` with
`blind_parts`; docs/statistics.md says why and what the benches measured).

Where a group's questions share prompts, a Visual Gain's spread comes mostly from a few prompts' blind answers, each
a copy of one answer: its estimate and its variance move together (at accuracy 0.92 a gain is low exactly where the
big prompts were answered right blind, and its variance small), and a symmetric t lies on one side of the truth too
often. The blind accuracy's own interval has that shape (Clopper-Pearson's, on its prompts). So split the gain's
deviation into the part that moves with the blind accuracy and the rest, d̄ − Δ = −β (b̄ − p_B) + e, β = −Cov(d̄,
b̄) / Var(b̄) = (Var b̄ + Var d̄ − Var v̄) / (2 Var b̄), Var e = Var d̄ − β² Var b̄ ≥ 0 (each variance the ANOVA
design effect's, so they polarise), e uncorrelated with b̄; and add the two parts' intervals as Zou & Donner's
(2008) MOVER adds uncorrelated ones: for β ≥ 0

    high = d̄ + √(β² (b̄ − l_B)² + t² Var e),      low = d̄ − √(β² (u_B − b̄)² + t² Var e),

[l_B, u_B] the blind accuracy's interval, t that of the gain's degrees of freedom (for β < 0 the blind sides
swap). The p-value of H0: no gain is the 1 − level at which the interval reaches 0 (bisection), so p < α exactly
when the interval excludes 0, as for a t.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
from numpy.typing import ArrayLike

from visdep_metrics.proportions import proportion_bounds

GAIN = "the blind accuracy's Clopper-Pearson with a t for the rest (MOVER)"


def checked_blind_parts(blind_parts: ArrayLike | None, gain: np.ndarray, blind_accuracy: np.ndarray) -> np.ndarray:
    """`crossed_intervals`' blind_parts as (outputs,) indices, -1 for none, each gain's an output that is a blind
    accuracy; gain, blind_accuracy: (outputs,) booleans, the outputs that may be either."""
    outputs = len(gain)
    parts = np.full(outputs, -1) if blind_parts is None else np.asarray(blind_parts, dtype=np.int64).ravel()
    named = np.flatnonzero(parts >= 0)
    if parts.shape != (outputs,) or (parts >= outputs).any() or not (gain[named] & blind_accuracy[parts[named]]).all():
        raise ValueError("blind_parts must give, for each Visual Gain (a robust difference), the index of its blind "
                         f"accuracy (a blind proportion) among the {outputs} outputs, and -1 elsewhere")
    return parts


def visual_gains(y: np.ndarray, blind_part: np.ndarray, deff: np.ndarray, df: np.ndarray,
                 design_effects: Callable[[np.ndarray], np.ndarray], confidence_level: float,
                 found: tuple[np.ndarray, ...]) -> None:
    """Replace (in place) the t interval, p-value and method in `found` (low, high, p, method: one group's, per output)
    of each Visual Gain d = v − b among the rows of y (rows with blind_part[o] ≥ 0, their blind accuracy b the row
    blind_part[o]), in a group whose questions share prompts (module docstring). deff, df: each output's design
    effect and degrees of freedom; design_effects(rows): the ANOVA design effect of each row of video answers."""
    low, high, p, method = found
    size = y.shape[1]
    gains = np.array([o for o in np.flatnonzero(blind_part >= 0)
                      if np.isfinite(low[o]) and np.isfinite(low[blind_part[o]])], dtype=np.int64)
    if not gains.size:
        return
    blinds = blind_part[gains]
    gain, blind = y[gains], y[blinds]
    seen = gain + blind

    def spread(rows: np.ndarray) -> np.ndarray:
        return ((rows - rows.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)

    spread_b = spread(blind)
    var_d, var_b, var_v = (sums / (size - 1) * design_effect / size for sums, design_effect in
                           ((spread(gain), deff[gains]), (spread_b, deff[blinds]),
                            (spread(seen), design_effects(seen))))
    varies = var_b > 0  # a blind accuracy of 0 or 1 has no spread to follow: the t stays
    beta = (var_b + var_d - var_v) / (2 * np.where(varies, var_b, 1.0))
    parts = GainParts(gain.mean(axis=1), blind.mean(axis=1), beta, np.maximum(var_d - beta**2 * var_b, 0.0),
                       spread_b, size, size / deff[blinds], df[blinds], df[gains])
    given = gains[varies]
    low[given], high[given] = (bound[varies] for bound in parts.bounds(np.full(len(gains), confidence_level)))
    p[given], method[given] = parts.p_values()[varies], GAIN


@dataclass(frozen=True)
class GainParts:
    """Visual Gains split as `visual_gains` splits them, one per entry: the mean d, the blind accuracy b, the slope
    β of the gain's deviation on the blind accuracy's, the rest's variance Var e; the blind accuracy's spread, answers
    and df, the gain's df; over `size` questions."""

    d: np.ndarray
    b: np.ndarray
    beta: np.ndarray
    var_e: np.ndarray
    spread_b: np.ndarray
    size: int
    n_eff_b: np.ndarray
    df_b: np.ndarray
    df_d: np.ndarray

    def bounds(self, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), each gain at its own confidence level."""
        lb, ub = proportion_bounds(self.b, self.spread_b, self.size, self.n_eff_b, self.df_b, level)
        rising = self.beta >= 0
        below, above = np.where(rising, self.b - lb, ub - self.b), np.where(rising, ub - self.b, self.b - lb)
        rest = scipy.special.stdtrit(self.df_d, 0.5 + level / 2) ** 2 * self.var_e
        return (self.d - np.sqrt(self.beta**2 * above**2 + rest), self.d + np.sqrt(self.beta**2 * below**2 + rest))

    def p_values(self) -> np.ndarray:
        """1 − the level at which each interval's bound on its gain's side reaches 0 (bounds widen as the level
        rises), by bisection; 1 for a gain of 0."""
        positive = self.d > 0
        low_level = np.full(self.d.shape, 1e-9)  # at a level of 0, t and z are 0
        high_level = np.full(self.d.shape, 1.0 - 1e-15)
        for _ in range(48):
            middle = (low_level + high_level) / 2
            low, high = self.bounds(middle)
            short = np.where(positive, low > 0, high < 0)  # the interval at this level still excludes 0
            low_level, high_level = np.where(short, middle, low_level), np.where(short, high_level, middle)
        return np.where(self.d == 0, 1.0, 1.0 - (low_level + high_level) / 2)
