"""The one place visdep opens a file someone else wrote: annotations, samples and results, specs and panels, twin
data and manifests, TsT outputs, frames and videos.

Every such read goes through here, so every one of them is bounded the same way:
- **regular files only**: a FIFO, a device (`/dev/zero`), a socket or a folder is refused before a byte is read. The
  file is opened with `O_NONBLOCK` (opening a FIFO does not wait for a writer) and judged by `fstat` of what was
  opened, so a link swapped in between cannot change the answer. Videos, which decoders open themselves, are judged
  by `stat` (`regular_file`).
- **a size limit per kind of file** (`LIMITS_MB`), checked before the read and again while reading (a file that
  grows). `VISDEP_MAX_<KIND>_MB` raises one where a real file is larger (`VISDEP_MAX_SAMPLES_MB=16384`).
- **text decoded once**, as UTF-8, the offending line named.
- **JSON and YAML nesting bounded** (`MAX_NESTING` levels) and YAML's aliases counted as what they expand to
  (`MAX_YAML_NODES`): a "billion laughs" file is refused, never expanded.
Every refusal is a `FileReadError`: one line naming the file, what it is and what to do.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from lmms_eval_tasks.errors import VisdepError, excerpt, flat

# What a real file of each kind holds, with room: a samples file of 100,000 questions with their prompts is ~1 GB.
LIMITS_MB = {
    "annotations": 2048, "samples": 8192, "results": 256, "spec": 4, "panel": 4, "manifest": 256,
    "twin": 2048, "tst": 1024, "frame": 256, "video": 1 << 20, "yaml": 4,
}
MAX_NESTING = 64  # levels of lists and objects: real records hold a handful
MAX_YAML_NODES = 1_000_000  # a YAML document's nodes with every alias expanded


class FileReadError(VisdepError):
    """A file that cannot be read as the kind it was asked for; the message names it and says why."""


def _raising(read: Callable) -> Callable:
    """`read` with an `error` keyword: the VisdepError class its refusals are raised as (a reader's own class, so
    that its callers' `except` keeps catching them), FileReadError by default."""

    @functools.wraps(read)
    def wrapper(*args, error: type[VisdepError] = FileReadError, **kwargs):
        try:
            return read(*args, **kwargs)
        except FileReadError as e:
            if error is FileReadError:
                raise
            raise error(str(e)) from None

    return wrapper


def limit_bytes(kind: str) -> int:
    """The size limit of a `kind` of file, in bytes: VISDEP_MAX_<KIND>_MB where set, else LIMITS_MB."""
    variable = f"VISDEP_MAX_{kind.upper()}_MB"
    value = os.environ.get(variable)
    if value is None:
        return LIMITS_MB[kind] << 20
    try:
        megabytes = float(value)
    except ValueError:
        raise FileReadError(f"{variable}={excerpt(value)}: expected a number of megabytes") from None
    if not megabytes > 0:
        raise FileReadError(f"{variable}={excerpt(value)}: expected a positive number of megabytes")
    return int(megabytes * (1 << 20))


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check(path: Path | str, info: os.stat_result, kind: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise FileReadError(f"{path}: {_kind_of(info.st_mode)}, not a file; give the {kind} file itself")
    limit = limit_bytes(kind)
    if info.st_size > limit:
        raise FileReadError(f"{path}: {info.st_size / (1 << 20):,.1f} MB, over the {limit / (1 << 20):,.0f} MB "
                            f"limit for a {kind} file (VISDEP_MAX_{kind.upper()}_MB raises it)")


def _os_error(path: Path | str, error: OSError) -> FileReadError:
    if isinstance(error, FileNotFoundError):
        return FileReadError(f"{path}: not found")
    return FileReadError(f"{path}: cannot be read ({error.strerror or error})")


@_raising
def resolved(path: Path | str) -> Path:
    """`path` made absolute, its links followed; FileReadError for a link loop or a path that is none."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: a link loop (Python 3.11); ValueError: a NUL
        raise FileReadError(f"{excerpt(str(path), 200)}: cannot be resolved ({flat(e, 200)})") from None


@_raising
def regular_file(path: Path | str, kind: str) -> os.stat_result:
    """`stat` of `path` (links followed) where it is a regular file within `kind`'s limit: for files a library opens
    itself (a video decoder, pyarrow, datasets). Raises FileReadError otherwise."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise (_os_error(path, e) if isinstance(e, OSError)
               else FileReadError(f"{excerpt(str(path))}: not a path")) from None
    _check(path, info, kind)
    return info


@contextmanager
def open_file(path: Path | str, kind: str) -> Iterator[BinaryIO]:
    """`path` opened for reading in binary, where it is a regular file within `kind`'s limit (checked on what was
    opened). Reads past the limit are the caller's to bound: `read_bytes` does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _os_error(path, e) from None
    except ValueError:
        raise FileReadError(f"{excerpt(str(path))}: not a path") from None
    try:
        _check(path, os.fstat(fd), kind)
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


@_raising
def read_bytes(path: Path | str, kind: str) -> bytes:
    """The bytes of a regular file of at most `kind`'s limit (also where it grows while read)."""
    limit = limit_bytes(kind)
    with open_file(path, kind) as f:
        try:
            # the size fstat gives and a byte more (a read of `limit` would reserve the limit's memory up front),
            # then what a growing file added, a MB at a time, up to the limit
            chunks = [f.read(os.fstat(f.fileno()).st_size + 1)]
            total = len(chunks[0])
            while total <= limit and (chunk := f.read(min(1 << 20, limit + 1 - total))):
                chunks.append(chunk)
                total += len(chunk)
        except OSError as e:
            raise _os_error(path, e) from None
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        raise FileReadError(f"{path}: grew past the {limit / (1 << 20):,.0f} MB limit for a {kind} file while read")
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # JSON's escape of a UTF-16 surrogate, paired or not
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")  # a surrogate encoded as UTF-8 (which UTF-8 forbids)


def unicode_text(value, where: str, error: type[VisdepError] = FileReadError):
    """`value` (JSON data) if every string in it is Unicode text; `error` naming `where` for a lone surrogate (JSON
    allows the escape "\\ud800", Python's strings hold it; no text does, and Arrow, CSV and a page refuse it)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{where}: a string holds a lone surrogate ({e.object[e.start:e.end]!r} in "
                    f"{excerpt(e.object[max(0, e.start - 30):e.start + 10])}), which is no Unicode text; the file "
                    f"was damaged or written by a broken encoder") from None
    return value


def read_json_text(data: bytes | str, where: str, error: type[VisdepError] = FileReadError):
    """JSON data from a file someone else wrote, checked once, here: `error` naming `where` for bytes that are not
    UTF-8, nesting too deep to read, or a lone surrogate (`unicode_text`). JSONDecodeError is the caller's to word
    (a samples line's reader words it per line); `parse_json` words it for a whole file."""
    try:
        value = json.loads(data)
    except UnicodeDecodeError as e:
        raise error(f"{where}: {not_utf8(e)}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to read") from None
    if isinstance(data, bytes):  # json.loads decodes bytes with "surrogatepass": a surrogate encoded in UTF-8 too
        suspect = _SURROGATE_BYTES.search(data) or _SURROGATE_ESCAPE.search(data.decode("utf-8", "replace"))
    else:
        suspect = _SURROGATE_ESCAPE.search(data)
    return unicode_text(value, where, error) if suspect else value


def not_utf8(error: UnicodeDecodeError) -> str:
    """What to say of bytes that are not UTF-8 text (e.g. Latin-1 from a spreadsheet), the line named."""
    line = error.object.count(b"\n", 0, error.start) + 1
    return (f"not UTF-8 text (byte 0x{error.object[error.start]:02x} on line {line}, at byte {error.start}); save it "
            f"as UTF-8 (Excel: CSV UTF-8)")


@_raising
def decode(data: bytes, where: Path | str) -> str:
    """UTF-8 text (a byte-order mark dropped); FileReadError naming the line otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileReadError(f"{where}: {not_utf8(e)}") from None


@_raising
def read_text(path: Path | str, kind: str) -> str:
    return decode(read_bytes(path, kind), path)


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """Levels of lists and dicts in `value`, counted without recursion and up to `limit` + 1 (a cyclic or shared
    structure stops at the limit)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


@_raising
def check_nesting(value: Any, where: Path | str) -> Any:
    if nesting_depth(value) > MAX_NESTING:
        raise FileReadError(f"{where}: nested more than {MAX_NESTING} levels deep; no record format visdep reads is")
    return value


@_raising
def parse_json(data: bytes | str, where: Path | str) -> Any:
    """JSON data, its strings Unicode text and its nesting bounded; FileReadError naming `where` and the line."""
    try:
        return check_nesting(read_json_text(data, str(where)), where)
    except json.JSONDecodeError as e:
        raise FileReadError(f"{where}: not valid JSON ({e.msg}: line {e.lineno} column {e.colno})") from None


@_raising
def read_json(path: Path | str, kind: str) -> Any:
    return parse_json(read_bytes(path, kind), path)


@_raising
def json_lines(data: bytes, where: Path | str) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line of JSONL bytes; FileReadError naming the line."""
    return [(number, parse_json(line, f"{where} line {number}"))
            for number, line in enumerate(data.split(b"\n"), 1) if line.strip()]


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses, before constructing anything, a document nested too deeply or with more
    nodes than MAX_YAML_NODES once its aliases are expanded (the aliased nodes are shared, so counting them once
    per use is linear in the file)."""

    def construct_document(self, node):
        sizes: dict[int, int] = {}
        stack = [(node, 1, False)]
        while stack:
            item, depth, done = stack.pop()
            if depth > MAX_NESTING:
                raise yaml.YAMLError(f"nested more than {MAX_NESTING} levels deep")
            if id(item) in sizes:
                continue
            children = ([c for pair in item.value for c in pair] if isinstance(item, yaml.MappingNode)
                        else item.value if isinstance(item, yaml.SequenceNode) else [])
            if not done:
                stack.append((item, depth, True))
                stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
                continue
            sizes[id(item)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(item)] > MAX_YAML_NODES:
                raise yaml.YAMLError(f"more than {MAX_YAML_NODES:,} values once its aliases are expanded")
        return super().construct_document(node)


@_raising
def parse_yaml(text: str, where: Path | str) -> Any:
    """YAML data (safe types only), bounded in nesting and in size with aliases expanded."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise FileReadError(f"{where}: nested too deeply to read") from None
    except yaml.YAMLError as e:
        raise FileReadError(f"{where}: not valid YAML ({flat(e)})") from None


@_raising
def read_yaml(path: Path | str, kind: str = "yaml") -> Any:
    return parse_yaml(read_text(path, kind), path)
