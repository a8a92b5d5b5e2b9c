"""The Hugging Face engine: transformers' checkpoints scored by visdep's own core (`model_adapters.scoring`).

`visdep_llm` (`TextEngine`): any causal LM (Llama 3.1, Mistral, Qwen2.5, DeepSeek, GGUF files), text only.
`visdep_vlm` (`VisionEngine`): the vision-language families `model_adapters.families` knows (Qwen2-VL, Qwen2.5-VL,
HF-native InternVL, LLaVA-OneVision). A video question's prompt is cut after the family's video marker; the part
before it (system turn, user header, frames) is the prefix that video's questions share, run once. The frames reach
the processor with their timing (`video_metadata`: source fps, total frames, sampled indices) and are not sampled
again there; frame folders (MM-AU) are timed at `frame_folder_fps` (default 30, see `model_adapters.frames`).

While the model scores one video's questions, `decode_workers` threads (default: one per core but one, at most 16;
0: decode in the scoring loop) decode the next videos and run the processor on them (`model_adapters.prefetch`), at
most `prefetch_videos` videos (default twice the workers) and `prefetch_mb` MiB of processed frames (default 768)
ahead. The scores are the same whatever these are.

Data parallel: under torchrun or `accelerate launch`, one full model per rank on the rank's own device; `device_map`
spreads one model over devices instead. torch and transformers are imported when an engine is made, not with this
module (the registry reads its spec).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Sequence
from functools import partial

from lmms_eval_tasks.errors import VisdepError
from model_adapters import identity
from model_adapters.engines import Engine, Loaded
from model_adapters.pipeline import Batches, Presented, Scores, ScoringError
from model_adapters.presentation import TokenizerTemplates
from model_adapters.settings import DTYPE_ARGUMENT, FRAME_ARGUMENTS, Argument

# `from_pretrained` keywords passed through from --model_args
LOADER_ARGUMENTS = (Argument("revision"), Argument("trust_remote_code", bool), Argument("gguf_file"),
                    Argument("subfolder"), Argument("use_safetensors", bool), Argument("variant"),
                    Argument("cache_dir", changes_scores=False),
                    Argument("local_files_only", bool, changes_scores=False), Argument("token", changes_scores=False),
                    Argument("low_cpu_mem_usage", bool, changes_scores=False),
                    Argument("offload_folder", changes_scores=False))
# ... of those, the ones the tokenizer / processor takes too
PROCESSOR_KEYWORDS = frozenset({"revision", "trust_remote_code", "gguf_file", "cache_dir", "local_files_only",
                                "subfolder", "token"})
# where the model runs (attention kernels and devices change float rounding only: in the durable store's key)
PLACEMENT_ARGUMENTS = (Argument("device", changes_scores=False), Argument("device_map", changes_scores=False),
                       Argument("attn_implementation", changes_scores=False))
PREFETCH_ARGUMENTS = (Argument("decode_workers", changes_scores=False),
                      Argument("prefetch_videos", changes_scores=False),
                      Argument("prefetch_mb", float, changes_scores=False))


class HFEngine(Engine):
    """What the text and vision engines share: arguments, ranks and device, loading, identity, the scoring core."""

    arguments = (Argument("pretrained"), DTYPE_ARGUMENT, *PLACEMENT_ARGUMENTS, *LOADER_ARGUMENTS)

    def __init__(self, adapter: str, arguments) -> None:
        super().__init__(adapter, arguments)
        import torch
        import torch.distributed as dist

        a = self.arguments
        if not a["pretrained"]:
            raise VisdepError(f"{adapter}: model_args pretrained=<checkpoint folder or hub id> is required")
        self.pretrained = str(a["pretrained"])
        loader = {arg.name: a[arg.name] for arg in LOADER_ARGUMENTS if a[arg.name] is not None}
        device, device_map = a["device"], a["device_map"]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # Data parallel (torchrun, or accelerate launch on GPUs): a full model per rank on the rank's own device.
            # On CPU, accelerate reports one process even under torchrun: ask torch.distributed.
            if device_map:
                raise VisdepError(f"{adapter}: device_map cannot be combined with several processes")
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            on_cpu = device == "cpu" or not torch.cuda.is_available()
            self._device = torch.device("cpu" if on_cpu else f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
        else:
            self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtypes = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        self.model_kwargs = dict(loader, dtype=dtypes[a["dtype"]])
        if a["attn_implementation"]:
            self.model_kwargs["attn_implementation"] = a["attn_implementation"]
        if device_map:
            self.model_kwargs["device_map"] = device_map
        self.processor_kwargs = {k: v for k, v in loader.items() if k in PROCESSOR_KEYWORDS}
        self._model = None

    def load_model(self):
        raise NotImplementedError

    def load(self) -> Loaded:
        self._model = self.load_model()
        if self.arguments["device_map"]:
            self._device = next(self._model.parameters()).device
        else:
            self._model.to(self._device)
        self._model.eval()
        return Loaded(self.pretrained, self.templates,
                      f"{type(self._model).__name__} from {self.pretrained} on {self._device}")

    @property
    def model(self):
        return self._model

    @property
    def device(self):
        return self._device

    def checkpoint(self, loaded: bool) -> dict[str, str]:
        """`identity.checkpoint_identity`; after loading, with the commit the loaded config names."""
        kwargs = self.model_kwargs
        filename = kwargs.get("gguf_file") or "config.json"
        commit = getattr(self._model.config, "_commit_hash", None) if loaded and self._model is not None else None
        return identity.checkpoint_identity(
            self.pretrained, commit=commit, revision=kwargs.get("revision"),
            filename=f"{kwargs['subfolder']}/{filename}" if kwargs.get("subfolder") else filename,
            cache_dir=kwargs.get("cache_dir"))

    def store_key(self) -> dict:
        """The dtype loaded, the device type, the attention kernel and the class loaded change float rounding
        (decoders: pixels), which a resumed run must not mix."""
        return {"dtype": str(self._model.dtype), "device": self._device.type,
                "attention": getattr(self._model.config, "_attn_implementation", None),
                "loaded": identity.loaded_code(self._model)}

    def questions(self, questions: Sequence[Presented]) -> list:
        from model_adapters.scoring import Question

        return [Question(q.qid, None, list(q.context), [list(o) for o in q.options]) for q in questions]

    def score(self, questions: Sequence[Presented], batches: Batches, batch_size: int) -> list[Scores | None]:
        from model_adapters.scoring import score_questions

        return score_questions(self._model, self.questions(questions), batch_size, self._device,
                               progress=self.rank == 0, on_scored=batches.scored, done=batches.skip)


class TextEngine(HFEngine):
    """`visdep_llm`: a causal LM, text only."""

    frames = None

    def load_model(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained, **self.processor_kwargs)
        self.templates = TokenizerTemplates(self.tokenizer)
        return AutoModelForCausalLM.from_pretrained(self.pretrained, **self.model_kwargs)


class VisionEngine(HFEngine):
    """`visdep_vlm`: a vision-language model, each video's prefix run once for its questions."""

    arguments = (*HFEngine.arguments, *FRAME_ARGUMENTS, *PREFETCH_ARGUMENTS)

    def __init__(self, adapter: str, arguments) -> None:
        super().__init__(adapter, arguments)
        from model_adapters.frames import frame_source
        from model_adapters.prefetch import DEFAULT_PREFETCH_MB, Prefetch, decoder_threads_for

        a = self.arguments
        try:
            self.prefetch = Prefetch.of(a["decode_workers"], a["prefetch_videos"],
                                        DEFAULT_PREFETCH_MB if a["prefetch_mb"] is None else a["prefetch_mb"])
        except ValueError as e:
            raise VisdepError(f"{adapter}: {e}") from None
        # FFmpeg's decoder threads return the same frames whatever their number (tests/adapters/test_frames.py)
        self.frames = frame_source(adapter, a["max_frames"], a["frame_folder_fps"], a["frames"], a["frame_order"],
                                   decoder_threads=decoder_threads_for(self.prefetch.workers))
        self._thread_processors = threading.local()

    def load_model(self):
        from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

        from model_adapters.families import family_of

        # an unsupported family fails before any weight is read
        self.family = family_of(AutoConfig.from_pretrained(self.pretrained, **self.processor_kwargs), self.adapter)
        self.processor = AutoProcessor.from_pretrained(self.pretrained, **self.processor_kwargs)
        self._owner_thread = threading.get_ident()
        self.tokenizer = self.processor.tokenizer
        self.templates = TokenizerTemplates(self.processor)
        return AutoModelForImageTextToText.from_pretrained(self.pretrained, **self.model_kwargs)

    def _processor_here(self):
        """The processor for the calling thread: the engine's own on the thread that built it, a copy on each worker
        thread (a tokenizer is not safe to call from several threads at once)."""
        if threading.get_ident() == self._owner_thread:
            return self.processor
        local = self._thread_processors
        if getattr(local, "processor", None) is None:
            local.processor = copy.deepcopy(self.processor)
        return local.processor

    def _prepare_prefix(self, video: str, prefix_text: str):
        """The CPU part of a video prefix, on any thread: the video decoded and sampled (cached), the processor's
        encoding of the prompt up to the end of the video (tensors on the host)."""
        frames, metadata = self.frames(video)
        return self._processor_here()(text=[prefix_text], videos=[frames], video_metadata=[metadata],
                                      do_sample_frames=False, return_tensors="pt", add_special_tokens=False)

    def _prefix_to_model(self, encoding) -> tuple[dict, int]:
        """The device part, on the model's thread: the encoding as model inputs with their position ids."""
        from model_adapters.families import prefix_positions

        inputs = on_device(encoding, self._device, self._model.dtype)
        positions, next_position = prefix_positions(self.family, self._model, inputs)
        inputs["position_ids"] = positions
        return inputs, next_position

    def questions(self, questions: Sequence[Presented]) -> list:
        """The scoring core's questions: a video question's prompt cut after the family's video marker, the part
        before it the prefix shared by that video's questions."""
        from model_adapters.scoring import Prefix, Question

        out = []
        for q in questions:
            context, prefix, tail = list(q.context), None, list(q.context)
            if q.video is not None:
                end = q.prompt.rfind(self.family.video_end)
                if end < 0:
                    raise ScoringError(f"{q.qid}: the chat template of {self.pretrained} did not place the video "
                                       f"marker {self.family.video_end!r} in {q.prompt!r}")
                prefix_text = q.prompt[: end + len(self.family.video_end)]
                prefix_ids = self.tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
                if context[: len(prefix_ids)] != prefix_ids:
                    raise ScoringError(f"{q.qid}: cutting the prompt after {self.family.video_end!r} changes its "
                                       "tokens; the video prefix cannot be shared")
                prefix = Prefix((q.video, prefix_text), partial(self._prepare_prefix, q.video, prefix_text),
                                self._prefix_to_model, self.prefetch)
                tail = context[len(prefix_ids):]
            out.append(Question(q.qid, prefix, tail, [list(o) for o in q.options]))
        return out


def on_device(encoding, device, dtype) -> dict:
    """A processor's output as model inputs: on `device`, the pixels (`pixel_values*`) in the model's dtype, every
    other tensor in its own: ids and grids int64, Qwen2.5-VL's `second_per_grid_ts` float32, the timing its
    temporal positions are computed from (in bf16 they would move by up to 15: docs/adapters.md)."""
    return {k: v.to(device, dtype=dtype if k.startswith("pixel_values") else None) for k, v in encoding.items()}
