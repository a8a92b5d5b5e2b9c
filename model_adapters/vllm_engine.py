"""The vLLM engine of `visdep_vllm`: the `score` step of `model_adapters.pipeline` on a `vllm.LLM`.

It is given the presented questions (`pipeline.Presented`: the templated prompt's token ids, each option's token ids
after it, the video's path) and the adapter's `frames.FrameSource`, so vLLM sees the very tokens, frames and frame
timing the Hugging Face engine sees. Two kinds of request, both with one generated token that is never used:

- a question whose options are all one token (letter scoring): ONE request of the context alone, with
  `logprob_token_ids` = the options' tokens. The log-probabilities come from the distribution after the context; the
  option is greedy when it is the token sampled at temperature 0 (the argmax). vLLM's prefix cache serves the
  shared start (system turn, frames) of a video's other questions.
- otherwise (option scoring): one request per option, context + option tokens, with `prompt_logprobs=1`, which gives
  at every prompt position the log-probability of the token there and its rank; loss = -sum over the option's
  positions, greedy = every option token ranks first. vLLM computes prompt log-probabilities only for tokens it runs,
  so these requests do not read the prefix cache (`SamplingParams.skip_reading_prefix_cache`).

A video reaches vLLM as (frames (T, H, W, 3) uint8, metadata): the sampled frames and the timing transformers'
`VideoMetadata` gives the Hugging Face processor (`video_item`), with `do_sample_frames: False` so the processor does
not sample them again. Imports vLLM only inside functions that need it (the module loads without it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from loguru import logger
from tqdm import tqdm

from model_adapters.pipeline import Batches, Presented, Scores
from model_adapters.scoring import ScoringError


def video_item(frames, metadata) -> tuple:
    """A video as vLLM's multimodal input takes it: the frames and the fields of their `VideoMetadata` that the
    processors read (transformers' own processor is called with the same frames, metadata and no resampling)."""
    return frames, {"fps": float(metadata.fps), "duration": float(metadata.duration),
                    "total_num_frames": int(metadata.total_num_frames),
                    "frames_indices": [int(i) for i in metadata.frames_indices],
                    "video_backend": metadata.video_backend, "do_sample_frames": False}


# The processors' arguments visdep_vlm passes to transformers' processor for every video: the frames given are the
# frames shown. vLLM drops `do_sample_frames` from a video's metadata and would otherwise leave it to the checkpoint's
# video processor config, which may set it true (and sample the frames again).
PROCESSOR_ARGUMENTS = {"do_sample_frames": False}
# Timing tensors of a processor's output: Qwen2.5-VL's temporal positions are computed from them (docs/adapters.md).
TIMING_KEYS = ("second_per_grid_ts",)


def keep_timing_in_float32() -> None:
    """Make vLLM keep the processors' timing tensors (`TIMING_KEYS`) in the precision the processor gave them.

    vLLM 0.32 casts every floating tensor a Hugging Face processor returns to the model's dtype
    (`InputProcessingContext._postprocess_output`), `second_per_grid_ts` included, and computes Qwen2.5-VL's temporal
    positions from it: in bf16 a 16-frame clip's move by up to 15, as they did in visdep_vlm before its fix. The
    processor runs in the process that calls `LLM.generate`, so wrapping that method there is enough. Idempotent."""
    from vllm.multimodal.processing.context import InputProcessingContext

    original = InputProcessingContext._postprocess_output
    if getattr(original, "keeps_timing", False):
        return

    def postprocess(self, output):
        timing = {k: output[k] for k in TIMING_KEYS if isinstance(output, dict) and k in output}
        result = original(self, output)
        for key, value in timing.items():
            result[key] = value.cpu() if hasattr(value, "cpu") else value
        return result

    postprocess.keeps_timing = True
    InputProcessingContext._postprocess_output = postprocess


def is_letter_question(question: Presented) -> bool:
    """True when every option is one token: one context-only request scores them all."""
    return all(len(option) == 1 for option in question.options)


def requests_of(question: Presented, frames: Callable[[str], tuple] | None) -> list[dict]:
    """The vLLM prompts (`TokensPrompt` dicts) of a question: the context alone for a letter question, context +
    option for each option otherwise; with the video's frames and timing where it has one."""
    if question.video is not None and frames is None:
        raise ScoringError(f"{question.qid}: a video question needs the adapter's frames")
    multimodal = None if question.video is None else {"video": [video_item(*frames(question.video))]}
    sequences = [list(question.context)] if is_letter_question(question) else [
        list(question.context) + list(option) for option in question.options]
    prompts = []
    for tokens in sequences:
        prompt: dict = {"prompt_token_ids": tokens}
        if multimodal is not None:
            prompt["multi_modal_data"] = multimodal
        prompts.append(prompt)
    return prompts


def sampling_params(question: Presented):
    """The `SamplingParams` of a question's requests (see the module's docstring)."""
    from vllm import SamplingParams

    if is_letter_question(question):
        return SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                              logprob_token_ids=sorted({option[0] for option in question.options}))
    return SamplingParams(max_tokens=1, temperature=0.0, detokenize=False, prompt_logprobs=1)


