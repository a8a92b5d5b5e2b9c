"""An upstream task's documents, read with `datasets` as the task reads them, then its own `process_docs`.

Where the documents come from, first match:
- `data`: a local copy a user names (`visdep twin --data PATH`): a parquet, json, jsonl or csv file, a folder saved
  with `save_to_disk`, or a folder laid out as the task's hub dataset repository (read by `datasets.load_dataset`
  with the task's `dataset_name`, as the task would read the repository itself);
- the task's own local files: `dataset_path: json` (csv, parquet...) with `dataset_kwargs.data_files`;
- the hub dataset as the datasets cache of an earlier lmms-eval run holds it (offline: never a download).
Only `data_files`/`data_dir` of `dataset_kwargs` are passed on (`config.DATA_KWARGS`): `video: True` would download
the whole repository. The split is the task's `test_split` (else `validation_split`).

A local copy is someone else's file: its data files must be regular files within the twin limit, and its JSON files
are parsed here first (`reading.parse_json`: nesting and Unicode bounded) before `datasets` reads them, because
pyarrow's JSON reader recurses without a bound (a file nested 100,000 levels deep crashes the process with SIGSEGV).
Whatever `datasets` or the task's `process_docs` cannot read is one UpstreamDataError naming the copy.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_eval_tasks.errors import VisdepError, excerpt
from lmms_eval_tasks.reading import check_nesting, json_lines, parse_json, read_bytes, regular_file, unicode_text
from lmms_eval_tasks.rows import SAVED_DATASET_MARKERS, SUFFIX_FORMATS
from lmms_eval_tasks.upstream.config import DATA_KWARGS, TwinRefused, UpstreamTask, offline

LOCAL_BUILDERS = ("json", "csv", "parquet", "arrow", "text", "pandas")
DATA_SUFFIXES = frozenset({*SUFFIX_FORMATS, ".arrow", ".txt", ".tsv"})  # what datasets reads in a copied repository
JSON_SUFFIXES = frozenset({s for s, f in SUFFIX_FORMATS.items() if f in ("json", "jsonl")})
MAX_COPY_ENTRIES = 100_000  # what a local copy's folder may hold (its videos included)


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


def _check_copy(path: Path) -> None:
    """The data files of a local copy (the file, or those of the folder) are regular files within the twin limit,
    and its JSON ones parse within the nesting bound; UpstreamDataError naming the file otherwise."""
    if path.is_dir():
        files = []
        for i, entry in enumerate(path.rglob("*")):
            if i == MAX_COPY_ENTRIES:
                raise UpstreamDataError(f"{path}: holds more than {MAX_COPY_ENTRIES:,} files and folders; give the "
                                        f"folder of the dataset's files, not one above it")
            if entry.suffix.lower() in DATA_SUFFIXES or entry.name in SAVED_DATASET_MARKERS:
                files.append(entry)
        if not files:
            raise UpstreamDataError(f"{path}: a folder without data files (parquet, json, jsonl, csv, arrow, or a "
                                    f"save_to_disk folder)")
    else:
        files = [path]
    for file in files:
        regular_file(file, "twin", error=UpstreamDataError)
        if file.suffix.lower() in JSON_SUFFIXES:
            data = read_bytes(file, "twin", error=UpstreamDataError)
            if not data.strip():
                raise UpstreamDataError(f"{file}: empty")
            if SUFFIX_FORMATS[file.suffix.lower()] == "jsonl":
                json_lines(data, file, error=UpstreamDataError)
            else:
                parse_json(data, file, error=UpstreamDataError)


def _load_local(path: Path, split: str, name: str | None):
    _check_copy(path)
    try:
        return _read_local(path, split, name)
    except UpstreamDataError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets and pyarrow raise many kinds for a file they cannot read
        raise UpstreamDataError(f"{path}: datasets cannot read it as the task's documents ({type(e).__name__}: "
                                f"{excerpt(str(e), 200)})") from None


def _read_local(path: Path, split: str, name: str | None):
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
    if hasattr(dataset, "to_list"):
        docs = dataset.to_list()
    elif isinstance(dataset, (list, tuple)):
        docs = list(dataset)
    else:
        raise UpstreamDataError(f"{task.name}: its process_docs returns {type(dataset).__name__}, not documents "
                                f"(a dataset or a list of dicts), on {origin}")
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise UpstreamDataError(f"{task.name}: document {i} of {origin} is {type(doc).__name__}, not a dict")
        where = f"{task.name}: document {i} of {origin}"
        unicode_text(check_nesting(doc, where, error=UpstreamDataError), where, UpstreamDataError)
    return Documents([json_value(d) for d in docs], origin, split)
