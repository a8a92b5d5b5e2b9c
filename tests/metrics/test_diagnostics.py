"""Pure diagnostics: hand-computed T, V, S, entropies, chance, BG/VG."""

import numpy as np
import pytest

from tests.helpers.hand_example import ANSWER, L1, L2, V1_BLIND, V1_VIDEO, K, h_norm
from visdep_metrics.audit.diagnostics import (
    answer_probability,
    blind_gap,
    chance,
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


def test_validation_at_the_boundary():
    with pytest.raises(ValueError, match="finite"):
        option_probabilities(np.array([[0.0, np.nan]]), np.array([2]))
    with pytest.raises(ValueError, match="at least 2 options"):
        chance(np.array([1, 4]))
    with pytest.raises(ValueError, match="not paired"):
        visual_gain(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one text-only"):
        textual_evidence(np.zeros((0, 3)), np.zeros((0, 3)))
