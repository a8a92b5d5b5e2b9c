"""Coverage by simulation: many benchmarks with crossed video and prompt effects, each given its intervals by
`stats.crossed_intervals`, judged by #27's rule on each tail (docs/statistics.md): the share of 95% intervals lying
wholly below the truth, and the share lying wholly above it, each at most 2.5% + 2 SE (SE = √(0.025 · 0.975 / S) over S
simulated benchmarks), and the coverage at most 97% + 2 √(0.95 · 0.05 / S). (The full grid on the real question lists,
with p-values and their family, is bench/bench_coverage.py; a validation generator apart from it,
bench/bench_validation.py.)

The design copies VRU-Accident's shape: 1,000 videos of 6 questions; half the questions take one of 405 prompts shared
across videos (Zipf-like copy counts), the others a prompt of their own; the "location-like" group is 1,000 questions,
one per video, over 131 prompts of which four hold 320. A question is answered right where a_video + b_prompt + e > c
with normal effects, c setting its marginal accuracy; the difference is between two such models sharing b_prompt."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from visdep_metrics.stats import crossed_intervals

pytestmark = pytest.mark.slow
N_VIDEOS, PER_VIDEO, N_SHARED = 1000, 6, 405
SIMULATIONS = 400  # Monte Carlo SE of a 95% coverage: 1.1 points


def assert_within_the_rule(below: int, above: int, simulations: int, what: str) -> None:
    """#27's rule (module docstring): each tail at most 2.5% + 2 SE, the coverage at most 97% + 2 SE."""
    tail = 0.025 + 2 * np.sqrt(0.025 * 0.975 / simulations)
    top = 0.97 + 2 * np.sqrt(0.95 * 0.05 / simulations)
    low_share, high_share = below / simulations, above / simulations
    assert low_share <= tail and high_share <= tail and 1 - low_share - high_share <= top, (
        f"{what}: below the truth {low_share:.1%}, above it {high_share:.1%} over {simulations} benchmarks "
        f"(each at most {tail:.2%}, coverage at most {top:.2%})")


