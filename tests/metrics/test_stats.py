"""visdep_metrics.stats: the intervals against scipy's where the questions are independent, the design effect against
its definition computed by hand, degenerate groups, a lone shared prompt, p-values against the intervals over a fine
scan, Holm's adjustment by hand, and the demo's video bootstrap against plain scipy."""

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from visdep_metrics.stats import (
    bootstrap_mean_intervals,
    crossed_intervals,
    design_effect,
    holm,
    two_way_variance,
    units_per_group,
)

Z = scipy.stats.norm.ppf(0.975)


def test_video_bootstrap_equals_plain_scipy_bootstrap_and_pairs_rows():
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


def test_video_bootstrap_of_a_group_resamples_within_the_group():
    rng = np.random.default_rng(2)
    blind = (rng.random(300) < 0.5).astype(float)
    in_group = rng.random(300) < 0.3
    low, high = bootstrap_mean_intervals(blind[None], np.stack([np.ones(300, bool), in_group, ~in_group]),
                                         n_resamples=999, seed=5)
    within = scipy.stats.bootstrap((blind[in_group],), np.mean, n_resamples=999, batch=999, method="percentile",
                                   rng=np.random.default_rng(5).spawn(3)[1]).confidence_interval
    assert (low[1, 0], high[1, 0]) == pytest.approx((within.low, within.high))
    assert low.shape == (3, 1) and low[2, 0] < blind[~in_group].mean() < high[2, 0]


def test_video_bootstrap_resamples_videos():
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 7, 80)  # 80 videos with 1 to 6 questions each
    video = np.repeat(np.arange(80), sizes)
    correct = (rng.random(80) < 0.5)[video].astype(float)
    correct[rng.random(len(video)) < 0.1] = 1.0
    shuffled = rng.permutation(len(video))
    names = np.array([f"videos/{v:03d}.mp4" for v in video])[shuffled]
    low, high = bootstrap_mean_intervals(correct[shuffled], clusters=names, n_resamples=999, seed=8)
    sums, counts = np.bincount(video, correct), np.bincount(video)
    ratio = scipy.stats.bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis) / c.sum(axis), paired=True,
                                  n_resamples=999, batch=999, method="percentile",
                                  rng=np.random.default_rng(8).spawn(1)[0]).confidence_interval
    assert (low[0], high[0]) == pytest.approx((ratio.low, ratio.high))


def test_video_bootstrap_degenerate_inputs():
    low, high = bootstrap_mean_intervals(np.ones((1, 1)))
    assert np.isnan(low).all() and np.isnan(high).all()
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_intervals(np.array([[0.0, np.nan, 1.0]]))


def test_units_per_group():
    groups = np.array([[1, 1, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=bool)
    assert units_per_group(groups, ["a", "a", "b", "c", "c"]).tolist() == [3, 1]
    assert units_per_group(groups).tolist() == [4, 2]


def test_independent_answers_get_wilson_and_the_t_interval():
    rng = np.random.default_rng(5)
    correct = (rng.random(400) < 0.7).astype(float)
    diff = rng.integers(-1, 2, 400).astype(float)
    found = crossed_intervals(np.stack([correct, diff]), None, np.arange(400), np.arange(400),
                              proportion=[True, False])
    # nothing shared: no variance component is estimated, so Wilson's interval on the 400 answers as they are
    wilson = scipy.stats.binomtest(int(correct.sum()), 400).proportion_ci(0.95, method="wilson")
    assert (found.low[0, 0], found.high[0, 0]) == pytest.approx((wilson.low, wilson.high))
    t = scipy.stats.ttest_1samp(diff, 0.0)
    assert (found.low[0, 1], found.high[0, 1]) == pytest.approx(tuple(t.confidence_interval(0.95)))
    assert found.p_value[0, 1] == pytest.approx(t.pvalue) and np.isnan(found.p_value[0, 0])
    assert found.deff[0] == pytest.approx([1.0, 1.0]) and found.n_effective[0] == pytest.approx([400.0, 400.0])


def by_hand_wilson(p: float, n: float, df: float) -> tuple[float, float]:
    """Wilson's score interval, written out, on n (z / t_df)² answers."""
    n = n * (Z / scipy.stats.t.ppf(0.975, df)) ** 2
    centre = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z / (1 + Z**2 / n) * np.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2))
    return max(centre - half, 0.0), min(centre + half, 1.0)


def anova_design_effect(values: np.ndarray, units: dict[str, np.ndarray]) -> float:
    """1 + Σ ρ_u (ν_u − 1), ρ_u the one-way ANOVA intraclass correlation, by pandas group-bys."""
    frame = pd.DataFrame({"y": values} | units)
    n, deff = len(frame), 1.0
    for name in units:
        g = frame.groupby(name)["y"]
        sizes, means = g.size(), g.mean()
        c = len(sizes)
        ssb = (sizes * (means - frame["y"].mean()) ** 2).sum()
        ssw = ((frame["y"] - g.transform("mean")) ** 2).sum()
        msb, msw = ssb / (c - 1), ssw / (n - c)
        nu = (sizes**2).sum() / n
        n0 = (n - nu) / (c - 1)
        rho = min(max((msb - msw) / (msb + (n0 - 1) * msw), 0.0), 1.0)
        deff += rho * (nu - 1)
    return deff


