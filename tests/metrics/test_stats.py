"""visdep_metrics.stats: the intervals against scipy's where the questions are independent, the design effect against
its definition computed by hand, degenerate groups, a lone shared prompt, p-values against the intervals over a fine
scan, Holm's adjustment by hand, blind answers' units, the degrees of freedom of an estimated design effect,
differences on too few clusters, and a Visual Gain over shared prompts, or over shared videos and prompts of their own,
against its definition written out by hand."""

import numpy as np
import pytest
import scipy.stats

from tests.helpers.by_hand import (
    anova_design_effect,
    by_hand_clopper_pearson,
    visual_gain_interval,
    visual_gain_interval_over_videos,
)
from visdep_metrics.degrees_of_freedom import effective_clusters
from visdep_metrics.stats import (
    GAIN,
    GAIN_VIDEO,
    T,
    crossed_intervals,
    design_effect,
    holm,
    two_way_variance,
    units_per_group,
)

Z = scipy.stats.norm.ppf(0.975)


def test_units_per_group():
    groups = np.array([[1, 1, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=bool)
    assert units_per_group(groups, ["a", "a", "b", "c", "c"]).tolist() == [3, 1]
    assert units_per_group(groups).tolist() == [4, 2]


def test_independent_answers_get_clopper_pearson_and_the_t_interval():
    rng = np.random.default_rng(5)
    correct = (rng.random(400) < 0.7).astype(float)
    diff = rng.integers(-1, 2, 400).astype(float)
    found = crossed_intervals(np.stack([correct, diff]), None, np.arange(400), np.arange(400),
                              proportion=[True, False])
    # nothing shared: no variance component is estimated, so Clopper-Pearson's interval on the 400 answers as they are
    assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_clopper_pearson(correct.mean(), 400, np.inf))
    t = scipy.stats.ttest_1samp(diff, 0.0)
    assert (found.low[0, 1], found.high[0, 1]) == pytest.approx(tuple(t.confidence_interval(0.95)))
    assert found.p_value[0, 1] == pytest.approx(t.pvalue) and np.isnan(found.p_value[0, 0])
    assert found.deff[0] == pytest.approx([1.0, 1.0]) and found.n_effective[0] == pytest.approx([400.0, 400.0])


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
        # the design's bound: max(ν_video, ν_prompt) = max(3, 4) = 4, so 30 independent answers; Clopper-Pearson there
        n = 30
        assert found.deff[0, 0] == pytest.approx(4.0) and found.n_effective[0, 0] == pytest.approx(n)
        assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_clopper_pearson(value, n, n - 1))
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


def test_a_dimension_hardly_shared_gives_the_cluster_robust_variance_no_lower_bound():
    # 10 videos of 6 questions; prompts their own but four asked about two videos each (ν_prompt = 68 / 60 < 2), the
    # copies' differences alike. The one-way sum over the prompts is the independent answers' variance plus the
    # copies' cross terms, which the two-way sum holds too: it bounds nothing (Cameron, Gelbach & Miller's bound is
    # for a negative sum), so the variance is the two-way one, not that larger one-way one
    rng = np.random.default_rng(17)
    video, prompt = np.repeat(np.arange(10), 6), np.arange(60)
    prompt[[6, 12, 18, 24]] = [0, 1, 2, 3]
    d = rng.integers(-1, 2, 60).astype(float) + np.repeat(rng.integers(-1, 2, 10), 6) * (rng.random(60) < 0.3)
    d[[6, 12, 18, 24]] = d[[0, 1, 2, 3]]
    e = d - d.mean()

    def part(unit):  # Σ_units (Σ e)², with the unit count's G / (G − 1)
        g = len(np.unique(unit))
        return sum(e[unit == u].sum() ** 2 for u in np.unique(unit)) * g / (g - 1)

    independent = e @ e / 59 * 60
    two_way = part(video) + part(prompt) - part(video * 100 + prompt)
    assert part(prompt) > two_way > max(part(video), independent)  # the case: the old bound would have picked it
    found = crossed_intervals(d[None], None, video, prompt, proportion=False)
    assert found.deff[0, 0] == pytest.approx(two_way / independent)