def vru_like_design(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    video = np.repeat(np.arange(N_VIDEOS), PER_VIDEO)
    prompt = N_SHARED + np.arange(len(video))
    shared = rng.random(len(video)) < 0.5
    weight = 1.0 / (np.arange(N_SHARED) + 5.0) ** 1.1
    prompt[shared] = rng.choice(N_SHARED, shared.sum(), p=weight / weight.sum())
    return video, prompt


def location_like_design() -> tuple[np.ndarray, np.ndarray]:
    sizes = np.r_[86, 83, 81, 70, np.full(27, 10), np.full(100, 4)]  # 131 prompts, 1,000 questions
    return np.arange(sizes.sum()), np.repeat(np.arange(len(sizes)), sizes)


def location_shaped_design() -> tuple[np.ndarray, np.ndarray]:
    """The prompt sizes of VRU-Accident's "location" category (131 prompts, 1,000 questions, ν = 37.9: four hold 324,
    19 more 10 to 37), each question its own video."""
    sizes = np.r_[86, 83, 81, 74, 37, 36, 30, 30, 30, 27, 26, 25, 23, 22, 21, 20, 19, 18, 16, 11, 11, 11, 10,
                  np.full(5, 7), np.full(8, 6), np.full(4, 5), np.full(7, 4), np.full(11, 3), np.full(16, 2),
                  np.ones(57)]
    return np.arange(sizes.sum()), np.repeat(np.arange(len(sizes)), sizes.astype(int))


def coverage(video: np.ndarray, prompt: np.ndarray, accuracy: float, sds: tuple[float, float], seed: int,
             simulations: int = SIMULATIONS) -> dict:
    rng = np.random.default_rng(seed)
    video_sd, prompt_sd = sds
    scale = np.sqrt(video_sd**2 + prompt_sd**2 + 0.3**2)
    cut = -scipy.stats.norm.ppf(accuracy) * scale
    misses = {what: {"below": 0, "above": 0} for what in ("accuracy", "difference")}
    for _ in range(simulations):
        b = rng.normal(0, prompt_sd, prompt.max() + 1)[prompt]
        a, c = (rng.normal(0, 0.3, len(video)) + rng.normal(0, video_sd, video.max() + 1)[video] for _ in range(2))
        first, second = (b + a > cut).astype(float), (b + c > cut).astype(float)
        found = crossed_intervals(np.stack([first, second]), None, video, prompt, 0.95,
                                  contrasts=[[1.0, 0.0], [1.0, -1.0]], proportion=[True, False])
        for j, (what, truth) in enumerate((("accuracy", accuracy), ("difference", 0.0))):
            misses[what]["below"] += bool(found.high[0, j] < truth)
            misses[what]["above"] += bool(found.low[0, j] > truth)
    return misses


# At 0.92 on the VRU-like design the accuracy's interval (the ANOVA design effect's, as for blind answers where
# records name no prompt) lies below the truth more often than the rule allows: Clopper-Pearson's in 3.9% of these
# 2,000 benchmarks and 4.6% of 3,000 on another seed, Wilson's, before #44, in 4.8% of 400. Prompts of very unequal
# sizes make the accuracy's distribution more skewed than a binomial on N / deff answers (docs/statistics.md). Run on
# 2,000 benchmarks, where the rule allows 3.2%, so that the failure is not one of chance; strict, so a fix shows. The
# location-like design at 0.92, where Wilson's lay below the truth in 5.0% of 400, is within the rule with Clopper-
# Pearson's (2.4% and 0.1% of 3,000).
ONE_SIDED = pytest.mark.xfail(strict=True, reason="lies below the truth too often at 0.92 (docs/statistics.md)")


@pytest.mark.parametrize("design, accuracy, sds, simulations", [
    ("vru", 0.5, (0.5, 1.0), SIMULATIONS),
    pytest.param("vru", 0.92, (0.5, 1.0), 2000, marks=ONE_SIDED),
    ("vru", 0.5, (1.0, 0.0), SIMULATIONS),
    ("location", 0.92, (0.0, 1.0), SIMULATIONS),
    ("location", 0.5, (0.0, 1.0), SIMULATIONS)])
def test_the_intervals_cover_the_truth(design, accuracy, sds, simulations):
    video, prompt = vru_like_design(np.random.default_rng(7)) if design == "vru" else location_like_design()
    found = coverage(video, prompt, accuracy, sds, seed=int(100 * accuracy + 10 * sds[0]), simulations=simulations)
    print(f"\n{design}, accuracy {accuracy}, sd of video and prompt effects {sds}, over {simulations} benchmarks: "
          + ", ".join(f"{what} below {m['below'] / simulations:.1%}, above {m['above'] / simulations:.1%}"
                      for what, m in found.items()))
    for what, m in found.items():
        assert_within_the_rule(m["below"], m["above"], simulations, what)


def test_video_answers_whose_sandwich_rests_on_four_prompts_get_those_prompts_degrees_of_freedom():
    """The location-like group, each question its own video, where only the four big prompts carry a prompt effect
    (intraclass correlations that differ by prompt): the ANOVA, pooled over 131 prompts, sees little of it, the
    two-way sandwich the accuracy of video answers is floored by takes over, and that variance rests on about four
    prompt sums. With the ANOVA parts' df (about 32) its interval lay below the truth in 4.2% of these benchmarks and
    above it in 4.2% (5f95a6a); with the df of the sandwich's own clusters (about 5) in 1.7% and 1.8%."""
    video, prompt = location_like_design()
    big = np.zeros(prompt.max() + 1)
    big[:4] = 0.8  # sd of the four big prompts' effect; the others have none
    accuracy, simulations = 0.5, 4000
    rng = np.random.default_rng(5)
    cut = -scipy.stats.norm.ppf(accuracy) * np.sqrt(1 + big[prompt] ** 2)
    below = above = 0
    for _ in range(simulations):
        correct = (rng.normal(0, 1, len(big))[prompt] * big[prompt] + rng.normal(0, 1, len(prompt)) > cut)
        found = crossed_intervals(correct[None].astype(float), None, video, prompt, 0.95, robust=True)
        below += bool(found.high[0, 0] < accuracy)
        above += bool(found.low[0, 0] > accuracy)
    print(f"\nAcc_V over four dominant prompts: below {below / simulations:.1%}, above {above / simulations:.1%}")
    assert_within_the_rule(below, above, simulations, "Acc_V over four dominant prompts")


def test_a_visual_gain_over_four_dominant_prompts_keeps_each_tail_within_the_rule():
    """VRU-Accident's "location" group at 0.92, each question its own video: blind answers nearly one per prompt (a
    prompt's difficulty, a model's take on it, a little per question), video answers sharing 0.6 of the prompt's
    difficulty; the true Visual Gain is 0. Where the four big prompts are answered right blind (0.92⁴ = 72% of
    benchmarks) the gain is low and its t interval narrow: it lay below the truth in 5–7% of benchmarks on the
    development bench. Following the blind accuracy's interval (`blind_parts`), each tail is within the rule; the t
    interval, computed on the same benchmarks, is checked to fail it, so that the test can tell the two apart."""
    video, prompt = location_shaped_design()
    accuracy, simulations = 0.92, 2000
    rng = np.random.default_rng(11)
    blind_cut = -scipy.stats.norm.ppf(accuracy) * np.sqrt(1 + 0.7**2 + 0.3**2)
    seen_cut = -scipy.stats.norm.ppf(accuracy) * np.sqrt(0.6**2 + 0.8**2 + 0.7**2)
    misses = {name: {"below": 0, "above": 0} for name in ("gain", "t")}
    outputs = {"contrasts": [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]], "proportion": [True, True, False],
               "robust": [False, True, True], "blind": [True, False, False]}
    for _ in range(simulations):
        u = rng.normal(0, 1, prompt.max() + 1)
        blind = (u[prompt] + rng.normal(0, 0.7, len(u))[prompt] + rng.normal(0, 0.3, len(prompt)) > blind_cut)
        seen = 0.6 * u[prompt] + rng.normal(0, 0.8, len(video)) + rng.normal(0, 0.7, len(video)) > seen_cut
        values = np.stack([blind, seen]).astype(float)
        for name, parts in (("gain", [-1, -1, 0]), ("t", None)):
            found = crossed_intervals(values, None, video, prompt, 0.95, blind_parts=parts, **outputs)
            misses[name]["below"] += bool(found.high[0, 2] < 0)
            misses[name]["above"] += bool(found.low[0, 2] > 0)
    print("\nVG over four dominant prompts at 0.92: " + ", ".join(
        f"{name} below {m['below'] / simulations:.1%}, above {m['above'] / simulations:.1%}"
        for name, m in misses.items()))
    assert_within_the_rule(misses["gain"]["below"], misses["gain"]["above"], simulations, "VG following Acc_B")
    with pytest.raises(AssertionError):
        assert_within_the_rule(misses["t"]["below"], misses["t"]["above"], simulations, "VG's t interval")


