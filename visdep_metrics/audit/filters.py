"""Question filters (paper sec. 3.3 and 4.2) and threshold sweeps (figures 3-4), as pure array functions.

Each filter returns a boolean mask of the questions it keeps.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from visdep_metrics.audit.diagnostics import check_n_options

SWEEP_SIGNALS = ("T", "-V", "S")
SWEEP_STEP = 0.05


def signal_range(signal: str, n_options: ArrayLike) -> tuple[float, float]:
    """The interval a sweep signal can take on questions with these option counts.

    T(q) is in [0, 1]. V(q) = mean Delta / (1 - 1/K) with Delta in [-1, 1], so |V(q)| <= r = K/(K-1) at the
    smallest K present (2 for K = 2, 4/3 for K = 4); hence -V in [-r, r] and S = T - V in [-r, 1 + r]."""
    k = check_n_options(n_options)
    if signal not in SWEEP_SIGNALS:
        raise ValueError(f"unknown sweep signal {signal!r}; expected one of {SWEEP_SIGNALS}")
    r = 1.0 if k.size == 0 else float(k.min()) / (float(k.min()) - 1.0)
    return {"T": (0.0, 1.0), "-V": (-r, r), "S": (-r, 1.0 + r)}[signal]


def sweep_taus(signal: str, n_options: ArrayLike, step: float = SWEEP_STEP) -> np.ndarray:
    """tau values of a sweep: the signal's whole range (`signal_range`) on a grid of `step`, rounded outwards."""
    low, high = signal_range(signal, n_options)
    start, stop = np.floor(low / step + 1e-9), np.ceil(high / step - 1e-9)
    return np.round(np.arange(start, stop + 1) * step, 10)


def shortcut_keep(shortcut: ArrayLike, tau: float) -> np.ndarray:
    """D_grounded = {q : S(q) <= tau} (paper eq. 7); a question without a score is not kept."""
    s = np.asarray(shortcut, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return s <= tau


def llm_inspector_keep(correct_blind: ArrayLike, max_hits: int = 1) -> np.ndarray:
    """LLM-Inspector: keep q unless more than `max_hits` text-only LLMs answer it correctly.

    keep(q) = sum_m [Correct_m(q)] <= max_hits, over the (models, n) blind results of its LLM panel."""
    c = np.asarray(correct_blind, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"LLM-Inspector needs (models, n) blind results of at least one LLM, got shape {c.shape}")
    return c.sum(axis=0) <= max_hits


def b_clean_keep(correct_blind: ArrayLike) -> np.ndarray:
    """B-Clean: keep q unless some panel VLM answers it correctly blind: keep(q) = max_m Correct_m(q) == 0."""
    c = np.asarray(correct_blind, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"B-Clean needs (models, n) blind results of at least one VLM, got shape {c.shape}")
    return c.max(axis=0) == 0


def threshold_sweep(signal: ArrayLike, taus: ArrayLike, correct_blind: ArrayLike, correct_video: ArrayLike,
                    n_options: ArrayLike) -> dict[str, np.ndarray]:
    """BG, VG and #kept of every model on {q : signal(q) <= tau} for every tau.

    With questions sorted by signal, the kept set at tau is a prefix of length
    n_kept(tau) = #{q : signal(q) <= tau}; accuracies come from prefix sums:
    Acc(tau) = cumsum(correct)[n_kept] / n_kept, chance(tau) = cumsum(1/K)[n_kept] / n_kept,
    BG = Acc_blind - chance, VG = Acc_video - Acc_blind (NaN where nothing is kept).

    signal: (n,) per-question score (NaN = never kept); correct_blind, correct_video: (models, n).
    Returns arrays of shape (len(taus),) for n_kept and chance, (len(taus), models) for the rest.
    """
    s = np.asarray(signal, dtype=np.float64)
    cb = np.asarray(correct_blind, dtype=np.float64)
    cv = np.asarray(correct_video, dtype=np.float64)
    k = check_n_options(n_options, s.shape[0])
    if cb.shape != cv.shape or cb.ndim != 2 or cb.shape[1] != s.shape[0]:
        raise ValueError(f"expected (models, {s.shape[0]}) blind and video results, got {cb.shape} and {cv.shape}")
    t = np.asarray(taus, dtype=np.float64)
    order = np.argsort(s, kind="stable")  # NaN sorts last and is never <= tau
    n_kept = np.searchsorted(s[order], t, side="right")

    def prefix_means(values):  # values (..., n) -> (len(taus), ...) means over the kept prefix
        sums = np.concatenate([np.zeros(values.shape[:-1] + (1,)), np.cumsum(values[..., order], axis=-1)], axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.moveaxis(sums[..., n_kept] / n_kept, -1, 0)

    acc_blind, acc_video = prefix_means(cb), prefix_means(cv)
    acc_random = prefix_means(1.0 / k)
    return {"tau": t, "n_kept": n_kept, "chance": acc_random, "acc_blind": acc_blind, "acc_video": acc_video,
            "blind_gap": acc_blind - acc_random[:, None], "visual_gain": acc_video - acc_blind}