def test_design_effect_against_its_definition():
    rng = np.random.default_rng(9)
    video = np.repeat(np.arange(60), 4)
    prompt = np.where(rng.random(240) < 0.5, rng.integers(0, 15, 240), 100 + np.arange(240))
    values = (rng.normal(0, 0.6, 60)[video] + rng.normal(0, 0.8, 400)[prompt] + rng.normal(0, 1, 240) > 0)
    expected = anova_design_effect(values.astype(float), {"video": video, "prompt": prompt})
    assert design_effect(values.astype(float), video, prompt)[0] == pytest.approx(expected)
    assert expected > 1.5  # the example does share answers


def test_design_effect_of_answers_shared_by_their_prompt():
    # each question about its own video; prompts in pairs of equal size, one answered right, one wrong: mean 1/2,
    # every copy of a prompt answered alike, so ρ_prompt = 1 and deff = Σ n_p² / N exactly
    sizes = np.array([1, 1, 2, 2, 5, 5, 9, 9, 30, 30])
    prompt = np.repeat(np.arange(len(sizes)), sizes)
    correct = (np.arange(len(sizes)) % 2).astype(float)[prompt]
    video = np.arange(len(prompt))
    assert design_effect(correct, video, prompt)[0] == pytest.approx((sizes**2).sum() / sizes.sum())
    assert design_effect(correct, video)[0] == pytest.approx(1.0)  # seen one way: independent questions
    # nothing varies: the design's bound
    assert design_effect(np.ones(len(prompt)), video, prompt)[0] == pytest.approx((sizes**2).sum() / sizes.sum())


def test_two_way_variance_sums_the_pairs_that_share_a_video_or_a_prompt():
    rng = np.random.default_rng(9)
    video = np.repeat(np.arange(12), 4)
    prompt = np.where(rng.random(48) < 0.5, rng.integers(0, 5, 48), 10 + np.arange(48))
    prompt[:2] = 0
    values = rng.normal(0, 1, (2, 48))
    e = values - values.mean(axis=1, keepdims=True)
    related = (video[:, None] == video[None, :]) | (prompt[:, None] == prompt[None, :])
    by_pairs = np.einsum("rq,qs,rs->r", e, related.astype(float), e) / 48**2
    assert two_way_variance(values, video, prompt) == pytest.approx(by_pairs)


def test_a_group_whose_answers_are_all_equal_gets_no_zero_width_interval():
    # 120 questions on 40 videos, 30 prompts shared by 4 questions each: every answer right (or every one wrong)
    video = np.repeat(np.arange(40), 3)
    prompt = np.arange(120) % 30
    for value in (0.0, 1.0):
        found = crossed_intervals(np.full((1, 120), value), None, video, prompt)
        # the design's bound: max(ν_video, ν_prompt) = max(3, 4) = 4, so 30 independent answers; Wilson there
        n = 30
        assert found.deff[0, 0] == pytest.approx(4.0) and found.n_effective[0, 0] == pytest.approx(n)
        assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_wilson(value, n, n - 1))
        assert found.low[0, 0] < value or found.high[0, 0] > value
        assert found.high[0, 0] - found.low[0, 0] > 0.1
    # an all-zero difference (two models answering alike) has no interval at all, and p = 1
    found = crossed_intervals(np.zeros((1, 120)), None, video, prompt, proportion=False)
    assert np.isnan(found.low[0, 0]) and found.p_value[0, 0] == 1.0
    assert found.note[0, 0] == "every question gives the same difference (+0.00): no spread to estimate"


def test_one_shared_prompt_counts():
    # 200 questions on 200 videos; 40 of them share one prompt and are answered alike (all right); the other 160
    # have prompts of their own and are answered independently at 1/2
    rng = np.random.default_rng(3)
    prompt = np.r_[np.zeros(40, int), 1 + np.arange(160)]
    correct = np.r_[np.ones(40), (rng.random(160) < 0.5)].astype(float)
    video = np.arange(200)
    shared = crossed_intervals(correct[None], None, video, prompt)
    alone = crossed_intervals(correct[None], None, video, None)
    expected = anova_design_effect(correct, {"prompt": prompt})
    assert shared.deff[0, 0] == pytest.approx(expected) and expected > 3  # ν_prompt = (40² + 160) / 200 = 8.8
    width, width_alone = (f.high[0, 0] - f.low[0, 0] for f in (shared, alone))
    assert width > 1.5 * width_alone


def test_too_few_independent_answers_withhold_the_interval_and_say_so():
    video = np.repeat(np.arange(4), 3)  # 12 questions, 4 videos, each answered alike within its video
    correct = np.repeat([1.0, 0.0, 1.0, 1.0], 3)
    found = crossed_intervals(correct[None], None, video)
    assert np.isnan(found.low[0, 0]) and found.n_effective[0, 0] == pytest.approx(4.0)
    assert found.note[0, 0] == "≈ 4 independent answers: too few for an interval"
    one_video = crossed_intervals(correct[None], None, np.zeros(12))
    assert one_video.note[0, 0].startswith("all 12 questions are about one video")


