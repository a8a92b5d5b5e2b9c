"""A Visual Gain's interval where its questions share prompts, or share videos and no prompt
(`visdep_metrics.stats.crossed_intervals` with `blind_parts`; docs/statistics.md says why and what the benches
measured).

Where a group's questions share prompts, a Visual Gain's spread comes mostly from a few prompts' blind answers, each
a copy of one answer: its estimate and its variance move together (at accuracy 0.92 a gain is low exactly where the
big prompts were answered right blind, and its variance small), and a symmetric t lies on one side of the truth too
often. The blind accuracy's own interval has that shape (Clopper-Pearson's, on its prompts). Where the questions share
videos and no prompt, the spread is the videos' and the video accuracy's interval has the shape (at 0.25 a gain is low
where the videos were answered badly, and its variance small). So split the gain's deviation into the part that moves
with the followed accuracy x (b or v) and the rest, d̄ − Δ = λ (x̄ − p_x) + e, λ = Cov(d̄, x̄) / Var x̄, from

    Cov(d̄, b̄) = (Var v̄ − Var d̄ − Var b̄) / 2,      Cov(d̄, v̄) = (Var v̄ + Var d̄ − Var b̄) / 2,

each variance the ANOVA design effect's (so they polarise), Var e = Var d̄ − λ² Var x̄ ≥ 0, e uncorrelated with x̄; and
add the two parts' intervals as Zou & Donner's (2008) MOVER adds uncorrelated ones: for λ > 0

    low = d̄ − √(λ² (x̄ − l_x)² + t² Var e),      high = d̄ + √(λ² (u_x − x̄)² + t² Var e),

[l_x, u_x] the followed accuracy's interval as reported, t that of the gain's degrees of freedom (for λ < 0 x's sides
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
GAIN_VIDEO = "the video accuracy's Clopper-Pearson with a t for the rest (MOVER)"


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
                 video_design: Callable[..., tuple[np.ndarray, np.ndarray]], follows_blind: bool,
                 min_independent: float, confidence_level: float, found: tuple[np.ndarray, ...]) -> None:
    """Replace (in place) the t interval, p-value and method in `found` (low, high, p, method: one group's, per output)
    of each Visual Gain d = v − b among the rows of y (rows with blind_part[o] ≥ 0, their blind accuracy b the row
    blind_part[o]), in a group whose questions share prompts (follows_blind: the gain follows b) or, sharing none,
    share videos (the gain follows v; module docstring). deff, df: each output's design effect and degrees of freedom;
    video_design(rows, robust=False): each row of video answers' ANOVA design effect and its df (no sandwich floor:
    a gain's parts polarise), or with robust=True those of its accuracy's interval as `crossed_intervals` reports it;
    min_independent: the fewest independent answers the followed accuracy's interval needs."""
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

    spread_d, spread_b, spread_v = spread(gain), spread(blind), spread(seen)
    var_d, var_b, var_v = (sums / (size - 1) * design_effect / size for sums, design_effect in
                           ((spread_d, deff[gains]), (spread_b, deff[blinds]), (spread_v, video_design(seen)[0])))
    if follows_blind:  # Cov(d̄, b̄) = (Var v̄ − Var d̄ − Var b̄) / 2
        followed, var_x, spread_x, deff_x, df_x = blind, var_b, spread_b, deff[blinds], df[blinds]
        slope_numerator = -(var_b + var_d - var_v)
    else:  # Cov(d̄, v̄) = (Var v̄ + Var d̄ − Var b̄) / 2
        deff_x, df_x = video_design(seen, robust=True)
        followed, var_x, spread_x = seen, var_v, spread_v
        slope_numerator = var_v + var_d - var_b
    # an accuracy of 0 or 1 has no spread to follow, nor one on too few independent answers: the t stays
    followable = (var_x > 0) & (size / deff_x >= min_independent)
    slope = slope_numerator / (2 * np.where(followable, var_x, 1.0))
    parts = GainParts(gain.mean(axis=1), followed.mean(axis=1), slope, np.maximum(var_d - slope**2 * var_x, 0.0),
                      spread_x, size, size / deff_x, df_x, df[gains])
    given = gains[followable]
    low[given], high[given] = (bound[followable] for bound in parts.bounds(np.full(len(gains), confidence_level)))
    p[given], method[given] = parts.p_values()[followable], GAIN if follows_blind else GAIN_VIDEO


@dataclass(frozen=True)
class GainParts:
    """Visual Gains split as `visual_gains` splits them, one per entry: the mean d, the followed accuracy x (blind or
    with the video), the slope λ of the gain's deviation on x's, the rest's variance Var e; x's spread, answers and
    df, the gain's df; over `size` questions."""

    d: np.ndarray
    x: np.ndarray
    slope: np.ndarray
    var_e: np.ndarray
    spread_x: np.ndarray
    size: int
    n_eff_x: np.ndarray
    df_x: np.ndarray
    df_d: np.ndarray

    def bounds(self, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), each gain at its own confidence level."""
        lx, ux = proportion_bounds(self.x, self.spread_x, self.size, self.n_eff_x, self.df_x, level)
        rising = self.slope > 0  # d rises with x: d's lower side is x's lower side
        below, above = np.where(rising, self.x - lx, ux - self.x), np.where(rising, ux - self.x, self.x - lx)
        rest = scipy.special.stdtrit(self.df_d, 0.5 + level / 2) ** 2 * self.var_e
        return (self.d - np.sqrt(self.slope**2 * below**2 + rest), self.d + np.sqrt(self.slope**2 * above**2 + rest))

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
