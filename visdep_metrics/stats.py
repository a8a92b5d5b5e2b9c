"""The statistics visdep reports, in one place for the audit, the stress test and the demo: intervals of means over
questions that share videos and blind prompts, their p-values, design effects, family-wise adjusted p-values.

Conventions: values are (rows, n) arrays, one row per model, metric or paired difference, questions along the last
axis; `groups` are (G, n) booleans, each group (a benchmark, a category, a subset) estimated on its own; `videos` and
`prompts` are (n,) labels of each question's video and blind prompt (None where unknown). docs/statistics.md says
why each interval is what it is and what a simulation of the real question lists measured.

Dependence. Questions about one video share it; questions that share a blind prompt share more (without the video a
model's blind answer to every copy is one answer). Under crossed random effects y = μ + a_video + b_prompt + ε the
variance of a group's mean ȳ is σ² deff / N with the design effect

    deff = 1 + ρ_video (ν_video − 1) + ρ_prompt (ν_prompt − 1),      ν = Σ n_u² / N over the group's units,

ρ the share of the variance each factor holds (Kish 1965; for unequal clusters Kerry & Bland 2001). Each ρ is the
one-way ANOVA estimate of the intraclass correlation over that factor's units within the group, (MSB − MSW) /
(MSB + (n₀ − 1) MSW) (Donner & Koval 1980), kept in [0, 1] with ρ_video + ρ_prompt ≤ 1: near 1 whenever a prompt's
copies agree, whatever they agree on (a sandwich sees a prompt's weight only through its residuals). N / deff is the
number of independent answers; where every answer is equal, deff is the design's bound max(ν_video, ν_prompt).

Blind answers share their prompt and nothing else (their input is the prompt): for those outputs (`blind`) the units
are the prompts alone where prompts are known. Answers with the video share more than their prompt (each copy comes
with its own video): for those outputs (`robust`) an accuracy's deff is at least the two-way cluster-robust one with
each dimension's G / (G − 1) (Cameron, Gelbach & Miller 2011). A difference between models (not `robust`, not a
proportion), where what both share cancels, gets that cluster-robust variance alone, never below the independent
answers' one. Degrees of freedom (`visdep_metrics.degrees_of_freedom`): those of the variance used. The ANOVA
design effect's are Satterthwaite's over its independent, video and prompt parts (a blind accuracy's, those of its
estimated deff); a sandwich's are those of its clusters' sums, Satterthwaite's effective number of clusters under the
exchangeable working model whose deff is the one used (Bell & McCaffrey 2002; Imbens & Kolesár 2016) less one: G − 1
over G videos of equal size, about 3 where four prompts hold most of a group. The videos bound the df wherever a video
holds two or more questions (video answers always, others where the sandwich is used), the prompts where they are
shared (SHARED_NU) and the sandwich is used.

Intervals. A proportion (an accuracy, or a mean of accuracies) gets Clopper and Pearson's interval on N / deff
independent answers, scaled by (z / t_df)² (Clopper & Pearson 1934; Korn & Graubard 1998 for clustered surveys): never
of zero width, never outside [0, 1], each tail at most α / 2 on independent answers. A difference (a Visual Gain, a
model minus a baseline) gets the t interval d ± t_df s √(deff / N) and its two-sided p-value of H0: no change from the
same t statistic, so p < 1 − confidence exactly when the interval excludes 0. Below MIN_INDEPENDENT independent answers:
no interval, and the note says why; likewise for a difference whose non-zero part lies in so few shared videos or
prompts that no sign-flip test over them could reach p < α (k ≤ log2(2 / α)).

A difference between models in a group whose questions share prompts (ν_prompt ≥ 2) but no video, over fewer than
WILD_BELOW effective prompts (a category where a few prompts hold much of it), gets its interval and p-value from the
restricted wild cluster bootstrap over the prompts instead (`visdep_metrics.wild_bootstrap`: sign flips of whole
prompts, the interval by inverting the test): there the t of a cluster-robust variance dominated by a few prompt sums
is conservative, and under H0 two models of equal skill are exchangeable within each prompt.

A Visual Gain over shared prompts, whose blind accuracy the same call estimates (`blind_parts`), follows that
accuracy's interval (`visdep_metrics.visual_gain`); one over shared videos whose prompts are not shared follows its
video accuracy's: there a symmetric t lay on one side of the truth. A difference of two binary answer rows of one
model under two conditions (`paired`) gets Tango's score interval on its design effect (`visdep_metrics.paired`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import scipy.special
from numpy.typing import ArrayLike

from visdep_metrics.degrees_of_freedom import anova_degrees, sandwich_degrees
from visdep_metrics.paired import PAIRED, checked_pairs, paired_intervals
from visdep_metrics.proportions import clopper_pearson as clopper_pearson  # re-exported: the API's
from visdep_metrics.proportions import proportion_bounds
from visdep_metrics.visual_gain import GAIN as GAIN  # re-exported: the methods' labels
from visdep_metrics.visual_gain import GAIN_VIDEO as GAIN_VIDEO
from visdep_metrics.visual_gain import checked_blind_parts, visual_gains
from visdep_metrics.wild_bootstrap import wild_intervals

# Below this many independent answers (N / deff) no interval: the approximations need a handful on each side.
MIN_INDEPENDENT = 10
# Units (videos, prompts) are shared where ν = Σ n_u² / N is at least this (a typical question shares its unit).
SHARED_NU = 2.0
# Over shared prompts, no video and fewer effective prompts (N / ν) than this: the wild bootstrap (module docstring)
WILD_BELOW = 400
T, WILD, CLOPPER_PEARSON = ("t on the design effect", "wild bootstrap over prompts",
                            "Clopper-Pearson on the design effect")


@dataclass(frozen=True)
class Intervals:
    """Per group and output, each (G, outputs): the interval (NaN where withheld), the p of H0: mean = 0 (NaN for
    proportions), the design effect, N / deff, why an interval is withheld ("") and how it was found (`method`)."""

    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray
    deff: np.ndarray
    n_effective: np.ndarray
    note: np.ndarray  # str
    method: np.ndarray  # str: how the interval and p were found (CLOPPER_PEARSON, T or WILD)


def labels(units: ArrayLike | None, n: int) -> np.ndarray:
    """Integer labels 0..C-1 of n questions' units (videos, prompts); each question its own unit when None."""
    if units is None:
        return np.arange(n)
    u = np.asarray(units)
    if u.shape != (n,):
        raise ValueError(f"expected one label per question ({n}), got shape {u.shape}")
    return np.unique(u, return_inverse=True)[1].ravel()