def test_video_answers_over_few_videos_get_t_with_videos_minus_one_degrees_of_freedom():
    # 10 videos of 6 questions, answers independent: Satterthwaite alone would give 59 degrees of freedom
    rng = np.random.default_rng(2)
    video, d = np.repeat(np.arange(10), 6), rng.normal(0, 1, 60)
    found = crossed_intervals(d[None], None, video, np.arange(60), proportion=False, robust=True)
    se = d.std(ddof=1) * np.sqrt(found.deff[0, 0] / 60)
    assert (found.high[0, 0] - found.low[0, 0]) / 2 == pytest.approx(scipy.stats.t.ppf(0.975, 9) * se)
    blind = crossed_intervals(d[None], None, video, np.arange(60), proportion=False)
    assert blind.high[0, 0] - blind.low[0, 0] < found.high[0, 0] - found.low[0, 0]


def test_a_difference_over_few_videos_gets_t_with_videos_minus_one_degrees_of_freedom():
    # 10 videos of 6 questions, a difference between models that leans a little by video: the sandwich over the
    # videos is above the independent answers' variance (the ANOVA share alone would leave Satterthwaite's ~40 df)
    rng = np.random.default_rng(4)
    video = np.repeat(np.arange(10), 6)
    d = rng.integers(-1, 2, 60).astype(float) + np.repeat([1, 0, 0, 0, 0, 0, 0, 0, 0, -1], 6) * (rng.random(60) < 0.3)
    e = d - d.mean()
    sums = np.array([e[video == v].sum() for v in range(10)])
    variance = (sums**2).sum() * 10 / 9 / 60**2
    assert variance > e @ e / 59 / 60  # the sandwich is the variance used
    found = crossed_intervals(d[None], None, video, None, proportion=False)
    half = (found.high[0, 0] - found.low[0, 0]) / 2
    assert half == pytest.approx(scipy.stats.t.ppf(0.975, 9) * np.sqrt(variance))
    t = abs(d.mean()) / np.sqrt(variance)
    assert found.p_value[0, 0] == pytest.approx(2 * scipy.stats.t.sf(t, 9))


def test_blind_answers_count_their_prompts_not_their_videos():
    # 40 videos of 3 questions; 30 prompts, each asked about four videos; blind answers right per prompt, and
    # (what a blind answer cannot see) a video-wide shift that makes the videos look like units
    rng = np.random.default_rng(4)
    video, prompt = np.repeat(np.arange(40), 3), np.arange(120) % 30
    correct = ((rng.random(30)[prompt] + 0.6 * rng.random(40)[video]) > 0.8).astype(float)
    found = crossed_intervals(correct[None], None, video, prompt, blind=True)
    relabelled = crossed_intervals(correct[None], None, np.arange(120), prompt, blind=True)
    assert found.low[0, 0] == relabelled.low[0, 0] and found.high[0, 0] == relabelled.high[0, 0]
    assert found.deff[0, 0] == pytest.approx(anova_design_effect(correct, {"prompt": prompt}))
    seen = crossed_intervals(correct[None], None, video, prompt)  # not blind: its videos count too
    assert seen.deff[0, 0] == pytest.approx(anova_design_effect(correct, {"video": video, "prompt": prompt}))
    assert seen.deff[0, 0] != pytest.approx(found.deff[0, 0])
    with pytest.raises(ValueError, match="both blind and robust"):
        crossed_intervals(correct[None], None, video, prompt, robust=True, blind=True)


