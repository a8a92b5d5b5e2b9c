"""What differs between the vision-language families `visdep_vlm` and `visdep_vllm` run, in one table.

Both engines show a family the same thing (`vlm.present_video`); `video_end` and `mrope` are what the Hugging Face
engine needs to run a video's prefix once (vLLM's prefix cache and its own rotary positions do that for it).

Every family takes the sampled frames as `processor(videos=[frames (T, H, W, 3) uint8])` and marks
the video in the chat-templated text with a placeholder that its processor expands. What differs:

- `video_end`: the text in the templated prompt after which the video part ends. The prompt is cut
  there: everything before (system turn, user header, the video) is the shared prefix of all
  questions about one video and is run once; the text after it is each question's own tail. The
  marker is a special token (or, for InternVL, a placeholder whose expansion ends in the special
  `</img>`), so the cut never splits a token.
- `mrope`: Qwen2-VL / Qwen2.5-VL give vision tokens 3D rotary positions (time, height, width); text
  after a video continues at the largest position before it + 1, on all three axes, which is not
  simply the prefix length. Other families count positions 0, 1, 2, ...

Qwen's positions are the rule the checkpoints were trained with: the authors' own training code
(qwen-vl-finetune's `get_rope_index_25` and `get_rope_index_2`, whose docstrings say "we calculate the
text start position_ids as the max vision position_ids plus 1"), transformers 4's Qwen2-VL and
Qwen2.5-VL, and vLLM. transformers 5 (5.24 here) computes the vision positions the same way but starts
the text after a vision block at the block's start + its merged grid's larger side: inside a video's
temporal positions whenever they pass its spatial ones (more temporal patches than the merged grid is
wide; Qwen2.5-VL spaces them by its frame timing: 16 frames of a 10 s clip reach 17, of a 10-minute
clip over 1,000). `prefix_positions` takes transformers' vision positions and moves each text run
after a vision block to Qwen's start (docs/adapters.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_adapters.transformers_api import rope_index


@dataclass(frozen=True)
class Family:
    model_type: str
    video_end: str
    mrope: bool = False


FAMILIES = {f.model_type: f for f in (
    Family("qwen2_5_vl", video_end="<|vision_end|>", mrope=True),
    Family("qwen2_vl", video_end="<|vision_end|>", mrope=True),
    Family("llava_onevision", video_end="<video>"),
    Family("internvl", video_end="<video>"),
)}


def family_of(config, adapter_name: str = "visdep_vlm") -> Family:
    """The family of a loaded model's config; an error names the supported ones."""
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise ValueError(f"{adapter_name} does not know model_type {model_type!r}; supported: {', '.join(FAMILIES)}")
    return FAMILIES[model_type]


def _mm_token_types(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Text 0, image 1, video 2: what `get_rope_index` groups by (processors of transformers 5 return it too)."""
    types = torch.zeros_like(input_ids)
    types[input_ids == model.config.image_token_id] = 1
    types[input_ids == model.config.video_token_id] = 2
    return types


def text_after_vision_at_qwens_start(positions: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
    """Qwen's positions from transformers 5's (module docstring): positions (3, B, L) as `get_rope_index` gives
    them for sequences whose token types (B, L) are text 0, image 1, video 2. In each row, each text run after a
    vision block starts at the largest position before it + 1, and everything after it moves with it (a later
    block's positions count from the text before it, in both rules; padding after the text moves too, unread)."""
    moved = positions.clone()
    for row, kinds in enumerate(types):
        for start in (torch.nonzero((kinds[1:] == 0) & (kinds[:-1] != 0)).flatten() + 1).tolist():
            moved[:, row, start:] += moved[:, row, :start].max() + 1 - moved[0, row, start]
    return moved


def qwen_positions(model, inputs: dict) -> torch.Tensor:
    """Position ids (3, B, L) of a Qwen2-VL / Qwen2.5-VL model's encoded `inputs` (a batch, padded or not), by
    Qwen's rule: what scoring uses (`prefix_positions`) and what the demo trains with."""
    types = inputs.get("mm_token_type_ids")
    if types is None:
        types = _mm_token_types(model, inputs["input_ids"])
    extra = {k: inputs[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts", "attention_mask")
             if inputs.get(k) is not None}
    positions = rope_index(model, inputs["input_ids"], types, **extra)
    return text_after_vision_at_qwens_start(positions, types)


def prefix_positions(family: Family, model, inputs: dict) -> tuple[torch.Tensor, int]:
    """Position ids of a prefix (batch 1) and the position of the first text token after it.

    mrope: Qwen's positions (`qwen_positions`) of the prefix plus one probe text token; the probe's position is where
    every question's tail starts. Others: 0 .. P-1, then P."""
    input_ids = inputs["input_ids"]
    length = input_ids.shape[1]
    if not family.mrope:
        return torch.arange(length, device=input_ids.device)[None], length
    types = inputs.get("mm_token_type_ids")
    if types is None:
        types = _mm_token_types(model, input_ids)
    probe = {k: inputs[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in inputs}
    probe |= {"input_ids": torch.cat([input_ids, input_ids[:, -1:]], dim=1),
              "mm_token_type_ids": torch.cat([types, torch.zeros_like(types[:, :1])], dim=1)}
    positions = qwen_positions(model, probe)
    return positions[:, :, :length], int(positions[0, 0, length])
