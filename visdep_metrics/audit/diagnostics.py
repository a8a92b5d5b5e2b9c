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
from collections.abc import Callable
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


def paper_textual_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                           n_options: ArrayLike) -> np.ndarray:
    """The paper's T(q) (eq. 3) in the signature every variant of T shares: `textual_evidence`."""
    return textual_evidence(correct_blind, entropy_blind)


# Variants of T(q) by name, each f(correct_blind, entropy_blind, p_answer_blind, n_options) -> T (n,), the first three
# (models, n) blind results of the text-only panel. "paper" (eq. 3) is the default everywhere.
TEXTUAL_EVIDENCE: dict[str, Callable[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], np.ndarray]] = {
    "paper": paper_textual_evidence,
}


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


def cluster_labels(clusters: ArrayLike | None, n: int) -> np.ndarray:
    """Integer cluster labels 0..C-1 of n questions; each question its own cluster when `clusters` is None."""
    if clusters is None:
        return np.arange(n)
    c = np.asarray(clusters)
    if c.shape != (n,):
        raise ValueError(f"clusters must give one label per question ({n}), got shape {c.shape}")
    return np.unique(c, return_inverse=True)[1].ravel()


def clusters_per_group(groups: ArrayLike, clusters: ArrayLike | None = None) -> np.ndarray:
    """How many clusters (videos) hold at least one question of each group: the units a group's bootstrap draws.

    groups: (G, n) booleans; clusters: (n,) labels, default one cluster per question."""
    member = np.asarray(groups, dtype=bool)
    if member.ndim != 2:
        raise ValueError(f"groups must be (n_groups, n_questions) booleans, got shape {member.shape}")
    labels = cluster_labels(clusters, member.shape[1])
    present = np.zeros((member.shape[0], int(labels.max(initial=-1)) + 1), dtype=bool)
    rows, questions = np.nonzero(member)
    present[rows, labels[questions]] = True
    return present.sum(axis=1)


