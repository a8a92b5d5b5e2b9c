"""Merging a model's record files into one (`visdep store compact PATH`, and `ScoreStore.open` past
`durable.COMPACT_AFTER_FILES` files), safe while other processes read and write the folder.

A writer holds an exclusive `flock` on its file from before its first write until it closes it (or dies, when the
kernel drops the lock). A compaction takes, without waiting, the lock of every non-empty record file; a file it
cannot lock is being written and is left as it is (an empty file may be one whose writer has not locked it yet:
left too). It reads the locked files as a reader does (`durable.StoreReader`: bad lines, other versions and other
models' records dropped, the newest sound record of each question kept, line for line), writes them to a temporary
file, fsyncs it, renames it into place as `compacted-<time ns>-<random>.jsonl`, fsyncs the folder, and only then
deletes the files it merged. A reader that opens a file already deleted reads the folder again and finds the merged
file; one that sees both (a crash between the rename and the deletions) reads the same records twice, with the same
values and times.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from model_adapters.store_records import StoreReader, fsync_folder, record_files


class StoreError(VisdepError):
    """A path that holds no durable store."""


@dataclass(frozen=True)
class Compaction:
    """What a compaction did: the files merged, the records kept, the merged file (None: nothing to merge)."""

    merged: int
    records: int
    path: Path | None
    left: int  # record files left as they were (being written, empty)


_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})


def _lock(path: Path) -> BinaryIO | None:
    """`path` opened and exclusively locked, or None when it is being written, empty, or gone."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        # still the file of that name (not one merged and deleted meanwhile), and written to at least once
        usable = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino and os.fstat(f.fileno()).st_size > 0
    except OSError as e:
        f.close()
        if isinstance(e, BlockingIOError | FileNotFoundError) or e.errno in _NO_LOCKS:
            return None
        raise
    if not usable:
        f.close()
        return None
    return f


def compact(folder: str | os.PathLike) -> Compaction:
    """Merge the record files of one model's folder (see the module's docstring)."""
    folder = Path(folder)
    files = record_files(folder)
    locked: list[tuple[Path, BinaryIO]] = []
    try:
        for path in files:
            if (f := _lock(path)) is not None:
                locked.append((path, f))
        if len(locked) < 2:
            return Compaction(0, 0, None, len(files) - len(locked))
        reader = StoreReader(folder.name, keep_lines=True)
        for path, f in locked:
            reader.read(path, f)
        reader.report(folder)
        kept = sorted(reader.found.values(), key=lambda found: found.order)
        tmp = folder / f".compacting-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        target = folder / f"compacted-{time.time_ns():020d}-{secrets.token_hex(4)}.jsonl"
        try:
            with open(tmp, "wb") as out:
                out.write(b"".join(found.line for found in kept))
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_folder(folder)
        for path, _ in locked:
            path.unlink(missing_ok=True)
        fsync_folder(folder)
    finally:
        for _, f in locked:
            f.close()
    logger.info(f"durable store {folder}: {len(locked)} files merged into {target.name} ({len(kept)} records); "
                f"{len(files) - len(locked)} left (being written, or empty)")
    return Compaction(len(locked), len(kept), target, len(files) - len(locked))


def store_folders(path: str | os.PathLike) -> list[Path]:
    """The model folders of a store: `path` itself (a model's folder), or those under PATH/visdep/ or PATH/
    (lmms-eval's `--use_cache` folder or its visdep folder). StoreError when there are none."""
    path = Path(path)
    if not path.is_dir():
        raise StoreError(f"{path}: not a folder")
    if (path / "settings.json").is_file():
        return [path]
    base = path / "visdep" if (path / "visdep").is_dir() else path
    folders = sorted(p.parent for p in base.glob("*/settings.json"))
    if not folders:
        raise StoreError(f"{path}: no durable store here (no <model key>/settings.json under it or under "
                         f"{path / 'visdep'})")
    return folders
