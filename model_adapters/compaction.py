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
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from model_adapters.store_records import (
    NO_LOCKS,
    StoreReader,
    fsync_folder,
    host_name,
    open_record_file,
    record_files,
    write_atomically,
)


class StoreError(VisdepError):
    """A path that holds no durable store."""


@dataclass(frozen=True)
class Compaction:
    """What a compaction did: the files merged, the records kept, the merged file (None: nothing to merge)."""

    merged: int
    records: int
    path: Path | None
    left: int  # record files left as they were (being written, empty)




def _lock(path: Path) -> BinaryIO | None:
    """`path` opened and exclusively locked, or None when it is being written, empty, gone, no regular file or
    unreadable (`open_record_file`, which names the last two)."""
    try:
        f = open_record_file(path)
    except FileNotFoundError:
        return None
    if f is None:
        return None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        # still the file of that name (not one merged and deleted meanwhile), and written to at least once
        usable = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino and os.fstat(f.fileno()).st_size > 0
    except OSError as e:
        f.close()
        if isinstance(e, BlockingIOError | FileNotFoundError) or e.errno in NO_LOCKS:
            return None
        raise
    if not usable:
        f.close()
        return None
    return f


_TMP_PREFIX = ".compacting-"
_TMP_NAME = re.compile(rf"^{re.escape(_TMP_PREFIX)}(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{{8}}\.tmp$")
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def _tmp_name() -> str:
    """The merged file while it is written: named by this host and process, and held locked (`_write_merged`), so
    that a later compaction can prove it dead (`remove_dead_tmp`)."""
    return f"{_TMP_PREFIX}{host_name()}-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def not_writable(folder: Path, error: OSError) -> StoreError | None:
    """The one line for a store this user cannot write (permissions, a read-only file system), or None where
    `error` is another failure."""
    if error.errno not in _NOT_WRITABLE:
        return None
    return StoreError(f"{folder}: the durable store cannot be written ({error.strerror}: {error.filename}); give "
                      f"this user write access to it, or run without the store (no --use_cache)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def remove_dead_tmp(folder: Path) -> int:
    """Remove the files compactions killed part-way left (each up to a copy of the store) where they are provably
    dead: written on this host by a process that is gone, and not locked (a live compaction holds its file's lock
    from its creation's next step; a process of another host, or of an older visdep that named its file without the
    host, cannot be checked: left, and named). Returns how many were removed."""
    removed, left = 0, []
    for path in sorted(folder.glob(f"{_TMP_PREFIX}*")):
        match = _TMP_NAME.match(path.name)
        if match is None or match["host"] != host_name() or _alive(int(match["pid"])):
            left.append(path.name)
            continue
        try:
            f = open_record_file(path, then="left")
        except FileNotFoundError:
            continue
        if f is None:
            continue
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:  # locked: alive after all (its pid reused by a compaction in another namespace)
                if not (isinstance(e, BlockingIOError) or e.errno in NO_LOCKS):
                    raise
                left.append(path.name)
                continue
            path.unlink(missing_ok=True)
            removed += 1
    if removed:
        logger.info(f"durable store {folder}: removed {removed} file(s) of compactions killed part-way")
    foreign = [name for name in left
               if (match := _TMP_NAME.match(name)) is None or match["host"] != host_name()]
    if foreign:
        logger.warning(f"durable store {folder}: {len(foreign)} file(s) of compactions that may still run (another "
                       f"host's, or an older visdep's) left: {', '.join(foreign[:3])}; delete them once no "
                       f"compaction runs on this store")
    return removed


def _write_merged(folder: Path, lines: bytes) -> Path:
    """`lines` written to a locked temporary file, fsynced and renamed into place; the merged file's path."""
    target = folder / f"compacted-{time.time_ns():020d}-{secrets.token_hex(4)}.jsonl"
    write_atomically(target, lines, _tmp_name(), locked=True)
    return target


def compact(folder: str | os.PathLike) -> Compaction:
    """Merge the record files of one model's folder (see the module's docstring). StoreError, one line, where the
    folder cannot be written."""
    folder = Path(folder)
    try:
        return _compact(folder)
    except OSError as e:
        if (error := not_writable(folder, e)) is None:
            raise
        raise error from None


def _compact(folder: Path) -> Compaction:
    remove_dead_tmp(folder)
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
        target = _write_merged(folder, b"".join(found.line for found in kept))
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
