"""The diagnostics of visual dependence (paper sections 3.1-3.3, eqs. 1-7) as pure, vectorised functions.

Conventions (every function):
- arrays of questions run along the last axis; a leading axis, where there is one, runs over models;
- ``n_options`` is K per question (AccidentBench varies K);
- option log-probabilities come padded to ``K_max`` columns: entries at positions ``>= K`` are ignored;
- accuracies and gaps are fractions in [0, 1] (the report multiplies by 100).

Nothing here reads files or imports torch / lmms-eval.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike


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
    """The paper's T(q), eq. 3: the text LLMs' mean of [correct] * (1 - H_norm).

    `textual_evidence` in the signature every variant of T shares."""
    return textual_evidence(correct_blind, entropy_blind)


# Variants of T(q) by name, each f(correct_blind, entropy_blind, p_answer_blind, n_options) -> T (n,), the first three
# (models, n) blind results of the text-only panel. "paper" (eq. 3) is the default everywhere.
TEXTUAL_EVIDENCE: dict[str, Callable[[ArrayLike, ArrayLike, ArrayLike, ArrayLike], np.ndarray]] = {
    "paper": paper_textual_evidence,
}


# Chance-aware variants of T(q). The paper's T counts a right blind answer by the model's confidence whether or
# not the model knows anything: a model that guesses confidently raises T on about 1/K of the questions nobody
# can answer from the text. Each variant below discounts chance in its own way; all stay in [0, 1].
CHANCE_ALPHA = 0.05  # the level of the variants' one-sided tests


def _blind_panel(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                 n_options: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The text panel's (models, n) correct, entropy and p(y*) as floats, and K, checked against each other."""
    c, h = _panel_arrays(correct_blind, entropy_blind, "T(q) needs at least one text-only model")
    c, p = _panel_arrays(c, p_answer_blind, "T(q) needs at least one text-only model")
    return c, h, p, check_n_options(n_options, c.shape[1])


def chance_normalised_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                               n_options: ArrayLike) -> np.ndarray:
    """T_cn(q) = 1/|M_LLM| sum_m max(0, (P_m(y*|blind,q) - 1/K) / (1 - 1/K)).

    Each LLM's probability of the right option above chance, on V's scale (eq. 5): 0 at or below 1/K, 1 when
    sure and right. A model that spreads its probability evenly adds nothing, right or wrong; one that is sure of
    a lucky guess still adds its full confidence."""
    _, _, p, k = _blind_panel(correct_blind, entropy_blind, p_answer_blind, n_options)
    return np.clip((p - 1.0 / k) / (1.0 - 1.0 / k), 0.0, None).mean(axis=0)


def chance_hits_pvalue(hits: ArrayLike, n_options: ArrayLike) -> np.ndarray:
    """One-sided p-values of H0 "right by chance only": P(X >= hits), X = sum_q Bernoulli(1/K_q), the questions
    independent (a Poisson binomial; a plain Binomial(n, 1/K) where every question has K options).

    hits: right answers, one per model (any shape); n_options: K of the questions they were counted over."""
    import scipy.signal
    import scipy.stats

    k = check_n_options(n_options)
    a = np.asarray(hits)
    values, counts = np.unique(k, return_counts=True)
    if len(values) == 1:
        return scipy.stats.binom.sf(a - 1, int(counts[0]), 1.0 / values[0])
    # scipy's poisson_binom is quadratic in n (6 s at 100,000 questions); one binomial per distinct K, convolved
    pmf = np.ones(1)
    for kk, n in zip(values, counts, strict=True):
        pmf = scipy.signal.fftconvolve(pmf, scipy.stats.binom.pmf(np.arange(n + 1), n, 1.0 / kk))
    tail = np.clip(pmf, 0.0, None)[::-1].cumsum()[::-1]  # tail[j] = P(X >= j)
    return np.minimum(1.0, tail[np.clip(a, 0, len(tail) - 1).astype(int)])