def _finite(question: Presented, k: int, loss: float) -> float:
    if not math.isfinite(loss):
        raise ScoringError(f"question {question.qid}: log-likelihood of option {k} is {-loss} (not finite); "
                           "try dtype=float32")
    return loss


def scores_of(question: Presented, outputs: Sequence) -> Scores:
    """(loss, is_greedy) per option from the question's `RequestOutput`s (in `requests_of`'s order)."""
    if is_letter_question(question):
        (output,) = outputs
        completion = output.outputs[0]
        logprobs, sampled = completion.logprobs[0], completion.token_ids[0]
        return [(_finite(question, k, -float(logprobs[option[0]].logprob)), sampled == option[0])
                for k, option in enumerate(question.options)]
    scores = []
    for k, (option, output) in enumerate(zip(question.options, outputs, strict=True)):
        # the option is the end of the prompt vLLM ran (its video placeholder expanded to the frames' tokens)
        if list(output.prompt_token_ids[-len(option):]) != list(option):
            raise ScoringError(f"question {question.qid}: vLLM's prompt does not end in option {k}'s tokens")
        positions = output.prompt_logprobs[-len(option):]
        found = [position[token] for position, token in zip(positions, option, strict=True)]
        scores.append((_finite(question, k, -sum(float(p.logprob) for p in found)), all(p.rank == 1 for p in found)))
    return scores


def score_with_vllm(llm, questions: Sequence[Presented], batches: Batches, frames: Callable[[str], tuple] | None,
                    batch_size: int, progress: bool = True) -> list[Scores | None]:
    """(loss, is_greedy) per option of every question, in the order given: `batch_size` questions per call of
    `llm.generate` (one durable-store write each), in order, so that a video's questions follow each other and its
    prefix is found in vLLM's cache. A batch `batches.skip` says is done is not run (its results stay None)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    results: list[Scores | None] = [None] * len(questions)
    bar = tqdm(total=len(questions), desc="visdep scoring (vLLM)", unit="question", disable=not progress)
    for start in range(0, len(questions), batch_size):
        part = list(range(start, min(start + batch_size, len(questions))))
        if batches.skip is not None and batches.skip(part):
            bar.update(len(part))
            continue
        prompts, params, owners = [], [], []
        for i in part:
            for prompt in requests_of(questions[i], frames):
                prompts.append(prompt)
                params.append(sampling_params(questions[i]))
                owners.append(i)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        by_question: dict[int, list] = {i: [] for i in part}
        for i, output in zip(owners, outputs, strict=True):
            by_question[i].append(output)
        for i in part:
            results[i] = scores_of(questions[i], by_question[i])
        if batches.scored is not None:
            batches.scored(part, [results[i] for i in part])
        bar.update(len(part))
    bar.close()
    logger.info(f"visdep_vllm: {sum(r is not None for r in results)} of {len(questions)} questions scored")
    return results
