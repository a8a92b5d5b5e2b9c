"""What an output was made from: package versions and the sha256 of input files (kept for unchanged files)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import tempfile
import time
from pathlib import Path

# Distributions whose versions decide the numbers visdep writes.
PACKAGES = ("visdep", "lmms-eval", "numpy", "pandas", "scipy", "pyarrow", "msgspec", "scikit-learn", "matplotlib")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """{"python": version, distribution: version or "not installed"}, read from the installed metadata (nothing
    is imported)."""
    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


# --------------------------------------------------------------------------- hashes of unchanged files
HASH_CACHE_ENV = "VISDEP_HASH_CACHE"
HASH_CACHE_ENTRIES = 20_000  # the most recent files kept (about 2 MB of JSON)
# A file changed less than this long before it was looked at may change again within the same timestamp tick (file
# times are taken from a coarse clock, milliseconds to seconds) without its stat changing: its hash is not kept.
RACY_SECONDS = 2.0


def settled(state: list[int]) -> bool:
    """Whether a file read now in `state` last changed long enough ago (RACY_SECONDS) that a later write could not
    leave the same times behind: file times come from a coarse clock (the "racy" rule of git's index)."""
    return time.time_ns() - state[2] > RACY_SECONDS * 1e9


def file_state(st: os.stat_result) -> list[int]:
    """What says a file is unchanged: size, modification and change times (ns), inode, device. Writing a file
    moves its mtime and ctime; the ctime cannot be set back from user space (unlike the mtime: `touch`, `cp -p`);
    replacing a file gives a new inode."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


class HashCache:
    """sha256 of files the audit hashed before, kept while their state (`file_state`) is unchanged: audits of the
    same runs (another panel, a baseline, a label) need not hash gigabytes again. In $VISDEP_HASH_CACHE, else
    $XDG_CACHE_HOME/visdep/sha256.json (~/.cache/visdep/sha256.json); VISDEP_HASH_CACHE=off keeps nothing."""

    def __init__(self, path: Path | None, entries: dict[str, list]):
        self.path, self.entries = path, entries

    @classmethod
    def load(cls) -> HashCache:
        setting = os.environ.get(HASH_CACHE_ENV, "")
        if setting.lower() == "off":
            return cls(None, {})
        path = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
            / "visdep" / "sha256.json"
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or unreadable: start afresh
            entries = {}
        return cls(path, entries if isinstance(entries, dict) else {})

    def of(self, paths: list[Path]) -> HashCache:
        """The entries of these files only (what a forked process needs), saving nowhere."""
        keys = {str(Path(p).resolve()) for p in paths}
        return HashCache(None, {k: v for k, v in self.entries.items() if k in keys})

    def known(self, path: Path, state: list[int]) -> str | None:
        """The sha256 of `path` if it was hashed in this `file_state`."""
        entry = self.entries.get(str(Path(path).resolve()))
        return entry[-1] if isinstance(entry, list) and entry[:-1] == state else None

    def save(self, hashed: dict[str, tuple[list[int] | None, str]]) -> None:
        """Add {path: (file_state, sha256)} (files without a state, racy or changed while read, left out) and write
        the cache atomically; a cache that cannot be written is left as it was."""
        if self.path is None:
            return
        for path, (state, sha) in hashed.items():
            key = str(Path(path).resolve())
            self.entries.pop(key, None)  # re-inserted last: the most recent are kept
            if state is not None:
                self.entries[key] = [*state, sha]
        kept = dict(list(self.entries.items())[-HASH_CACHE_ENTRIES:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".sha256-")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(kept, f)
            os.replace(temporary, self.path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
