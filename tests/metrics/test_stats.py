"""visdep_metrics.stats: the video bootstrap against plain scipy, the two-way variance against its definition over
pairs of questions, the crossed bootstrap's spread against that variance, design effects and p-values."""

import numpy as np
import pytest
import scipy.stats

from visdep_metrics.stats import (
    BootstrapSettings,
    bootstrap_mean_intervals,
    bootstrap_p_values,
    crossed_bootstrap,
    design_effect,
    two_way_variance,
    units_per_group,
)


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


def test_units_per_group():
    groups = np.array([[1, 1, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=bool)
    assert units_per_group(groups, ["a", "a", "b", "c", "c"]).tolist() == [3, 1]
    assert units_per_group(groups).tolist() == [4, 2]


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


def crossed_design(rng, n_videos=300, per_video=6, shared_share=0.5, n_shared=60):
    """A VRU-Accident-like design: videos of `per_video` questions; a share of the questions take one of
    `n_shared` prompts that questions about other videos share, the others a prompt of their own."""
    video = np.repeat(np.arange(n_videos), per_video)
    prompt = np.arange(len(video)) + n_shared
    shared = rng.random(len(video)) < shared_share
    prompt[shared] = rng.integers(0, n_shared, shared.sum())
    return video, prompt


def test_two_way_variance_sums_the_pairs_that_share_a_video_or_a_prompt():
    rng = np.random.default_rng(9)
    video, prompt = crossed_design(rng, n_videos=12, per_video=4, n_shared=5)
    prompt[:2] = 0  # two questions of one video share a prompt too: a (video, prompt) cell of two
    values = rng.normal(0, 1, (2, len(video)))
    e = values - values.mean(axis=1, keepdims=True)
    related = (video[:, None] == video[None, :]) | (prompt[:, None] == prompt[None, :])
    by_pairs = np.einsum("rq,qs,rs->r", e, related.astype(float), e) / len(video) ** 2
    assert two_way_variance(values, video, prompt) == pytest.approx(by_pairs)
    one_way = np.einsum("rq,qs,rs->r", e, (video[:, None] == video[None, :]).astype(float), e) / len(video) ** 2
    assert two_way_variance(values, video) == pytest.approx(one_way)


def test_design_effect_of_answers_shared_by_their_prompt():
    # each question about its own video; prompts in pairs of equal size, one answered right, one wrong: mean 1/2,
    # and every copy of a prompt answered alike, so deff = sum n_p^2 / N exactly
    sizes = np.array([1, 1, 2, 2, 5, 5, 9, 9, 30, 30])
    prompt = np.repeat(np.arange(len(sizes)), sizes)
    correct = (np.arange(len(sizes)) % 2).astype(float)[prompt]
    video = np.arange(len(prompt))
    assert design_effect(correct, video, prompt)[0] == pytest.approx((sizes**2).sum() / sizes.sum())
    assert design_effect(correct, video)[0] == pytest.approx(1.0)  # seen one way: independent questions
    assert np.isnan(design_effect(np.ones(10), np.arange(10))[0])


def test_without_shared_prompts_the_crossed_bootstrap_is_the_video_bootstrap():
    rng = np.random.default_rng(10)
    video = np.repeat(np.arange(50), 3)
    values = (rng.random((2, 150)) < 0.4).astype(float)
    settings = BootstrapSettings(n_resamples=500, seed=4)
    crossed = crossed_bootstrap(values, None, video, np.arange(150), settings)
    low, high = bootstrap_mean_intervals(values, None, video, 500, seed=settings.rng())
    assert crossed.low[0].tolist() == low.tolist() and crossed.high[0].tolist() == high.tolist()


def test_a_contrast_is_resampled_as_the_difference_it_stands_for():
    """With shared prompts, the interval of contrasts @ values (each output its own prompt shrinkage) equals that of
    the difference computed per question beforehand, draw for draw."""
    rng = np.random.default_rng(12)
    video, prompt = crossed_design(rng)
    n_prompts = prompt.max() + 1
    a = ((rng.random(n_prompts) < 0.5)[prompt] | (rng.random(len(video)) < 0.2)).astype(float)
    b = (rng.random(len(video)) < 0.45).astype(float)
    settings = BootstrapSettings(n_resamples=500, seed=5)
    contrast = crossed_bootstrap(np.stack([a, b]), None, video, prompt, settings, settings.rng("k"),
                                 contrasts=[[1.0, -1.0]])
    direct = crossed_bootstrap((a - b)[None], None, video, prompt, settings, settings.rng("k"))
    for name in ("low", "high", "p_value"):
        np.testing.assert_allclose(getattr(contrast, name), getattr(direct, name), rtol=0, atol=1e-12)


def test_the_crossed_bootstrap_spreads_as_the_two_way_variance():
    rng = np.random.default_rng(11)
    video, prompt = crossed_design(rng)
    n_prompts = prompt.max() + 1
    # row 0: one answer per prompt, shared by its copies; row 1: a video effect and a prompt effect, crossed;
    # row 2: independent answers (the prompt resampling must then add nothing)
    rows = np.stack([(rng.random(n_prompts) < 0.5)[prompt],
                     (rng.normal(0, 1, 300)[video] + rng.normal(0, 1, n_prompts)[prompt]
                      + rng.normal(0, 1, len(video)) > 0),
                     rng.random(len(video)) < 0.5]).astype(float)
    found = crossed_bootstrap(rows, None, video, prompt, BootstrapSettings(n_resamples=4000, seed=2))
    width = found.high[0] - found.low[0]
    normal = 2 * scipy.stats.norm.ppf(0.975) * np.sqrt(two_way_variance(rows, video, prompt))
    assert width == pytest.approx(normal, rel=0.1)
    videos_only = crossed_bootstrap(rows, None, video, None, BootstrapSettings(n_resamples=4000, seed=2))
    assert width[2] == pytest.approx((videos_only.high - videos_only.low)[0, 2], rel=0.1)
    assert width[0] > 2.5 * (videos_only.high - videos_only.low)[0, 0]  # the copies are one answer, not many


def test_p_values_are_where_the_interval_reaches_zero():
    distribution = np.array([[-2.0, -1, 0, 1, 2, 3, 4, 5, 6, 7], [1.0] * 10, [0.0] * 10])
    # row 0: 3 of 10 at or below 0 -> 2 * (1 + 3) / 11; row 1: none below -> 2 / 11; row 2: all at 0 -> 1
    assert bootstrap_p_values(distribution).tolist() == pytest.approx([8 / 11, 2 / 11, 1.0])
    rng = np.random.default_rng(12)
    video, prompt = crossed_design(rng, n_videos=100)
    shifts = np.linspace(-0.15, 0.15, 13)[:, None]
    found = crossed_bootstrap((rng.random(len(video)) < 0.5) - 0.5 + shifts, None, video, prompt,
                              BootstrapSettings(n_resamples=999, confidence_level=0.95))
    excludes_zero = (found.low[0] > 0) | (found.high[0] < 0)
    assert excludes_zero.any() and not excludes_zero.all()
    assert ((found.p_value[0] < 0.05) == excludes_zero).all()


def test_settings_give_one_generator_per_key():
    settings = BootstrapSettings(seed=3)
    assert settings.rng("mmau").random() == settings.rng("mmau").random() != settings.rng("vru_accident").random()
    with pytest.raises(ValueError, match="confidence_level"):
        BootstrapSettings(confidence_level=1.5)