def test_a_visual_gain_over_ten_shared_videos_keeps_each_tail_within_the_rule():
    """Ten videos of six questions at accuracy 0.25, every blind prompt its own: blind answers independent (a
    question's difficulty, a model's take, a little noise), video answers sharing their video's difficulty and a
    model's take on it, and 0.6 of the question's; the true Visual Gain is 0. The gain's spread is the videos': where
    they were answered badly its t interval is narrow and lay below the truth in 4% of benchmarks on the development
    bench. Following the video accuracy's interval, each tail is within the rule; the t, on the same benchmarks, is
    checked to fail it (seeds 12 and 13, tried by hand: the t 3.9% and 5.0% below, this 2.1% and 2.8%)."""
    n_videos, accuracy, simulations = 10, 0.25, 2000
    video = np.repeat(np.arange(n_videos), 6)
    prompt = np.arange(len(video))
    rng = np.random.default_rng(11)
    blind_cut = -scipy.stats.norm.ppf(accuracy) * np.sqrt(1 + 0.7**2 + 0.3**2)
    seen_cut = -scipy.stats.norm.ppf(accuracy) * np.sqrt(0.8**2 + 0.6**2 + 0.5**2 + 0.7**2)
    misses = {name: {"below": 0, "above": 0, "given": 0} for name in ("gain", "t")}
    outputs = {"contrasts": [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]], "proportion": [True, True, False],
               "robust": [False, True, True], "blind": [True, False, False]}
    for _ in range(simulations):
        u = rng.normal(0, 1, len(video))
        blind = u + rng.normal(0, 0.7, len(video)) + rng.normal(0, 0.3, len(video)) > blind_cut
        seen = (rng.normal(0, 0.8, n_videos)[video] + 0.6 * u + rng.normal(0, 0.5, n_videos)[video]
                + rng.normal(0, 0.7, len(video)) > seen_cut)
        values = np.stack([blind, seen]).astype(float)
        for name, parts in (("gain", [-1, -1, 0]), ("t", None)):
            found = crossed_intervals(values, None, video, prompt, 0.95, blind_parts=parts, **outputs)
            misses[name]["below"] += bool(found.high[0, 2] < 0)
            misses[name]["above"] += bool(found.low[0, 2] > 0)
            misses[name]["given"] += bool(np.isfinite(found.low[0, 2]))
    print("\nVG over ten shared videos at 0.25: " + ", ".join(
        f"{name} below {m['below'] / m['given']:.1%}, above {m['above'] / m['given']:.1%} of {m['given']}"
        for name, m in misses.items()))
    assert misses["gain"]["given"] == misses["t"]["given"] > 0.9 * simulations  # the same intervals withheld
    assert_within_the_rule(misses["gain"]["below"], misses["gain"]["above"], misses["gain"]["given"],
                           "VG following Acc_V")
    with pytest.raises(AssertionError):
        assert_within_the_rule(misses["t"]["below"], misses["t"]["above"], misses["t"]["given"], "VG's t interval")