@pytest.mark.parametrize("n", [10, 26, 60, 200])
def test_an_accuracy_on_independent_answers_misses_on_each_side_at_most_half_the_error(n):
    # #27's rule judges each tail: on n independent answers the chance that the interval lies wholly below (above) an
    # accuracy p is a binomial sum, exactly computable; Wilson's had 4.82% below 0.92 on 60 answers
    right = np.arange(n + 1)
    values = (np.arange(n)[None] < right[:, None]).astype(float)  # k right answers of n, for every k
    found = crossed_intervals(values, None, np.arange(n), np.arange(n))
    assert np.isfinite(found.low[0]).all() and (found.n_effective[0] == pytest.approx(n))
    for p in (0.03, 0.08, 0.25, 0.5, 0.75, 0.92, 0.97):
        mass = scipy.stats.binom.pmf(right, n, p)
        below, above = mass[found.high[0] < p].sum(), mass[found.low[0] > p].sum()
        assert below <= 0.025 + 1e-12 and above <= 0.025 + 1e-12, (p, below, above)


def test_video_answers_about_videos_of_their_own_get_clopper_pearsons_interval_as_it_is():
    # no video shared: no cluster, so no G - 1 degrees of freedom (they had raised its coverage to 97.3% at 0.92)
    rng = np.random.default_rng(6)
    correct = (rng.random(60) < 0.92).astype(float)
    found = crossed_intervals(correct[None], None, np.arange(60), np.arange(60), robust=True)
    assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_clopper_pearson(correct.mean(), 60, np.inf))


def test_a_blind_accuracy_whose_copies_agree_gets_clopper_pearson_on_its_prompts():
    # 25 prompts of 4 copies each, every copy answered alike: 25 answers, known to be 25 (the estimated intraclass
    # correlation is 1, with no sampling variance), so Clopper-Pearson's interval on 25 answers and no t
    rng = np.random.default_rng(8)
    prompt = np.repeat(np.arange(25), 4)
    right = rng.random(25) < 0.7
    found = crossed_intervals(right[prompt][None].astype(float), None, np.arange(100), prompt, blind=True)
    assert found.deff[0, 0] == pytest.approx(4.0)
    assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_clopper_pearson(right.mean(), 25, np.inf))


def test_a_blind_accuracys_degrees_of_freedom_are_those_of_its_estimated_design_effect():
    # copies that mostly agree: deff's df from the ICC's sampling variance (Fisher's 2 (1 - ρ)² (1 + (n0 - 1) ρ)² /
    # (n0 (n0 - 1) (C - 1))), written out here over pandas group-bys
    rng = np.random.default_rng(9)
    prompt = np.repeat(np.arange(30), 5)
    correct = ((rng.normal(0, 1, 30)[prompt] + rng.normal(0, 0.8, 150)) > 0).astype(float)
    found = crossed_intervals(correct[None], None, np.arange(150), prompt, blind=True)
    deff = anova_design_effect(correct, {"prompt": prompt})
    rho, n0, c = (deff - 1) / 4, 5.0, 30
    variance = 2 * (1 - rho) ** 2 * (1 + (n0 - 1) * rho) ** 2 / (n0 * (n0 - 1) * (c - 1))
    df = 2 * deff**2 / (4**2 * variance)
    assert 0.2 < rho < 0.9 and 20 < df < 1000
    assert (found.low[0, 0], found.high[0, 0]) == pytest.approx(by_hand_clopper_pearson(correct.mean(), 150 / deff, df))


@pytest.mark.parametrize("confidence, rejectable", [(0.95, 6), (0.90, 5)])
def test_a_difference_on_too_few_units_is_withheld_and_says_so(confidence, rejectable):
    # a sign-flip test over k clusters reaches no p below 2 / 2^k: k = 5 cannot reach 0.05, k = 4 cannot reach 0.10
    rng = np.random.default_rng(10)
    video = np.repeat(np.arange(20), 3)
    for k in (rejectable - 1, rejectable):
        d = np.zeros(60)
        d[3 * np.arange(k)] = rng.choice([-1.0, 1.0], k)
        d[0] = 1.0  # the mean is not 0 on every draw
        found = crossed_intervals(d[None], None, video, np.arange(60), confidence, proportion=False)
        if k < rejectable:
            assert np.isnan([found.low[0, 0], found.high[0, 0], found.p_value[0, 0]]).all()
            assert f"rests on {k} clusters" in found.note[0, 0]
            # the same differences over questions of their own: no cluster, nothing withheld
            alone = crossed_intervals(d[None], None, np.arange(60), np.arange(60), confidence, proportion=False)
            assert np.isfinite([alone.low[0, 0], alone.p_value[0, 0]]).all()
        else:
            assert np.isfinite([found.low[0, 0], found.high[0, 0], found.p_value[0, 0]]).all()
            assert found.note[0, 0] == ""


