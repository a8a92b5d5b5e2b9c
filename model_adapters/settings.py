"""The model arguments of `visdep_vlm` and `visdep_llm` that change a score, their defaults and their canonical text.

One definition for the adapters (which take the arguments) and for the audit (which tells runs apart by them), so
that a run with default arguments and one that writes a default out (`max_frames=16`, `dtype=auto`) are one model.
It imports nothing heavy: the audit reads it without torch.
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_MAX_FRAMES = 16
# MM-AU's frame folders carry no frame rate: 30 fps, the rate the dataset authors' own code uses for them
# (model_adapters.frames explains where it comes from).
DEFAULT_FRAME_FOLDER_FPS = 30.0
DEFAULT_DTYPE = "auto"
# The temporal ladder's conditions (docs/ladder.md): which frames are shown and in what order.
UNIFORM_FRAMES, MIDDLE_FRAME = "uniform", "middle"
FRAME_SAMPLINGS = (UNIFORM_FRAMES, MIDDLE_FRAME)
ORIGINAL_ORDER = "original"
FRAME_ORDERS = (ORIGINAL_ORDER, "shuffled", "reversed")
LADDER_SETTINGS = ("max_frames", "frames", "frame_order")  # what the rungs of one checkpoint's ladder differ in


def condition_of(settings: Mapping[str, str]) -> str:
    """Which rung of the temporal ladder a model's settings are: "single" (`frames=middle`), "shuffled" or "reversed"
    (`frame_order`), or "video" (the frames as sampled, and any model without frames)."""
    if settings.get("frames") == MIDDLE_FRAME:
        return "single"
    order = settings.get("frame_order", ORIGINAL_ORDER)
    return "video" if order == ORIGINAL_ORDER else str(order)


_VIDEO_DEFAULTS = {"dtype": DEFAULT_DTYPE, "max_frames": DEFAULT_MAX_FRAMES,
                   "frame_folder_fps": DEFAULT_FRAME_FOLDER_FPS, "frames": UNIFORM_FRAMES,
                   "frame_order": ORIGINAL_ORDER}

# Score-changing arguments each adapter fills in when they are not given.
ADAPTER_DEFAULTS: dict[str, dict[str, object]] = {
    "visdep_vlm": _VIDEO_DEFAULTS,
    "visdep_llm": {"dtype": DEFAULT_DTYPE},
    "visdep_vllm": _VIDEO_DEFAULTS,
}

# model_args that decide where and how fast a model runs or how its files are fetched, not what it scores
# (attention kernels and devices change float rounding only). Runs that differ only in these are one model;
# every other model_arg (max_frames, frame_folder_fps, dtype, revision, subfolder, variant, gguf_file, ...,
# and any argument not listed here) tells runs apart.
NOT_SCORE_CHANGING = frozenset({
    "device", "device_map", "batch_size", "max_batch_size", "attn_implementation", "cache_dir",
    "local_files_only", "token", "low_cpu_mem_usage", "offload_folder",
    "decode_workers", "prefetch_videos", "prefetch_mb",
    # visdep_vllm's engine arguments (model_adapters.vllm_adapter.ENGINE_ARGUMENTS)
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enforce_eager",
    "distributed_executor_backend", "block_size",
})
# Yes/no loader arguments that choose what is loaded: `trust_remote_code` the modeling code (a folder's own class
# or transformers'), `use_safetensors` the weight file where a folder holds both. Written "true"/"false"; the
# loader's default (LOADER_DEFAULTS) is the same model as not giving the argument.
_BOOLEAN = frozenset({"trust_remote_code", "use_safetensors"})
LOADER_DEFAULTS = {"trust_remote_code": "false"}
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})

_INTEGER = frozenset({"max_frames"})
_REAL = frozenset({"frame_folder_fps"})
_LOWER = frozenset({"dtype", "frames", "frame_order"})


def canonical_value(name: str, value: object) -> str:
    """An argument's value as one text whatever way it was written: 16, "16" and "16.0" -> "16" for max_frames;
    30, "30.0" -> "30" for frame_folder_fps (the shortest form of the number); True, "True", "1" -> "true" for
    trust_remote_code and use_safetensors; anything else as str(), stripped."""
    text = str(value).strip()
    if name in _BOOLEAN and text.lower() in _TRUE | _FALSE:
        return "true" if text.lower() in _TRUE else "false"
    try:
        if name in _INTEGER:
            number = float(text)
            return str(int(number)) if number == int(number) else text
        if name in _REAL:
            return format(float(text), "g")
    except ValueError:
        return text
    return text.lower() if name in _LOWER else text


def score_settings(adapter: str, model_args: Mapping[str, object]) -> dict[str, str]:
    """The score-changing settings of a run besides its checkpoint, defaults filled in, values canonical:
    every model_arg but `pretrained` and NOT_SCORE_CHANGING, plus the adapter's defaults for those not given, less
    those set to the loader's default (`trust_remote_code=False`), and `max_frames` and `frame_order` where
    `frames=middle` (one frame whatever the budget, in any order).
    An adapter visdep does not know gets no defaults (its arguments are taken as written)."""
    settings = {name: canonical_value(name, value) for name, value in ADAPTER_DEFAULTS.get(adapter, {}).items()}
    settings |= {name: canonical_value(name, value) for name, value in model_args.items()
                 if name != "pretrained" and name not in NOT_SCORE_CHANGING}
    settings = {name: value for name, value in settings.items() if LOADER_DEFAULTS.get(name) != value}
    if settings.get("frames") == MIDDLE_FRAME:
        settings.pop("max_frames", None)
        settings.pop("frame_order", None)
    return dict(sorted(settings.items()))
