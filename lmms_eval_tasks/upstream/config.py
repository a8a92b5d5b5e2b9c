"""An upstream lmms-eval task's YAML, found and loaded the way lmms-eval does it.

lmms-eval's `TaskManager` finds a task's YAML by its name (the wheel's tasks, plus `include_path`); its
`load_yaml_config` loads it with every `include` merged and every `!function utils.f` resolved, which executes the
task folder's `utils.py`. That import is upstream code with side effects seen in lmms-eval 0.7.3: a KeyError on an
unset `HF_HOME`, `decord` or `soundfile` imported at the top, an API client built at import, a hub download at
import, `sys.exit`. `load_task` sets up what an import needs (HF_HOME; stand-ins for media decoders that are not
installed; the hub switched off) and turns every other failure into `TwinRefused` naming the task and what its import
did, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from lmms_eval_tasks.errors import VisdepError

DEFAULT_HF_HOME = "~/.cache/huggingface"
# Media decoders some utils.py import at the top (lmms-eval 0.7.3: decord in longvideobench, FALCONBench, sitebench;
# soundfile in xmod_bench). Reading questions and naming video paths decodes nothing: where one is not installed, a
# stand-in lets the import through and fails only if upstream code calls it.
MEDIA_MODULES = ("decord", "soundfile")
# The load_dataset arguments of a task's dataset_kwargs that say where its documents are; the others (video,
# cache_dir, token, force_download, create_link, From_YouTube...) drive lmms-eval's downloads, which a twin never
# triggers (`video: True` alone snapshot-downloads the whole dataset repository).
DATA_KWARGS = ("data_files", "data_dir")


class _Absent(types.ModuleType):
    """A stand-in for a media decoder that is not installed: every name in it fails when called, naming it."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        module = self.__name__

        def unavailable(*args, **kwargs):
            raise ImportError(f"{module} is not installed: the upstream task needs it to decode media")

        return unavailable


