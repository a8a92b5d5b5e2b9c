"""Output folders: what a command may write into, and permissions that follow the user's umask."""

from __future__ import annotations

import os
from pathlib import Path


class OutputDirError(ValueError):
    """OUT exists and is not an earlier output of the same command."""


def check_out_dir(out: str | Path, marker: str, command: str) -> Path:
    """OUT may be new, empty, or an earlier output of `command` (it holds `marker`), which is replaced."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / marker).is_file())):
        raise OutputDirError(f"{out}: exists and is not an earlier visdep {command} output (no {marker}); "
                             f"choose a new or empty folder")
    return out


def umask() -> int:
    """The process's umask (read by setting it and putting it back: POSIX has no other way before Python 3.13)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def chmod_like_mkdir(folder: Path) -> None:
    """Give a folder made by tempfile.mkdtemp (0700) the permissions mkdir would have given it."""
    folder.chmod(0o777 & ~umask())
