"""The prompts' wild cluster bootstrap (`visdep_metrics.wild_bootstrap`): the sign-flip test by hand, its interval by
inversion, p < α exactly where the interval excludes 0, where `crossed_intervals` uses it and where it cannot reject."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from visdep_metrics.stats import WILD, T, crossed_intervals
from visdep_metrics.wild_bootstrap import wild_intervals


def sign_flip_p(y: np.ndarray, cluster: np.ndarray, delta: float) -> float:
    """The restricted sign-flip test of H0: mean = delta by hand: every sign pattern of the clusters applied to the
    data less delta, each pattern's cluster-robust t (with G / (G − 1)) against the data's own."""
    g = cluster.max() + 1

    def t_of(x):
        e = x - x.mean()
        sums = np.array([e[cluster == c].sum() for c in range(g)])
        return abs(x.mean()) / np.sqrt(g / (g - 1) * (sums**2).sum() / len(x) ** 2)

    t = abs(y.mean() - delta) / np.sqrt(g / (g - 1) * (np.array([(y - y.mean())[cluster == c].sum()
                                                                  for c in range(g)]) ** 2).sum() / len(y) ** 2)
    flips = [t_of(np.array(signs)[cluster] * (y - delta)) for signs in itertools.product([1.0, -1.0], repeat=g)]
    return float(np.mean(np.array(flips) >= t * (1 - 1e-9)))


def test_the_wild_bootstrap_is_the_sign_flip_test_and_its_interval_the_values_it_keeps():
    rng = np.random.default_rng(5)
    cluster = np.repeat(np.arange(8), [20, 15, 9, 5, 4, 3, 2, 2])  # 8 prompts: every one of the 256 sign patterns
    y = rng.normal(0.3, 1, len(cluster)) + rng.normal(0, 0.5, 8)[cluster]
    sums = np.array([[y[cluster == c].sum() for c in range(8)]])
    low, high, p = wild_intervals(sums, np.bincount(cluster), 0.95)
    assert p[0] == pytest.approx(sign_flip_p(y, cluster, 0.0))
    assert low[0] < y.mean() < high[0]
    step = 1e-6 * (high[0] - low[0])
    for bound, outward in ((low[0], -step), (high[0], step)):
        assert sign_flip_p(y, cluster, bound - outward) >= 0.05 > sign_flip_p(y, cluster, bound + outward)


def location_like(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """990 questions on their own videos over 131 prompts, four of which hold 320 (like VRU's "location")."""
    sizes = np.r_[86, 83, 81, 70, np.full(27, 10), np.full(100, 4)]
    prompt = np.repeat(np.arange(len(sizes)), sizes)
    return np.arange(len(prompt)), rng.permutation(prompt)


def test_a_difference_over_a_few_dominant_prompts_gets_the_wild_bootstrap_and_p_agrees_over_a_fine_scan():
    rng = np.random.default_rng(8)
    video, prompt = location_like(rng)
    # two models answering each prompt's copies nearly alike, one per prompt
    n = len(prompt)
    a = (rng.normal(0, 1, 131)[prompt] + rng.normal(0, 0.3, n) > -1).astype(float)
    b = (rng.normal(0, 1, 131)[prompt] + rng.normal(0, 0.3, n) > -1).astype(float)
    once = crossed_intervals((a - b)[None], None, video, prompt, proportion=False)
    # a fine scan of shifts across both boundaries of the interval (shift s moves 0 to -s in the unshifted data)
    shifts = np.concatenate([np.linspace(-bound - 0.002, -bound + 0.002, 301) for bound in (once.low[0, 0],
                                                                                            once.high[0, 0])])[:, None]
    found = crossed_intervals(a - b + shifts, None, video, prompt, proportion=False)
    assert (found.method[0] == WILD).all()
    excludes_zero = (found.low[0] > 0) | (found.high[0] < 0)
    assert 200 < excludes_zero.sum() < len(shifts) - 200
    assert ((found.p_value[0] < 0.05) == excludes_zero).all()
    # the same answers about shared videos (two questions each): the t on the design effect
    shared = crossed_intervals((a - b)[None], None, video // 2, prompt, proportion=False)
    assert shared.method[0, 0] == T and np.isfinite(shared.low[0, 0])
    # an accuracy (a proportion) keeps Clopper-Pearson's interval
    accuracy = crossed_intervals(a[None], None, video, prompt)
    assert accuracy.method[0, 0] != WILD
    # 60 questions with prompts of their own (flipping single answers would be the exact sign test, conservative
    # for answers that are mostly ties): the t
    alone = crossed_intervals((a - b)[None, :60], None, video[:60], np.arange(60), proportion=False)
    assert alone.method[0, 0] == T and np.isfinite(alone.low[0, 0])


def test_four_prompts_cannot_reject_and_the_interval_is_withheld_with_its_reason():
    rng = np.random.default_rng(1)
    prompt = np.repeat(np.arange(4), 30)  # 16 sign patterns: the smallest p is 2 / 16
    d = rng.integers(-1, 2, 120).astype(float) + 0.5
    found = crossed_intervals(d[None], None, np.arange(120), prompt, proportion=False)
    assert np.isnan(found.low[0, 0]) and np.isnan(found.high[0, 0]) and np.isnan(found.p_value[0, 0])
    assert found.note[0, 0] == "4 prompts, a few holding most questions: the sign-flip test rejects no value"


@pytest.mark.parametrize("g", [7, 131, 699, 1726])
def test_the_sign_patterns_kept_between_calls_are_those_drawn_in_batches(monkeypatch, g):
    """The weights kept for the next call (`_signs`) are the ones the batched draw gives where nothing is kept: a
    report's p-values do not depend on which groups were tested before it. Each resample's sum is also written out
    here from the seed: the first all ones, the others Rademacher draws of default_rng(g), in batches of at most
    1,000,000 weights."""
    import visdep_metrics.wild_bootstrap as wild

    columns = np.random.default_rng(3).normal(size=(g, 3))
    kept = wild._signed_sums(columns)
    monkeypatch.setattr(wild, "_CACHED_ELEMENTS", 0)
    drawn = wild._signed_sums(columns)
    np.testing.assert_allclose(kept, drawn, rtol=1e-12, atol=1e-12)
    if 2**g > wild.RESAMPLES:
        rng, step, signs = np.random.default_rng(g), 1_000_000 // g, [np.ones((1, g))]
        for start in range(1, wild.RESAMPLES, step):
            signs.append(1.0 - 2.0 * rng.integers(0, 2, size=(min(step, wild.RESAMPLES - start), g), dtype=np.int8))
        np.testing.assert_allclose(kept, np.concatenate(signs) @ columns, rtol=1e-12, atol=1e-12)
    else:
        assert len(kept) == 2**g
