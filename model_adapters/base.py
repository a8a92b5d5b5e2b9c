"""What `visdep_vlm` and `visdep_llm` share on the lmms-eval side: model arguments, device and
ranks, and turning lmms-eval's loglikelihood requests into questions for the scoring core.

lmms-eval's `multiple_choice` sends the K options of a document as K requests with the same
context and visual; padding copies of data-parallel ranks repeat a real request. Requests are
grouped by (task, split, doc_id, context), each distinct continuation is scored once, and every
request gets the value of its own continuation, in input order.

Once loaded, an adapter knows what it is: its score-changing arguments with defaults filled in
(`model_adapters.settings`), its checkpoint's identity (`model_adapters.identity`). It tells the
evaluation hook (`record_model`, written into `results["visdep"]["model"]`) and keys its durable
store on them (`model_adapters.durable`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

import torch
import torch.distributed as dist
from accelerate import Accelerator
from lmms_eval.api.model import lmms
from loguru import logger

from lmms_eval_tasks.evaluation_hooks import record_model
from model_adapters import durable, identity, settings
from model_adapters.scoring import Question, ScoringError, score_questions

# `from_pretrained` keywords passed through from --model_args (anything else is an error).
MODEL_KEYWORDS = frozenset({"revision", "trust_remote_code", "gguf_file", "cache_dir", "local_files_only",
                            "subfolder", "token", "use_safetensors", "variant", "low_cpu_mem_usage",
                            "offload_folder"})
# ... of those, the ones the tokenizer / processor takes too.
PROCESSOR_KEYWORDS = frozenset({"revision", "trust_remote_code", "gguf_file", "cache_dir", "local_files_only",
                                "subfolder", "token"})
DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class QuestionRequest:
    """One document's prompt as lmms-eval asks for it, with its distinct continuations."""

    task: str
    doc_id: int
    context: str
    visuals: list
    qid: str
    continuations: list[str] = field(default_factory=list)  # as the task asked for them
    # set by build_questions: the templated text the options are scored after, and the strings scored after it
    prompt: str = ""
    scored: list[str] = field(default_factory=list)


