"""Faithful in the checkpoints' own dtype: Qwen2.5-VL checkpoints are bf16, and `dtype=auto` runs them in bf16.

- Positions: Qwen2.5-VL's temporal positions are computed from `second_per_grid_ts`, the seconds per temporal patch.
  In bf16 that number keeps 8 significant bits (83.375 s becomes 83.5), which moves a 16-frame clip's temporal
  positions by up to 15. The adapter keeps it float32 on the device (`vlm.on_device`), so in bf16 its positions are
  the float32 rule of the checkpoints' training code, here for clips of 5 s to 20 minutes (the expected positions
  come from `independent_reference.qwen_position_ids`, which shares no code with the adapters).
- Values: a bf16 run's option log-probabilities are within bf16 noise of the float32 run's (`BF16_BOUND`, measured
  on every tiny family, docs/adapters.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.video_utils import VideoMetadata

from lmms_eval_tasks import tasks
from tests.adapters.independent_reference import qwen_position_ids, uniform_indices
from tests.adapters.test_exactness import questions
from tests.helpers.adapters import make_adapter, requests_for
from visdep_metrics.demo.tiny import VLM_KINDS

FRAMES = 16
# 16-frame clips of 5 s to 20 minutes at the usual frame rates: (frames in the file, frames per second)
RATES = (24000 / 1001, 24.0, 25.0, 30000 / 1001, 30.0, 50.0, 60.0)
CLIPS = [(round(seconds * fps), fps) for seconds, fps in zip(np.geomspace(5, 1200, 40), RATES * 6, strict=False)
         ] + [(16675, 25.0)]  # the last: 667 s


def clip(total: int, fps: float) -> tuple[np.ndarray, VideoMetadata]:
    """16 frames of a clip of `total` frames at `fps`, timed as the frame source times them (the content does not
    change positions)."""
    indices = uniform_indices(total, FRAMES)
    frames = np.random.default_rng(total).integers(0, 256, (FRAMES, 56, 56, 3), dtype=np.uint8)
    return frames, VideoMetadata(total_num_frames=total, fps=fps, frames_indices=[int(i) for i in indices],
                                 video_backend="pyav")


@pytest.fixture(scope="module")
def bf16_qwen25(tiny_models):
    return make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], dtype="bfloat16", max_frames=FRAMES)


def test_bf16_positions_equal_the_float32_rule_for_clips_of_5_s_to_20_min(bf16_qwen25):
    adapter = bf16_qwen25
    assert adapter.model.dtype == torch.bfloat16
    prefix = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>"
    clips = {f"clip{i}": clip(*c) for i, c in enumerate(CLIPS)}
    adapter.engine.frames = clips.__getitem__  # the adapter's decoding step, given these frames and their timing
    seconds, moved, bf16_would_move = [], {}, 0
    for name, (frames, metadata) in clips.items():
        inputs, next_position = adapter.engine._prefix_to_model(adapter.engine._prepare_prefix(name, prefix))
        reference = adapter.engine.processor(text=[prefix], videos=[frames], video_metadata=[metadata],
                                      do_sample_frames=False, return_tensors="pt", add_special_tokens=False)
        expected = qwen_position_ids(adapter.model.config, reference)
        difference = int((inputs["position_ids"] - expected).abs().max())
        if difference or next_position != int(expected.max()) + 1:
            moved[f"{name}: {metadata.total_num_frames} frames at {metadata.fps:.2f} fps"] = difference
        seconds.append(float(reference["second_per_grid_ts"]))
        rounded = dict(reference, second_per_grid_ts=reference["second_per_grid_ts"].bfloat16().float())
        bf16_would_move += qwen_position_ids(adapter.model.config, rounded).tolist() != expected.tolist()
    assert moved == {}, f"{len(moved)} of {len(clips)} clips' positions moved by up to {max(moved.values())}"
    assert inputs["second_per_grid_ts"].dtype == torch.float32
    assert min(seconds) < 1 and max(seconds) > 100  # s per temporal patch: 0.6 s (5 s clip) to 150 s (20 min)
    assert bf16_would_move >= 10  # what the test guards against: the timing rounded to bf16 moves 14 of these clips


# bf16 keeps 8 significant bits (relative rounding 2^-9). Measured over the 4 families' 10 questions, video and blind
# (docs/adapters.md): one-token letters moved by at most 0.034 nats (medians 0.004-0.009), option sums of up to 218
# nats by at most 0.123 (medians 0.010-0.029); the bounds leave about half as much again for other seeds and libraries.
BF16_BOUND = {"letter": 0.05, "option": 0.2}


@pytest.mark.parametrize("kind", VLM_KINDS)
def test_a_bf16_runs_log_probabilities_are_within_bf16_noise_of_float32(tiny_models, benchmark_env, monkeypatch,
                                                                        kind):
    """Every VLM family, video and blind, letter and option scoring, 10 questions of 4-5 options: the bf16 run's
    option log-probabilities within BF16_BOUND of the float32 run's, and the same answer wherever float32's best
    option leads the next by more than twice the bound."""
    docs = questions()
    for scoring in ("letter", "option"):
        monkeypatch.setenv("VISDEP_SCORING", scoring)
        for video in (True, False):
            runs = {}
            for dtype in ("float32", "bfloat16"):
                adapter = make_adapter(kind, tiny_models[kind], dtype=dtype, batch_size=4, max_frames=8)
                values = [-loss for loss, _, _ in adapter.loglikelihood(requests_for(adapter, docs, video))]
                runs[dtype] = np.split(np.array(values), np.cumsum([len(tasks.doc_to_choice(d)) for d in docs])[:-1])
            case = f"{kind} {scoring} {'video' if video else 'blind'}"
            delta = max(float(np.abs(b - f).max()) for f, b in zip(runs["float32"], runs["bfloat16"], strict=True))
            print(f"\n{case}: |bf16 - fp32| at most {delta:.4f}")
            assert delta <= BF16_BOUND[scoring], case
            for f, b in zip(runs["float32"], runs["bfloat16"], strict=True):
                lead = np.sort(f)[-1] - np.sort(f)[-2]
                assert lead <= 2 * BF16_BOUND[scoring] or np.argmax(f) == np.argmax(b), (case, f, b)
