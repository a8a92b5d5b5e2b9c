"""Pure diagnostics: hand-computed T, V, S, entropies, chance, BG/VG and the bootstrap against plain scipy."""

import itertools

import numpy as np
import pytest
import scipy.stats

from tests.helpers.hand_example import ANSWER, L1, L2, V1_BLIND, V1_VIDEO, K, h_norm
from visdep_metrics.audit.diagnostics import (
    answer_probability,
    blind_gap,
    bootstrap_mean_intervals,
    chance,
    cluster_permutation_pvalues,
    clusters_per_group,
    mcnemar_exact,
    normalised_entropy,
    option_probabilities,
    predicted_index,
    shortcut_score,
    subset_diagnostics,
    textual_evidence,
    visual_gain,
    visual_necessity,
)


def padded_logprobs(rows, shift=-3.0):
    """log p, shifted by a constant (softmax must not care), padded with NaN to K_max = 4."""
    out = np.full((len(rows), 4), np.nan)
    for i, p in enumerate(rows):
        out[i, : len(p)] = np.log(p) + shift
    return out


def test_probabilities_entropy_prediction_of_padded_rows():
    p = option_probabilities(padded_logprobs(L1), K)
    for i, row in enumerate(L1):
        assert p[i, : len(row)] == pytest.approx(row)
        assert p[i, len(row):].sum() == 0.0
    assert normalised_entropy(p, K) == pytest.approx([h_norm(r) for r in L1])
    assert predicted_index(option_probabilities(padded_logprobs(L2), K)).tolist() == [1, 0, 1]  # tie -> first
    assert answer_probability(p, ANSWER) == pytest.approx([0.8, 0.7, 0.5])


def test_uniform_and_certain_entropies():
    p = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    assert normalised_entropy(p, np.array([4, 4])) == pytest.approx([1.0, 0.0])


def test_T_V_S_by_hand_for_a_three_model_panel():
    probs = {name: option_probabilities(padded_logprobs(rows), K)
             for name, rows in (("L1", L1), ("L2", L2), ("Vb", V1_BLIND), ("Vv", V1_VIDEO))}
    correct = np.stack([predicted_index(probs[m]) == ANSWER for m in ("L1", "L2")])
    entropy = np.stack([normalised_entropy(probs[m], K) for m in ("L1", "L2")])
    t = textual_evidence(correct, entropy)
    # eq. 3 by hand: only correct blind predictions count, weighted by 1 - H_norm.
    t_hand = [(1 - h_norm(L1[0])) / 2,  # L2 wrong
              (1 - h_norm(L1[1])) / 2,  # L2 wrong (tie)
              ((1 - h_norm(L1[2])) + (1 - h_norm(L2[2]))) / 2]
    assert t == pytest.approx(t_hand)
    assert t[0] == pytest.approx(0.139035, abs=1e-6)  # (1 - 0.721928) / 2
    p_video, p_blind = answer_probability(probs["Vv"], ANSWER), answer_probability(probs["Vb"], ANSWER)
    v = visual_necessity(p_video[None], p_blind[None], K)
    # eqs. 4-5 by hand: (P(y*|video) - P(y*|blind)) / (1 - 1/K)
    v_hand = [(0.9 - 0.6) / (1 - 1 / 2), (0.5 - 0.5) / (1 - 1 / 4), (0.3 - 0.9) / (1 - 1 / 3)]
    assert v == pytest.approx(v_hand)
    assert v == pytest.approx([0.6, 0.0, -0.9])
    s = shortcut_score(t, v)
    assert s == pytest.approx([t_hand[0] - 0.6, t_hand[1], t_hand[2] + 0.9])
    assert (s <= 0.1).tolist() == [True, False, False]


def test_V_averages_over_models():
    pv = np.array([[0.9, 0.5], [0.5, 0.5]])
    pb = np.array([[0.5, 0.5], [0.7, 0.25]])
    assert visual_necessity(pv, pb, np.array([2, 4])) == pytest.approx(
        [((0.4) + (-0.2)) / 2 / 0.5, ((0.0) + (0.25)) / 2 / 0.75])


