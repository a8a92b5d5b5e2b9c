"""The chance-aware variants of T(q) in `diagnostics.TEXTUAL_EVIDENCE`, against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from visdep_metrics.audit.diagnostics import (
    TEXTUAL_EVIDENCE,
    chance_hits_pvalue,
    chance_normalised_evidence,
    latent_class_evidence,
    llms_above_chance_evidence,
    panel_beats_chance_evidence,
    textual_evidence,
)

VARIANTS = ("chance_normalised", "llms_above_chance", "panel_beats_chance", "latent_class")


def test_the_registry_names_every_variant_beside_the_unchanged_paper():
    assert set(TEXTUAL_EVIDENCE) == {"paper", *VARIANTS}
    assert next(iter(TEXTUAL_EVIDENCE)) == "paper"
    for name in VARIANTS:
        assert "T" in TEXTUAL_EVIDENCE[name].__doc__ and "=" in TEXTUAL_EVIDENCE[name].__doc__, name
    rng = np.random.default_rng(0)
    correct = rng.integers(0, 2, (3, 50)).astype(float)
    entropy = rng.random((3, 50))
    k = np.full(50, 4)
    np.testing.assert_array_equal(TEXTUAL_EVIDENCE["paper"](correct, entropy, rng.random((3, 50)), k),
                                  textual_evidence(correct, entropy))


def test_chance_normalised_counts_only_probability_above_one_in_k():
    # K = 4: (1 - 1/4) / (3/4) = 1; (0.625 - 0.25) / 0.75 = 0.5; (0.5 - 0.25) / 0.75 = 1/3; below 1/4 -> 0
    p = np.array([[1.0, 0.25, 0.1], [0.625, 0.5, 0.25]])
    t = chance_normalised_evidence(np.zeros((2, 3)), np.zeros((2, 3)), p, np.array([4, 4, 4]))
    np.testing.assert_allclose(t, [0.75, 1 / 6, 0.0])
    # K = 2: (0.75 - 0.5) / 0.5 = 0.5, whatever the argmax says
    t = chance_normalised_evidence(np.array([[0.0]]), np.array([[0.0]]), np.array([[0.75]]), np.array([2]))
    np.testing.assert_allclose(t, [0.5])


def test_chance_hits_pvalue_by_hand_and_against_scipys_poisson_binomial():
    k = np.array([4, 4, 4])
    # P(X >= 3) = 1/64; P(X >= 2) = 3 (1/16)(3/4) + 1/64 = 10/64; P(X >= 0) = 1
    np.testing.assert_allclose(chance_hits_pvalue(np.array([3, 2, 0]), k), [1 / 64, 10 / 64, 1.0])
    # one question at K = 2 and one at K = 4: P(X >= 2) = 1/8, P(X >= 1) = 1 - (1/2)(3/4) = 5/8
    np.testing.assert_allclose(chance_hits_pvalue(np.array([2, 1, 0]), np.array([2, 4])), [1 / 8, 5 / 8, 1.0])
    mixed = np.random.default_rng(1).choice([2, 4, 5], 400)
    hits = np.array([90, 130, 160])
    reference = scipy.stats.poisson_binom(1.0 / mixed).sf(hits - 1)
    np.testing.assert_allclose(chance_hits_pvalue(hits, mixed), reference, rtol=1e-6, atol=1e-12)


def test_llms_above_chance_leaves_out_a_model_that_only_guesses():
    n = 40
    k = np.full(n, 4)
    knows = np.ones(n)  # right on 40 of 40
    guesses = (np.arange(n) % 4 == 0).astype(float)  # right on 10 of 40: P(X >= 10) = 0.56 at chance
    correct = np.stack([knows, guesses])
    entropy = np.stack([np.full(n, 0.2), np.zeros(n)])  # the guesser is sure of every guess
    p = np.zeros((2, n))
    np.testing.assert_allclose(llms_above_chance_evidence(correct, entropy, p, k), np.full(n, 0.8))
    # the paper's T counts the guesser's lucky hits at full confidence: (0.8 + 1) / 2 on them
    assert textual_evidence(correct, entropy)[0] == pytest.approx(0.9)
    # both beat chance: the paper's T; neither does: 0
    np.testing.assert_allclose(llms_above_chance_evidence(np.stack([knows, knows]), entropy, p, k),
                               textual_evidence(np.stack([knows, knows]), entropy))
    np.testing.assert_array_equal(llms_above_chance_evidence(np.stack([guesses, guesses]), entropy, p, k),
                                  np.zeros(n))


def test_panel_beats_chance_needs_a_significant_count_of_right_answers():
    k = np.full(4, 4)
    # three models; questions answered right by 3, 2, 1, 0 of them: only 3 of 3 passes (1/64 <= 0.05 < 10/64)
    correct = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=float)
    entropy = np.full((3, 4), 0.4)
    t = panel_beats_chance_evidence(correct, entropy, np.zeros((3, 4)), k)
    np.testing.assert_allclose(t, [0.6, 0.0, 0.0, 0.0])
    # two models can never pass at K = 4 (2 of 2: 1/16 > 0.05), at K = 2 neither (1/4)
    both = np.ones((2, 4))
    assert not panel_beats_chance_evidence(both, np.zeros((2, 4)), np.zeros((2, 4)), k).any()


def test_latent_class_finds_the_answerable_questions_and_ignores_a_guesser():
    # 3,000 questions, 30% answerable from the text; two LLMs right there with 0.95 and 0.85, a third right
    # everywhere at chance (1/4), and sure of every answer: the paper's T counts its lucky hits in full
    rng = np.random.default_rng(3)
    n, k = 3000, np.full(3000, 4)
    answerable = rng.random(n) < 0.3
    rates = np.array([0.95, 0.85])[:, None]
    skilled = np.where(answerable, rng.random((2, n)) < rates, rng.random((2, n)) < 0.25)
    guesser = rng.random(n) < 0.25
    correct = np.vstack([skilled, guesser]).astype(float)
    entropy, p = np.zeros((3, n)), np.zeros((3, n))
    t = latent_class_evidence(correct, entropy, p, k)
    # the posterior under the true parameters, by Bayes' rule
    true_rates = np.array([0.95, 0.85, 0.25])[:, None]
    l1 = np.prod(np.where(correct == 1, true_rates, 1 - true_rates), axis=0)
    l0 = np.prod(np.where(correct == 1, 0.25, 0.75), axis=0)
    bayes = 0.3 * l1 / (0.3 * l1 + 0.7 * l0)
    assert np.abs(t - bayes).mean() < 0.02
    assert t.mean() == pytest.approx(0.3, abs=0.03)
    without_guesser = latent_class_evidence(correct[:2], entropy[:2], p[:2], k)
    assert np.abs(t - without_guesser).mean() < 0.02
    # one lucky hit of the guesser alone, on an open question: T near 0 (the paper's: 1/3)
    alone = ~answerable & ~skilled.any(axis=0) & guesser
    assert alone.sum() > 100 and t[alone].max() < 0.05
    assert textual_evidence(correct, entropy)[alone] == pytest.approx(1 / 3)


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_stays_in_zero_one_and_refuses_unpaired_arrays(name):
    f = TEXTUAL_EVIDENCE[name]
    rng = np.random.default_rng(2)
    k = rng.choice([2, 4, 5], 300)
    p = rng.dirichlet(np.ones(5), (3, 300))
    p = np.where(np.arange(5)[None, None, :] < k[None, :, None], p, 0.0)
    p /= p.sum(axis=-1, keepdims=True)
    answer = rng.integers(0, k)
    p_answer = p[:, np.arange(300), answer]
    correct = (p.argmax(axis=-1) == answer).astype(float)
    entropy = rng.random((3, 300))
    t = f(correct, entropy, p_answer, k)
    assert t.shape == (300,) and (t >= 0).all() and (t <= 1).all()
    with pytest.raises(ValueError, match="one shape"):
        f(correct, entropy, p_answer[:2], k)
    with pytest.raises(ValueError, match="n_options"):
        f(correct, entropy, p_answer, k[:10])
    with pytest.raises(ValueError, match="at least one"):
        f(np.zeros((0, 300)), np.zeros((0, 300)), np.zeros((0, 300)), k)