@contextlib.contextmanager
def media_stand_ins():
    """Stand-ins for the media decoders (MEDIA_MODULES) that are not installed, while an upstream utils.py loads."""
    added = [name for name in MEDIA_MODULES if name not in sys.modules and importlib.util.find_spec(name) is None]
    for name in added:
        sys.modules[name] = _Absent(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


class TwinRefused(VisdepError):
    """An upstream task visdep does not twin (or cannot load here); `reason` is the short text `--list` shows."""

    def __init__(self, task: str, reason: str, detail: str = ""):
        self.task, self.reason, self.detail = task, reason, detail
        super().__init__(f"{task}: refused: {reason}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class UpstreamTask:
    """One upstream task's resolved configuration (what `load_yaml_config` returned) and where it came from."""

    name: str
    yaml_path: Path
    config: dict[str, Any] = field(repr=False)

    @property
    def folder(self) -> str:
        """The task's folder under lmms-eval's tasks (the benchmark's directory), or the YAML's own folder."""
        return self.yaml_path.parent.name

    @property
    def yaml_sha256(self) -> str:
        return hashlib.sha256(self.yaml_path.read_bytes()).hexdigest()

    def specific_kwargs(self) -> dict[str, Any] | None:
        """`lmms_eval_specific_kwargs` as lmms-eval hands them to `doc_to_text` for a model with no entry of its
        own (api/task.py: the whole mapping updated with its `default`), pre and post prompts blanked: the twin
        keeps the question and its options, and each visdep task adds its own prompt."""
        given = self.config.get("lmms_eval_specific_kwargs")
        if given is None:
            return None
        kwargs = dict(given)
        if "default" in given:
            kwargs.update(given["default"])
        elif "dataset" in given:
            kwargs.update(given["dataset"])
        if isinstance(kwargs.get("default"), dict):  # some utils.py read the prompts from 'default' itself
            kwargs["default"] = _blank_prompts(kwargs["default"])
        return _blank_prompts(kwargs)


def _blank_prompts(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The prompts blanked, a mapping of prompts (one per question kind) blanked entry by entry."""
    out = dict(kwargs)
    for key in ("pre_prompt", "post_prompt"):
        value = out.get(key)
        out[key] = {k: "" for k in value} if isinstance(value, dict) else ""
    return out


class offline:
    """The hub switched off while upstream code runs: a twin downloads nothing (several utils.py download videos or
    files when one is not there). The libraries read HF_HUB_OFFLINE once, at import: their flags are set as well."""

    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    flags = (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
             ("datasets.config", "HF_DATASETS_OFFLINE"))

    def __enter__(self) -> None:
        self.saved = {n: os.environ.get(n) for n in self.names}
        os.environ.update({n: "1" for n in self.names})
        self.saved_flags = []
        for module_name, flag in self.flags:
            module = sys.modules.get(module_name)
            if module is not None and hasattr(module, flag):
                self.saved_flags.append((module, flag, getattr(module, flag)))
                setattr(module, flag, True)

    def __exit__(self, *exc) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for module, flag, value in self.saved_flags:
            setattr(module, flag, value)


def lmms_eval_version() -> str:
    return metadata.version("lmms_eval")


def tasks_root() -> Path:
    """The folder of the tasks the installed lmms-eval ships."""
    spec = importlib.util.find_spec("lmms_eval")
    return Path(spec.submodule_search_locations[0]) / "tasks"


@functools.lru_cache(maxsize=1)
def task_index() -> dict[str, dict]:
    """lmms-eval's own index of its tasks (name -> {'type', 'yaml_path'}), built once per process.

    Only what the installed lmms-eval ships: once lmms-eval's model registry has been imported in this process,
    visdep's entry point (`lmms_eval_tasks.discovery`) adds visdep's own task folder to every TaskManager, and its
    tasks are not upstream tasks (twinning `mmau_video` would audit visdep with itself)."""
    from lmms_eval.tasks import TaskManager
    from loguru import logger

    shipped = tasks_root().resolve()
    logger.disable("lmms_eval")  # its index logs one DEBUG line per YAML it cannot read as a task
    try:
        index = TaskManager().task_index
    finally:
        logger.enable("lmms_eval")
    own = {name: entry for name, entry in index.items()
           if isinstance(entry.get("yaml_path"), str) and Path(entry["yaml_path"]).resolve().is_relative_to(shipped)}
    for name, entry in index.items():  # a tag has no YAML of its own: keep it with its shipped members
        if entry.get("type") == "tag" and name not in own:
            members = [m for m in entry.get("task") or [] if m in own]
            if members:
                own[name] = {**entry, "task": members}
    return own


def find_yaml(task: str) -> Path:
    entry = task_index().get(task)
    if entry is None:
        raise VisdepError(f"{task}: not a task of lmms-eval {lmms_eval_version()} (`visdep twin --list` lists them)")
    if entry.get("type") != "task" or not isinstance(entry.get("yaml_path"), str):
        raise VisdepError(f"{task}: a {entry.get('type', 'group')} of lmms-eval, not one task; name its tasks")
    return Path(entry["yaml_path"])


def _import_failure(error: BaseException) -> str:
    """What an upstream import did, as the reason `--list` shows (one per kind of failure)."""
    cause = error
    while isinstance(cause, ImportError) and cause.__cause__ is not None:  # lmms-eval wraps the real failure
        cause = cause.__cause__
    if isinstance(cause, ModuleNotFoundError):
        return f"its utils.py imports {cause.name!r}, which is not installed"
    if isinstance(cause, SystemExit):
        return "its utils.py exits at import"
    return f"its utils.py fails at import ({type(cause).__name__})"


@functools.cache
def load_task(task: str) -> UpstreamTask:
    """The task's configuration with every `!function` resolved (its `utils.py` imported). Raises TwinRefused
    naming what the import did where it fails; VisdepError for a name that is no task."""
    path = find_yaml(task)
    os.environ.setdefault("HF_HOME", os.path.expanduser(DEFAULT_HF_HOME))  # utils.py files read it at import
    from lmms_eval.utils import load_yaml_config

    try:
        with offline(), media_stand_ins():
            config = load_yaml_config(str(path), mode="full")
    except (Exception, SystemExit) as e:  # noqa: BLE001 - upstream code: whatever it raises is a refusal
        raise TwinRefused(task, _import_failure(e), f"{type(e).__name__}: {e}"[:300]) from None
    return UpstreamTask(task, path, config)
