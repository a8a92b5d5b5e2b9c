"""An upstream lmms-eval task's twin: its questions frozen to a file, read back as a question source.

`visdep twin TASK --out DIR` reads an upstream multiple-choice video task (`lmms_eval_tasks.upstream.read_upstream`)
and `freeze_twin` writes, in DIR,

    <task>_twin.jsonl           one line per question: the visdep document and the upstream document it came from
    <task>_twin.json            the manifest: lmms-eval's version, the upstream YAML's sha256, the adapter used,
                                the records dropped (counted by reason, and each one listed)
    <task>_visdep.jsonl         the tasks' data file: its one line names the twin file (`TwinSource.reference`)
    <task>_visdep_blind.yaml    the tasks, for `lmms-eval --include_path DIR` (`task_yaml.source_task_yaml`)
    <task>_visdep_video.yaml

The twin's benchmark is `<task>_visdep`. A blind run reads the frozen file only and imports no upstream code; a video
run finds each video lazily, through the upstream task's own `doc_to_visual` on the frozen upstream document
(`lmms_eval_tasks.upstream.resolve_video`), where a failure (a missing video, `sys.exit`, a return that is no path) is
that question's unusable video, with its reason.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.loaders import open_source
from lmms_eval_tasks.reading import json_lines, read_bytes, read_json, resolved
from lmms_eval_tasks.records import BenchmarkDataError, Question, RecordError, fail
from lmms_eval_tasks.task_yaml import source_task_yaml
from lmms_eval_tasks.unusable import BenchmarkData, Unusable, by_reason
from lmms_eval_tasks.writing import starts_with, write_file

TWIN_FORMAT = 1  # the manifest's "visdep_twin": what this reader reads
# An lmms-eval task name as a manifest may give it: it names files (`twin_files`, the grounded tasks' exports), so
# nothing that reads as a path (no separator, no leading dot)
TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
TWIN_YAML_HEADER = "# visdep twin of the lmms-eval task"
UPSTREAM_DOC = "upstream_doc"  # the key of each frozen line that holds the upstream document


def twin_name(task: str) -> str:
    """The twin's benchmark name; its tasks are `<task>_visdep_blind` and `<task>_visdep_video`."""
    return f"{task}_visdep"


def twin_files(out_dir: Path, task: str) -> dict[str, Path]:
    out = Path(out_dir)
    name = twin_name(task)
    return {"questions": out / f"{task}_twin.jsonl", "manifest": out / f"{task}_twin.json",
            "data": out / f"{name}.jsonl", "blind": out / f"{name}_blind.yaml", "video": out / f"{name}_video.yaml"}


def reported_categories(questions: Sequence[Question]) -> list[str]:
    """The category labels the tasks report accuracy for (`tasks._process_results`): each facet's 'facet value'
    where a question has facets, else its category; in order of first appearance."""
    labels: dict[str, None] = {}
    for q in questions:
        for label in ([f"{k} {v}" for k, v in q.facets.items()] if q.facets else [q.category] if q.category else []):
            labels.setdefault(label, None)
    return list(labels)


# --------------------------------------------------------------------------- the source
@dataclass
class TwinSource:
    """A frozen twin (`<task>_twin.jsonl` and its manifest), a `loaders.QuestionSource`."""

    path: Path  # the frozen questions, absolute
    manifest: dict
    categories: tuple[str, ...] = ()
    skip_unusable: bool = True  # the records dropped when the twin was built are listed, never run
    _resolved: dict[str, Path] = field(default_factory=dict, repr=False)

    @property
    def task(self) -> str:
        return self.manifest["task"]

    @property
    def name(self) -> str:
        return twin_name(self.task)

    @property
    def title(self) -> str:
        return f"{self.task} (twin)"

    def read(self, root=None) -> BenchmarkData:
        data = BenchmarkData(self.name, origin=f"twin {self.path}")
        for where, question, _ in _frozen_lines(self.path):
            data.questions.append(question)
            data.wheres.append(where)
        data.unusable = [Unusable(u["where"], u["reason"], u.get("question_id"), u.get("detail", ""))
                         for u in self.manifest.get("unusable", [])]
        return data

    def video_path(self, video: str, question_id: str = "", root: Path | None = None) -> Path:
        """The path the upstream `doc_to_visual` gives for the question's frozen upstream document (the first
        question about `video` where no question is named). RecordError with the reason where it gives none, or
        where a video root is given (the upstream task, not a root, says where its videos are)."""
        if root is not None:
            raise RecordError("a twin's videos are where its upstream task finds them, not under a given root",
                              f"{self.task}: {root}")
        docs = _upstream_docs(self.path)
        if not question_id:
            question_id = next((qid for qid, (v, _) in docs.items() if v == video), "")
        if question_id not in self._resolved:
            if question_id not in docs:
                raise RecordError("the question is not in the twin", f"{question_id!r} in {self.path}")
            from lmms_eval_tasks.upstream import resolve_video

            self._resolved[question_id] = Path(resolve_video(self.task, docs[question_id][1]))
        return self._resolved[question_id]

    def video_origin(self) -> str:
        return f"the videos are where the upstream task {self.task}'s doc_to_visual looks for them"

    def reference(self) -> dict[str, str]:
        return {"twin": str(self.path)}

    def task_file(self, mode: str) -> Path:
        path = twin_files(self.path.parent, self.task)[mode]
        if not path.is_file():
            raise BenchmarkDataError(f"{path}: not found; write the twin's tasks again: visdep twin {self.task} "
                                     f"--out {self.path.parent}")
        return path


