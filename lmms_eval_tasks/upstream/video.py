"""Where an upstream task's video is: named once when the twin is made, resolved at run time by the task itself.

The twin records each question's `video` as an identity (clusters, the grounded export): the path the task's
`doc_to_visual` would look at first, found by calling it with every existence check answering yes (no video needs
to be there), relative to the task's video folder (`$HF_HOME/<dataset_kwargs.cache_dir>`, as lmms-eval unpacks
it). A video run resolves the real path lazily, per question, through the same `doc_to_visual` (`resolve_video`):
31 of lmms-eval 0.7.3's task folders call `sys.exit` on a missing video, others raise or return frames, text or
nothing; each of those is a RecordError with its reason, never a dead evaluation. The path it gives must lie under
the folder lmms-eval unpacks every task's videos into, $HF_HOME (`roots.under_root`): a document's absolute or '../'
video name, or a link out of that folder, is a RecordError, never a file opened for decoding.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any
from unittest import mock

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.records import RecordError
from lmms_eval_tasks.roots import under_root
from lmms_eval_tasks.upstream.config import UpstreamTask, load_task, offline

VIDEO_FIELDS = ("video", "video_path", "video_name", "videoID", "video_id", "video_file", "vid", "video_uid")


def _call_doc_to_visual(task: UpstreamTask, doc: dict) -> Any:
    doc_to_visual = task.config.get("doc_to_visual")
    if isinstance(doc_to_visual, str):
        return [doc.get(doc_to_visual)]
    if not callable(doc_to_visual):
        raise RecordError("the task has no doc_to_visual", repr(doc_to_visual))
    kwargs = task.specific_kwargs()
    try:
        takes_kwargs = len(inspect.signature(doc_to_visual).parameters) == 2
    except (TypeError, ValueError):
        takes_kwargs = False
    return doc_to_visual(doc, kwargs) if kwargs is not None and takes_kwargs else doc_to_visual(doc)


def _one_path(returned: Any) -> str:
    """The one video path a doc_to_visual return holds; RecordError for anything else."""
    items = returned if isinstance(returned, (list, tuple)) else [returned]
    if len(items) != 1 or not isinstance(items[0], (str, os.PathLike)):
        kinds = ", ".join(sorted({type(i).__name__ for i in items})) or "nothing"
        raise RecordError("the upstream doc_to_visual returns no single video path",
                          f"{len(items)} item(s) of type {kinds}")
    return os.fspath(items[0])


def videos_root() -> Path:
    """$HF_HOME (default ~/.cache/huggingface), absolute: where lmms-eval's tasks find their videos."""
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser().absolute()


def video_folder(task: UpstreamTask) -> Path:
    """The folder lmms-eval unpacks the task's videos into: $HF_HOME/<cache_dir> (or $HF_HOME)."""
    home = videos_root()
    cache_dir = (task.config.get("dataset_kwargs") or {}).get("cache_dir")
    return home / str(cache_dir) if cache_dir else home


def video_identity(task: UpstreamTask, doc: dict) -> str | None:
    """The path `doc_to_visual` names first for `doc`, relative to the task's video folder where it lies under it;
    else the document's video field; None where neither gives one."""
    try:
        with offline(), mock.patch("os.path.exists", return_value=True), \
                mock.patch("os.path.isfile", return_value=True):
            path = _one_path(_call_doc_to_visual(task, doc))
    except (Exception, SystemExit):  # noqa: BLE001 - upstream code; the field below names the video instead
        path = None
    if path:
        absolute = Path(os.path.expanduser(path))
        for root in (video_folder(task), video_folder(task).parent):
            try:
                return absolute.relative_to(root).as_posix()
            except ValueError:
                continue
        return path
    for name in VIDEO_FIELDS:
        if isinstance(doc.get(name), (str, int)) and str(doc[name]).strip():
            return str(doc[name])
    return None


def resolve_video(task: str, upstream_doc: dict) -> str:
    """The video file (or frame folder) the upstream task's `doc_to_visual` gives for the document, checked to
    exist. Raises RecordError with the reason: it exited (a missing video), raised, returned no single path, or a
    path that is not there."""
    upstream = load_task(task)
    try:
        with offline():
            returned = _call_doc_to_visual(upstream, upstream_doc)
    except SystemExit as e:
        raise RecordError("the upstream doc_to_visual exits (the video is missing)", str(e.code)[:300]) from None
    except RecordError:
        raise
    except Exception as e:  # noqa: BLE001 - upstream code
        raise RecordError("the upstream doc_to_visual fails", f"{type(e).__name__}: {e}"[:300]) from None
    path = _one_path(returned)
    under_root(videos_root(), os.path.expanduser(path), "the video the upstream doc_to_visual names is not under "
                                                        "$HF_HOME")
    if not os.path.exists(path):
        raise RecordError("the video the upstream doc_to_visual names is not there", excerpt(path, 300))
    return path
