"""What `visdep_vlm` and `visdep_llm` share on the lmms-eval side: model arguments, device and ranks, and
`loglikelihood` as the steps of `model_adapters.pipeline`: requests -> distinct questions -> `present` (what the
model is shown) -> `score` (the engine) through the durable store -> results in request order.

An adapter implements `load_model`, `present` and `score`; `score` is the one method that differs between engines
(this package's Hugging Face scoring core, `scoring.score_questions`, or another engine on the same presented
questions).

Once loaded, an adapter knows what it is: its score-changing arguments with defaults filled in
(`model_adapters.settings`), its checkpoint's identity (`model_adapters.identity`). It says so when asked
(`run_identity`: the evaluation hook writes it into `results["visdep"]["model"]` after the evaluation) and keys its
durable store on it (`model_identity`, `model_adapters.durable`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist
from accelerate import Accelerator
from lmms_eval.api.model import lmms
from loguru import logger

from lmms_eval_tasks.evaluation import SCORING_ARGUMENT, Evaluation, current, scoring_argument
from model_adapters import durable, identity, settings
from model_adapters.pipeline import (
    Batches,
    DistinctQuestion,
    Presented,
    Scores,
    group_requests,
    in_request_order,
    question_keys,
    scored_through_store,
)
from model_adapters.scoring import ScoringError

# `from_pretrained` keywords passed through from --model_args (anything else is an error).
MODEL_KEYWORDS = frozenset({"revision", "trust_remote_code", "gguf_file", "cache_dir", "local_files_only",
                            "subfolder", "token", "use_safetensors", "variant", "low_cpu_mem_usage",
                            "offload_folder"})
# ... of those, the ones the tokenizer / processor takes too.
PROCESSOR_KEYWORDS = frozenset({"revision", "trust_remote_code", "gguf_file", "cache_dir", "local_files_only",
                                "subfolder", "token"})
DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def batch_size_of(adapter: str, batch_size: int | str, max_batch_size: int | None) -> int:
    """--batch_size as a positive integer; lmms-eval's batch_size=auto (which it passes as max_batch_size) refused."""
    if max_batch_size is not None:
        raise ValueError(f"{adapter}: max_batch_size (batch_size=auto) is not supported; give batch_size=N")
    try:
        size = int(batch_size)
    except ValueError:
        raise ValueError(f"{adapter}: batch_size must be an integer, got {batch_size!r}") from None
    if size < 1:
        raise ValueError(f"{adapter}: batch_size must be >= 1, got {batch_size!r}")
    return size


def check_scoring(adapter: str, scoring: str | None) -> None:
    """A model's `scoring=` argument: the evaluation that builds the model sets its scoring mode from it (the tasks'
    choices follow it, `evaluation_hooks`); a model built inside an evaluation of the other mode is refused."""
    if scoring is None:
        return
    mode, evaluation = scoring_argument(scoring), current().scoring_mode()
    if mode != evaluation:
        raise ValueError(f"{adapter}: model_args {SCORING_ARGUMENT}={mode}, but the evaluation it is built in scores "
                         f"{evaluation} (lmms-eval sets the mode from the model's arguments when it starts)")


