"""The naive procedure the adapters' scoring core is checked and timed against: one full forward per option.

No cache, no batching, no shared prefix: for each option the processor encodes the whole
chat-templated prompt + option (with the video, if any) and the model runs it from the first
token; the loss sums -log p over the tokens after the encoded prompt alone (the lm-eval rule).
This is what lmms-eval's own adapters do per request, minus their re-decoding of the video.

It builds its inputs with the adapters' own prompt builder and frames, so it checks the key/value
cache, the batching and the shared prefix, not what the model is shown: that is checked by the
test-only references in `tests/adapters/independent_reference.py`, which share no code with the adapters
(Qwen's 3D rotary positions are taken from there, `qwen_position_ids`, not from the adapters).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from model_adapters.engines.hf import on_device
from model_adapters.presentation import TokenizerTemplates, answer_strings, chat_prompt, user_message
from tests.adapters.independent_reference import qwen_position_ids


def reference_prompt(processor, context: str, with_video: bool) -> tuple[str, bool]:
    """(chat-templated prompt, whether the tokenizer adds its special tokens) for a VLM processor
    or a causal LM tokenizer, built as the adapters build it."""
    if hasattr(processor, "tokenizer"):
        return processor.apply_chat_template(user_message(context, with_video), add_generation_prompt=True,
                                             tokenize=False), False
    return chat_prompt(TokenizerTemplates(processor), context)


def reference_inputs(model, processor, text: str, add_special_tokens: bool, video: tuple | None) -> dict:
    """The processor's full encoding of `text` (with the video and its timing), on the model's device and dtype."""
    kwargs = {}
    if video is not None:
        frames, metadata = video
        kwargs = {"videos": [frames], "video_metadata": [metadata], "do_sample_frames": False}
    enc = processor(text=[text], return_tensors="pt", add_special_tokens=add_special_tokens, **kwargs)
    return on_device(enc, model.device, model.dtype)


def full_forward_logits(model, inputs: dict) -> torch.Tensor:
    """The logits (L, vocabulary) of one full forward of encoded `inputs` (batch 1), Qwen's 3D rotary positions
    given as its training code computes them (`qwen_position_ids`)."""
    positions = qwen_position_ids(model.config, inputs)
    return model(**inputs, **({} if positions is None else {"position_ids": positions})).logits[0].float()


@torch.inference_mode()
def naive_option_scores(model, processor, context: str, continuations: Sequence[str],
                        video: tuple[np.ndarray, object] | None = None) -> list[tuple[float, bool]]:
    """(-sum log p(option | prompt), is_greedy) per option for a VLM (`processor` a multimodal
    processor; `video` = (frames, VideoMetadata)) or a causal LM (`processor` a tokenizer; no video)."""
    prompt, special = reference_prompt(processor, context, video is not None)
    n_context = reference_inputs(model, processor, prompt, special, video)["input_ids"].shape[1]
    scores = []
    for continuation in answer_strings(prompt, continuations):
        inputs = reference_inputs(model, processor, prompt + continuation, special, video)
        logits = full_forward_logits(model, inputs)
        target = inputs["input_ids"][0, n_context:]
        dist = torch.log_softmax(logits[n_context - 1: -1], dim=-1)
        logprob = dist.gather(-1, target[:, None]).sum().item()
        scores.append((-logprob, bool((dist.argmax(-1) == target).all())))
    return scores