def bootstrap_mean_intervals(values: ArrayLike, groups: ArrayLike | None = None, clusters: ArrayLike | None = None,
                             n_resamples: int = 1000, confidence_level: float = 0.95,
                             seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile cluster-bootstrap intervals of the means of `values` (rows, n) over groups of questions.

    Each group is resampled on its own (a category's or subset's interval resamples that category or subset):
    one scipy.stats.bootstrap run per group draws, with replacement, as many clusters as hold questions of the
    group (C_g). With w_c = how often cluster c was drawn and c ∩ g its questions in the group,

        mean_g(row) = sum_c w_c * sum_{q in c ∩ g} row_q / sum_c w_c * |c ∩ g|

    (the cluster bootstrap of a mean; Miller 2024, "Adding Error Bars to Evals"). Questions about one video are
    not independent: resampling them one by one makes intervals too narrow. Without `clusters` every question is
    its own cluster: the plain bootstrap of questions. Every row of a group is computed on the same resamples, so
    rows built per question from paired results (correct_video - correct_blind for VG, a model minus a baseline)
    give paired intervals.

    groups: (G, n) booleans, default one group of all questions; clusters: (n,) labels (e.g. video paths).
    seed: a seed or a Generator; group g draws from the g-th of `G` generators it spawns.
    Returns (low, high), each (G, rows), or (rows,) without `groups`; NaN for a group of fewer than 2 clusters.
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
    labels = cluster_labels(clusters, n)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    generators = rng.spawn(member.shape[0])
    low = np.full((member.shape[0], rows), np.nan)
    high = low.copy()
    with bootstrap_settings():
        for g, in_group in enumerate(member):
            if not rows:
                break
            low[g], high[g] = _cluster_bootstrap(x[:, in_group], labels[in_group], n_resamples, confidence_level,
                                                 generators[g])
    if groups is None:
        return low[0], high[0]
    return low, high


def _cluster_bootstrap(x: np.ndarray, labels: np.ndarray, n_resamples: int, confidence_level: float,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One group's intervals (see bootstrap_mean_intervals): x (rows, n_g), labels (n_g,) of any clusters."""
    rows = x.shape[0]
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]]) if len(order) else order
    n_clusters = len(starts)
    if n_clusters < 2:
        return np.full(rows, np.nan), np.full(rows, np.nan)
    sums = np.ascontiguousarray(np.add.reduceat(x[:, order], starts, axis=1).T)  # (C, rows)
    sizes = np.diff(np.r_[starts, len(order)]).astype(np.float64)  # (C,)

    def group_means(drawn, axis=-1):
        # drawn: resampled cluster indices (..., C) -> means (rows, ...)
        idx = np.asarray(drawn).reshape(-1, n_clusters)
        batch = idx.shape[0]
        counts = np.bincount((idx + (n_clusters * np.arange(batch))[:, None]).ravel(), minlength=batch * n_clusters)
        counts = counts.reshape(batch, n_clusters).astype(np.float64)
        means = (counts @ sums) / (counts @ sizes)[:, None]  # every drawn cluster has a question: no 0 / 0
        return means.T.reshape((rows,) + np.shape(drawn)[:-1])

    batch = int(max(1, min(n_resamples, _BOOTSTRAP_BATCH_ELEMENTS // n_clusters)))
    result = scipy.stats.bootstrap((np.arange(n_clusters),), group_means, n_resamples=n_resamples, batch=batch,
                                   vectorized=True, method="percentile", confidence_level=confidence_level, rng=rng)
    return np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def mcnemar_exact(correct: ArrayLike, correct_baseline: ArrayLike) -> np.ndarray:
    """McNemar's exact test per row: does a model's accuracy differ from the baseline's on the same questions?

    With b = #{q : correct_q = 1, baseline_q = 0} and c = #{q : correct_q = 0, baseline_q = 1} (the discordant
    pairs), under H0 b ~ Binomial(b + c, 1/2); p = the two-sided binomial test's p-value
    (scipy.stats.binomtest), 1 when b + c = 0. It treats questions as independent.

    correct: (rows, n) or (n,) 0/1; correct_baseline: (n,) or the same shape. Returns p per row."""
    a = np.atleast_2d(np.asarray(correct, dtype=np.float64))
    base = np.broadcast_to(np.asarray(correct_baseline, dtype=np.float64), a.shape)
    if a.shape[-1] != base.shape[-1]:
        raise ValueError(f"correct {a.shape} and correct_baseline {base.shape} cover different questions")
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(base, (0.0, 1.0)).all()):
        raise ValueError("McNemar's test needs 0/1 correctness (NaN or other values found)")
    gained = ((a == 1) & (base == 0)).sum(axis=-1)
    lost = ((a == 0) & (base == 1)).sum(axis=-1)
    return np.array([scipy.stats.binomtest(int(b), int(b + c), 0.5).pvalue if b + c else 1.0
                     for b, c in zip(gained, lost, strict=True)])


def cluster_permutation_pvalues(differences: ArrayLike, clusters: ArrayLike | None = None, n_resamples: int = 1000,
                                seed: int | np.random.Generator = 0) -> np.ndarray:
    """Two-sided paired permutation p-values of H0: mean_q d_q = 0, flipping the sign of whole clusters.

    d_q is a per-question paired difference (a model minus the baseline, e.g. of (c_video - c_blind) for ΔVG).
    Under H0 the two models are exchangeable on each video, so each cluster sum D_c = sum_{q in c} d_q is as
    likely as -D_c; the statistic is sum_c D_c (n fixed), its null distribution that of sum_c e_c D_c over
    random signs e_c (scipy.stats.permutation_test, paired samples; exact when 2^C <= n_resamples).
    p = 2 * min(P(T* <= T), P(T* >= T)), capped at 1; 1 where every D_c = 0.

    differences: (rows, n) or (n,); clusters: (n,) labels, default one per question. Returns p per row."""
    d = np.atleast_2d(np.asarray(differences, dtype=np.float64))
    if not np.isfinite(d).all():
        raise ValueError("differences must be finite")
    labels = cluster_labels(clusters, d.shape[1])
    n_clusters = int(labels.max(initial=-1)) + 1
    sums = np.zeros((d.shape[0], n_clusters))
    for row in range(d.shape[0]):
        sums[row] = np.bincount(labels, weights=d[row], minlength=n_clusters)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    p = np.ones(d.shape[0])
    for row, generator in zip(range(d.shape[0]), rng.spawn(d.shape[0]), strict=True):
        if not np.any(sums[row]):
            continue
        test = scipy.stats.permutation_test((sums[row], np.zeros(n_clusters)), _sum_difference,
                                            permutation_type="samples", n_resamples=n_resamples, vectorized=True,
                                            alternative="two-sided", rng=generator)
        p[row] = min(1.0, float(test.pvalue))
    return p


def _sum_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.sum(axis=axis) - y.sum(axis=axis)
