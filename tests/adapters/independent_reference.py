"""Option scores computed the way each model's documentation says to run it, sharing no code with visdep.

This module imports nothing from `model_adapters` or `lmms_eval_tasks`: the prompt text, the frame
sampling, the timing, the chat template call, the answer cue and the tokenisation are written here
from what the method and the libraries document, so a mistake in what the adapters show the model
cannot hide behind a copy of itself.

- Prompt (paper appendix B.2, ARCHITECTURE.md): the question, the lettered options, then
  "Answer with the option's letter from the given choices directly."
- Frames: 16 (here `n`) frames spread uniformly over the whole video, first and last included,
  index_i = round(i * (total - 1) / (n - 1)) as Qwen's own `qwen-vl-utils` samples
  (`torch.linspace(0, total - 1, nframes).round()`); mp4 files are decoded by transformers'
  documented `load_video(..., backend="pyav", sample_indices_fn=...)`, which also reads the
  stream's frame rate into a `VideoMetadata`; an image folder is read with PIL in frame-number
  order and timed at the rate the test states.
- VLMs (Qwen2-VL / Qwen2.5-VL, LLaVA-OneVision, InternVL-hf model cards): a user message whose
  content is a video entry then a text entry, `processor.apply_chat_template(messages,
  add_generation_prompt=True, tokenize=False)`, then `processor(text=..., videos=[frames],
  video_metadata=[metadata], do_sample_frames=False)`: the sampled frames with their timing, so
  Qwen2.5-VL computes `second_per_grid_ts` from the real frame rate.
- Causal LMs: a chat model gets one user turn through `tokenizer.apply_chat_template` (the
  template writes BOS; no special tokens added); a base model without a template gets the prompt
  and "\\nAnswer:" with the tokenizer's own special tokens, as lm-evaluation-harness asks base models.
- The scored string is the letter (or option text), with a leading space when the text before it
  does not end in whitespace (" A" after "Answer:" or "Assistant:").
- A score is one full forward of context + option: -sum log p over the option's tokens, which are
  the tokens of tok(context + option) after the len(tok(context)) context tokens (checked to agree).
- Qwen2-VL / Qwen2.5-VL's 3D rotary positions are given to that forward as the authors' own training
  code computes them (`qwen_position_ids`), not left to transformers 5, which starts the text after a
  video elsewhere (docs/adapters.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers.video_utils import VideoMetadata, load_video

LETTERS = "ABCDEFGHIJKL"
INSTRUCTION = "Answer with the option's letter from the given choices directly."


def mc_prompt(question: str, options: Sequence[str]) -> str:
    return "\n".join([question, *(f"{LETTERS[k]}. {o}" for k, o in enumerate(options)), INSTRUCTION])


def uniform_indices(total: int, n: int) -> np.ndarray:
    if total <= n:
        return np.arange(total)
    return np.round(np.linspace(0, total - 1, n)).astype(int)


def load_mp4(path: Path, n: int) -> tuple[np.ndarray, VideoMetadata]:
    return load_video(str(path), backend="pyav",
                      sample_indices_fn=lambda metadata, **_: uniform_indices(metadata.total_num_frames, n))


def load_image_folder(folder: Path, n: int, fps: float) -> tuple[np.ndarray, VideoMetadata]:
    files = sorted((p for p in folder.iterdir() if p.suffix in (".jpg", ".png")),
                   key=lambda p: int(re.findall(r"\d+", p.stem)[-1]))
    indices = uniform_indices(len(files), n)
    frames = np.stack([np.asarray(Image.open(files[i]).convert("RGB")) for i in indices])
    return frames, VideoMetadata(total_num_frames=len(files), fps=fps, frames_indices=list(indices))


def qwen_position_ids(config, inputs: dict) -> torch.Tensor | None:
    """Qwen2-VL / Qwen2.5-VL rotary positions (3, 1, L) for one encoded prompt with a video, by the rule of Qwen's
    own training code (qwen-vl-finetune's `get_rope_index_2` and `get_rope_index_25`, and the examples in their
    docstrings): the video's tokens are at (temporal, height, width) = (t * interval, h, w) over its merged grid (t
    temporal patches, the patches' rows and columns // spatial_merge_size; interval = tokens_per_second * seconds per
    temporal patch for Qwen2.5-VL, 1 for Qwen2-VL), each axis offset by where the text before it ends; each text
    token is one past the largest position before it, on all three axes. None where positions are 0, 1, 2, ...: other
    families, or no video. Qwen2.5-VL's temporal positions are rounded as transformers 4.51's `get_rope_index` and
    qwen-vl-finetune's compute them, `(arange(t) * second_per_grid_t * tokens_per_second).long()` with a float32
    `second_per_grid_t`: both products in float32, then truncated (numpy float32 here); `second_per_grid_ts` must be
    float32 (the processor's output), never the model's dtype."""
    if config.model_type not in ("qwen2_vl", "qwen2_5_vl") or "video_grid_thw" not in inputs:
        return None
    ids = inputs["input_ids"][0].tolist()
    merge = config.vision_config.spatial_merge_size
    columns: list[tuple[int, int, int]] = []
    largest, v, i = -1, 0, 0  # the largest position so far, the next video, the next token
    while i < len(ids):
        start = largest + 1
        if ids[i] == config.video_token_id:
            t, h, w = (int(x) for x in inputs["video_grid_thw"][v])
            if config.model_type == "qwen2_5_vl":
                seconds = inputs["second_per_grid_ts"][v]
                assert seconds.dtype == torch.float32, f"second_per_grid_ts in {seconds.dtype}"
                per_second = np.float32(config.vision_config.tokens_per_second)
                temporal = [int(np.float32(k) * np.float32(seconds.item()) * per_second) for k in range(t)]
            else:
                temporal = list(range(t))
            block = [(start + temporal[k], start + row, start + column)
                     for k in range(t) for row in range(h // merge) for column in range(w // merge)]
            columns += block
            largest = max(largest, *(max(c) for c in block))
            v, i = v + 1, i + len(block)
        else:
            columns.append((start, start, start))
            largest, i = start, i + 1
    return torch.tensor(columns, dtype=torch.long).T[:, None, :]


def _scored(text: str, choice: str) -> str:
    return choice if text[-1].isspace() else " " + choice


def _option_logprob(model, encode, context: str, scored: str) -> float:
    context_ids = encode(context)["input_ids"]
    inputs = encode(context + scored)
    ids = inputs["input_ids"]
    n = context_ids.shape[1]
    assert torch.equal(ids[0, :n], context_ids[0]), "tok(context + option) does not start with tok(context)"
    positions = qwen_position_ids(model.config, inputs)
    with torch.inference_mode():
        logits = model(**inputs, **({} if positions is None else {"position_ids": positions})).logits[0].float()
    logprobs = torch.log_softmax(logits[n - 1:-1], dim=-1)
    return float(logprobs.gather(-1, ids[0, n:, None]).sum())


def vlm_option_logprobs(model, processor, question: str, options: Sequence[str], choices: Sequence[str],
                        video: tuple[np.ndarray, VideoMetadata] | None = None,
                        ) -> tuple[list[float], list[str], dict]:
    """(log p of each choice, the strings scored, the model inputs of the context) for a VLM."""
    content = ([{"type": "video"}] if video is not None else []) + [{"type": "text",
                                                                     "text": mc_prompt(question, options)}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)
    video_kwargs = {} if video is None else {"videos": [video[0]], "video_metadata": [video[1]],
                                             "do_sample_frames": False}

    def encode(t: str) -> dict:
        enc = processor(text=[t], return_tensors="pt", **video_kwargs)
        return {k: v.to(model.dtype) if k.startswith("pixel_values") else v for k, v in enc.items()}

    scored = [_scored(text, c) for c in choices]
    return [_option_logprob(model, encode, text, s) for s in scored], scored, encode(text)


def llm_option_logprobs(model, tokenizer, question: str, options: Sequence[str], choices: Sequence[str],
                        ) -> tuple[list[float], list[str]]:
    """(log p of each choice, the strings scored) for a causal LM."""
    prompt = mc_prompt(question, options)
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=False)
        special = False
    else:
        text, special = prompt + "\nAnswer:", True

    def encode(t: str) -> dict:
        return tokenizer(t, return_tensors="pt", add_special_tokens=special)

    scored = [_scored(text, c) for c in choices]
    return [_option_logprob(model, encode, text, s) for s in scored], scored
