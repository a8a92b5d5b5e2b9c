"""Scored questions made durable as soon as they are scored: a killed run resumes where it stopped, and no rerun is
handed a value that no longer holds. Why it is built this way (and not on SQLite): `docs/durability.md`.

With lmms-eval's `--use_cache PATH` the adapters keep, beside lmms-eval's own cache:

    PATH/visdep/<model key>/settings.json                            what the model key covers, for a reader
    PATH/visdep/<model key>/rank<r>-<host>-<pid>-<random>.jsonl      one file per writing process, append-only

- The model key (the folder) is the first 24 hex digits of the SHA-256 of the adapter's `model_identity()`: the
  adapter, its score-changing arguments with defaults filled in (`model_adapters.settings`), its checkpoint's
  identity and visdep's scoring code's identity (`model_adapters.identity`), the dtype loaded, the device type, the
  attention kernel, and the versions of transformers, torch, PyAV and Pillow.
- A question's key is the SHA-256 of what the model is shown and what it scores (`question_key`): the templated
  prompt as the adapter built it (chat template, system line, video placeholder), the token ids after the shared
  prefix, each option's token ids, the strings asked for and scored, and each video's identity by content.
- One record per line: `{"key": ..., "scores": {continuation: [loss, is_greedy, string scored]}, "sha256": ...}`,
  where "sha256" is the digest of the canonical JSON of `[key, scores]` (`record_checksum`). A process writes only
  the file it created (exclusively), each batch in one write followed by fsync, so records of two processes cannot
  interleave, and nothing is ever appended after another process's torn line; a write that fails part-way is cut
  back to the last complete record before the error goes on. The folder is fsync'd after a file appears in it, and
  `settings.json` is written to a temporary file and renamed into place.
- Reading takes every complete line of every process's file. A line that is not a record of that shape, holds a
  non-finite loss, or fails its checksum is skipped with one warning naming the file and line, and its question is
  scored again; an incomplete last line (a process killed mid-write, or one writing now) is passed over.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.evaluation_hooks import store_root
from model_adapters.identity import digest

MODEL_KEY_DIGITS = 24
RECORD_FIELDS = frozenset({"key", "scores", "sha256"})


def question_key(prompt: str, continuations: Sequence[str], scored: Sequence[str], tail: Sequence[int],
                 continuation_ids: Sequence[Sequence[int]], videos: Sequence[object]) -> str:
    """SHA-256 (hex) of a question as the model is shown it: `prompt` (the templated text the options are scored
    after), the `continuations` asked for and the strings `scored` for them, the context token ids after any shared
    prefix (`tail`), each option's token ids, and the identities of its `videos` (`identity.video_identity`)."""
    return digest({"prompt": prompt, "continuations": list(continuations), "scored": list(scored),
                   "tail": list(tail), "continuation_ids": [list(c) for c in continuation_ids],
                   "videos": list(videos)})


def record_checksum(key: str, scores: Mapping[str, Sequence]) -> str:
    """A record's "sha256": SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of [key, scores]."""
    return digest([key, scores])


def normal_scores(scores: Mapping[str, Sequence]) -> dict[str, list]:
    """{continuation: [loss, is_greedy, string scored]} with JSON's types (float, bool, str)."""
    return {str(c): [float(loss), bool(greedy), str(text)] for c, (loss, greedy, text) in scores.items()}


def record_line(key: str, scores: Mapping[str, list]) -> str:
    """One record (`normal_scores`) as a line of the store; a non-finite loss is refused (ValueError)."""
    return json.dumps({"key": key, "scores": scores, "sha256": record_checksum(key, scores)}, allow_nan=False) + "\n"