def _frozen_lines(path: Path):
    """(where, question, upstream document) of each line of a frozen twin file."""
    for n, record in json_lines(read_bytes(path, "twin", error=BenchmarkDataError), path, error=BenchmarkDataError):
        where = f"{path} line {n}"
        try:
            upstream = record.pop(UPSTREAM_DOC)
            question = Question(**{**record, "category": record.get("category") or None})
        except (KeyError, TypeError, AttributeError, RecordError) as e:
            raise fail(where, f"not a line visdep twin wrote ({type(e).__name__}: {excerpt(str(e), 200)}); write "
                              f"the twin again") from None
        yield where, question, upstream


@functools.lru_cache(maxsize=8)
def _upstream_docs(path: Path) -> dict[str, tuple[str, dict]]:
    """question id -> (video, upstream document) of a frozen twin file (read once per process)."""
    return {q.question_id: (q.video, doc) for _, q, doc in _frozen_lines(path)}


def open_twin(path: str | Path) -> TwinSource:
    """The twin whose frozen questions are `path` (`<task>_twin.jsonl`; its manifest beside it)."""
    path = resolved(path, error=BenchmarkDataError)
    manifest_path = path.with_suffix(".json")
    if not manifest_path.exists():
        raise fail(manifest_path, "not found: the twin's manifest is written beside its questions; write the twin "
                                  "again (visdep twin TASK --out DIR)")
    manifest = read_json(manifest_path, "manifest", error=BenchmarkDataError)
    if not isinstance(manifest, dict) or manifest.get("visdep_twin") != TWIN_FORMAT or "task" not in manifest:
        raise fail(manifest_path, f"not a manifest visdep twin wrote (format {TWIN_FORMAT})")
    if not isinstance(manifest["task"], str) or not TASK_NAME.fullmatch(manifest["task"]):
        raise fail(manifest_path, f"task {excerpt(manifest['task'])} is not an lmms-eval task name (letters, "
                                  f"digits, '_', '-', '.'; it names the files written for the twin)")
    return TwinSource(path, manifest, tuple(manifest.get("categories", ())))


def open_twins(folders: Sequence[str | Path]) -> list[str]:
    """Open every twin of each `visdep twin` output folder (a repeatable `--twin DIR`), known by name to this process
    from then on; returns their benchmark names."""
    names = []
    for folder in folders:
        found = sorted(Path(folder).expanduser().glob("*_twin.jsonl"))
        if not found:
            raise fail(folder, "holds no twin (<task>_twin.jsonl); write them with visdep twin TASK... --out DIR")
        names += [open_source(open_twin(path)).name for path in found]
    return names


# --------------------------------------------------------------------------- writing
def _check_ours(path: Path, overwrite: bool) -> None:
    if (path.exists() or path.is_symlink()) and not overwrite and not starts_with(path, TWIN_YAML_HEADER):
        raise fail(path, "exists and was not written by visdep twin; choose another --out or pass --force")


def freeze_twin(twin, out_dir: str | Path, overwrite: bool = False) -> dict[str, Path]:
    """Write the twin files of `twin` (an `lmms_eval_tasks.upstream.UpstreamTwin`) into `out_dir`; returns them by
    kind (questions, manifest, data, blind, video). A twin without one usable question is refused."""
    task = twin.task
    files = twin_files(Path(out_dir).expanduser().resolve(), task)
    questions: list[Question] = list(twin.questions)
    if not questions:
        dropped = "; ".join(f"{n} {reason}" for reason, n in by_reason(twin.unusable).most_common())
        raise BenchmarkDataError(f"{task}: no record can be used, so no twin is written ({dropped or 'no records'})")
    for mode in ("blind", "video"):
        _check_ours(files[mode], overwrite)
    name = twin_name(task)
    documents = [{**q.document(), "benchmark": name, UPSTREAM_DOC: doc}
                 for q, doc in zip(questions, twin.documents, strict=True)]
    categories = reported_categories(questions)
    manifest = {
        "visdep_twin": TWIN_FORMAT, "task": task, "benchmark": twin.benchmark, "name": name,
        "lmms_eval_version": twin.lmms_eval_version, "yaml_path": str(twin.yaml_path), "yaml_sha256": twin.yaml_sha256,
        "adapter": twin.adapter, "split": twin.split, "read_from": twin.origin, "questions": len(questions),
        "dropped": dict(by_reason(twin.unusable).most_common()),
        "categories": categories, "notes": {what: len(ids) for what, ids in twin.notes.items()},
        "unusable": [{**u.entry(), "detail": u.detail} for u in twin.unusable],
    }
    folder = files["questions"].parent
    write_file(folder, files["questions"].name, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents))
    write_file(folder, files["manifest"].name, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    write_file(folder, files["data"].name, json.dumps({"twin": str(files["questions"])}) + "\n")
    _upstream_docs.cache_clear()
    comment = (f"{TWIN_YAML_HEADER.removeprefix('# ')} {task} (lmms-eval {twin.lmms_eval_version}, adapter "
               f"{twin.adapter}): rerun `visdep twin {task} --out DIR` after moving this folder.")
    for mode in ("blind", "video"):
        write_file(folder, files[mode].name, source_task_yaml(comment, name, mode, files["data"].name, categories))
    return files
