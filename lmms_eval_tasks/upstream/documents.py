"""An upstream task's documents, read with `datasets` as the task reads them, then its own `process_docs`.

Where the documents come from, first match:
- `data`: a local copy a user names (`visdep twin --data PATH`): a parquet, json, jsonl or csv file, a folder saved
  with `save_to_disk`, or a folder laid out as the task's hub dataset repository (read by `datasets.load_dataset`
  with the task's `dataset_name`, as the task would read the repository itself);
- the task's own local files: `dataset_path: json` (csv, parquet...) with `dataset_kwargs.data_files`;
- the hub dataset as the datasets cache of an earlier lmms-eval run holds it (offline: never a download).
Only `data_files`/`data_dir` of `dataset_kwargs` are passed on (`config.DATA_KWARGS`): `video: True` would download
the whole repository. The split is the task's `test_split` (else `validation_split`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.rows import SAVED_DATASET_MARKERS, SUFFIX_FORMATS
from lmms_eval_tasks.upstream.config import DATA_KWARGS, TwinRefused, UpstreamTask, offline

LOCAL_BUILDERS = ("json", "csv", "parquet", "arrow", "text", "pandas")


class UpstreamDataError(VisdepError):
    """An upstream task's documents cannot be read from where they were looked for; the message says where."""


@dataclass
class Documents:
    """The documents (`process_docs` applied, in the task's order) and where they were read."""

    docs: list[dict]
    origin: str
    split: str


def _cache_dir() -> str | None:
    from lmms_eval.api.task import _resolve_hf_datasets_cache_dir

    return _resolve_hf_datasets_cache_dir()


def _split(task: UpstreamTask) -> str:
    split = task.config.get("test_split") or task.config.get("validation_split")
    if not split:
        raise TwinRefused(task.name, "no test or validation split")
    return str(split)


def _load_local(path: Path, split: str, name: str | None):
    import datasets

    if path.is_dir() and any((path / marker).exists() for marker in SAVED_DATASET_MARKERS):
        return datasets.load_from_disk(str(path))
    if path.is_dir():  # a copy of the hub repository: its own README configs and file layout decide
        return datasets.load_dataset(str(path), name=name, cache_dir=_cache_dir())
    builder = SUFFIX_FORMATS.get(path.suffix.lower())
    if builder is None:
        raise UpstreamDataError(f"{path}: cannot tell the format from the suffix {path.suffix!r}; expected one of "
                                f"{', '.join(SUFFIX_FORMATS)}, a folder saved with save_to_disk, or a copy of the "
                                f"dataset's repository")
    builder = "json" if builder == "jsonl" else builder
    return datasets.load_dataset(builder, data_files={split: str(path)}, cache_dir=_cache_dir())


def _load(task: UpstreamTask, data: Path | None, split: str) -> tuple[Any, str]:
    """(a Dataset or DatasetDict, where it was read)."""
    import datasets

    config = task.config
    repo, name = config.get("dataset_path"), config.get("dataset_name")
    kwargs = {k: v for k, v in (config.get("dataset_kwargs") or {}).items() if k in DATA_KWARGS}
    if data is not None:
        if not data.exists():
            raise UpstreamDataError(f"{data}: not found (the local copy of {task.name}'s documents)")
        return _load_local(data, split, name), str(data)
    if repo in LOCAL_BUILDERS and kwargs.get("data_files"):
        return datasets.load_dataset(repo, name=name, cache_dir=_cache_dir(), **kwargs), f"{kwargs['data_files']}"
    if repo and Path(os.path.expanduser(str(repo))).exists():
        return _load_local(Path(os.path.expanduser(str(repo))), split, name), str(repo)
    try:
        with offline():
            return (datasets.load_dataset(repo, name=name, cache_dir=_cache_dir(), **kwargs),
                    f"{repo} (the datasets cache)")
    except Exception as e:  # noqa: BLE001 - not cached, gated, renamed: say what to give instead
        raise UpstreamDataError(
            f"{task.name}: its documents are the hub dataset {repo}"
            + (f" ({name})" if name else "")
            + f", not in the datasets cache here ({type(e).__name__}); give a local copy with --data PATH "
              f"(a parquet/json/jsonl/csv file of split {split!r}, a save_to_disk folder, or the repository's "
              f"files)") from None


def _pick_split(loaded, split: str, where: str):
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        if split in loaded:
            return loaded[split]
        if len(loaded) == 1:  # one file given for the task's split
            return next(iter(loaded.values()))
        raise UpstreamDataError(f"{where}: no split {split!r} (it has {', '.join(loaded)})")
    return loaded


def json_value(value: Any) -> Any:
    """A document's value as JSON data (NaN as None; a value JSON cannot hold, such as an image, as None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        json.dumps(value)
    except TypeError:
        return None
    return value


def read_documents(task: UpstreamTask, data: str | Path | None = None) -> Documents:
    """The task's documents after its `process_docs`, each as JSON data, in the order the task iterates them."""
    split = _split(task)
    loaded, origin = _load(task, None if data is None else Path(data).expanduser(), split)
    dataset = _pick_split(loaded, split, origin)
    process_docs = task.config.get("process_docs")
    if callable(process_docs):
        try:
            with offline():
                dataset = process_docs(dataset)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - upstream code
            raise UpstreamDataError(f"{task.name}: its process_docs fails on {origin} "
                                    f"({type(e).__name__}: {str(e)[:200]})") from None
    docs = dataset.to_list() if hasattr(dataset, "to_list") else [dict(d) for d in dataset]
    return Documents([json_value(d) for d in docs], origin, split)
