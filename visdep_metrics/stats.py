"""The statistics visdep reports, in one place for the audit, the stress test and the demo: bootstrap settings,
percentile intervals of means that resample the units questions depend on, paired p-values, design effects.

Conventions: values are (rows, n) arrays, one row per model, metric or paired difference, questions along the last
axis; `groups` are (G, n) booleans, each group (a benchmark, a category, a subset) resampled on its own; `videos` and
`prompts` are (n,) labels of each question's video and blind prompt (None where unknown).

Why two factors. Questions about one video are not independent: a model that misreads a clip misreads it for each
of its questions. Nor are questions that share a blind prompt (question and options as presented): without the
video their input is the same text, so a model's blind answer to every copy is one answer. The two are crossed, not
nested: on VRU-Accident a video's six questions have six different prompts, and 3,015 of the 6,000 questions share
their prompt with questions about other videos (405 prompts, up to 86 copies each). Resampling videos alone treats
those copies as independent answers.

The estimator. For the mean ȳ = Σ_q y_q / N of a group, with e_q = y_q − ȳ, write

    V_video  = Σ_v (Σ_{q in v} e_q)²            over videos
    V_prompt = Σ_p (Σ_{q in p} e_q)²            over distinct prompts
    V_cell   = Σ_{v,p} (Σ_{q in v and p} e_q)²  over (video, prompt) pairs: almost always one question each

(V_video + V_prompt − V_cell) / N² estimates the variance of ȳ when questions covary exactly where they share a
video or a prompt (the two-way cluster-robust variance, Cameron, Gelbach & Miller 2011, "Robust inference with
multiway clustering", JBES): pairs sharing both would be counted twice. Under crossed random effects
y = μ + a_v + b_p + ε, with single questions per (video, prompt), its expectation is (ν_v σ_a² + ν_p σ_b² + σ_ε²) / N,
ν = Σ n² / N over videos and over prompts: the variance of ȳ (Owen 2007).

The intervals resample. The pigeonhole bootstrap (Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat.; Owen &
Eckles 2012, "Bootstrapping data arrays of arbitrary order") draws videos and prompts independently with replacement
and weighs each question by the product of its video's and its prompt's weights,

    ȳ* = Σ_q W_v(q) U_p(q) y_q / Σ_q W_v(q) U_p(q).

With both weights multinomial counts its variance is about (V_video + V_prompt + V_cell) / N²: conservative by
2 V_cell / N². That is mild where every video and prompt holds many questions (their setting), but not here, where
most prompts and cells hold one: with one question per video and prompt (MM-AU) it would triple the variance. Owen
and Eckles's argument needs weights of mean 1 only, so here a prompt's weight is shrunk towards 1,

    U_p = 1 − c + c M_p     (M_p: how often p was drawn; mean 1, variance c² (1 − 1/P))
    c²  = max(0, V_prompt − V_cell) / (V_prompt + V_cell)       per row,

which makes the bootstrap variance V_video + c² (V_prompt + V_cell) = V_video + V_prompt − V_cell: the two-way
estimate. Only prompts that two or more questions of the group share are drawn (for the others the V_prompt and
V_cell terms are equal and cancel). So: with no shared prompt this is the video (cluster) bootstrap, unchanged;
where a prompt's copies are answered alike, c → 1, the pigeonhole bootstrap; where they are answered independently,
c ≈ 0, the video bootstrap again. Where copies agree less than chance (V_prompt < V_cell), c = 0: the video
bootstrap, wider than the two-way estimate. c < 1 whenever the values vary, so every weight is positive and ȳ* is a
weighted mean of the group's values. Each row gets its own c; the draws are shared by every row of a group, so rows
built per question from paired results (c_video − c_blind, a model minus a baseline) give paired intervals.

Percentile intervals of ȳ* come from scipy.stats.bootstrap, which draws the videos and the shared prompts as two
samples resampled independently. The p-value of H0: mean = 0 is the level at which the percentile interval reaches 0,
p = min(1, 2 min((1 + #{ȳ* ≤ 0}) / (B + 1), (1 + #{ȳ* ≥ 0}) / (B + 1))) over B resamples (the +1 as in Davison &
Hinkley 1997, ch. 4): below 1 − confidence exactly when the interval excludes 0, and it carries the same dependence.

The design effect deff = (V_video + V_prompt − V_cell) / Σ_q e_q² is the two-way variance of a mean over the variance
it would have were its questions independent: the figures rest on about N / deff independent answers. When every
copy of a prompt is answered alike and nothing else is shared, deff = Σ_p n_p² / N over distinct prompts.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse
import scipy.stats
from numpy.typing import ArrayLike

# Resampled units held at once (batch * units): 8 MB of counts per batch, whatever the benchmark's size.
_BATCH_ELEMENTS = 1_000_000


@dataclass(frozen=True)
class BootstrapSettings:
    """How many resamples, at which confidence, from which seed."""

    n_resamples: int = 1000
    confidence_level: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_resamples < 1:
            raise ValueError(f"n_resamples must be at least 1, got {self.n_resamples}")
        if not 0 < self.confidence_level < 1:
            raise ValueError(f"confidence_level must lie in (0, 1), got {self.confidence_level}")

    def rng(self, *key: str) -> np.random.Generator:
        """A generator for one named computation (a benchmark, a comparison): its intervals do not depend on what
        else was computed, or in which order."""
        return np.random.default_rng([self.seed, zlib.crc32("/".join(key).encode())])


@dataclass(frozen=True)
class Intervals:
    """Percentile intervals and p-values of H0: mean = 0, each (G, rows); NaN for a group of fewer than 2 videos."""

    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray


def labels(units: ArrayLike | None, n: int) -> np.ndarray:
    """Integer labels 0..C-1 of n questions' units (videos, prompts); each question its own unit when None."""
    if units is None:
        return np.arange(n)
    u = np.asarray(units)
    if u.shape != (n,):
        raise ValueError(f"expected one label per question ({n}), got shape {u.shape}")
    return np.unique(u, return_inverse=True)[1].ravel()


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


