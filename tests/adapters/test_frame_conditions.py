"""The temporal ladder's frame conditions as the processor receives them, through the real lmms-eval entry point.

A tiny Qwen2.5-VL and a tiny LLaVA-OneVision score one VRU-Accident video's questions with frames as sampled, with
`frame_order=shuffled` and `reversed`, and with `frames=middle`. The processor's own `__call__` is wrapped to
capture the `videos` and `video_metadata` it is given. The frames are checked against the clip decoded here by
transformers' own video loader (no visdep code): the same frames, permuted, with the sampled timing unchanged; the
middle frame alone for `frames=middle`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import LlavaOnevisionProcessor, Qwen2_5_VLProcessor
from transformers.video_utils import load_video

from tests.helpers.lmms_cli import lmms_eval_env, read_samples, run_lmms_eval

PROCESSORS = {"qwen2_5_vl": Qwen2_5_VLProcessor, "llava_onevision": LlavaOnevisionProcessor}
CONDITIONS = {"original": "", "shuffled": ",frame_order=shuffled", "reversed": ",frame_order=reversed",
              "middle": ",frames=middle"}
LIMIT = 6  # one video's six questions


@pytest.fixture(scope="module")
def captured(tiny_models, fixture_env, tmp_path_factory):
    """{(kind, condition): [(frames, metadata), ...] per processor call}, and the video each run was shown."""
    root = tmp_path_factory.mktemp("frame_conditions")
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1")
    seen: dict[tuple[str, str], list] = {}
    videos = set()
    patch = pytest.MonkeyPatch()
    current: list[tuple[str, str]] = []
    try:
        for cls in PROCESSORS.values():
            original_call = cls.__call__

            def call(self, *args, _original=original_call, **kwargs):
                if kwargs.get("videos") is not None:
                    seen.setdefault(current[-1], []).append(
                        (np.array(kwargs["videos"][0]), kwargs.get("video_metadata")[0]))
                return _original(self, *args, **kwargs)

            patch.setattr(cls, "__call__", call)
        for kind in PROCESSORS:
            for condition, extra in CONDITIONS.items():
                current.append((kind, condition))
                out = root / kind / condition
                proc = run_lmms_eval(["--model", "visdep_vlm", "--model_args",
                                      f"pretrained={tiny_models[kind]},device=cpu,dtype=float32,decode_workers=0{extra}",
                                      "--tasks", "vru_accident_video", "--limit", str(LIMIT), "--batch_size", "6"],
                                     env, out)
                assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
                samples = read_samples(out, "vru_accident_video")
                assert len(samples) == LIMIT
                videos |= {s["visdep"]["video"] for s in samples}
    finally:
        patch.undo()
    assert len(videos) == 1
    return seen, Path(fixture_env["VRU_ACCIDENT_ROOT"]) / next(iter(videos))


def decoded(path: Path, indices) -> tuple[np.ndarray, list[int]]:
    """The clip's frames at `indices(total)`, by transformers' PyAV loader."""
    frames, metadata = load_video(str(path), backend="pyav",
                                  sample_indices_fn=lambda metadata, **_: np.array(indices(metadata.total_num_frames)))
    return np.asarray(frames), [int(i) for i in metadata.frames_indices]


def one_video(seen, kind, condition):
    calls = seen[(kind, condition)]
    assert calls, f"{kind} {condition}: the processor never received a video"
    first_frames, first_metadata = calls[0]
    for frames, metadata in calls[1:]:  # every question of the one video is shown the same frames
        np.testing.assert_array_equal(frames, first_frames)
        assert list(metadata.frames_indices) == list(first_metadata.frames_indices)
    return first_frames, first_metadata


def permutation_of(shown: np.ndarray, reference: np.ndarray) -> list[int]:
    """Which reference frame each shown frame is (each must be exactly one)."""
    found = []
    for frame in shown:
        equal = [j for j, ref in enumerate(reference) if np.array_equal(frame, ref)]
        assert len(equal) == 1, "a shown frame is not exactly one of the sampled frames"
        found.append(equal[0])
    return found


@pytest.mark.parametrize("kind", PROCESSORS)
def test_the_processor_receives_the_sampled_frames_permuted_with_their_timing(captured, kind):
    seen, video = captured
    reference, indices = decoded(video, lambda n: range(n))  # the fixture clips are shorter than 16 frames
    n = len(reference)
    assert n > 2
    frames, metadata = one_video(seen, kind, "original")
    assert permutation_of(frames, reference) == list(range(n))
    assert list(metadata.frames_indices) == indices
    for condition in ("shuffled", "reversed"):
        frames, shown_metadata = one_video(seen, kind, condition)
        order = permutation_of(frames, reference)
        assert sorted(order) == list(range(n)), f"{condition}: every sampled frame exactly once"
        assert list(shown_metadata.frames_indices) == indices, f"{condition}: the timestamps stay as sampled"
        assert (shown_metadata.fps, shown_metadata.total_num_frames) == (metadata.fps, metadata.total_num_frames)
        if condition == "reversed":
            assert order == list(range(n))[::-1]
        else:
            assert order != list(range(n)) and order != list(range(n))[::-1]


def test_every_model_sees_one_shuffle_per_video(captured):
    seen, video = captured
    reference, _ = decoded(video, lambda n: range(n))
    orders = {kind: permutation_of(one_video(seen, kind, "shuffled")[0], reference) for kind in PROCESSORS}
    assert len({tuple(order) for order in orders.values()}) == 1, orders


@pytest.mark.parametrize("kind", PROCESSORS)
def test_frames_middle_shows_the_middle_frame_alone(captured, kind):
    seen, video = captured
    middle, indices = decoded(video, lambda n: [(n - 1) // 2])
    frames, metadata = one_video(seen, kind, "middle")
    assert frames.shape[0] == 1
    np.testing.assert_array_equal(frames[0], middle[0])
    assert list(metadata.frames_indices) == indices
