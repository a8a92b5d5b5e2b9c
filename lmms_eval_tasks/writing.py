"""The one way visdep writes a file into a folder that is not its own staging folder: beside a spec (`visdep spec
init`, the unusable-records list), into a twin's `--out`, into an export's folder, into lmms-eval's output folder.

Those folders hold other people's files, and maybe a link planted where visdep will write (`my_bench_spec.jsonl ->
~/.bashrc`). `write_file` therefore:
- takes one file name, never a path: a name with a separator, '.', '..' or a NUL is refused, so nothing lands outside
  the folder whatever a spec's or a manifest's name says;
- writes a temporary file in the folder and renames it over the name (`os.replace`): a link at that name is
  replaced by the file, never written through, and a reader sees the old file or the new one, never half of one.
(The audit's, TsT's and the demo's OUT are written through `visdep_metrics.outdir.staged`, a folder of their own.)
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from lmms_eval_tasks.errors import VisdepError, excerpt
from lmms_eval_tasks.reading import FileReadError, open_file

HEADER_BYTES = 4096  # what `starts_with` reads of an existing file
# The process's umask, read once at import (reading it means setting it, which a thread would race with): a written
# file gets the permissions a plain open() would give it, not mkstemp's 0o600.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class WriteError(VisdepError):
    """A file visdep cannot write where it was asked to; the message names the folder and the name."""


def check_name(name: str) -> str:
    """`name` where it is one file name; WriteError otherwise."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or (os.altsep and os.altsep in name):
        raise WriteError(f"{excerpt(name)} is not a file name (it would be written outside its folder)")
    return name


def write_file(folder: str | os.PathLike, name: str, data: str | bytes) -> Path:
    """folder/name replaced by `data` (text as UTF-8), atomically and without following a link at that name. The
    folder is created where missing. Raises WriteError naming the file where it cannot be written."""
    folder = Path(folder)
    path = folder / check_name(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if path.is_dir() and not path.is_symlink():
            raise WriteError(f"{path}: a folder is in the way of the file visdep writes there")
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name[:100]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.chmod(temporary, 0o666 & ~_UMASK)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise WriteError(f"{path}: cannot be written ({e.strerror or e})") from None
    return path


def starts_with(path: Path, header: str) -> bool:
    """Whether the regular file at `path` (not a link) begins with `header`: is it one visdep wrote? A link, a FIFO
    or a device is not (nothing is read from it)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open_file(path, "yaml") as f:
            return f.read(HEADER_BYTES).startswith(header.encode("utf-8"))
    except (OSError, FileReadError):
        return False
