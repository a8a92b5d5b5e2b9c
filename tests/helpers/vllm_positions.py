"""Run in vLLM's environment by tests/adapters/test_vllm.py; prints one JSON object on its last line.

`python -m tests.helpers.vllm_positions rule CLIPS_JSON`: vLLM's own Qwen2.5-VL rotary positions
(`Qwen2_5_VLForConditionalGeneration.get_mrope_input_positions`, called on the features its processor would give) for
each clip of CLIPS_JSON ([[temporal patches, seconds per patch (a float32 value)], ...]): {"temporal": [[the video's
temporal positions, from 0] per clip]}.

`python -m tests.helpers.vllm_positions engine CHECKPOINT VIDEO DTYPE [TOTAL FPS]`: a `visdep_vllm` adapter on
CHECKPOINT (in-process engine, DTYPE) scores two letter questions about VIDEO's frames (timed as a clip of TOTAL frames
at FPS where given); the positions vLLM computes for each Qwen2.5-VL request are captured where it computes them:
{"scores": ..., "requests": [{"tokens": prompt token ids, "positions": (3, L) positions}], "prompt": the HF
processor's encoding of the first question's prompt as visdep_vlm makes it: {"input_ids", "video_grid_thw",
"second_per_grid_ts"}}."""

from __future__ import annotations

import dataclasses
import json
import sys
from types import SimpleNamespace


def qwen25_class():
    from vllm.model_executor.models.qwen2_5_vl import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration


def rule(clips_json: str) -> dict:
    import torch
    from transformers import Qwen2_5_VLConfig

    cls = qwen25_class()
    config = Qwen2_5_VLConfig()
    config.vision_config.tokens_per_second, config.vision_config.spatial_merge_size = 2, 2  # the released checkpoints'
    model = SimpleNamespace(config=config)
    model.iter_mm_grid_thw = lambda features: cls.iter_mm_grid_thw(model, features)
    out = []
    for patches, seconds in json.loads(clips_json):
        data = {"video_grid_thw": SimpleNamespace(data=torch.tensor([patches, 2, 2])),
                "second_per_grid_ts": SimpleNamespace(data=torch.tensor(seconds, dtype=torch.float32))}
        feature = SimpleNamespace(mm_position=SimpleNamespace(offset=0), modality="video", data=data)
        positions, _ = cls.get_mrope_input_positions(model, [0] * patches, [feature])
        out.append([int(p) for p in positions[0]])
    return {"temporal": out}


def timed_as(source, total: int, fps: float):
    """`source`'s frames of a video, timed as its frames sampled uniformly from a clip of `total` frames at
    `fps` (the content does not change positions; the timing does)."""

    def timed(path: str):
        frames, metadata = source(path)
        indices = [round(i * (total - 1) / (len(frames) - 1)) for i in range(len(frames))]
        return frames, dataclasses.replace(metadata, total_num_frames=total, fps=fps, duration=total / fps,
                                           frames_indices=indices)

    return timed


def engine(checkpoint: str, video: str, dtype: str, total: str | None = None, fps: str | None = None) -> dict:
    from model_adapters.adapter import VisdepVLLM
    from model_adapters.pipeline import Batches, DistinctQuestion
    from tests.helpers.vllm_probe import QUESTIONS

    cls = qwen25_class()
    captured, original = [], cls.get_mrope_input_positions

    def capture(self, input_tokens, mm_features):
        positions, delta = original(self, input_tokens, mm_features)
        captured.append({"tokens": list(input_tokens), "positions": [[int(p) for p in axis] for axis in positions]})
        return positions, delta

    cls.get_mrope_input_positions = capture  # the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)
    adapter = VisdepVLLM(pretrained=checkpoint, dtype=dtype, enforce_eager="true", max_model_len="4096")
    if total is not None:
        adapter.engine.frames = timed_as(adapter.engine.frames, int(total), float(fps))
    questions = [DistinctQuestion("probe", i, text, [video], f"probe {i}", ("A", "B", "C", "D"))
                 for i, text in enumerate(QUESTIONS)]
    presented = adapter.present(questions)
    scores = adapter.score(presented, Batches())
    frames, metadata = adapter.engine.frames(video)
    encoding = adapter.engine.processor(text=[presented[0].prompt], videos=[frames], video_metadata=[metadata],
                                 do_sample_frames=False, return_tensors="pt", add_special_tokens=False)
    prompt = {k: encoding[k].tolist() for k in ("input_ids", "video_grid_thw", "second_per_grid_ts")}
    return {"scores": scores, "requests": captured, "prompt": prompt}


if __name__ == "__main__":
    mode, *arguments = sys.argv[1:]
    print(json.dumps({"rule": rule, "engine": engine}[mode](*arguments)))
