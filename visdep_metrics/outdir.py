"""Output folders: what a command may replace, and how it replaces it.

A command writes OUT through `staged`: everything goes into a staging folder beside OUT (`.OUT.writing-<pid>-*`),
then a file list (`visdep_files.json`: the command and each file's size and sha256) is written and the staging folder
takes OUT's place in two renames, so an error, Ctrl-C or SIGTERM leaves OUT as it was. An existing OUT is replaced
only where it is empty, or where it holds exactly what an earlier run of the same command listed, unchanged: a file
the user added or edited there makes the command refuse, naming it. OUT may not hold an input of the command (a run
folder, `--tst`, `--panel`, `--spec`) or the working folder. Staging folders left by a process that died are
removed (or, where the process is alive, named) the next time a command writes beside them.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.errors import VisdepError

FILE_LIST = "visdep_files.json"
_STAGING = re.compile(r"^\.(?P<name>.+)\.(?P<kind>writing|previous)-(?P<pid>\d+)-[^/]+$")


class OutputDirError(VisdepError):
    """OUT cannot be written or replaced; the message names the folder and what is in the way."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _listed(folder: Path) -> dict[str, dict]:
    """Every file under `folder` (relative posix path -> size and sha256), the file list itself left out."""
    return {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() != FILE_LIST}


def _foreign(out: Path, command: str) -> list[str]:
    """What in an existing OUT an earlier `command` did not write, or wrote and someone changed since."""
    try:
        listing = json.loads((out / FILE_LIST).read_text(encoding="utf-8"))
        files, written_by = dict(listing["files"]), listing["command"]
    except (OSError, ValueError, KeyError, TypeError):
        return sorted(p.name for p in out.iterdir())  # no readable file list: nothing here is known to be ours
    if written_by != command:
        return [f"{FILE_LIST} (written by visdep {written_by}, not {command})"]
    found = []
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if relative == FILE_LIST or (path.is_dir() and not path.is_symlink()):
            continue
        entry = files.get(relative)
        if entry is None or path.is_symlink() or not path.is_file():
            found.append(relative)
        elif path.stat().st_size != entry.get("size") or _sha256(path) != entry.get("sha256"):
            found.append(f"{relative} (changed since visdep {command} wrote it)")
    return found


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_out_dir(out: str | Path, command: str, inputs: Iterable[str | Path] = ()) -> Path:
    """OUT, resolved, if `command` may write it: new, empty, or an unchanged earlier output of `command`; and holding
    neither an input nor the working folder. Raises OutputDirError naming what is in the way."""
    given = Path(out)
    out = given.expanduser().resolve()
    for path in [*map(Path, inputs), Path.cwd()]:
        resolved = path.expanduser().resolve()
        if _inside(resolved, out):
            what = "the working folder" if path == Path.cwd() else f"the input {path}"
            raise OutputDirError(f"--out {given}: holds {what}, which replacing it would delete; choose an output "
                                 f"folder outside the inputs")
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise OutputDirError(f"--out {given}: exists and is not a folder")
        if (out / FILE_LIST).is_file() or any(out.iterdir()):
            foreign = _foreign(out, command)
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise OutputDirError(f"--out {given}: holds what visdep {command} did not write there ({shown}); "
                                     f"move it away or choose a new or empty folder (visdep replaces only its own "
                                     f"earlier output, listed in {FILE_LIST})")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out: Path) -> None:
    """Remove the staging folders beside OUT that a dead process left (an earlier OUT set aside is put back where
    OUT is missing); name the ones a live process holds."""
    if not out.parent.is_dir():
        return
    for path in sorted(out.parent.glob(f".{out.name}.*-*")):
        match = _STAGING.match(path.name)
        if not match or match["name"] != out.name or not path.is_dir():
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and _alive(pid):
            logger.warning(f"{path}: a staging folder of process {pid}, which is still running (another visdep "
                           f"writing {out}?)")
            continue
        if match["kind"] == "previous" and (path / out.name).is_dir() and not out.exists():
            (path / out.name).rename(out)
            logger.warning(f"{out}: put back from {path}, set aside by process {pid}, which stopped before its new "
                           f"output took its place")
        shutil.rmtree(path, ignore_errors=True)
        logger.info(f"removed {path}, a staging folder left by process {pid}")


def umask() -> int:
    """The process's umask (read by setting it and putting it back: POSIX has no other way before Python 3.13)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def chmod_like_mkdir(folder: Path) -> None:
    """Give a folder made by tempfile.mkdtemp (0700) the permissions mkdir would have given it."""
    folder.chmod(0o777 & ~umask())


class _Terminated(BaseException):
    """SIGTERM while a staging folder is open: raised so that the folder is removed on the way out."""


@contextmanager
def _terminate_as_exception() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, previous)
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


class Staged:
    """The staging folder a command writes into (`folder`), and where its files will be once in place (`final`)."""

    def __init__(self, folder: Path, out: Path):
        self.folder, self.out = folder, out

    def final(self, paths: Sequence[Path]) -> list[Path]:
        """`paths` written into the staging folder, as they will be named in OUT."""
        return [self.out / Path(p).relative_to(self.folder) for p in paths]


@contextmanager
def _one_at_a_time(parent: Path) -> Iterator[None]:
    """OUT's checks and its replacement by one process at a time: an exclusive flock on OUT's parent folder, held
    for the check of what OUT holds and for the two renames (two commands writing one OUT otherwise saw it vanish
    mid-check, or renamed onto each other's). No file of its own beside OUT; a file system without locks: as before."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)  # drops the lock


@contextmanager
def staged(out: str | Path, command: str, inputs: Iterable[str | Path] = ()) -> Iterator[Staged]:
    """Write OUT in a staging folder and put it in OUT's place at the end (see the module docstring)."""
    parent = Path(out).expanduser().resolve().parent
    if parent.is_dir():
        with _one_at_a_time(parent):
            out = check_out_dir(out, command, inputs)
    else:  # no OUT to race for
        out = check_out_dir(out, command, inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-{os.getpid()}-", dir=out.parent))
    except OSError as e:
        raise OutputDirError(f"{out}: cannot write there ({e.strerror})") from e
    try:
        with _terminate_as_exception():
            chmod_like_mkdir(folder)  # mkdtemp makes it 0700; OUT follows the umask like any folder the user makes
            yield Staged(folder, out)
            listing = {"command": command, "files": _listed(folder)}
            (folder / FILE_LIST).write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
            aside = None
            with _one_at_a_time(out.parent):
                check_out_dir(out, command, inputs)  # again: something may have appeared in OUT meanwhile
                if out.exists():
                    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.previous-{os.getpid()}-", dir=out.parent))
                    out.rename(aside / out.name)
                folder.rename(out)
            if aside is not None:
                shutil.rmtree(aside)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
