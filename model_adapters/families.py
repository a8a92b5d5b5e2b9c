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
- `mrope`: Qwen2-VL / Qwen2.5-VL give vision tokens 3D rotary positions; text after the video
  continues at the position the model's own `get_rope_index` assigns to the next text token,
  which is not simply the prefix length. Other families count positions 0, 1, 2, ...
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def prefix_positions(family: Family, model, inputs: dict) -> tuple[torch.Tensor, int]:
    """Position ids of a prefix (batch 1) and the position of the first text token after it.

    mrope: `get_rope_index` on the prefix plus one probe text token; the probe's position is where
    every question's tail starts. Others: 0 .. P-1, then P."""
    input_ids = inputs["input_ids"]
    length = input_ids.shape[1]
    if not family.mrope:
        return torch.arange(length, device=input_ids.device)[None], length
    types = inputs.get("mm_token_type_ids")
    if types is None:
        types = _mm_token_types(model, input_ids)
    probe_ids = torch.cat([input_ids, input_ids[:, -1:]], dim=1)
    probe_types = torch.cat([types, torch.zeros_like(types[:, :1])], dim=1)
    extra = {k: inputs[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in inputs}
    positions, _ = model.model.get_rope_index(probe_ids, mm_token_type_ids=probe_types, **extra)
    return positions[:, :, :length], int(positions[0, 0, length])