def _units(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Labels 0..C-1 of a group's units (from any labels), each unit's size and ν = Σ n_u² / N."""
    unit = np.unique(labels, return_inverse=True)[1].ravel()
    sizes = np.bincount(unit).astype(np.float64)
    return unit, sizes, float((sizes**2).sum() / len(unit))


def units_per_group(groups: ArrayLike, units: ArrayLike | None = None) -> np.ndarray:
    """How many units (videos, prompts) hold at least one question of each group. groups: (G, n) booleans."""
    member = np.asarray(groups, dtype=bool)
    if member.ndim != 2:
        raise ValueError(f"groups must be (n_groups, n_questions) booleans, got shape {member.shape}")
    unit = labels(units, member.shape[1])
    present = np.zeros((member.shape[0], int(unit.max(initial=-1)) + 1), dtype=bool)
    rows, questions = np.nonzero(member)
    present[rows, unit[questions]] = True
    return present.sum(axis=1)


def shares_prompts(prompts: ArrayLike | None, keep: np.ndarray) -> bool:
    """Whether two or more of the questions `keep` share a prompt (then prompts enter their intervals)."""
    if prompts is None or keep.sum() < 2:
        return False
    return bool(np.bincount(np.unique(np.asarray(prompts)[keep], return_inverse=True)[1]).max() >= 2)


def _unit_sums(values: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """(units, rows): the sums of each row of values (rows, n) over each unit's questions, unit labels 0..C-1."""
    rows, c = values.shape[0], int(unit.max(initial=-1)) + 1
    index = (np.arange(rows)[:, None] * c + unit).ravel()
    return np.bincount(index, weights=values.ravel(), minlength=rows * c).reshape(rows, c).T


def _squared_sums(e: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Σ_units (Σ_{q in unit} e_q)² per row of e (rows, n)."""
    return (_unit_sums(e, unit) ** 2).sum(axis=0)


def _cells(video: np.ndarray, prompt: np.ndarray) -> np.ndarray:
    """Labels of (video, prompt) pairs, from integer labels of each."""
    pair = video.astype(np.int64) * (int(prompt.max(initial=0)) + 1) + prompt
    return np.unique(pair, return_inverse=True)[1].ravel()


def two_way_variance(values: ArrayLike, videos: ArrayLike | None = None,
                     prompts: ArrayLike | None = None) -> np.ndarray:
    """(V_video + V_prompt − V_cell) / N² per row, V_u = Σ_units (Σ e_q)²: the two-way cluster-robust variance of
    the mean (Cameron, Gelbach & Miller 2011), kept as the reference the docs compare with. May be negative."""
    x = _rows(values)
    n = x.shape[1]
    e = x - x.mean(axis=1, keepdims=True)
    video = labels(videos, n)
    variance = _squared_sums(e, video)
    if prompts is not None:
        prompt = labels(prompts, n)
        variance = variance + _squared_sums(e, prompt) - _squared_sums(e, _cells(video, prompt))
    return variance / n**2


def _rows(values: ArrayLike) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    x = x[None, :] if x.ndim == 1 else x
    if x.ndim != 2:
        raise ValueError(f"values must be (rows, n_questions), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite")
    return x


def _intraclass(y: np.ndarray, unit: np.ndarray, spread: np.ndarray) -> tuple[np.ndarray, float, float]:
    """One-way ANOVA intraclass correlation of each row of y (rows, n) over `unit` (labels 0..C-1), in [0, 1] (NaN
    where nothing varies), ν = Σ n_u² / N, and the sampling variance of the estimate (Fisher 1925's large-sample
    one, 2 (1 − ρ)² (1 + (n₀ − 1) ρ)² / (n₀ (n₀ − 1) (C − 1)) with n₀ = (N − ν) / (C − 1); 0 where no two
    questions share a unit, since nothing is estimated then)."""
    n = y.shape[1]
    counts = np.bincount(unit)  # unit: labels 0..C-1 already
    c = len(counts)
    nu = float((counts.astype(np.float64) ** 2).sum() / n)
    if c == n or c < 2:  # no two questions share a unit, or one unit holds them all
        return np.where(spread > 0, 0.0, np.nan), nu, np.zeros(len(y))
    sums = _unit_sums(y, unit)  # (C, rows)
    between = np.maximum((sums**2 / counts[:, None]).sum(axis=0) - y.sum(axis=1) ** 2 / n, 0.0)
    within = np.maximum(spread - between, 0.0)
    msb, msw = between / (c - 1), within / (n - c)
    n0 = (n - nu) / (c - 1)
    denominator = msb + (n0 - 1) * msw
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.clip((msb - msw) / denominator, 0.0, 1.0)
    rho = np.where((spread > 0) & (denominator > 0), rho, np.nan)
    r = np.nan_to_num(rho)
    variance = 2 * (1 - r) ** 2 * (1 + (n0 - 1) * r) ** 2 / (n0 * max(n0 - 1, 1e-12) * (c - 1))
    return rho, nu, variance


def _design_effects(y: np.ndarray, video: np.ndarray, prompt: np.ndarray | None, robust: np.ndarray | bool = False,
                    proportion: np.ndarray | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """deff per row of y and the degrees of freedom of the variance it implies (module docstring)."""
    n = y.shape[1]
    spread = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    video = np.unique(video, return_inverse=True)[1].ravel()
    rho_v, nu_v, var_v = _intraclass(y, video, spread)
    if prompt is None:
        rho_p, nu_p, var_p = np.zeros(len(y)), 1.0, np.zeros(len(y))
    else:
        rho_p, nu_p, var_p = _intraclass(y, np.unique(prompt, return_inverse=True)[1].ravel(), spread)
    varies = spread > 0
    rho_v, rho_p = np.where(varies, rho_v, 0.0), np.where(varies, rho_p, 0.0)
    total = rho_v + rho_p
    scale = 1.0 / np.where(total > 1, total, 1.0)  # the two shares of the variance sum to at most 1
    rho_v, rho_p = rho_v * scale, rho_p * scale
    deff = 1 + rho_v * (nu_v - 1) + rho_p * (nu_p - 1)
    is_proportion = np.broadcast_to(np.asarray(proportion, dtype=bool), deff.shape)
    is_robust = np.broadcast_to(np.asarray(robust, dtype=bool), deff.shape)
    df = anova_degrees(n, deff, [(rho_v, nu_v, var_v), (rho_p, nu_p, var_p)], is_proportion, is_robust)
    difference = ~is_robust & ~is_proportion
    uses_sandwich = np.zeros(deff.shape, dtype=bool)
    if (is_robust | difference).any():
        with np.errstate(invalid="ignore", divide="ignore"):
            sandwich = _robust_variance(y, video, prompt) * n * (n - 1) / spread  # over s² / N
        # an accuracy with the video: deff at least the sandwich (VG keeps the ANOVA one: with the floor it
        # over-covered, docs/statistics.md); between models what both share cancels and no exchangeable share is left
        # to estimate: the sandwich alone, never below the independent answers' variance
        uses_sandwich = varies & ((is_robust & is_proportion & (sandwich > deff)) | (difference & (sandwich > 1.0)))
        deff = np.where(uses_sandwich, sandwich, np.where(difference & varies, 1.0, deff))
    # the df of the variance used: a sandwich's are those of its clusters' sums, the videos' for video answers too
    sizes = np.bincount(video).astype(np.float64)
    dimensions = [(sizes, rho_v, nu_v, sizes.max() >= 2)]
    if prompt is not None:
        dimensions.append((np.bincount(np.unique(prompt, return_inverse=True)[1].ravel()).astype(np.float64),
                           rho_p, nu_p, nu_p >= SHARED_NU))
    df = sandwich_degrees(df, deff, uses_sandwich, is_robust, dimensions)
    bound = max(nu_v, nu_p)  # nothing varies: the design's bound, on as many effective units
    return np.where(varies, deff, bound), np.where(varies, df, max(n / bound - 1.0, 1.0))


def _robust_variance(y: np.ndarray, video: np.ndarray, prompt: np.ndarray | None) -> np.ndarray:
    """The two-way cluster-robust variance of the mean with each dimension's small-cluster factor G / (G − 1)
    (Cameron, Gelbach & Miller 2011), at least the one-way one of each dimension whose units are shared (their
    fix for a negative sum; over units nearly all its own that bound only picks the larger of two noisy estimates)."""
    n = y.shape[1]
    e = y - y.mean(axis=1, keepdims=True)

    def part(labels: np.ndarray) -> tuple[np.ndarray, bool]:
        unit, sizes, nu = _units(labels)
        g = len(sizes)
        return _squared_sums(e, unit) * (g / (g - 1) if g > 1 else 1.0), nu >= SHARED_NU

    by_video, videos_shared = part(video)
    if prompt is None:
        return by_video / n**2
    (by_prompt, prompts_shared), (by_cell, _) = part(prompt), part(_cells(video, prompt))
    bounds = [b for b, shared in ((by_video, videos_shared), (by_prompt, prompts_shared)) if shared]
    two_way = by_video + by_prompt - by_cell
    return (np.maximum(two_way, np.maximum.reduce(bounds)) if bounds else two_way) / n**2


def design_effect(values: ArrayLike, videos: ArrayLike | None = None, prompts: ArrayLike | None = None) -> np.ndarray:
    """deff per row (module docstring): the variance of the mean over that of independent questions; for rows that
    do not vary, the design's bound max(ν_video, ν_prompt)."""
    x = _rows(values)
    n = x.shape[1]
    return _design_effects(x, labels(videos, n), None if prompts is None else labels(prompts, n))[0]


def crossed_intervals(values: ArrayLike, groups: ArrayLike | None = None, videos: ArrayLike | None = None,
                      prompts: ArrayLike | None = None, confidence_level: float = 0.95,
                      contrasts: ArrayLike | None = None, proportion: ArrayLike | bool = True,
                      robust: ArrayLike | bool = False, blind: ArrayLike | bool = False,
                      blind_parts: ArrayLike | None = None, paired: ArrayLike | bool = False) -> Intervals:
    """Intervals of the means of `values` (rows, n) over each group, with the dependence the questions' videos and
    prompts give them (module docstring).

    groups: (G, n) booleans, default one group of all; videos: (n,) labels, default one per question; prompts: (n,)
    labels, default none shared. contrasts: (outputs, rows): the intervals of `contrasts @ values` instead (each output
    its own design effect). proportion: (outputs,) booleans or one for all: a proportion in [0, 1] (Clopper-Pearson
    interval, no p-value) or a difference (t interval and p-value). robust: (outputs,) booleans or one for all: the
    outputs whose answers share more than their prompt (video answers: a model sees each copy's own video): t with at
    most G − 1 df over G videos, and for a proportion a design effect at least the two-way cluster-robust one; a
    difference that is not `robust` (between models) gets the cluster-robust one. blind: (outputs,) booleans or one for
    all: the outputs made of blind answers only, which saw the prompt and no video: where prompts are given, their units
    are the prompts alone. blind_parts: (outputs,) indices, for a Visual Gain (a `robust` difference: video answers less
    blind ones) the output that is its blind accuracy, -1 elsewhere: where a group's questions share prompts its
    interval follows that accuracy's, where they share videos and no prompt its video accuracy's (v = d + b;
    `visdep_metrics.visual_gain`). paired: (outputs,) booleans or one for all: differences of two binary answer rows
    (one model under two conditions): Tango's score interval on the design effect (`visdep_metrics.paired`) instead
    of the t or the wild bootstrap. Returns Intervals of (G, outputs)."""
    x = _rows(values)
    rows, n = x.shape
    combine = np.eye(rows) if contrasts is None else np.asarray(contrasts, dtype=np.float64).reshape(-1, rows)
    outputs = combine.shape[0]
    is_proportion = np.broadcast_to(np.asarray(proportion, dtype=bool), (outputs,))
    is_robust = np.broadcast_to(np.asarray(robust, dtype=bool), (outputs,))
    is_blind = np.broadcast_to(np.asarray(blind, dtype=bool), (outputs,))
    is_paired = checked_pairs(paired, combine, x)
    if (is_robust & is_blind).any() or (is_paired & (is_proportion | is_robust)).any():
        raise ValueError("an output cannot be both blind and robust (video answers), nor paired and a proportion "
                         "or robust")
    blind_part = checked_blind_parts(blind_parts, is_robust & ~is_proportion, is_blind & is_proportion)
    gains = np.flatnonzero(blind_part >= 0)
    member = np.ones((1, n), dtype=bool) if groups is None else np.asarray(groups, dtype=bool)
    if member.ndim != 2 or member.shape[1] != n:
        raise ValueError(f"groups must be (n_groups, {n}) booleans, got shape {member.shape}")
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level}")
    video = labels(videos, n)
    prompt = None if prompts is None else labels(prompts, n)
    shape = (member.shape[0], outputs)
    low, high, p, deff, n_eff, df = (np.full(shape, np.nan) for _ in range(6))
    note = np.full(shape, "", dtype=object)
    method = np.full(shape, T, dtype=object)
    method[:, is_proportion], method[:, is_paired] = CLOPPER_PEARSON, PAIRED
    # the blind outputs' units where prompts are known: the prompts alone (each question its own video)
    by_prompt = is_blind if prompt is not None else np.zeros(outputs, dtype=bool)
    for g, keep in enumerate(member):
        size = int(keep.sum())
        why = _group_note(size, video[keep], None if prompt is None else prompt[keep])
        if why:
            note[g] = why
            continue
        y = combine @ x[:, keep]
        for part, units in ((by_prompt, np.arange(size)), (~by_prompt, video[keep])):
            if not part.any():
                continue
            found = _estimate(y[part], units, None if prompt is None else prompt[keep], is_robust[part],
                              is_proportion[part], confidence_level, is_paired[part])
            low[g, part], high[g, part], p[g, part], deff[g, part], df[g, part], note[g, part], method[g, part] = found
            n_eff[g, part] = size / deff[g, part]
        group_prompt = None if prompt is None else prompt[keep]
        shared_prompts = group_prompt is not None and _units(group_prompt)[2] >= SHARED_NU
        if gains.size and (shared_prompts or _units(video[keep])[2] >= SHARED_NU):
            design = partial(_design_effects, video=video[keep], prompt=group_prompt)
            visual_gains(y, blind_part, deff[g], df[g], design, shared_prompts, MIN_INDEPENDENT, confidence_level,
                         (low[g], high[g], p[g], method[g]))
    return Intervals(low=low, high=high, p_value=p, deff=deff, n_effective=n_eff, note=note, method=method)


def _estimate(y: np.ndarray, video: np.ndarray, prompt: np.ndarray | None, is_robust: np.ndarray,
              is_proportion: np.ndarray, confidence_level: float, is_paired: np.ndarray) -> tuple[np.ndarray, ...]:
    """One group's (low, high, p, deff, df, note, method) for each output row of y (outputs, n_g), its questions'
    videos and prompts the units."""
    size = y.shape[1]
    deff, df = _design_effects(y, video, prompt, is_robust, is_proportion)
    low, high, p, note = _bounds(y, size / deff, deff, df, is_proportion, confidence_level)
    method = np.where(is_proportion, CLOPPER_PEARSON, np.where(is_paired, PAIRED, T)).astype(object)
    scored = is_paired & np.isfinite(low)
    low[scored], high[scored], p[scored] = paired_intervals(y[scored], deff[scored], df[scored], confidence_level)
    wild = ~is_proportion & ~is_robust & ~is_paired & np.isfinite(low)  # differences between models
    unit = _dominant_prompts(video, prompt) if prompt is not None and wild.any() else None
    if unit is not None:
        found = wild_intervals(_unit_sums(y[wild], unit).T, np.bincount(unit), confidence_level)
        unbounded = np.isnan(found[0]) | np.isnan(found[1])
        low[wild], high[wild], p[wild] = (np.where(unbounded, np.nan, f) for f in found)
        method[wild] = WILD
        note[np.flatnonzero(wild)[unbounded]] = (f"{int(unit.max()) + 1} prompts, a few holding most questions: "
                                                 f"the sign-flip test rejects no value")
    _withhold_few_differing(y, video, prompt, ~is_proportion & np.isfinite(low), 1 - confidence_level,
                            (low, high, p, note))
    return low, high, p, deff, df, note, method


def _withhold_few_differing(y: np.ndarray, video: np.ndarray, prompt: np.ndarray | None, rows: np.ndarray,
                            alpha: float, found: tuple[np.ndarray, ...]) -> None:
    """Withhold (in place) the interval and p of each difference in `rows` whose non-zero part lies in fewer clusters
    (videos; prompts where shared, SHARED_NU) than any test needs: over k clusters whose sum is not 0, sign flips reach
    no p below 2 / 2^k, ≥ α for k ≤ log2(2 / α) (5 at 0.05); a t over so few is unreliable too (MacKinnon & Webb 2017).
    Over questions of their own nothing is withheld: there the t's errors at small and larger k balance (docs)."""
    if not rows.any():
        return
    needed = int(np.floor(np.log2(2 / alpha))) + 1
    counts = []
    for given in (units for units in (video, prompt) if units is not None):
        unit, _, nu = _units(given)
        if nu < SHARED_NU:
            continue
        sums = _unit_sums(y[rows], unit).T
        counts.append((np.abs(sums) > 1e-9 * max(1.0, float(np.abs(y).max()))).sum(axis=1))
    if not counts:
        return
    k = np.minimum.reduce(counts)
    low, high, p, note = found
    for o, units in zip(np.flatnonzero(rows), k, strict=True):
        if units < needed:
            low[o] = high[o] = p[o] = np.nan
            note[o] = (f"the difference rests on {units} cluster{'s' if units != 1 else ''} (videos or prompts): "
                       f"too few for a test at {alpha:g}")


def _dominant_prompts(video: np.ndarray, prompt: np.ndarray) -> np.ndarray | None:
    """A group's prompt labels 0..P-1 where its questions share prompts (SHARED_NU), no video, and fewer than WILD_BELOW
    effective ones; else None (over prompts of their own sign flips are the sign test, conservative for many ties)."""
    if np.bincount(video).max() > 1:
        return None
    unit, _, nu = _units(prompt)
    return unit if nu >= SHARED_NU and len(unit) / nu < WILD_BELOW else None


def _group_note(size: int, video: np.ndarray, prompt: np.ndarray | None) -> str:
    """Why a group has no interval at all ("" where it may have one)."""
    if size < 2:
        return "one question: no spread to estimate" if size else "no question"
    if len(np.unique(video)) < 2:
        return f"all {size} questions are about one video: their answers may be one answer"
    if prompt is not None and len(np.unique(prompt)) < 2:
        return f"all {size} questions share one prompt: their blind answers are one answer"
    return ""


def _bounds(y: np.ndarray, n_eff: np.ndarray, deff: np.ndarray, df: np.ndarray, is_proportion: np.ndarray,
            confidence_level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One group's intervals, p-values and notes for each output row of y (outputs, n_g)."""
    size = y.shape[1]
    mean = y.mean(axis=1)
    spread = ((y - mean[:, None]) ** 2).sum(axis=1)
    low, high, p = (np.full(len(y), np.nan) for _ in range(3))
    note = np.array([""] * len(y), dtype=object)
    t = scipy.special.stdtrit(df, 0.5 + confidence_level / 2)
    cl, ch = proportion_bounds(mean, spread, size, n_eff, df, confidence_level)
    se = np.sqrt(spread / (size - 1) * deff / size)
    for o in range(len(y)):
        if not is_proportion[o] and spread[o] == 0:
            note[o] = f"every question gives the same difference ({mean[o]:+.2f}): no spread to estimate"
            p[o] = 1.0 if mean[o] == 0 else np.nan
        elif n_eff[o] < MIN_INDEPENDENT:
            note[o] = f"≈ {n_eff[o]:.0f} independent answers: too few for an interval"
        elif is_proportion[o]:
            low[o], high[o] = cl[o], ch[o]
        else:
            low[o], high[o] = mean[o] - t[o] * se[o], mean[o] + t[o] * se[o]
            p[o] = 2 * scipy.special.stdtr(df[o], -abs(mean[o]) / se[o])
    return low, high, p, note


def holm(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979) of one family of p-values, any shape; NaN stays NaN and is not
    counted. Rejecting where the adjusted p < α keeps the chance of any false rejection in the family at most α."""
    p = np.asarray(p_values, dtype=np.float64)
    flat = p.ravel()
    out = np.full(flat.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(flat))
    if finite.size:
        order = finite[np.argsort(flat[finite], kind="stable")]
        m = len(order)
        out[order] = np.minimum(np.maximum.accumulate((m - np.arange(m)) * flat[order]), 1.0)
    return out.reshape(p.shape)
