"""The one lmms-eval model class of visdep, whatever the engine: `visdep_vlm`, `visdep_llm`, `visdep_vllm` and the
others `model_adapters.registry` names are this class over their engines (`model_adapters.engines`).

    lmms-eval --model visdep_vlm --model_args pretrained=Qwen/Qwen2.5-VL-7B-Instruct,max_frames=16 \\
        --tasks visdep_blind,visdep_video --log_samples --output_path runs/

`loglikelihood` runs the steps of `model_adapters.pipeline`: requests -> distinct questions -> `present` (what the
model is shown, `model_adapters.presentation`) -> the engine's `score` through the durable store -> results in request
order. The adapter reads and checks the model_args against the engine's spec, and knows what it is once loaded: its
score-changing arguments with defaults filled in (`registry.score_settings`), the checkpoint's identity as the
engine reports it. It says so when asked (`run_identity`: the evaluation hook writes it into
`results["visdep"]["model"]` after the evaluation) and keys its durable store on it (`model_identity`).

The class of each model (`VisdepVLM`, ...) is made from the registry when first asked for (this module's
`__getattr__`): a new engine needs no class of its own here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from accelerate import Accelerator
from lmms_eval.api.model import lmms
from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.evaluation import SCORING_ARGUMENT, Evaluation, current, scoring_argument
from model_adapters import durable, identity, registry
from model_adapters.engines import Engine, read_arguments
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
from model_adapters.presentation import present_text, present_video


def batch_size_of(adapter: str, batch_size: object, max_batch_size: object) -> int:
    """--batch_size as a positive integer; lmms-eval's batch_size=auto (which it passes as max_batch_size) refused."""
    if max_batch_size is not None:
        raise VisdepError(f"{adapter}: max_batch_size (batch_size=auto) is not supported; give batch_size=N")
    try:
        size = int(str(batch_size))
    except ValueError:
        raise VisdepError(f"{adapter}: batch_size must be an integer, got {batch_size!r}") from None
    if size < 1:
        raise VisdepError(f"{adapter}: batch_size must be >= 1, got {batch_size!r}")
    return size


def check_scoring(adapter: str, scoring: object) -> None:
    """A model's `scoring=` argument: the evaluation that builds the model sets its scoring mode from it (the tasks'
    choices follow it, `evaluation_hooks`); a model built inside an evaluation of the other mode is refused."""
    if scoring is None:
        return
    mode, evaluation = scoring_argument(str(scoring)), current().scoring_mode()
    if mode != evaluation:
        raise VisdepError(f"{adapter}: model_args {SCORING_ARGUMENT}={mode}, but the evaluation it is built in scores "
                          f"{evaluation} (lmms-eval sets the mode from the model's arguments when it starts)")


