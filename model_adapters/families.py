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
clip over 1,000). `qwen_positions` computes Qwen's positions itself, transformers 4's float32 rounding of
the temporal positions included (`qwen_temporal_positions`), from the float32 `second_per_grid_ts`
whatever the model's dtype (docs/adapters.md).
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
    """Text 0, image 1, video 2: how Qwen's positions group the tokens (processors of transformers 5 return it too)."""
    types = torch.zeros_like(input_ids)
    types[input_ids == model.config.image_token_id] = 1
    types[input_ids == model.config.video_token_id] = 2
    return types


def qwen_temporal_positions(patches: int, seconds_per_patch: torch.Tensor | None,
                            tokens_per_second: float | None) -> torch.Tensor:
    """The temporal positions (int64) of a vision block's `patches` temporal patches before its offset: 0, 1, 2, ...
    for Qwen2-VL and images (`tokens_per_second` None); for a Qwen2.5-VL video, k * seconds_per_patch *
    tokens_per_second truncated, as the checkpoints' training code computes it (transformers 4's and qwen-vl-finetune's
    `get_rope_index`): the int64 range times the float32 seconds, then times tokens_per_second, both products rounded
    to float32. The seconds are refused in a narrower float (a bf16 `second_per_grid_ts` moves these positions by up
    to 15 on 16-frame clips: docs/adapters.md)."""
    index = torch.arange(patches)
    if tokens_per_second is None:
        return index
    if seconds_per_patch is None:  # transformers 4: a video without its timing counts one second per patch
        seconds_per_patch = torch.tensor(1.0)
    if seconds_per_patch.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"second_per_grid_ts in {seconds_per_patch.dtype}: the positions of a video need its "
                         "float32 timing (keep it out of the model's dtype)")
    return (index * seconds_per_patch.detach().to("cpu", torch.float32) * tokens_per_second).long()


def qwen_positions(model, inputs: dict) -> torch.Tensor:
    """Position ids (3, B, L) of a Qwen2-VL / Qwen2.5-VL model's encoded `inputs` (a batch, padded or not), by
    Qwen's rule (module docstring): what scoring uses (`prefix_positions`) and what the demo trains with.

    In each row (its unmasked tokens), a text token is one past the largest position before it, on all three
    axes; a vision block (its `*_grid_thw` taken in order over the rows) is at (temporal, row, column) of its merged
    grid (`qwen_temporal_positions`) plus one past the largest position before it. Masked tokens get 0."""
    config = model.config
    input_ids = inputs["input_ids"]
    types = inputs.get("mm_token_type_ids")
    if types is None:
        types = _mm_token_types(model, input_ids)
    merge = config.vision_config.spatial_merge_size
    tokens_per_second = (config.vision_config.tokens_per_second if config.model_type == "qwen2_5_vl" else None)
    grids = {kind: iter(inputs[key].tolist() if inputs.get(key) is not None else [])
             for kind, key in ((1, "image_grid_thw"), (2, "video_grid_thw"))}
    seconds = iter(inputs["second_per_grid_ts"]) if inputs.get("second_per_grid_ts") is not None else None
    mask = inputs.get("attention_mask")
    positions = torch.zeros(3, *input_ids.shape, dtype=torch.long)
    for row, kinds in enumerate(types.tolist()):
        keep = [True] * len(kinds) if mask is None else mask[row].bool().tolist()
        kept = [kind for kind, k in zip(kinds, keep, strict=True) if k]
        parts, start, i = [], 0, 0
        while i < len(kept):
            kind = kept[i]
            if kind == 0:
                n = next((j for j in range(i, len(kept)) if kept[j] != 0), len(kept)) - i
                part = torch.arange(n).expand(3, n) + start
            else:  # one image or video: its grid says how many tokens it has
                t, h, w = next(grids[kind])
                per_second = tokens_per_second if kind == 2 else None
                temporal = qwen_temporal_positions(t, None if seconds is None or kind == 1 else next(seconds),
                                                   per_second)
                grid = torch.meshgrid(temporal, torch.arange(h // merge), torch.arange(w // merge), indexing="ij")
                part = torch.stack(grid).reshape(3, -1) + start
                n = part.shape[1]
                if kept[i:i + n] != [kind] * n:
                    raise ValueError(f"row {row}: a vision block of grid {(t, h, w)} needs {n} tokens of type {kind}")
            parts.append(part)
            start, i = int(part.max()) + 1, i + n
        if parts:
            positions[:, row, torch.tensor(keep)] = torch.cat(parts, dim=1)
    return positions.to(input_ids.device)


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
