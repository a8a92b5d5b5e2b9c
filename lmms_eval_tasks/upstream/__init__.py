"""Upstream twins: lmms-eval's own multiple-choice video tasks read as visdep questions (`visdep twin`).

The interface the rest of visdep uses:
- `read_upstream(task, data=None) -> UpstreamTwin`: the task's documents (read as the task reads them, its
  `process_docs` applied), each turned into a `Question` by the task's adapter or the generic path (render, parse,
  cross-check: `generic`), or listed as unusable with its reason. Raises `TwinRefused` for a task visdep does not
  twin, naming why.
- `list_upstream() -> list[UpstreamStatus]`: every video task the installed lmms-eval ships, with its benchmark and
  status (`automatic`, `adapter`, `refused: <reason>`), from its YAML and utils.py alone (`catalog`).
- `resolve_video(task, upstream_doc) -> str`: a question's video at run time, through the task's own
  `doc_to_visual`; RecordError with the reason where it gives none (`video`).

Everything here imports lmms-eval (and so torch) only when called: a blind run reads the frozen twin and needs
none of it. Docs: docs/twins.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmms_eval_tasks.records import Question
from lmms_eval_tasks.unusable import BenchmarkData, Unusable
from lmms_eval_tasks.upstream.catalog import UpstreamStatus, list_upstream
from lmms_eval_tasks.upstream.config import TwinRefused, lmms_eval_version, load_task
from lmms_eval_tasks.upstream.convert import convert_documents, where
from lmms_eval_tasks.upstream.documents import UpstreamDataError, read_documents
from lmms_eval_tasks.upstream.video import resolve_video

__all__ = ["TwinRefused", "UpstreamDataError", "UpstreamStatus", "UpstreamTwin", "list_upstream", "read_upstream",
           "resolve_video"]


@dataclass
class UpstreamTwin:
    """An upstream task read as questions: what `visdep twin` freezes (the questions, each with the upstream
    document its video is resolved from) and its manifest (where it came from, what was dropped and why)."""

    task: str
    benchmark: str  # the task's folder in lmms-eval's tasks (one benchmark's tasks share it)
    questions: list[Question]
    documents: list[dict]  # the upstream document of each question (JSON data), for `resolve_video` at run time
    unusable: list[Unusable]
    adapter: str  # "generic", or the adapter's name
    lmms_eval_version: str
    yaml_path: Path
    yaml_sha256: str
    split: str
    origin: str  # where the documents were read
    notes: dict[str, list[str]] = field(default_factory=dict)  # quirks handled: {what: question ids}


def read_upstream(task: str, data: str | Path | None = None) -> UpstreamTwin:
    """The twin of upstream task `task`: every document as a question or an unusable record with its reason.

    `data`: a local copy of the task's documents (see `documents`); default: the task's own local files or the
    datasets cache. Raises TwinRefused (a task refused, with the reason `--list` gives), UpstreamDataError (no
    documents where they were looked for), VisdepError (no such task)."""
    from lmms_eval_tasks.upstream.adapters import adapter_for
    from lmms_eval_tasks.upstream.catalog import refusal

    reason = refusal(task)
    if reason is not None:
        raise TwinRefused(task, reason)
    upstream = load_task(task)
    documents = read_documents(upstream, data)
    adapter = adapter_for(task)
    data_read: BenchmarkData = convert_documents(upstream, documents.docs, adapter)
    index = {where(upstream, i): i for i in range(len(documents.docs))}
    return UpstreamTwin(
        task=task, benchmark=upstream.folder, questions=data_read.questions,
        documents=[documents.docs[index[w]] for w in data_read.wheres],
        unusable=data_read.unusable, adapter=adapter.name if adapter else "generic",
        lmms_eval_version=lmms_eval_version(), yaml_path=upstream.yaml_path, yaml_sha256=upstream.yaml_sha256,
        split=documents.split, origin=documents.origin, notes=data_read.notes)
