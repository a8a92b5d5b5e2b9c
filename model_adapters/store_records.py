"""The durable store's records and files: a record line, what makes a record sound, the reader every run and
every compaction uses, and the file-system steps that make files and folders durable. The store itself:
`model_adapters.durable`; the rules: `docs/durability.md`.

- One record per line, `record_line`: {"key", "v" (the format version), "model" (the folder's key), "written" (the
  writer's clock, ns), "scores": {continuation: [loss, is_greedy, string scored]}, "sha256"}, where "sha256" is the
  digest of the canonical JSON of the record without it; the key comes first, so that a reader can pass over the
  lines it was not asked for without parsing them.
- Reading (`StoreReader`): any line that is not a sound record of this version and this model is skipped with a
  warning naming its file and line, never fatal; an incomplete last line is passed over. Of several sound records of
  one question the newest write wins (`written`, then file name, then line); records whose losses differ by more
  than batch-composition rounding (CONFLICT_TOLERANCE) are warned about, once per pair of files.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import secrets
import socket
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from loguru import logger

from model_adapters.identity import digest

FORMAT_VERSION = 2
RECORD_FIELDS = frozenset({"key", "v", "model", "written", "scores", "sha256"})
# Losses of one question scored in two batch compositions agree to float32 rounding (about 1e-6 here); a larger
# difference between two sound records means something else changed, and is worth a warning.
CONFLICT_TOLERANCE = 1e-4
_KEY_PREFIX = b'{"key":"'  # every line `record_line` writes starts so, the key's 64 hex digits next
_KEY_END = len(_KEY_PREFIX) + 64


def record_checksum(record: Mapping[str, object]) -> str:
    """A record's "sha256": SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of its other fields."""
    return digest({name: value for name, value in record.items() if name != "sha256"})


def normal_scores(scores: Mapping[str, Sequence]) -> dict[str, list]:
    """{continuation: [loss, is_greedy, string scored]} with JSON's types (float, bool, str)."""
    return {str(c): [float(loss), bool(greedy), str(text)] for c, (loss, greedy, text) in scores.items()}


def record_line(model: str, key: str, scores: Mapping[str, list], written: int) -> str:
    """One record (`normal_scores`) as a line of the store, its key first (a reader finds it without parsing the
    line); a non-finite loss is refused (ValueError)."""
    body = {"key": key, "v": FORMAT_VERSION, "model": model, "written": written, "scores": dict(scores)}
    return json.dumps({**body, "sha256": record_checksum(body)}, separators=(",", ":"), allow_nan=False) + "\n"


class UnknownVersion(Exception):
    """A record of a format version this visdep does not read."""


def record_problem(record: object, model: str) -> str | None:
    """Why a parsed line cannot be used as a record of the model `model`, or None when it is a sound record.
    Raises UnknownVersion for an object of another format version (or of none: visdep's first format)."""
    if isinstance(record, dict) and "key" in record and "scores" in record and record.get("v") != FORMAT_VERSION:
        raise UnknownVersion(str(record.get("v", "none")))
    if not isinstance(record, dict) or set(record) != RECORD_FIELDS:
        return f"not a store record (an object with {', '.join(sorted(RECORD_FIELDS))})"
    key, scores, written = record["key"], record["scores"], record["written"]
    if not (isinstance(key, str) and isinstance(record["sha256"], str) and isinstance(scores, dict) and scores
            and isinstance(written, int) and not isinstance(written, bool) and written >= 0):
        return "not a store record (key and sha256 strings, written a count of ns, scores a non-empty object)"
    if record["model"] != model:
        return f"a record of another model ({str(record['model'])[:40]!r}, not {model})"
    for continuation, value in scores.items():
        if not (isinstance(value, list) and len(value) == 3 and isinstance(value[0], float | int)
                and not isinstance(value[0], bool) and isinstance(value[1], bool) and isinstance(value[2], str)):
            return f"the scores of {continuation!r} are not [loss, is_greedy, string scored]"
        if not math.isfinite(value[0]):  # a huge integer raises OverflowError: the caller skips that line too
            return f"the loss of {continuation!r} is {value[0]} (not finite)"
    if record_checksum(record) != record["sha256"]:
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


# what flock raises on a file system without locks (some network and FUSE file systems)
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL})


