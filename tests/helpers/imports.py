"""What importing some modules loads, seen from a fresh interpreter (this one has loaded everything already)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def heavy_modules_loaded(modules: Sequence[str], heavy: Sequence[str] = ("torch", "transformers")) -> list[str]:
    """The modules of `heavy` that importing `modules` in a new Python process loads."""
    code = ("import importlib, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            f"print(' '.join(sorted(m for m in {list(heavy)!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()