def test_a_sandwich_over_four_dominant_prompts_rests_on_about_four_clusters():
    # four prompts of 80 copies and 680 of their own: under a working ρ of 1 the prompts' sums have variances 80² and
    # 1, (4·6400 + 680)² / (4·80⁴ + 680) = 4.215 clusters; under ρ = 0 Kish's 1,000² / 26,280 = 38.05; G over G equal
    sizes = np.r_[np.full(4, 80.0), np.ones(680)]
    np.testing.assert_allclose(effective_clusters(sizes, np.array([1.0, 0.0])), [4.2153, 38.052], rtol=1e-4)
    np.testing.assert_allclose(effective_clusters(np.full(10, 6.0), np.array([0.0, 0.4, 1.0])), 10.0)


def _gain_design(seed: int, blind_cut: float, seen_cut: float) -> tuple[np.ndarray, ...]:
    """Questions each about a video of its own over prompts of very unequal sizes (three hold 105 of 305): blind
    answers nearly one per prompt, video answers sharing a little of the prompt's difficulty."""
    rng = np.random.default_rng(seed)
    sizes = np.r_[40, 35, 30, np.full(20, 5), np.full(50, 2)]
    prompt = np.repeat(np.arange(len(sizes)), sizes)
    n = len(prompt)
    u = rng.normal(0, 1, len(sizes))
    blind = ((u + rng.normal(0, 0.7, len(sizes)))[prompt] + rng.normal(0, 0.3, n) > blind_cut).astype(float)
    seen = (0.6 * u[prompt] + rng.normal(0, 1, n) > seen_cut).astype(float)
    return seen, blind, prompt


def _video_gain_design(seed: int, blind_cut: float, seen_cut: float) -> tuple[np.ndarray, ...]:
    """50 videos of 6 questions each, every blind prompt its own: blind answers independent, video answers sharing
    their video's difficulty (as Video-MME's three questions a video, but more)."""
    rng = np.random.default_rng(seed)
    video = np.repeat(np.arange(50), 6)
    n = len(video)
    blind = (rng.normal(0, 1, n) > blind_cut).astype(float)
    seen = (rng.normal(0, 1, 50)[video] + rng.normal(0, 0.8, n) > seen_cut).astype(float)
    return seen, blind, video


GAIN_OUTPUTS = {"contrasts": [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]], "proportion": [True, True, False],
                "robust": [False, True, True], "blind": [True, False, False]}


def _shared_gain_design(shared: str, seed: int, blind_cut: float, seen_cut: float) -> tuple[np.ndarray, ...]:
    """(seen, blind, video, prompt): `_gain_design`'s questions (shared prompts) or `_video_gain_design`'s (shared
    videos), each question's other unit its own."""
    if shared == "prompts":
        seen, blind, prompt = _gain_design(seed, blind_cut, seen_cut)
        return seen, blind, np.arange(len(prompt)), prompt
    seen, blind, video = _video_gain_design(seed, blind_cut, seen_cut)
    return seen, blind, video, np.arange(len(video))


@pytest.mark.parametrize("shared, seed, blind_cut, seen_cut", [
    ("prompts", 1, -1.2, -1.3), ("prompts", 2, 0.7, 0.5), ("prompts", 3, 0.0, -0.3), ("prompts", 4, -1.6, -1.0),
    ("videos", 1, -1.2, -1.3), ("videos", 2, 0.7, 0.5), ("videos", 3, 0.0, -0.3), ("videos", 4, -1.4, 1.0)])