def test_chance_bg_vg_paper_table1_rows():
    # InternVL 3.5 8B on MM-AU (2453 questions, K = 5): 1480 correct blind, 1248 with video.
    k = np.full(2453, 5)
    blind = np.arange(2453) < 1480
    video = np.arange(2453) < 1248
    assert chance(k) == pytest.approx(0.2)
    assert round(100 * blind.mean(), 2) == 60.33 and round(100 * video.mean(), 2) == 50.88
    assert round(100 * blind_gap(blind, k), 2) == 40.33
    assert round(100 * visual_gain(video, blind), 2) == -9.46  # the paper's -9.46; 50.88 - 60.33 = -9.45 rounded
    # AccidentBench (K varies): 96 two-option + 9904 four-option questions give the paper's 25.24% chance.
    k = np.r_[np.full(96, 2), np.full(9904, 4)]
    assert 100 * chance(k) == pytest.approx(25.24)
    blind, video = np.arange(10000) < 3043, np.arange(10000) < 3776
    assert 100 * blind_gap(blind, k) == pytest.approx(5.19)
    assert 100 * visual_gain(video, blind) == pytest.approx(7.33)


def test_subset_diagnostics_per_model_with_text_only_rows():
    cb = np.array([[1, 0, 1, 1], [0, 0, 1, 0]], dtype=float)
    cv = np.array([[1, 1, 1, 1], [np.nan] * 4])
    d = subset_diagnostics(np.array([True, True, False, True]), cb, cv, np.array([2, 4, 4, 4]))
    assert d["n"].tolist() == [3, 3]
    assert d["chance"][0] == pytest.approx((0.5 + 0.25 + 0.25) / 3)
    assert d["acc_blind"] == pytest.approx([2 / 3, 0])
    assert d["visual_gain"][0] == pytest.approx(1 / 3) and np.isnan(d["visual_gain"][1])


def test_bootstrap_equals_plain_scipy_bootstrap_and_pairs_rows():
    rng = np.random.default_rng(1)
    blind = (rng.random(300) < 0.5).astype(float)
    video = (rng.random(300) < 0.6).astype(float)
    low, high = bootstrap_mean_intervals(np.stack([blind, video - blind]), n_resamples=999, seed=3)
    # the one group draws from the first generator the seed spawns; no clusters: each question is one
    plain = scipy.stats.bootstrap((blind,), np.mean, n_resamples=999, batch=999, method="percentile",
                                  rng=np.random.default_rng(3).spawn(1)[0]).confidence_interval
    paired = scipy.stats.bootstrap((video, blind), lambda v, b, axis=-1: v.mean(axis) - b.mean(axis), paired=True,
                                   n_resamples=999, batch=999, method="percentile",
                                   rng=np.random.default_rng(3).spawn(1)[0]).confidence_interval
    assert low[0] == pytest.approx(plain.low) and high[0] == pytest.approx(plain.high)
    assert low[1] == pytest.approx(paired.low) and high[1] == pytest.approx(paired.high)
    assert low[0] < blind.mean() < high[0]


def test_bootstrap_of_a_group_resamples_within_the_group():
    rng = np.random.default_rng(2)
    blind = (rng.random(300) < 0.5).astype(float)
    in_group = rng.random(300) < 0.3
    low, high = bootstrap_mean_intervals(blind[None], np.stack([np.ones(300, bool), in_group, ~in_group]),
                                         n_resamples=999, seed=5)
    # group 1 draws its own questions, as many as it has, from the second spawned generator
    within = scipy.stats.bootstrap((blind[in_group],), np.mean, n_resamples=999, batch=999, method="percentile",
                                   rng=np.random.default_rng(5).spawn(3)[1]).confidence_interval
    assert (low[1, 0], high[1, 0]) == pytest.approx((within.low, within.high))
    assert low.shape == (3, 1) and low[2, 0] < blind[~in_group].mean() < high[2, 0]


