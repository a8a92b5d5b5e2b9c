"""What an output was made from: package versions and the sha256 of input files."""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
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


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in 16 MB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()
