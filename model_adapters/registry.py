"""The visdep models lmms-eval can run, each an engine behind the one engine-neutral adapter: one line per model.

Also the entry point of the `lmms_eval.models` group. lmms-eval loads every entry point of the group inside one
try-block (a failure here could skip the task-discovery entry point too), so this module and the engine modules it
names import nothing heavy: the model classes are built when lmms-eval asks for one (`model_adapters.adapter`), and
the audit reads the engines' specs (`score_settings`) without torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache

from model_adapters import settings

# lmms-eval's model name: (its class in `model_adapters.adapter`, its engine as "module:class")
ADAPTERS: dict[str, tuple[str, str]] = {
    "visdep_vlm": ("VisdepVLM", "model_adapters.engines.hf:VisionEngine"),
    "visdep_llm": ("VisdepLLM", "model_adapters.engines.hf:TextEngine"),
    "visdep_vllm": ("VisdepVLLM", "model_adapters.engines.vllm:VLLMEngine"),
    "visdep_server": ("VisdepServer", "model_adapters.engines.server:ServerEngine"),
}
MODELS = {name: f"model_adapters.adapter.{class_name}" for name, (class_name, _) in ADAPTERS.items()}


@cache
def engine_class(adapter: str) -> type:
    """The engine class of a visdep model (`model_adapters.engines.Engine`)."""
    module, name = ADAPTERS[adapter][1].split(":")
    return getattr(importlib.import_module(module), name)


def spec(adapter: str) -> tuple[settings.Argument, ...]:
    """The arguments of a visdep model: its engine's and the batch arguments every adapter reads."""
    return (*engine_class(adapter).arguments, *settings.BATCH_ARGUMENTS)


@cache
def not_score_changing() -> frozenset[str]:
    """The arguments of any visdep model that change no score (where and how fast a model runs, how its files are
    fetched): an older run's adapter that is gone is read with these."""
    return frozenset(a.name for adapter in ADAPTERS for a in spec(adapter) if not a.changes_scores)


def score_settings(adapter: str, model_args: Mapping[str, object]) -> dict[str, str]:
    """The score-changing settings of a run of `adapter` (`settings.settings_of`): its engine's spec decides which
    arguments change a score and fills in their defaults. An adapter visdep does not know gets no defaults (its
    arguments are taken as written, less those no visdep model counts). An argument outside the adapter's spec that
    some other visdep model counts as not changing scores (an older run's) is left out likewise."""
    if adapter not in ADAPTERS:
        return settings.settings_of({}, not_score_changing(), model_args)
    arguments = spec(adapter)
    defaults = {a.name: a.default for a in arguments if a.changes_scores and a.default is not None}
    changing = {a.name for a in arguments if a.changes_scores}
    return settings.settings_of(defaults, not_score_changing() - changing, model_args,
                                {a.name: a for a in arguments})


def manifests() -> list:
    from lmms_eval.models.registry_v2 import ModelManifest  # already imported by the caller

    return [ModelManifest(model_id=name, simple_class_path=path) for name, path in MODELS.items()]