class EngineAdapter(lmms):
    """A visdep model: loglikelihood only (`is_simple`), exact, over the engine `engine_path` names."""

    is_simple = True
    adapter_name = "visdep"
    # the evaluation this model scores for: handed over by the one that built it (`evaluation_hooks`); None for a
    # model built outside lmms-eval's runner, which scores for the current one
    evaluation: Evaluation | None = None

    def __init__(self, batch_size: object = None, max_batch_size: object = None, **model_args) -> None:
        super().__init__()
        name = self.adapter_name
        check_scoring(name, model_args.pop(SCORING_ARGUMENT, None))
        engine_class = registry.engine_class(name)
        self.batch_size_per_device = batch_size_of(name, engine_class.default_batch_size if batch_size is None
                                                   else batch_size, max_batch_size)
        self.engine: Engine = engine_class(name, read_arguments(name, engine_class.arguments, model_args,
                                                                own=("batch_size", SCORING_ARGUMENT)))
        # the engine's module read now, before any scoring (`identity.code_identity`)
        self.engine_source = inspect.getsourcefile(engine_class)
        identity.code_identity(self.engine_source)
        self.accelerator = Accelerator()  # lmms-eval's evaluator uses it for its collectives
        # identified before and after loading: files that change meanwhile (a trainer saving into the folder) would
        # put values of one checkpoint under the other's key, so such a run stores nothing
        before = self.engine.checkpoint(loaded=False)
        loaded = self.engine.load()
        self._rank, self._world_size = self.engine.rank, self.engine.world_size
        self.pretrained, self.templates = loaded.name, loaded.templates
        self.run_settings = registry.score_settings(name, model_args)
        self.checkpoint = self.engine.checkpoint(loaded=True)
        self.checkpoint_settled = self.engine.checkpoint(loaded=False) == before
        if not self.checkpoint_settled:
            logger.warning(f"{name}: the files of {self.pretrained} changed while it was loaded; this run neither "
                           "reads nor writes the durable store")
        logger.info(f"{name}: {loaded.description} (rank {self.rank}/{self.world_size}, batch_size "
                    f"{self.batch_size_per_device})")

    # lmms-eval reads these
    @property
    def model(self):
        return self.engine.model

    @property
    def device(self):
        return self.engine.device

    @property
    def frames(self):
        """The engine's `frames.FrameSource`; None for a text-only model."""
        return self.engine.frames

    @property
    def batch_size(self) -> int:
        return self.batch_size_per_device

    def __repr__(self) -> str:  # keys lmms-eval's response cache (which never answers for a visdep model)
        shown = "".join(f", {k}={v}" for k, v in self.run_settings.items())
        return f"{type(self).__name__}(pretrained={self.pretrained!r}{shown})"

    def present(self, questions: Sequence[DistinctQuestion]) -> list[Presented]:
        """What the model is shown of each question (`pipeline.Presented`), whatever the engine."""
        if self.frames is not None:
            return present_video(self.templates, questions, self.adapter_name)
        return present_text(self.templates, questions, self.adapter_name)

    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        return self.engine.score(questions, batches, self.batch_size_per_device)

    def run_identity(self) -> dict:
        """What the run's model was (JSON data), for `results["visdep"]["model"]`."""
        return {"adapter": self.adapter_name, "pretrained": self.pretrained, "settings": self.run_settings,
                "checkpoint": self.checkpoint, "code": identity.code_identity(self.engine_source),
                **identity.library_versions(),
                **self.engine.run_record()}

    def model_identity(self) -> dict:
        """Everything besides the question that changes a value: the durable store's model key. The engine adds what
        changes float rounding (the dtype run, the device, the attention kernel, an engine's version)."""
        return {"adapter": self.adapter_name, "settings": self.run_settings, "checkpoint": self.checkpoint["identity"],
                "code": identity.code_identity(self.engine_source), **identity.library_versions(),
                **self.engine.store_key()}

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
        scored = len(from_store) - sum(from_store)
        decodes = getattr(self.frames, "decodes", None)
        logger.info(f"{self.adapter_name} rank {self.rank}: {scored} questions scored"
                    + (f"; {len(decodes)} videos, {sum(decodes.values())} decodes" if decodes is not None else ""))
        return in_request_order(grouped, values)

    def generate_until(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")

    def generate_until_multi_round(self, requests):
        raise NotImplementedError(f"{self.adapter_name} scores options only (loglikelihood / multiple_choice tasks)")

    def __del__(self) -> None:
        engine = self.__dict__.get("engine")
        if engine is not None:
            engine.close()


def adapter_class(adapter: str) -> type[EngineAdapter]:
    """The lmms-eval model class of a registered visdep model (`registry.ADAPTERS`)."""
    class_name = registry.ADAPTERS[adapter][0]
    made = globals().get(class_name)
    if made is None:
        made = type(class_name, (EngineAdapter,), {"adapter_name": adapter, "__module__": __name__,
                                                   "__qualname__": class_name})
        globals()[class_name] = made
    return made


def __getattr__(name: str) -> type[EngineAdapter]:
    for adapter, (class_name, _) in registry.ADAPTERS.items():
        if class_name == name:
            return adapter_class(adapter)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