class ScoringAdapter(lmms):
    """Base of the visdep adapters: loglikelihood only (`is_simple`), exact, shared-prefix scoring."""

    is_simple = True
    adapter_name = "visdep"
    own_arguments: tuple[str, ...] = ()  # adapter-specific model_args, named in errors
    # the evaluation this model scores for: handed over by the one that built it (`evaluation_hooks`); None for a
    # model built outside lmms-eval's runner, which scores for the current one
    evaluation: Evaluation | None = None

    def __init__(self, pretrained: str, dtype: str = settings.DEFAULT_DTYPE, device: str | None = None,
                 device_map: str | None = None, batch_size: int | str = 1, attn_implementation: str | None = None,
                 max_batch_size: int | None = None, scoring: str | None = None, **from_pretrained_kwargs) -> None:
        super().__init__()
        unknown = sorted(set(from_pretrained_kwargs) - MODEL_KEYWORDS)
        if unknown:
            raise ValueError(f"{self.adapter_name}: unknown model_args {unknown}; accepted: pretrained, dtype, device, "
                             f"device_map, batch_size, attn_implementation, {SCORING_ARGUMENT}, "
                             f"{', '.join(self.own_arguments)}{', ' if self.own_arguments else ''}"
                             f"{', '.join(sorted(MODEL_KEYWORDS))}")
        check_scoring(self.adapter_name, scoring)
        self.batch_size_per_device = batch_size_of(self.adapter_name, batch_size, max_batch_size)
        dtype = settings.canonical_value("dtype", dtype)
        if dtype not in DTYPES:
            raise ValueError(f"{self.adapter_name}: dtype {dtype!r} not one of {', '.join(DTYPES)}")
        self.pretrained = str(pretrained)
        self.given_arguments = {"dtype": dtype, **from_pretrained_kwargs}
        self.accelerator = Accelerator()  # lmms-eval's evaluator uses it for its collectives
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # Data parallel (torchrun, or accelerate launch on GPUs): a full model per rank on the rank's
            # own device. On CPU, accelerate reports one process even under torchrun: ask torch.distributed.
            if device_map:
                raise ValueError(f"{self.adapter_name}: device_map cannot be combined with several processes")
            self._rank, self._world_size = dist.get_rank(), dist.get_world_size()
            on_cpu = device == "cpu" or not torch.cuda.is_available()
            self._device = torch.device("cpu" if on_cpu else f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
        else:
            self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model_kwargs = dict(from_pretrained_kwargs, dtype=DTYPES[dtype])
        if attn_implementation:
            self.model_kwargs["attn_implementation"] = attn_implementation
        if device_map:
            self.model_kwargs["device_map"] = device_map
        self.processor_kwargs = {k: v for k, v in from_pretrained_kwargs.items() if k in PROCESSOR_KEYWORDS}
        # identified before and after loading: files that change meanwhile (a trainer saving into the folder) would
        # put values of one checkpoint under the other's key, so such a run stores nothing
        before = self.checkpoint_identity(loaded=False)
        self._model = self.load_model()
        if device_map:
            self._device = next(self._model.parameters()).device
        else:
            self._model.to(self._device)
        self._model.eval()
        self.run_settings = settings.score_settings(self.adapter_name, self.score_settings())
        self.checkpoint = self.checkpoint_identity()
        self.checkpoint_settled = self.checkpoint_identity(loaded=False) == before
        if not self.checkpoint_settled:
            logger.warning(f"{self.adapter_name}: the files of {self.pretrained} changed while it was loaded; this "
                           "run neither reads nor writes the durable store")
        logger.info(f"{self.adapter_name}: {type(self._model).__name__} from {self.pretrained} on {self._device} "
                    f"(rank {self.rank}/{self.world_size}, batch_size {self.batch_size_per_device})")

    def load_model(self):
        raise NotImplementedError

    def present(self, questions: Sequence[DistinctQuestion]) -> list[Presented]:
        """What the model is shown of each question (`pipeline.Presented`), whatever the engine."""
        raise NotImplementedError

    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        """The engine: (loss, is_greedy) per option of every question, in the order given, in batches of its own
        that it reports through `batches` (`pipeline.Batches`); None for a batch `batches.skip` said to skip."""
        raise NotImplementedError

    # lmms-eval reads these
    @property
    def model(self):
        return self._model

    @property
    def device(self):
        return self._device

    @property
    def batch_size(self) -> int:
        return self.batch_size_per_device

    def __repr__(self) -> str:  # keys lmms-eval's response cache
        return f"{type(self).__name__}(pretrained={self.pretrained!r})"

    def score_settings(self) -> dict:
        """The model_args this adapter was given (adapters add their own), before `settings.score_settings` keeps
        those that change a score, fills in the defaults and writes each value one way (`self.run_settings`)."""
        return dict(self.given_arguments)

    def checkpoint_identity(self, loaded: bool = True) -> dict[str, str]:
        """{"identity", "source"} of the checkpoint (`identity.checkpoint_identity`); `loaded`: with the commit the
        loaded config names (False: from the files alone, as before loading)."""
        kwargs = self.model_kwargs
        filename = kwargs.get("gguf_file") or "config.json"
        commit = getattr(self._model.config, "_commit_hash", None) if loaded else None
        return identity.checkpoint_identity(
            self.pretrained, commit=commit, revision=kwargs.get("revision"),
            filename=f"{kwargs['subfolder']}/{filename}" if kwargs.get("subfolder") else filename,
            cache_dir=kwargs.get("cache_dir"))

    def run_identity(self) -> dict:
        """What the run's model was (JSON data), for `results["visdep"]["model"]`."""
        return {"adapter": self.adapter_name, "pretrained": self.pretrained, "settings": self.run_settings,
                "checkpoint": self.checkpoint, "code": identity.code_identity(), **identity.library_versions()}

    def model_identity(self) -> dict:
        """Everything besides the question that changes a value: the durable store's model key. The dtype loaded,
        the device type, the attention kernel and the libraries' versions change float rounding (decoders: pixels),
        which a resumed run must not mix."""
        return {"adapter": self.adapter_name, "settings": self.run_settings, "checkpoint": self.checkpoint["identity"],
                "code": identity.code_identity(), "dtype": str(self._model.dtype), "device": self._device.type,
                "attention": getattr(self._model.config, "_attn_implementation", None),
                "loaded": identity.loaded_code(self._model), **identity.library_versions()}

    def loglikelihood(self, requests) -> list[tuple[float, bool, str]]:
        """(-sum log p(continuation | context), is_greedy, the string scored) per request, in input order.

        The string scored is the continuation as the model saw it after the adapter's prompt (" A" after a base
        model's "Answer:"); the tasks write it into each sample's `visdep` record. It rides as a third element
        rather than beside lmms-eval's (loss, is_greedy) pair so that it reaches `process_results` with its value
        on any rank and thread, and because lmms-eval's response cache keeps only two-element loglikelihood
        responses: it never answers for a visdep adapter, so no value keyed on the `--model_args` text alone is
        reused (docs/adapters.md). With lmms-eval's `--use_cache`, questions already in the durable store are not
        scored again, and each batch scored is added to it before the next one starts (`model_adapters.pipeline`)."""
        grouped = group_requests(requests, self.task_dict)
        presented = self.present(grouped.questions)
        root = (self.evaluation or current()).store_root if self.checkpoint_settled else None
        keys = question_keys(presented) if root is not None else []
        store = durable.ScoreStore.open(self.model_identity(), self.rank, {"pretrained": self.pretrained,
                                                                           "checkpoint": self.checkpoint["source"]},
                                        keys=keys, root=root)
        try:
            values, from_store = scored_through_store(self.score, presented, store, keys)
            if store is not None:
                reused = sum(from_store[q] for q in grouped.documents)
                durable.log_reuse(self.adapter_name, self.rank, reused, len(grouped.documents), store)
        finally:
            if store is not None:
                store.close()
        self.after_scoring(len(from_store) - sum(from_store))
        return in_request_order(grouped, values)

    def after_scoring(self, n_questions: int) -> None:
        """Hook for a summary log line."""

    def generate_until(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")

    def generate_until_multi_round(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")


ANSWER_CUE = "\nAnswer:"


def answer_strings(prompt: str, continuations: Sequence[str]) -> list[str]:
    """The strings scored after `prompt`: each continuation with a leading space where the prompt does not end
    in whitespace (a base model's "...\nAnswer:", or a chat template whose generation prompt ends in
    "Assistant:"), as lm-evaluation-harness scores base models on MMLU (" A", not "A")."""
    if not prompt or prompt[-1].isspace():
        return list(continuations)
    return [c if c[:1].isspace() else " " + c for c in continuations]


def continuation_tokens(tokenizer, prompt: str, continuations: Sequence[str], add_special_tokens: bool, qid: str,
                        ) -> tuple[list[int], list[list[int]]]:
    """Context tokens and each continuation's tokens: tok(prompt + c) minus the first len(tok(prompt)).

    Tokenising jointly keeps merges inside the continuation as the model would see them (lm-eval's rule).
    The rule needs tok(prompt + c) to start with tok(prompt); a tokenizer that merges across the boundary
    would make the shared context differ from what the model sees for that option, so that is an error."""
    encoded = tokenizer([prompt] + [prompt + c for c in continuations],
                        add_special_tokens=add_special_tokens)["input_ids"]
    context = list(encoded[0])
    for c, ids in zip(continuations, encoded[1:], strict=True):
        if list(ids[:len(context)]) != context:
            raise ScoringError(f"question {qid}: the tokenizer merges the end of the prompt {prompt[-20:]!r} with the "
                               f"option {c!r}; the option's tokens cannot be separated from the context")
    return context, [list(ids[len(context):]) for ids in encoded[1:]]