def llms_above_chance_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                               n_options: ArrayLike) -> np.ndarray:
    """T_llm(q) = 1/|A| sum_{m in A} [Correct_m(q)] * (1 - H_norm,m(q)), A = the LLMs that beat chance; 0 if none.

    The paper's T over the LLMs whose blind accuracy on these questions beats chance: model m is in A when
    P(X >= a_m) <= alpha = `CHANCE_ALPHA`, a_m = sum_q [Correct_m(q)], X the right answers of a guesser
    (`chance_hits_pvalue`). A model that knows nothing of the questions leaves T, and so its lucky guesses
    leave S. The test is over the questions passed in (the audit passes one benchmark at a time)."""
    c, h, _, k = _blind_panel(correct_blind, entropy_blind, p_answer_blind, n_options)
    above = chance_hits_pvalue(c.sum(axis=1), k) <= CHANCE_ALPHA
    if not above.any():
        return np.zeros(c.shape[1])
    return (c[above] * (1.0 - h[above])).mean(axis=0)


def panel_beats_chance_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                                n_options: ArrayLike) -> np.ndarray:
    """T_pt(q) = T(q) if P(Binomial(|M_LLM|, 1/K) >= c(q)) <= alpha, else 0; c(q) = sum_m [Correct_m(q)].

    The paper's T (eq. 3) where a one-sided binomial test says the text panel beats chance on this question:
    under H0 each LLM guesses, right with probability 1/K, independently; alpha = `CHANCE_ALPHA`. With few
    models only near-unanimity passes: at K = 4, 2 right of 2 has P = 1/16 > 0.05 (so a panel of two never
    passes), 3 of 3 has P = 1/64, 3 of 4 has P = 13/256 > 0.05."""
    import scipy.stats

    c, h, _, k = _blind_panel(correct_blind, entropy_blind, p_answer_blind, n_options)
    beats = scipy.stats.binom.sf(c.sum(axis=0) - 1, c.shape[0], 1.0 / k) <= CHANCE_ALPHA
    return np.where(beats, (c * (1.0 - h)).mean(axis=0), 0.0)


def latent_class_evidence(correct_blind: ArrayLike, entropy_blind: ArrayLike, p_answer_blind: ArrayLike,
                          n_options: ArrayLike, max_iterations: int = 1000, tolerance: float = 1e-10) -> np.ndarray:
    """T_lc(q) = pi L1(q) / (pi L1(q) + (1 - pi) L0(q)): the probability that q is answerable from its text.

    A two-class model of the panel's right and wrong blind answers: on a question the text does not give away
    every LLM is right by chance, with probability 1/K; on one it gives away LLM m is right with probability a_m:

        L0(q) = prod_m (1/K)^{c_m(q)} (1 - 1/K)^{1 - c_m(q)}      L1(q) = prod_m a_m^{c_m(q)} (1 - a_m)^{1 - c_m(q)}

    with c_m(q) = [Correct_m(q)], and pi (the share of answerable questions) and a_m fitted by maximum likelihood
    over the questions passed in (EM from pi = 1/2, a_m = 0.9, until the log-likelihood gains less than `tolerance`
    of itself; the chance class is fixed, so the classes cannot swap).
    A model right at chance rate gets a_m near 1/K and its answers then weigh nothing; a lucky hit of one model
    that others miss weighs little. Confidence plays no part. The models are taken as independent given the class."""
    c, _, _, k = _blind_panel(correct_blind, entropy_blind, p_answer_blind, n_options)
    c = (c > 0).astype(np.float64)
    hits = c.sum(axis=0)
    log_chance0 = hits * np.log(1.0 / k) + (c.shape[0] - hits) * np.log1p(-1.0 / k)  # log L0(q)
    pi, a = 0.5, np.full(c.shape[0], 0.9)
    previous = -np.inf
    for _ in range(max_iterations):
        a = np.clip(a, 1e-9, 1.0 - 1e-9)
        # log L1(q) = sum_m c_m log a_m + (1 - c_m) log(1 - a_m), as one product
        log1 = (np.log(a) - np.log1p(-a)) @ c + np.log1p(-a).sum() + np.log(pi)
        log0 = log_chance0 + np.log1p(-pi)
        joint = np.logaddexp(log1, log0)
        posterior = np.exp(log1 - joint)
        likelihood = joint.sum()
        if likelihood - previous < tolerance * abs(likelihood):  # EM never lowers the likelihood
            break
        previous = likelihood
        pi = float(np.clip(posterior.mean(), 1e-9, 1.0 - 1e-9))
        a = (c * posterior).sum(axis=1) / max(posterior.sum(), 1e-300)
    return posterior


TEXTUAL_EVIDENCE.update({
    "chance_normalised": chance_normalised_evidence,
    "llms_above_chance": llms_above_chance_evidence,
    "panel_beats_chance": panel_beats_chance_evidence,
    "latent_class": latent_class_evidence,
})


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
