"""The diagnostics of visual dependence (paper sections 3.1-3.3, eqs. 1-7) as pure, vectorised functions.

Conventions (every function):
- arrays of questions run along the last axis; a leading axis, where there is one, runs over models;
- ``n_options`` is K per question (AccidentBench varies K);
- option log-probabilities come padded to ``K_max`` columns: entries at positions ``>= K`` are ignored;
- accuracies and gaps are fractions in [0, 1] (the report multiplies by 100).

Nothing here reads files or imports torch / lmms-eval.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np
import scipy.stats
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

# Resampled question indices processed at once (batch * n): about 8 MB stays in cache, which measured
# twice as fast as 40 MB batches, and bounds the memory of any benchmark size.
_BOOTSTRAP_BATCH_ELEMENTS = 1_000_000


def check_n_options(n_options: ArrayLike, n_questions: int | None = None) -> np.ndarray:
    """K per question as a 1-D integer array (K >= 2), optionally of a given length; raises otherwise."""
    k = np.asarray(n_options)
    if k.ndim != 1:
        raise ValueError(f"n_options must be one-dimensional, got shape {k.shape}")
    if not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"n_options must be integers, got dtype {k.dtype}")
    if k.size and k.min() < 2:
        raise ValueError(f"every question needs at least 2 options, got K={int(k.min())}")
    if n_questions is not None and k.shape[0] != n_questions:
        raise ValueError(f"n_options has {k.shape[0]} questions, the other array {n_questions}")
    return k


def _option_mask(n_options: np.ndarray, k_max: int) -> np.ndarray:
    """(n, k_max) True where the option exists (column < K)."""
    return np.arange(k_max)[None, :] < n_options[:, None]


def option_probabilities(option_logprobs: ArrayLike, n_options: ArrayLike) -> np.ndarray:
    """Probabilities over each question's K options, normalised across options (paper B.2).

    p_k = exp(l_k) / sum_{j<K} exp(l_j) for k < K, and 0 for the padding columns k >= K.

    option_logprobs: (n, K_max) log-probabilities (any scale, finite where k < K).
    """
    logprobs = np.asarray(option_logprobs, dtype=np.float64)
    if logprobs.ndim != 2:
        raise ValueError(f"option_logprobs must be (n_questions, K_max), got shape {logprobs.shape}")
    k = check_n_options(n_options, logprobs.shape[0])
    if k.size and k.max() > logprobs.shape[1]:
        raise ValueError(f"K={int(k.max())} options but only {logprobs.shape[1]} log-probability columns")
    mask = _option_mask(k, logprobs.shape[1])
    if not np.isfinite(logprobs[mask]).all():
        raise ValueError("option log-probabilities must be finite (NaN or infinity found)")
    masked = np.where(mask, logprobs, -np.inf)
    shifted = np.exp(masked - masked.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def predicted_index(probabilities: ArrayLike) -> np.ndarray:
    """argmax_k p_k per question; ties go to the first option (as the task's `process_results` does)."""
    return np.asarray(probabilities).argmax(axis=-1)


def answer_probability(probabilities: ArrayLike, answer_index: ArrayLike) -> np.ndarray:
    """P(y* | input) = p_{y*} per question."""
    p = np.asarray(probabilities)
    y = np.asarray(answer_index)
    if y.shape != p.shape[:-1]:
        raise ValueError(f"answer_index shape {y.shape} does not match probabilities {p.shape}")
    return np.take_along_axis(p, y[..., None], axis=-1)[..., 0]


def normalised_entropy(probabilities: ArrayLike, n_options: ArrayLike) -> np.ndarray:
    """H_norm(q) = -sum_k p_k ln p_k / ln K, in [0, 1] (paper sec. 3.2; 0 ln 0 = 0)."""
    p = np.asarray(probabilities, dtype=np.float64)
    k = check_n_options(n_options, p.shape[0])
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -plogp.sum(axis=-1) / np.log(k)


def chance(n_options: ArrayLike) -> float:
    """Acc_random = mean over questions of 1/K (paper eq. 1)."""
    k = check_n_options(n_options)
    if k.size == 0:
        return float("nan")
    return float(np.mean(1.0 / k))


def accuracy(correct: ArrayLike) -> np.ndarray:
    """Acc = mean over questions of [argmax_k p_k == y*]; per model when `correct` is (models, n)."""
    c = np.asarray(correct, dtype=np.float64)
    if c.shape[-1] == 0:
        return np.full(c.shape[:-1], np.nan)
    return c.mean(axis=-1)


def blind_gap(correct_blind: ArrayLike, n_options: ArrayLike) -> np.ndarray:
    """BlindGap = Acc_blind - Acc_random (paper eq. 1); per model when `correct_blind` is (models, n)."""
    c = np.asarray(correct_blind, dtype=np.float64)
    check_n_options(n_options, c.shape[-1])
    return accuracy(c) - chance(n_options)


def visual_gain(correct_video: ArrayLike, correct_blind: ArrayLike) -> np.ndarray:
    """VisualGain = Acc_video - Acc_blind over the same questions (paper eq. 2)."""
    v = np.asarray(correct_video, dtype=np.float64)
    b = np.asarray(correct_blind, dtype=np.float64)
    if v.shape != b.shape:
        raise ValueError(f"video results {v.shape} and blind results {b.shape} are not paired")
    return accuracy(v) - accuracy(b)


def _panel_arrays(a: ArrayLike, b: ArrayLike, empty_message: str) -> tuple[np.ndarray, np.ndarray]:
    """Two (models, n) float arrays of one shape with at least one model."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"expected two (models, n) arrays of one shape, got {a.shape} and {b.shape}")
    if a.shape[0] == 0:
        raise ValueError(empty_message)
    return a, b


def textual_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike) -> np.ndarray:
    """T(q) = 1/|M_LLM| sum_m [Correct_m(q)] * (1 - H_norm,m(q)) (paper eq. 3).

    correct_blind, entropy_blind: (models, n) blind results of the text-only panel."""
    c, h = _panel_arrays(correct_blind, entropy_blind, "T(q) needs at least one text-only model")
    return (c * (1.0 - h)).mean(axis=0)


def visual_necessity(p_answer_video: ArrayLike, p_answer_blind: ArrayLike, n_options: ArrayLike) -> np.ndarray:
    """V(q) = 1/|M_VLM| sum_m Delta_m(q) / (1 - 1/K), Delta_m = P_m(y*|video,q) - P_m(y*|blind,q) (eqs. 4-5).

    p_answer_video, p_answer_blind: (models, n) probabilities of the correct option for the VLM panel."""
    pv, pb = _panel_arrays(p_answer_video, p_answer_blind, "V(q) needs at least one vision-language model")
    k = check_n_options(n_options, pv.shape[1])
    return (pv - pb).mean(axis=0) / (1.0 - 1.0 / k)


def shortcut_score(textual: ArrayLike, visual: ArrayLike) -> np.ndarray:
    """S(q) = T(q) - V(q) (paper eq. 6): high = shortcut-prone, low or negative = visually useful."""
    t = np.asarray(textual, dtype=np.float64)
    v = np.asarray(visual, dtype=np.float64)
    if t.shape != v.shape:
        raise ValueError(f"T {t.shape} and V {v.shape} must cover the same questions")
    return t - v


def subset_diagnostics(keep: ArrayLike, correct_blind: ArrayLike, correct_video: ArrayLike,
                       n_options: ArrayLike) -> dict[str, np.ndarray]:
    """Per-model n, chance, Acc_blind, Acc_video, BG and VG on the questions where `keep` is True.

    correct_video rows of text-only models are NaN and give NaN Acc_video / VG."""
    keep = np.asarray(keep, dtype=bool)
    cb = np.asarray(correct_blind, dtype=np.float64)[:, keep]
    cv = np.asarray(correct_video, dtype=np.float64)[:, keep]
    k = check_n_options(n_options)[keep]
    acc_b, acc_v = accuracy(cb), accuracy(cv)
    acc_random = chance(k)
    return {"n": np.full(cb.shape[0], int(keep.sum())), "chance": np.full(cb.shape[0], acc_random),
            "acc_blind": acc_b, "acc_video": acc_v, "blind_gap": acc_b - acc_random, "visual_gain": acc_v - acc_b}


@contextmanager
def bootstrap_settings():
    """The process-wide settings `bootstrap_mean_intervals` runs under. Neither threadpool limits nor warning
    filters are per thread, so callers that bootstrap from several threads enter this once around them.

    - one BLAS thread: the products are small, and OpenBLAS's spinning threads slow to a crawl on a busy machine;
    - no DegenerateDataWarning: a group absent from a resample has no mean there, its interval is NaN as documented.
    """
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        yield


def bootstrap_mean_intervals(values: ArrayLike, groups: ArrayLike | None = None, n_resamples: int = 1000,
                             confidence_level: float = 0.95,
                             seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of the means of `values` (rows, n) over groups of questions (columns).

    One scipy.stats.bootstrap run resamples the n questions; every row and every group is computed on the
    same resamples, so rows built per question from paired results (e.g. correct_video - correct_blind for
    VG) give paired intervals. With w_q = how often question q was drawn, group g's statistic is

        mean_g(row) = sum_{q in g} w_q * row_q / sum_{q in g} w_q,

    the usual bootstrap of a subgroup mean (the group's size varies across resamples, as in a fresh
    draw of questions). groups: (G, n) boolean, default one group of all questions.
    Returns (low, high), each (G, rows), or (rows,) without `groups`. NaN where the group has fewer than
    2 questions or was absent from some resample.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"values must be (rows, n_questions), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("values to bootstrap must be finite")
    rows, n = x.shape
    member = np.ones((1, n), dtype=bool) if groups is None else np.asarray(groups, dtype=bool)
    if member.ndim != 2 or member.shape[1] != n:
        raise ValueError(f"groups must be (n_groups, {n}) booleans, got shape {member.shape}")
    low = np.full((member.shape[0], rows), np.nan)
    high = low.copy()
    if n >= 2 and rows:
        # Questions with the same memberships form a cell; sorted by cell, each cell is a block of columns.
        cells, cell_of = np.unique(member.T, axis=0, return_inverse=True)
        order = np.argsort(cell_of.ravel(), kind="stable")
        starts = np.searchsorted(cell_of.ravel()[order], np.arange(len(cells)))
        blocks = list(zip(starts, np.r_[starts[1:], n], strict=True))
        x_sorted = np.ascontiguousarray(x[:, order].T)  # (n, rows)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        in_group = cells.T.astype(np.float64)  # (G, cells)

        def group_means(resampled_ranks, axis=-1):
            idx = np.asarray(resampled_ranks).reshape(-1, n)
            batch = idx.shape[0]
            counts = np.bincount((idx + (n * np.arange(batch))[:, None]).ravel(), minlength=batch * n)
            counts = counts.reshape(batch, n).astype(np.float64)
            # (batch, n) @ (n, rows) on contiguous blocks: ~50x faster in OpenBLAS than rows @ counts.T
            cell_sums = np.stack([counts[:, a:b] @ x_sorted[a:b] for a, b in blocks], axis=1)
            cell_counts = np.add.reduceat(counts, starts, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                means = np.einsum("gc,bcr->grb", in_group, cell_sums) / (cell_counts @ in_group.T).T[:, None, :]
            return means.reshape(means.shape[:2] + np.shape(resampled_ranks)[:-1])

        batch = int(max(1, min(n_resamples, _BOOTSTRAP_BATCH_ELEMENTS // n)))
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        with bootstrap_settings():
            result = scipy.stats.bootstrap((rank,), group_means, n_resamples=n_resamples, batch=batch,
                                           vectorized=True, method="percentile", confidence_level=confidence_level,
                                           rng=rng)
        low, high = np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)
        small = member.sum(axis=1) < 2
        low[small], high[small] = np.nan, np.nan
    if groups is None:
        return low[0], high[0]
    return low, high