def test_cluster_bootstrap_resamples_videos():
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 7, 80)  # 80 videos with 1 to 6 questions each
    video = np.repeat(np.arange(80), sizes)
    correct = (rng.random(80) < 0.5)[video].astype(float)  # one answer per video, shared by its questions
    correct[rng.random(len(video)) < 0.1] = 1.0
    shuffled = rng.permutation(len(video))  # questions need not come sorted by video
    video_names = np.array([f"videos/{v:03d}.mp4" for v in video])[shuffled]
    low, high = bootstrap_mean_intervals(correct[shuffled], clusters=video_names, n_resamples=999, seed=8)
    # independent route: the bootstrap of the ratio (sum of drawn videos' correct) / (their question count)
    sums, counts = np.bincount(video, correct), np.bincount(video)
    ratio = scipy.stats.bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis) / c.sum(axis), paired=True,
                                  n_resamples=999, batch=999, method="percentile",
                                  rng=np.random.default_rng(8).spawn(1)[0]).confidence_interval
    assert (low[0], high[0]) == pytest.approx((ratio.low, ratio.high))


def test_clusters_per_group_and_mcnemar_against_scipy():
    groups = np.array([[1, 1, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=bool)
    assert clusters_per_group(groups, ["a", "a", "b", "c", "c"]).tolist() == [3, 1]
    assert clusters_per_group(groups).tolist() == [4, 2]
    rng = np.random.default_rng(6)
    base = (rng.random(500) < 0.5).astype(float)
    models = np.stack([np.where(rng.random(500) < 0.2, 1.0, base), base, 1 - base])
    p = mcnemar_exact(models, base)
    for row, model in zip(p, models, strict=True):
        gained = int(sum(1 for m, b in zip(model, base, strict=True) if m == 1 and b == 0))
        lost = int(sum(1 for m, b in zip(model, base, strict=True) if m == 0 and b == 1))
        expected = scipy.stats.binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
        assert row == expected
    assert p[1] == 1.0 and p[0] < 1e-6


def test_cluster_permutation_pvalue_by_enumeration():
    d = np.array([0.0, 1, 1, -1, 0, 1, 1, 1, 0, 1])  # per-question paired differences
    videos = np.array([0, 0, 1, 1, 2, 3, 4, 5, 6, 7])  # 8 videos: 2^8 sign flips, enumerated exactly
    p = cluster_permutation_pvalues(d, videos, n_resamples=1000, seed=1)
    sums = np.array([1.0, 0, 0, 1, 1, 1, 0, 1])  # per video
    null = np.array([np.dot(signs, sums) for signs in itertools.product((-1, 1), repeat=8)])
    observed = sums.sum()
    expected = min(1.0, 2 * min((null <= observed).mean(), (null >= observed).mean()))
    assert p[0] == pytest.approx(expected)
    assert cluster_permutation_pvalues(np.zeros((1, 10)), videos)[0] == 1.0


def test_bootstrap_degenerate_inputs():
    low, high = bootstrap_mean_intervals(np.ones((2, 50)), n_resamples=200)
    assert low.tolist() == [1.0, 1.0] and high.tolist() == [1.0, 1.0]
    low, high = bootstrap_mean_intervals(np.ones((1, 1)))
    assert np.isnan(low).all() and np.isnan(high).all()
    one = np.zeros(40, bool)
    one[3] = True  # a one-question group gets no interval
    low, high = bootstrap_mean_intervals(np.ones((1, 40)), np.stack([np.ones(40, bool), one]), n_resamples=50)
    assert low[0, 0] == 1.0 and np.isnan(low[1, 0]) and np.isnan(high[1, 0])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_intervals(np.array([[0.0, np.nan, 1.0]]))


def test_validation_at_the_boundary():
    with pytest.raises(ValueError, match="finite"):
        option_probabilities(np.array([[0.0, np.nan]]), np.array([2]))
    with pytest.raises(ValueError, match="at least 2 options"):
        chance(np.array([1, 4]))
    with pytest.raises(ValueError, match="not paired"):
        visual_gain(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one text-only"):
        textual_evidence(np.zeros((0, 3)), np.zeros((0, 3)))
