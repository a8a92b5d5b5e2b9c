"""Scored questions made durable as soon as they are scored: a killed run resumes where it stopped, and no rerun is
handed a value that no longer holds. Why it is built this way (and not on SQLite), and the rules a reader follows:
`docs/durability.md`.

With lmms-eval's `--use_cache PATH` the adapters keep, beside lmms-eval's own cache:

    PATH/visdep/<model key>/settings.json                            what the model key covers, for a reader
    PATH/visdep/<model key>/rank<r>-<host>-<pid>-<random>.jsonl      one file per writing process, append-only
    PATH/visdep/<model key>/compacted-<time>-<random>.jsonl          files merged into one (`compaction`)

- The model key (the folder) is the first 24 hex digits of the SHA-256 of the adapter's `model_identity()`.
- A question's key is the SHA-256 of what the model is shown and what it scores (`question_key`).
- Records, their checks and the reader: `model_adapters.store_records`; merging files: `model_adapters.compaction`.
- A process writes only the file it created (exclusively), holding an exclusive `flock` on it while it is open, each
  batch in one write followed by fsync; a write that fails part-way is cut back to the last complete record before
  the error goes on. A question already stored (read when the store opened, or written since) is never written
  again, so one writer never leaves two records of one question.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from loguru import logger

from model_adapters.compaction import compact, not_writable
from model_adapters.identity import digest
from model_adapters.store_records import (
    NO_LOCKS,
    StoreReader,
    fsync_folder,
    host_name,
    make_folders,
    normal_scores,
    record_files,
    record_line,
    write_atomically,
)

__all__ = ["ScoreStore", "fsync_folder", "log_reuse", "question_key"]

MODEL_KEY_DIGITS = 24
# Past this many record files a store is compacted when it is opened (`model_adapters.compaction`).
COMPACT_AFTER_FILES = 32


def question_key(prompt: str, continuations: Sequence[str], scored: Sequence[str], tail: Sequence[int],
                 continuation_ids: Sequence[Sequence[int]], videos: Sequence[object]) -> str:
    """SHA-256 (hex) of a question as the model is shown it: `prompt` (the templated text the options are scored
    after), the `continuations` asked for and the strings `scored` for them, the context token ids after any shared
    prefix (`tail`), each option's token ids, and the identities of its `videos` (`identity.video_identity`)."""
    return digest({"prompt": prompt, "continuations": list(continuations), "scored": list(scored),
                   "tail": list(tail), "continuation_ids": [list(c) for c in continuation_ids],
                   "videos": list(videos)})


def _writer_name(rank: int) -> str:
    return f"rank{rank}-{host_name()}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"


class ScoreStore:
    """{question key: {continuation: [loss, is_greedy, string scored]}} read from every record file in `folder`
    (of `keys` only, when given; the newest sound record of each); what this process scores goes to a file of its
    own, created at its first batch, and a question already stored is never written again."""

    def __init__(self, folder: Path, rank: int, keys: Iterable[str] | None = None) -> None:
        self.folder = folder
        self.model = folder.name
        self.rank = rank
        self.path: Path | None = None  # this process's file, once it has written
        self._fd: int | None = None
        self._end = 0  # bytes of complete records in this process's file
        reader = StoreReader(self.model, None if keys is None else frozenset(keys))
        reader.read_folder(folder)
        reader.report(folder)
        self.entries: dict[str, dict[str, list]] = {key: found.scores for key, found in reader.found.items()}

    @classmethod
    def open(cls, model: Mapping[str, object], rank: int, about: Mapping[str, object] | None = None,
             keys: Iterable[str] | None = None, root: str | os.PathLike | None = None) -> ScoreStore | None:
        """The store of a model (`model`: what its key covers) under `root` (the evaluation's `--use_cache` folder,
        `evaluation.Evaluation.store_root`), or None when it is None (the store is off). `about` (e.g. the
        checkpoint's path) is written into settings.json beside the key's contents. `keys`: the questions the caller
        will ask for (only their lines are parsed and held); None reads every record. A folder of more than
        COMPACT_AFTER_FILES record files is compacted first."""
        if root is None:
            return None
        root = Path(root)
        folder = root / "visdep" / digest(dict(model))[:MODEL_KEY_DIGITS]
        try:
            make_folders(folder)
            meta = folder / "settings.json"
            if not meta.exists():
                write_atomically(meta, json.dumps({"model_key": dict(model), "first_written_for": dict(about or {})},
                                                  indent=1, sort_keys=True, default=str) + "\n")
        except OSError as e:
            if (error := not_writable(folder, e)) is None:
                raise
            raise error from None
        if len(record_files(folder)) > COMPACT_AFTER_FILES:
            compact(folder)
        return cls(folder, rank, keys)

    def get(self, key: str) -> dict[str, list] | None:
        return self.entries.get(key)

    def _create(self) -> None:
        self.path = self.folder / _writer_name(self.rank)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except OSError as e:  # a folder made read-only since the store opened
            if (error := not_writable(self.folder, e)) is None:
                raise
            raise error from None
        try:  # held while the file is open: a compaction merges only files no process is writing
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as e:
            # a file system without locks: a compaction cannot lock this file either, and leaves it alone
            if e.errno not in NO_LOCKS:
                raise
        fsync_folder(self.folder)

    def add(self, scored: Mapping[str, Mapping[str, Sequence]]) -> None:
        """Append the records of those of these questions not stored yet (read or written) to this process's file
        and make them durable (fsync) before returning."""
        written = time.time_ns()
        records = {key: normal_scores(scores) for key, scores in scored.items() if key not in self.entries}
        if not records:
            return
        data = "".join(record_line(self.model, key, scores, written) for key, scores in records.items()).encode()
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