class ScoringAdapter(lmms):
    """Base of the visdep adapters: loglikelihood only (`is_simple`), exact, shared-prefix scoring."""

    is_simple = True
    adapter_name = "visdep"
    own_arguments: tuple[str, ...] = ()  # adapter-specific model_args, named in errors

    def __init__(self, pretrained: str, dtype: str = settings.DEFAULT_DTYPE, device: str | None = None,
                 device_map: str | None = None, batch_size: int | str = 1, attn_implementation: str | None = None,
                 max_batch_size: int | None = None, **from_pretrained_kwargs) -> None:
        super().__init__()
        unknown = sorted(set(from_pretrained_kwargs) - MODEL_KEYWORDS)
        if unknown:
            raise ValueError(f"{self.adapter_name}: unknown model_args {unknown}; accepted: pretrained, dtype, device, "
                             f"device_map, batch_size, attn_implementation, {', '.join(self.own_arguments)}"
                             f"{', ' if self.own_arguments else ''}{', '.join(sorted(MODEL_KEYWORDS))}")
        if max_batch_size is not None:
            raise ValueError(f"{self.adapter_name}: max_batch_size (batch_size=auto) is not supported; "
                             "give batch_size=N")
        try:
            self.batch_size_per_device = int(batch_size)
        except ValueError:
            raise ValueError(f"{self.adapter_name}: batch_size must be an integer, got {batch_size!r}") from None
        if self.batch_size_per_device < 1:
            raise ValueError(f"{self.adapter_name}: batch_size must be >= 1, got {batch_size!r}")
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
        self._model = self.load_model()
        if device_map:
            self._device = next(self._model.parameters()).device
        else:
            self._model.to(self._device)
        self._model.eval()
        self.run_settings = settings.score_settings(self.adapter_name, self.score_settings())
        self.checkpoint = self.checkpoint_identity()
        record_model({"adapter": self.adapter_name, "pretrained": self.pretrained, "settings": self.run_settings,
                      "checkpoint": self.checkpoint, "code": identity.code_identity(), **library_versions()})
        logger.info(f"{self.adapter_name}: {type(self._model).__name__} from {self.pretrained} on {self._device} "
                    f"(rank {self.rank}/{self.world_size}, batch_size {self.batch_size_per_device})")

    def load_model(self):
        raise NotImplementedError

    def build_questions(self, requests: Sequence[QuestionRequest]) -> list[Question]:
        """Token sequences of the requests; sets each request's `scored` strings."""
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

    def checkpoint_identity(self) -> dict[str, str]:
        """{"identity", "source"} of the checkpoint loaded (`identity.checkpoint_identity`)."""
        kwargs = self.model_kwargs
        filename = kwargs.get("gguf_file") or "config.json"
        return identity.checkpoint_identity(
            self.pretrained, commit=getattr(self._model.config, "_commit_hash", None), revision=kwargs.get("revision"),
            filename=f"{kwargs['subfolder']}/{filename}" if kwargs.get("subfolder") else filename,
            cache_dir=kwargs.get("cache_dir"))

    def model_identity(self) -> dict:
        """Everything besides the question that changes a value: the durable store's model key. The dtype loaded,
        the device type, the attention kernel and the libraries' versions change float rounding (decoders: pixels),
        which a resumed run must not mix."""
        return {"adapter": self.adapter_name, "settings": self.run_settings, "checkpoint": self.checkpoint["identity"],
                "code": identity.code_identity(), "dtype": str(self._model.dtype), "device": self._device.type,
                "attention": getattr(self._model.config, "_attn_implementation", None), **library_versions()}

    def loglikelihood(self, requests) -> list[tuple[float, bool, str]]:
        """(-sum log p(continuation | context), is_greedy, the string scored) per request, in input order.

        The string scored is the continuation as the model saw it after the adapter's prompt (" A" after a base
        model's "Answer:"); the tasks write it into each sample's `visdep` record. With lmms-eval's
        `--use_cache`, questions already in the durable store are not scored again, and each batch scored is
        added to it before the next one starts (`model_adapters.durable`)."""
        by_key: dict[tuple, QuestionRequest] = {}
        targets: list[tuple[tuple, str]] = []
        for request in requests:
            context, continuation, doc_to_visual, doc_id, task, split = request.args
            key = (task, split, doc_id, context)
            if key not in by_key:
                doc = self.task_dict[task][split][doc_id]
                qid = f"{task} doc {doc_id}" + (f" ({doc['question_id']})" if "question_id" in doc else "")
                by_key[key] = QuestionRequest(task, doc_id, context, list(doc_to_visual(doc)), qid)
            if callable(continuation):  # `loglikelihood` tasks pass a function of the document
                continuation = continuation(self.task_dict[task][split][doc_id])
            if continuation not in by_key[key].continuations:
                by_key[key].continuations.append(continuation)
            targets.append((key, continuation))

        # One question per distinct (prompt, options, video): blind questions of different documents often
        # read the same, and score the same.
        distinct: dict[tuple, tuple] = {}
        representative = {key: distinct.setdefault((r.context, tuple(sorted(r.continuations)),
                                                    tuple(map(str, r.visuals))), key)
                          for key, r in by_key.items()}
        unique = list(distinct.values())

        # Every question is tokenised, stored or not, so that batches are formed as in an uninterrupted run;
        # a batch all of whose questions are stored is not scored (at most the batch in flight at a kill is
        # scored again).
        requests_unique = [by_key[key] for key in unique]
        questions = self.build_questions(requests_unique)
        store = durable.ScoreStore.open(self.model_identity(), self.rank, {"pretrained": self.pretrained,
                                                                           "checkpoint": self.checkpoint["source"]})
        try:
            store_keys = self._question_keys(requests_unique, questions) if store is not None else []
            stored = {i: found for i, key in enumerate(store_keys)
                      if (found := store.get(key)) is not None
                      and all(c in found for c in requests_unique[i].continuations)}

            def persist(indices: list[int], results: list) -> None:
                store.add({store_keys[i]: {c: (loss, greedy, requests_unique[i].scored[j])
                                           for j, (c, (loss, greedy)) in enumerate(zip(
                                               requests_unique[i].continuations, result, strict=True))}
                           for i, result in zip(indices, results, strict=True)})

            scored = score_questions(self._model, questions, self.batch_size_per_device, self._device,
                                     progress=self.rank == 0, on_scored=persist if store is not None else None,
                                     done=(lambda part: all(i in stored for i in part)) if stored else None)
            if store is not None:
                from_store = {unique[i] for i, result in enumerate(scored) if result is None}
                reused = sum(representative[key] in from_store for key in by_key)
                durable.log_reuse(self.adapter_name, self.rank, reused, len(by_key), store)
        finally:
            if store is not None:
                store.close()
        values: dict[tuple, dict[str, tuple]] = {}
        for i, (key, result) in enumerate(zip(unique, scored, strict=True)):
            r = by_key[key]
            if result is None:
                values[key] = {c: tuple(stored[i][c]) for c in r.continuations}
            else:
                values[key] = {c: (loss, greedy, r.scored[j]) for j, (c, (loss, greedy)) in
                               enumerate(zip(r.continuations, result, strict=True))}
        self.after_scoring(sum(result is not None for result in scored))
        return [values[representative[key]][continuation] for key, continuation in targets]

    def _question_keys(self, requests: Sequence[QuestionRequest], questions: Sequence[Question]) -> list[str]:
        """The durable store's key of each question (`durable.question_key`), from what `build_questions` built."""
        videos: dict[str, list] = {}
        keys = []
        for r, q in zip(requests, questions, strict=True):
            if not r.prompt:
                raise RuntimeError(f"{self.adapter_name}: build_questions did not record the prompt of {r.qid}; "
                                   "the durable store cannot key it")
            for v in map(str, r.visuals):
                if v not in videos:
                    videos[v] = identity.video_identity(v)
            keys.append(durable.question_key(r.prompt, r.continuations, r.scored, q.tail, q.continuations,
                                             [videos[str(v)] for v in r.visuals]))
        return keys

    def after_scoring(self, n_questions: int) -> None:
        """Hook for a summary log line."""

    def generate_until(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")

    def generate_until_multi_round(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")


ANSWER_CUE = "\nAnswer:"


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries that compute values: the model (transformers, torch), the frames (av, pillow)."""
    versions = {"torch": torch.__version__}  # with its build (+cu130, +cpu), which the package metadata leaves out
    for name in ("transformers", "av", "pillow"):
        try:
            versions[name] = _version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


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