def test_p_below_alpha_exactly_when_the_interval_excludes_zero():
    rng = np.random.default_rng(12)
    video = np.repeat(np.arange(150), 4)
    prompt = np.where(rng.random(600) < 0.5, rng.integers(0, 40, 600), 100 + np.arange(600))
    base = (rng.normal(0, 1, 150)[video] + rng.normal(0, 1, 700)[prompt] + rng.normal(0, 1, 600) > 0).astype(float)
    other = (rng.normal(0, 1, 150)[video] + rng.normal(0, 1, 700)[prompt] + rng.normal(0, 1, 600) > 0).astype(float)
    # a fine scan of shifts across both boundaries of the interval
    shifts = np.linspace(-0.2, 0.2, 2001)[:, None]
    found = crossed_intervals(other - base + shifts, None, video, prompt, proportion=False)
    excludes_zero = (found.low[0] > 0) | (found.high[0] < 0)
    assert 100 < excludes_zero.sum() < len(shifts) - 100
    assert ((found.p_value[0] < 0.05) == excludes_zero).all()
    at_99 = crossed_intervals(other - base + shifts, None, video, prompt, confidence_level=0.99, proportion=False)
    assert ((at_99.p_value[0] < 0.01) == ((at_99.low[0] > 0) | (at_99.high[0] < 0))).all()


def test_a_contrast_is_the_difference_it_stands_for():
    rng = np.random.default_rng(12)
    video = np.repeat(np.arange(100), 3)
    prompt = np.where(rng.random(300) < 0.5, rng.integers(0, 30, 300), 100 + np.arange(300))
    a = ((rng.random(400) < 0.5)[prompt] | (rng.random(300) < 0.2)).astype(float)
    b = (rng.random(300) < 0.45).astype(float)
    groups = np.stack([np.ones(300, bool), rng.random(300) < 0.6])
    contrast = crossed_intervals(np.stack([a, b]), groups, video, prompt, contrasts=[[1.0, -1.0]], proportion=False)
    direct = crossed_intervals((a - b)[None], groups, video, prompt, proportion=False)
    for name in ("low", "high", "p_value", "deff"):
        np.testing.assert_allclose(getattr(contrast, name), getattr(direct, name), rtol=0, atol=1e-12)


def test_holm_by_hand():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.5])
    # sorted finite: 0.01 (x4), 0.03 (x3), 0.04 (x2), 0.5 (x1), each at least the one before
    np.testing.assert_allclose(holm(p), [0.04, 0.09, np.nan, 0.09, 0.5], equal_nan=True)
    assert holm(np.array([[0.2, 0.001]])).shape == (1, 2)


def test_a_difference_between_models_gets_the_two_way_cluster_robust_variance():
    rng = np.random.default_rng(11)
    video, prompt = np.repeat(np.arange(30), 4), np.arange(120) % 20
    d = rng.integers(-1, 2, 120).astype(float) + np.repeat(rng.integers(-1, 2, 30), 4)
    e = d - d.mean()

    def part(unit):  # Σ_units (Σ e)², with the unit count's G / (G − 1)
        g = len(np.unique(unit))
        return sum(e[unit == u].sum() ** 2 for u in np.unique(unit)) * g / (g - 1)

    by_video, by_prompt, by_cell = part(video), part(prompt), part(video * 100 + prompt)
    variance = max(by_video + by_prompt - by_cell, by_video, by_prompt) / 120**2
    found = crossed_intervals(d[None], None, video, prompt, proportion=False)
    # deff is that variance over the independent answers' s² / N
    assert found.deff[0, 0] == pytest.approx(max(variance / (e @ e / 119 / 120), 1.0))
    assert (found.low[0, 0] + found.high[0, 0]) / 2 == pytest.approx(d.mean())
    with pytest.raises(ValueError, match="confidence_level"):
        crossed_intervals(d[None], None, video, prompt, confidence_level=1.5)


def test_video_answers_over_few_videos_get_t_with_videos_minus_one_degrees_of_freedom():
    # 10 videos of 6 questions, answers independent: Satterthwaite alone would give 59 degrees of freedom
    rng = np.random.default_rng(2)
    video, d = np.repeat(np.arange(10), 6), rng.normal(0, 1, 60)
    found = crossed_intervals(d[None], None, video, np.arange(60), proportion=False, robust=True)
    se = d.std(ddof=1) * np.sqrt(found.deff[0, 0] / 60)
    assert (found.high[0, 0] - found.low[0, 0]) / 2 == pytest.approx(scipy.stats.t.ppf(0.975, 9) * se)
    blind = crossed_intervals(d[None], None, video, np.arange(60), proportion=False)
    assert blind.high[0, 0] - blind.low[0, 0] < found.high[0, 0] - found.low[0, 0]
