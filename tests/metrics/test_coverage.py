"""Coverage by simulation: many benchmarks with crossed video and prompt effects, each audited by the two-way
bootstrap; its 95% interval must cover the true mean in 93-97% of them. The video bootstrap's coverage ("today's":
videos resampled only) is printed beside it.

The design copies VRU-Accident's shape: 1,000 videos of 6 questions; half the questions take one of 405 prompts shared
across videos (Zipf-like copy counts), the others a prompt of their own. A question is answered right where
a_video + b_prompt + e_question > 0 with normal effects: by symmetry the true mean is 1/2 whatever their sizes."""

from __future__ import annotations

import numpy as np
import pytest

from visdep_metrics.stats import BootstrapSettings, crossed_bootstrap

pytestmark = pytest.mark.slow
N_VIDEOS, PER_VIDEO, N_SHARED = 1000, 6, 405
SIMULATIONS, BATCH = 1000, 250


def vru_like_design(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    video = np.repeat(np.arange(N_VIDEOS), PER_VIDEO)
    prompt = N_SHARED + np.arange(len(video))
    shared = rng.random(len(video)) < 0.5
    weight = 1.0 / (np.arange(N_SHARED) + 5.0) ** 1.1
    prompt[shared] = rng.choice(N_SHARED, shared.sum(), p=weight / weight.sum())
    return video, prompt


def coverage(video_sd: float, prompt_sd: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    video, prompt = vru_like_design(rng)
    covered = {"videos and prompts": [], "videos only": []}
    for batch in range(SIMULATIONS // BATCH):
        correct = (rng.normal(0, video_sd, (BATCH, N_VIDEOS))[:, video]
                   + rng.normal(0, prompt_sd, (BATCH, prompt.max() + 1))[:, prompt]
                   + rng.normal(0, 1, (BATCH, len(video))) > 0).astype(float)
        for unit, prompts in (("videos and prompts", prompt), ("videos only", None)):
            found = crossed_bootstrap(correct, None, video, prompts, BootstrapSettings(seed=seed + batch))
            covered[unit].append((found.low[0] <= 0.5) & (0.5 <= found.high[0]))
    return {unit: float(np.concatenate(hits).mean()) for unit, hits in covered.items()}


@pytest.mark.parametrize("video_sd, prompt_sd", [(0.5, 1.0), (1.0, 0.5), (1.0, 0.0)])
def test_the_two_way_interval_covers_the_true_mean(video_sd, prompt_sd):
    found = coverage(video_sd, prompt_sd, seed=int(10 * video_sd + prompt_sd))
    print(f"\nvideo sd {video_sd}, prompt sd {prompt_sd}: coverage of the 95% interval over {SIMULATIONS} benchmarks: "
          + ", ".join(f"{unit} {share:.1%}" for unit, share in found.items()))
    assert 0.93 <= found["videos and prompts"] <= 0.97
    if prompt_sd > 0:  # the video bootstrap misses the prompt effects
        assert found["videos only"] < 0.9