def _indicator(unit: np.ndarray) -> scipy.sparse.csr_array:
    """(units, n) with a 1 where question q belongs to the unit: sums by unit are indicator @ values.T."""
    n = len(unit)
    return scipy.sparse.csr_array((np.ones(n), (unit, np.arange(n))), shape=(int(unit.max(initial=-1)) + 1, n))


def _squared_sums(e: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Σ_units (Σ_{q in unit} e_q)² per row of e (rows, n)."""
    return ((_indicator(unit) @ e.T) ** 2).sum(axis=0)


def _cells(video: np.ndarray, prompt: np.ndarray) -> np.ndarray:
    """Labels of (video, prompt) pairs, from integer labels of each."""
    pair = video.astype(np.int64) * (int(prompt.max(initial=0)) + 1) + prompt
    return np.unique(pair, return_inverse=True)[1].ravel()


def two_way_variance(values: ArrayLike, videos: ArrayLike | None = None,
                     prompts: ArrayLike | None = None) -> np.ndarray:
    """(V_video + V_prompt − V_cell) / N² per row (module docstring): the variance of the mean under two-way
    dependence. Without prompts it is the one-way cluster variance V_video / N², without videos each question is
    its own video. May be negative where a prompt's copies disagree more than chance."""
    x = _rows(values)
    n = x.shape[1]
    e = x - x.mean(axis=1, keepdims=True)
    video = labels(videos, n)
    variance = _squared_sums(e, video)
    if prompts is not None:
        prompt = labels(prompts, n)
        variance = variance + _squared_sums(e, prompt) - _squared_sums(e, _cells(video, prompt))
    return variance / n**2


def design_effect(values: ArrayLike, videos: ArrayLike | None = None, prompts: ArrayLike | None = None) -> np.ndarray:
    """deff = (V_video + V_prompt − V_cell) / Σ_q e_q² per row: the two-way variance of the mean over that of
    independent questions (module docstring); NaN for a row that does not vary."""
    x = _rows(values)
    spread = ((x - x.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(spread > 0, two_way_variance(x, videos, prompts) * x.shape[1] ** 2 / spread, np.nan)


def _rows(values: ArrayLike) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    x = x[None, :] if x.ndim == 1 else x
    if x.ndim != 2:
        raise ValueError(f"values must be (rows, n_questions), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite")
    return x


def bootstrap_p_values(distribution: np.ndarray) -> np.ndarray:
    """Two-sided p-values of H0: mean = 0 from bootstrap distributions (rows, B): the level at which the percentile
    interval reaches 0, min(1, 2 min((1 + #{≤ 0}) / (B + 1), (1 + #{≥ 0}) / (B + 1)))."""
    b = distribution.shape[-1]
    below = (1 + (distribution <= 0).sum(axis=-1)) / (b + 1)
    above = (1 + (distribution >= 0).sum(axis=-1)) / (b + 1)
    return np.minimum(1.0, 2 * np.minimum(below, above))


def crossed_bootstrap(values: ArrayLike, groups: ArrayLike | None = None, videos: ArrayLike | None = None,
                      prompts: ArrayLike | None = None, settings: BootstrapSettings = BootstrapSettings(),
                      rng: np.random.Generator | None = None, contrasts: ArrayLike | None = None) -> Intervals:
    """Percentile intervals of the means of `values` (rows, n) over each group, resampling videos and the prompts
    questions share (module docstring), with the p-value of each mean against 0.

    groups: (G, n) booleans, default one group of all questions; videos: (n,) labels, default one per question;
    prompts: (n,) labels, default none shared (the video bootstrap). rng: default `settings.rng()`; group g draws
    from the g-th of the G generators it spawns. contrasts: (outputs, rows), the intervals of `contrasts @ values`
    instead (differences, gaps, means over rows: each output gets its own prompt shrinkage c, and the resampling,
    whose cost grows with the rows, runs on `values` only). Returns Intervals of (G, outputs)."""
    x = _rows(values)
    rows, n = x.shape
    combine = None if contrasts is None else np.asarray(contrasts, dtype=np.float64).reshape(-1, rows)
    outputs = rows if combine is None else combine.shape[0]
    member = np.ones((1, n), dtype=bool) if groups is None else np.asarray(groups, dtype=bool)
    if member.ndim != 2 or member.shape[1] != n:
        raise ValueError(f"groups must be (n_groups, {n}) booleans, got shape {member.shape}")
    video = labels(videos, n)
    prompt = None if prompts is None else labels(prompts, n)
    generators = (settings.rng() if rng is None else rng).spawn(member.shape[0])
    low, high, p = (np.full((member.shape[0], outputs), np.nan) for _ in range(3))
    for g, in_group in enumerate(member):
        if outputs:
            low[g], high[g], p[g] = _group_bootstrap(x[:, in_group], video[in_group],
                                                     None if prompt is None else prompt[in_group], settings,
                                                     generators[g], combine)
    return Intervals(low=low, high=high, p_value=p)


def bootstrap_mean_intervals(values: ArrayLike, groups: ArrayLike | None = None, clusters: ArrayLike | None = None,
                             n_resamples: int = 1000, confidence_level: float = 0.95,
                             seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """The video (cluster) bootstrap's percentile intervals: `crossed_bootstrap` without prompts. clusters: (n,)
    labels, default each question its own. Returns (low, high), each (G, rows), or (rows,) without `groups`."""
    settings = BootstrapSettings(n_resamples, confidence_level, seed if isinstance(seed, int) else 0)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    result = crossed_bootstrap(values, groups, clusters, None, settings, rng)
    if groups is None:
        return result.low[0], result.high[0]
    return result.low, result.high


def _group_bootstrap(x: np.ndarray, video: np.ndarray, prompt: np.ndarray | None, settings: BootstrapSettings,
                     rng: np.random.Generator, combine: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One group's intervals and p-values: x (rows, n_g), video and prompt labels (n_g,) of any numbering,
    combine (outputs, rows) or None for the rows themselves."""
    rows = x.shape[0] if combine is None else combine.shape[0]
    nan = np.full(rows, np.nan)
    video = np.unique(video, return_inverse=True)[1].ravel()
    n_videos = int(video.max(initial=-1)) + 1
    if n_videos < 2:
        return nan, nan, nan
    by_video = _indicator(video)
    video_sums, video_sizes = by_video @ x.T, by_video.sum(axis=1)  # (C, rows), (C,)
    shared = _shared_prompts(x if combine is None else combine @ x, x, video, prompt)
    units = n_videos if shared is None else max(n_videos, len(shared.cell_prompt), shared.n_prompts)

    def combined(sums: np.ndarray) -> np.ndarray:
        return sums if combine is None else sums @ combine.T

    def means(drawn_videos, drawn_prompts=None, axis=-1):
        batch_shape = np.shape(drawn_videos)[:-1]
        w = _counts(drawn_videos, n_videos)
        total, size = combined(w @ video_sums), (w @ video_sizes)[:, None]  # (b, outputs), (b, 1)
        if drawn_prompts is not None:
            # W_v (1 - c + c M_p) = W_v + c W_v (M_p - 1), summed over each shared cell's questions
            z = w[:, shared.cell_video] * (_counts(drawn_prompts, shared.n_prompts)[:, shared.cell_prompt] - 1.0)
            total = total + combined(z @ shared.cell_sums) * shared.c
            size = size + (z @ shared.cell_sizes)[:, None] * shared.c
        return (total / size).T.reshape((rows, *batch_shape))

    data = (np.arange(n_videos),) if shared is None else (np.arange(n_videos), np.arange(shared.n_prompts))
    batch = int(max(1, min(settings.n_resamples, _BATCH_ELEMENTS // units)))
    result = scipy.stats.bootstrap(data, means, n_resamples=settings.n_resamples, batch=batch, vectorized=True,
                                   paired=False, method="percentile", confidence_level=settings.confidence_level,
                                   rng=rng)
    distribution = np.asarray(result.bootstrap_distribution).reshape(rows, -1)
    return (np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high),
            bootstrap_p_values(distribution))


@dataclass(frozen=True)
class _SharedPrompts:
    """The (video, prompt) cells of a group's questions whose prompt two or more of them share."""

    n_prompts: int
    cell_video: np.ndarray  # (cells,) video of each cell
    cell_prompt: np.ndarray  # (cells,) shared prompt of each cell, 0..n_prompts-1
    cell_sums: np.ndarray  # (cells, rows) of the resampled values
    cell_sizes: np.ndarray  # (cells,)
    c: np.ndarray  # (outputs,) the shrinkage of the prompt weights


def _shared_prompts(y: np.ndarray, x: np.ndarray, video: np.ndarray,
                    prompt: np.ndarray | None) -> _SharedPrompts | None:
    """The shared cells of values x (rows, n) and the shrinkage of each output y (outputs, n); None where no prompt
    is shared by two questions (then only videos are drawn)."""
    if prompt is None:
        return None
    prompt = np.unique(prompt, return_inverse=True)[1].ravel()
    copies = np.bincount(prompt)
    in_shared = copies[prompt] >= 2
    if np.count_nonzero(copies >= 2) < 2:  # one shared prompt: drawing it alone moves nothing
        return None
    e = (y - y.mean(axis=1, keepdims=True))[:, in_shared]
    shared_prompt = np.unique(prompt[in_shared], return_inverse=True)[1].ravel()
    cell = _cells(video[in_shared], shared_prompt)
    by_cell = _indicator(cell)
    v_prompt, v_cell = _squared_sums(e, shared_prompt), _squared_sums(e, cell)
    with np.errstate(invalid="ignore", divide="ignore"):
        c2 = np.where(v_prompt + v_cell > 0, np.maximum(v_prompt - v_cell, 0.0) / (v_prompt + v_cell), 0.0)
    first = np.unique(cell, return_index=True)[1]  # a question of each cell
    return _SharedPrompts(n_prompts=int(shared_prompt.max()) + 1, cell_video=video[in_shared][first],
                          cell_prompt=shared_prompt[first], cell_sums=by_cell @ x[:, in_shared].T,
                          cell_sizes=by_cell.sum(axis=1), c=np.sqrt(c2))


def _counts(drawn: np.ndarray, n_units: int) -> np.ndarray:
    """How often each unit was drawn: (..., n_units) drawn indices -> (b, n_units) counts, b the leading size."""
    idx = np.asarray(drawn).reshape(-1, n_units)
    b = idx.shape[0]
    counts = np.bincount((idx + (n_units * np.arange(b))[:, None]).ravel(), minlength=b * n_units)
    return counts.reshape(b, n_units).astype(np.float64)
