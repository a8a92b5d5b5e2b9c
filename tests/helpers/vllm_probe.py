"""Run in vLLM's environment by tests/adapters/test_vllm.py: `python -m tests.helpers.vllm_probe CHECKPOINT VIDEO`.

Scores two letter questions (`QUESTIONS`) about VIDEO with a `visdep_vllm`
adapter on CHECKPOINT (in-process engine), twice: with the frames and their timing as the adapter's `FrameSource`
gives them, and with the same frames timed at 24 fps (what transformers assumes when no timing is given). Then the
same two questions with their options' words as the options (`OPTIONS`, several tokens each), from an empty prefix
cache, by forced decoding (the adapter's route) and by prompt log-probabilities (the fallback), each request's
prompt and prefix-cache hit recorded. Prints one JSON object: {"right": [[loss, is_greedy] per option] per question,
"timed_24": ..., "fps": the source's, "options": {"forced_route": the adapter's route is forced decoding,
"block_size": vLLM's, "option_tokens": [[token count per option] per question], "forced" / "prompt": {"scores": ...,
"requests": [{"tokens": the prompt vLLM ran (video expanded), "cached": its prefix-cache hit}]}}}.

`python -m tests.helpers.vllm_probe processor`: `ForcedOptionTokens` alone, on hand-made batch updates (requests
added, one not forced, one finished and removed, two rows swapped) and logits: {"steps": [{"argmax": per row,
"unchanged": per row, whether its logits were left alone}], "refused": the messages for bad parameters}."""

from __future__ import annotations

import dataclasses
import json
import sys

from model_adapters.adapter import VisdepVLLM
from model_adapters.pipeline import Batches, DistinctQuestion
from model_adapters.vllm_engine import score_with_vllm

QUESTIONS = [("What's the weather and lighting? Answer with the option's letter from the given choices directly.\n"
              "A. sunny day\nB. cloudy night\nC. stormy day\nD. rainy evening"),
             ("Where is the accident? Answer with the option's letter from the given choices directly.\n"
              "A. rural road\nB. urban street\nC. highway\nD. tunnel")]
OPTIONS = [("sunny day", "cloudy night", "stormy day", "rainy evening"),
           ("rural road", "urban street", "highway", "tunnel")]


def recorded(llm, route) -> dict:
    """`route()`'s scores and the requests `llm.generate` ran for it, from an empty prefix cache."""
    seen, generate = [], llm.generate

    def recording(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        seen.extend(outputs)
        return outputs

    llm.reset_prefix_cache()
    llm.generate = recording
    try:
        scores = route()
    finally:
        del llm.generate
    return {"scores": scores, "requests": [{"tokens": list(o.prompt_token_ids), "cached": o.num_cached_tokens}
                                           for o in seen]}


def main(checkpoint: str, video: str) -> None:
    adapter = VisdepVLLM(pretrained=checkpoint, dtype="float32", enforce_eager="true", max_model_len="4096")
    questions = [DistinctQuestion("probe", i, text, [video], f"probe {i}", ("A", "B", "C", "D"))
                 for i, text in enumerate(QUESTIONS)]
    presented = adapter.present(questions)
    right = adapter.score(presented, Batches())
    source = adapter.engine.frames

    def timed_24(path: str):
        frames, metadata = source(path)
        n = metadata.total_num_frames
        return frames, dataclasses.replace(metadata, fps=24.0, duration=n / 24.0)

    adapter.engine.frames = timed_24
    other = adapter.score(presented, Batches())
    adapter.engine.frames = source

    with_options = adapter.present([dataclasses.replace(q, continuations=options)
                                    for q, options in zip(questions, OPTIONS, strict=True)])
    llm = adapter.engine._model
    options = {"forced_route": adapter.engine.forced_options,
               "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
               "option_tokens": [[len(o) for o in q.options] for q in with_options],
               "forced": recorded(llm, lambda: adapter.score(with_options, Batches())),
               "prompt": recorded(llm, lambda: score_with_vllm(llm, with_options, Batches(), source, 64,
                                                               progress=False, forced=False))}
    print(json.dumps({"right": right, "timed_24": other, "fps": source(video)[1].fps, "options": options}))


def processor() -> dict:
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from model_adapters.vllm_engine import FORCED_TOKENS, ForcedOptionTokens

    forcing = ForcedOptionTokens(None, torch.device("cpu"), False)
    outputs = {"a": [], "b": [], "c": []}  # vLLM's running output lists, which the processor reads
    a = SamplingParams(max_tokens=2, extra_args={FORCED_TOKENS: [3, 4]})
    c = SamplingParams(max_tokens=1, extra_args={FORCED_TOKENS: [5]})
    steps, generator = [], torch.Generator().manual_seed(0)

    def step(batch_update, rows: int) -> None:
        forcing.update_state(batch_update)
        logits = torch.randn(rows, 8, generator=generator)
        out = forcing.apply(logits.clone())
        steps.append({"argmax": out.argmax(-1).tolist(), "unchanged": torch.eq(out, logits).all(-1).tolist()})

    step(BatchUpdate(3, [], [(0, a, [1], outputs["a"]), (1, SamplingParams(max_tokens=1), [1], outputs["b"]),
                             (2, c, [1], outputs["c"])], []), 3)
    outputs["a"].append(3)
    outputs["c"].append(5)
    step(BatchUpdate(2, [2], [], []), 2)  # c finished
    step(BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]), 2)  # a moved to row 1, its 2nd token to come
    outputs["a"].append(4)
    step(None, 2)  # a has generated its tokens
    refused = []
    for params in (SamplingParams(max_tokens=3, extra_args={FORCED_TOKENS: [3, 4]}),
                   SamplingParams(max_tokens=1, extra_args={FORCED_TOKENS: []})):
        try:
            ForcedOptionTokens.validate_params(params)
        except ValueError as e:
            refused.append(str(e))
    return {"steps": steps, "refused": refused}


if __name__ == "__main__":
    if sys.argv[1] == "processor":
        print(json.dumps(processor()))
    else:
        main(*sys.argv[1:3])