def test_a_visual_gain_is_the_interval_of_the_accuracy_carrying_its_spread_and_a_t_as_written_out_by_hand(
        shared, seed, blind_cut, seen_cut):
    seen, blind, video, prompt = _shared_gain_design(shared, seed, blind_cut, seen_cut)
    found = crossed_intervals(np.stack([blind, seen]), None, video, prompt, 0.95, blind_parts=[-1, -1, 0],
                              **GAIN_OUTPUTS)
    if shared == "prompts":
        assert found.method[0, 2] == GAIN
        by_hand = visual_gain_interval(seen, blind, prompt)
    else:
        assert found.method[0, 2] == GAIN_VIDEO
        by_hand = visual_gain_interval_over_videos(seen, blind, video, (found.low[0, 1], found.high[0, 1]))
        # prompts unknown: the blind answers count their videos as units too, and the gain still follows the video's
        unknown = crossed_intervals(np.stack([blind, seen]), None, video, None, 0.95, blind_parts=[-1, -1, 0],
                                    **GAIN_OUTPUTS)
        assert unknown.method[0, 2] == GAIN_VIDEO
    assert (found.low[0, 2], found.high[0, 2]) == pytest.approx(by_hand, rel=1e-6)
    # without its blind part named, the same gain gets the symmetric t interval, another one
    t_interval = crossed_intervals(np.stack([blind, seen]), None, video, prompt, 0.95, **GAIN_OUTPUTS)
    assert t_interval.method[0, 2] == T
    assert max(abs(t_interval.low[0, 2] - found.low[0, 2]), abs(t_interval.high[0, 2] - found.high[0, 2])) > 1e-3


@pytest.mark.parametrize("confidence", [0.95, 0.99])
@pytest.mark.parametrize("shared", ["prompts", "videos"])
def test_a_visual_gains_p_is_below_alpha_exactly_when_its_interval_excludes_zero(confidence, shared):
    seen, blind, video, prompt = _shared_gain_design(shared, 1, -1.2, -1.3)
    if shared == "prompts":  # a shift of the video answers moves the gain alone, not its blind accuracy
        designs = [(blind, seen + shift) for shift in np.linspace(-0.25, 0.25, 201)]
    else:  # the gain follows the video accuracy, which stays a proportion: the video answers' threshold moves
        designs = [_video_gain_design(1, 0.0, cut)[1::-1] for cut in np.linspace(-0.6, 0.6, 201)]
    low, high, p = (np.empty(len(designs)) for _ in range(3))
    for i, (blind, seen) in enumerate(designs):
        found = crossed_intervals(np.stack([blind, seen]), None, video, prompt, confidence,
                                  blind_parts=[-1, -1, 0], **GAIN_OUTPUTS)
        low[i], high[i], p[i] = found.low[0, 2], found.high[0, 2], found.p_value[0, 2]
        assert found.method[0, 2] == (GAIN if shared == "prompts" else GAIN_VIDEO)
    excludes_zero = (low > 0) | (high < 0)
    assert 20 < excludes_zero.sum() < len(designs) - 20 and (low < high).all()
    assert ((p < 1 - confidence) == excludes_zero).all()


def test_a_visual_gain_over_videos_and_prompts_of_their_own_keeps_the_t_and_a_bad_blind_part_is_refused():
    rng = np.random.default_rng(5)
    blind, seen = (rng.random((2, 200)) < 0.7).astype(float)
    found = crossed_intervals(np.stack([blind, seen]), None, np.arange(200), np.arange(200), blind_parts=[-1, -1, 0],
                              **GAIN_OUTPUTS)
    assert found.method[0, 2] == T
    for bad in ([-1, -1, 1], [-1, -1, 3], [0, -1, 0], [-1, -1]):
        with pytest.raises(ValueError, match="blind_parts"):
            crossed_intervals(np.stack([blind, seen]), None, np.arange(200), np.arange(200), blind_parts=bad,
                              **GAIN_OUTPUTS)