def write_atomically(path: Path, data: str | bytes, tmp_name: str | None = None, locked: bool = False) -> None:
    """Write `data` to a temporary file beside `path` (named `tmp_name`, default .<name>.<pid>.<random>.tmp),
    fsync it, rename it over `path`, fsync the folder: a reader sees the old file or the new one, never part of one.
    `locked`: hold an exclusive flock on the temporary file until the rename (a compaction's: a later compaction
    must not take it for a dead one's)."""
    tmp = path.with_name(tmp_name or f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            if locked:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    if e.errno not in NO_LOCKS:
                        raise
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_folder(path.parent)


def host_name() -> str:
    """This host's name as a file name may hold it (writers' and compactions' files are named by it)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


def record_files(folder: Path) -> list[Path]:
    """The record files of a model's folder, in name order (what each is: `open_record_file`)."""
    return sorted(folder.glob("*.jsonl"))


def open_record_file(path: Path, then: str = "skipped, its questions are scored again") -> BinaryIO | None:
    """A file of the store opened for reading. FileNotFoundError where it is gone (a compaction merged it
    meanwhile); None, with a warning naming it and saying what `then` happens, where it is no regular file (a folder
    or a FIFO named *.jsonl: opened without waiting for a FIFO's writer, then let go) or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        logger.warning(f"durable store {path}: cannot be read ({e.strerror}); {then}")
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        logger.warning(f"durable store {path}: not a regular file; {then}")
        return None
    return os.fdopen(fd, "rb")


@dataclass
class Found:
    """The newest sound record of a question read so far: its order (written, file name, line), scores, line."""

    order: tuple[int, str, int]
    scores: dict[str, list]
    line: bytes


@dataclass
class StoreReader:
    """Reads the record files of the model `model`'s folder, keeping for each question (of `keys`, or every one)
    its newest sound record (with its line as written when `keep_lines`: a compaction copies them). Problems are
    gathered and logged once (`report`)."""

    model: str
    keys: Collection[str] | None = None
    keep_lines: bool = False
    found: dict[str, Found] = field(default_factory=dict)
    conflicts: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    unknown_versions: list[str] = field(default_factory=list)

    def read_folder(self, folder: Path) -> None:
        """Every record file of `folder`; a file deleted while it is read (a compaction merged it into a new file
        meanwhile) sends the reader back to the folder for the files it has not read."""
        done: set[str] = set()
        while True:
            todo = [p for p in record_files(folder) if p.name not in done]
            vanished = False
            for path in todo:
                done.add(path.name)
                try:
                    f = open_record_file(path)
                except FileNotFoundError:
                    vanished = True
                    continue
                if f is None:
                    continue
                with f:
                    self.read(path, f)
            if not vanished:
                return

    def read(self, path: Path, f: BinaryIO) -> None:
        number = 0
        try:
            for number, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    logger.info(f"durable store {path}, line {number}: an incomplete last record (a process killed "
                                "while writing it, or one writing it now) is passed over")
                    break
                try:
                    self.take(path, number, line)
                except UnknownVersion as e:
                    self.unknown_versions.append(f"{path}, line {number} (version {e})")
                except Exception as e:  # noqa: BLE001 - any bad line (RecursionError, OverflowError, ...) is skipped
                    logger.warning(f"durable store {path}, line {number}: unreadable ({type(e).__name__}: "
                                   f"{str(e)[:200]}); skipped, its question is scored again")
        except OSError as e:
            logger.warning(f"durable store {path}: reading stopped after line {number} ({e}); the questions of the "
                           "lines after it are scored again")

    def take(self, path: Path, number: int, line: bytes) -> None:
        if (self.keys is not None and line.startswith(_KEY_PREFIX) and line[_KEY_END:_KEY_END + 1] == b'"'
                and line[len(_KEY_PREFIX):_KEY_END].decode("ascii", "replace") not in self.keys):
            return  # not asked for: not parsed
        record = json.loads(line)
        problem = record_problem(record, self.model)
        if problem is not None:
            logger.warning(f"durable store {path}, line {number}: {problem}; skipped, its question is scored again")
            return
        key = record["key"]
        if self.keys is not None and key not in self.keys:
            return
        new = Found((record["written"], path.name, number), record["scores"], line if self.keep_lines else b"")
        old = self.found.get(key)
        if old is not None:
            older, newer = sorted((old, new), key=lambda found: found.order)
            difference = max((abs(loss - older.scores[c][0]) for c, (loss, *_) in newer.scores.items()
                              if c in older.scores), default=0.0)
            if difference > CONFLICT_TOLERANCE:
                self.conflicts.setdefault((older.order[1], newer.order[1]), []).append(difference)
            new = newer
        self.found[key] = new

    def report(self, folder: Path) -> None:
        for (older, newer), differences in self.conflicts.items():
            logger.warning(f"durable store {folder}: {len(differences)} question(s) have sound records in both "
                           f"{older} and {newer} whose losses differ by up to {max(differences):.3g} (more than "
                           f"batch-composition rounding, {CONFLICT_TOLERANCE:g}); the newest write, in {newer}, "
                           "is used")
        if self.unknown_versions:
            logger.warning(f"durable store {folder}: {len(self.unknown_versions)} record(s) of a format version other "
                           f"than {FORMAT_VERSION} ignored (first: {self.unknown_versions[0]}); their questions are "
                           "scored again")
