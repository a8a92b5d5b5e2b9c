"""Run in vLLM's environment by tests/adapters/test_vllm.py: `python -m tests.helpers.vllm_probe CHECKPOINT VIDEO`.

Scores two letter questions (`QUESTIONS`) about VIDEO with a `visdep_vllm`
adapter on CHECKPOINT (in-process engine), twice: with the frames and their timing as the adapter's `FrameSource`
gives them, and with the same frames timed at 24 fps (what transformers assumes when no timing is given). Prints
one JSON object: {"right": [[loss, is_greedy] per option] per question, "timed_24": ..., "fps": the source's}."""

from __future__ import annotations

import dataclasses
import json
import sys

from model_adapters.pipeline import Batches, DistinctQuestion
from model_adapters.vllm_adapter import VisdepVLLM

QUESTIONS = [("What's the weather and lighting? Answer with the option's letter from the given choices directly.\n"
              "A. sunny day\nB. cloudy night\nC. stormy day\nD. rainy evening"),
             ("Where is the accident? Answer with the option's letter from the given choices directly.\n"
              "A. rural road\nB. urban street\nC. highway\nD. tunnel")]


def main(checkpoint: str, video: str) -> None:
    adapter = VisdepVLLM(pretrained=checkpoint, dtype="float32", enforce_eager="true", max_model_len="4096")
    questions = [DistinctQuestion("probe", i, text, [video], f"probe {i}", ("A", "B", "C", "D"))
                 for i, text in enumerate(QUESTIONS)]
    presented = adapter.present(questions)
    right = adapter.score(presented, Batches())
    source = adapter.frames

    def timed_24(path: str):
        frames, metadata = source(path)
        n = metadata.total_num_frames
        return frames, dataclasses.replace(metadata, fps=24.0, duration=n / 24.0)

    adapter.frames = timed_24
    other = adapter.score(presented, Batches())
    print(json.dumps({"right": right, "timed_24": other, "fps": source(video)[1].fps}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