def record_problem(record: object) -> str | None:
    """Why a parsed line cannot be used, or None when it is a sound record."""
    if not isinstance(record, dict) or set(record) != RECORD_FIELDS:
        return "not a store record (an object with key, scores and sha256)"
    key, scores = record["key"], record["scores"]
    if not isinstance(key, str) or not isinstance(record["sha256"], str) or not isinstance(scores, dict) or not scores:
        return "not a store record (key and sha256 strings, scores a non-empty object)"
    for continuation, value in scores.items():
        if not (isinstance(value, list) and len(value) == 3 and isinstance(value[0], int | float)
                and not isinstance(value[0], bool) and isinstance(value[1], bool) and isinstance(value[2], str)):
            return f"the scores of {continuation!r} are not [loss, is_greedy, string scored]"
        if not math.isfinite(value[0]):
            return f"the loss of {continuation!r} is {value[0]} (not finite)"
    if record_checksum(key, scores) != record["sha256"]:
        return "its checksum does not match its contents (edited or damaged)"
    return None


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (a file created or renamed into it) durable. File systems that cannot sync a
    folder (EINVAL, ENOTSUP: some network and FUSE file systems) commit entries with their own operations."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def make_folders(folder: Path) -> None:
    """`mkdir -p` that fsyncs the parent of every folder it creates."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # another process made it first
            continue
        fsync_folder(path.parent)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`, fsync the folder: a reader
    sees the old file or the new one, never part of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_folder(path.parent)


def _writer_name(rank: int) -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
    return f"rank{rank}-{host}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"


class ScoreStore:
    """{question key: {continuation: [loss, is_greedy, string scored]}} read from every process's file in `folder`
    (files in name order; of two sound records of one question, the first read is kept); what this process scores
    goes to a file of its own, created at its first batch."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder = folder
        self.rank = rank
        self.path: Path | None = None  # this process's file, once it has written
        self.entries: dict[str, dict[str, list]] = {}
        self._fd: int | None = None
        self._end = 0  # bytes of complete records in this process's file
        for path in sorted(folder.glob("rank*.jsonl")):
            self._read(path)

    @classmethod
    def open(cls, model: Mapping[str, object], rank: int, about: Mapping[str, object] | None = None,
             ) -> ScoreStore | None:
        """The store of a model (`model`: what its key covers) under the current root, or None when `--use_cache`
        is off. `about` (e.g. the checkpoint's path) is written into settings.json beside the key's contents."""
        root = store_root()
        if root is None:
            return None
        folder = root / "visdep" / digest(dict(model))[:MODEL_KEY_DIGITS]
        make_folders(folder)
        meta = folder / "settings.json"
        if not meta.exists():
            write_atomically(meta, json.dumps({"model_key": dict(model), "first_written_for": dict(about or {})},
                                              indent=1, sort_keys=True, default=str) + "\n")
        return cls(folder, rank)

    def _read(self, path: Path) -> None:
        *lines, last = path.read_bytes().split(b"\n")
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except ValueError as e:
                problem = f"not JSON ({e})"
            else:
                problem = record_problem(record)
            if problem is not None:
                logger.warning(f"durable store {path}, line {number}: {problem}; skipped, its question is scored again")
                continue
            self.entries.setdefault(record["key"], record["scores"])
        if last:
            logger.info(f"durable store {path}, line {len(lines) + 1}: an incomplete last record (a process killed "
                        "while writing it, or one writing it now) is passed over")

    def get(self, key: str) -> dict[str, list] | None:
        return self.entries.get(key)

    def _create(self) -> None:
        self.path = self.folder / _writer_name(self.rank)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fsync_folder(self.folder)

    def add(self, scored: Mapping[str, Mapping[str, Sequence]]) -> None:
        """Append these questions' records to this process's file and make them durable (fsync) before returning."""
        records = {key: normal_scores(scores) for key, scores in scored.items()}
        data = "".join(record_line(key, scores) for key, scores in records.items()).encode()
        if self._fd is None:
            self._create()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, self._end)  # no torn record stays behind for readers
            raise
        self._end += len(data)
        self.entries.update(records)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __len__(self) -> int:
        return len(self.entries)


def log_reuse(adapter_name: str, rank: int, reused: int, total: int, store: ScoreStore) -> None:
    logger.info(f"{adapter_name} rank {rank}: {reused} of {total} questions taken from the durable store "
                f"{store.folder}, {total - reused} scored")
