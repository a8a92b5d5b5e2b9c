"""What differs between the transformers releases visdep runs on, in one place (pyproject.toml: >=5.17,<5.40).

The range goes from 5.17 (what vLLM 0.32 to 0.34 allow: transformers<5.20, <5.21, <5.23; and what lent GPU machines
have) to the newest tested, 5.25. Everything else visdep calls is the same over it; found by running the adapters'
exactness, fidelity and positions tests under 5.17.0, 5.20.2 and 5.25.0 (`.ci/transformers-range`, docs/adapters.md):

- The key/value cache argument and output: models take `past_key_values=` and return `.past_key_values` up to
  5.23; from 5.24 on they take `cache=` and return `.cache`, and `past_key_values` is a deprecated alias (announced
  to go in 5.40). Told apart by the output class's fields, not by a version number, so a backport or a later
  release is read as it is.
- Qwen2.5-VL's video positions: 5.17's `get_rope_index` spaces a video's temporal patches by
  `tokens_per_second * int(second_per_grid_ts)`, the seconds per patch cut to whole seconds (16 frames of a 10 s
  clip: 1.25 s per patch, spaced 2 instead of 2.5); 5.18 on take the product unrounded. visdep never uses it:
  `families.qwen_positions` computes Qwen's rule itself (tests/adapters/test_positions.py pins its values), so this
  difference reaches no score.

What the range was checked for and found the same: the processors' `videos=`, `video_metadata=` and
`do_sample_frames=False`; `get_rope_index(input_ids, mm_token_type_ids=..., video_grid_thw=...,
second_per_grid_ts=...)` of Qwen2-VL / Qwen2.5-VL (tests/adapters/test_positions.py pins its values); the cache
layers' `batch_select_indices`.
"""

from __future__ import annotations

import dataclasses
from functools import cache


@cache
def cache_name() -> str:
    """The name of the key/value cache in this transformers' model arguments and outputs: `cache` (5.24 on) or
    `past_key_values` (before)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


def cache_argument(cache_object) -> dict:
    """The keyword argument that passes `cache_object` (a transformers Cache, or None) to a model's forward."""
    return {cache_name(): cache_object}


def cache_of(output):
    """The key/value cache a model's forward returned (`use_cache=True`)."""
    return getattr(output, cache_name())
