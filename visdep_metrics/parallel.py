"""Where the audit may use more than one core: the cores it may run on, and forking.

Forked processes start at once with this process's imports and data (nothing is pickled on the way in), which is
what makes them pay off for the audit's second-long steps. Forking is used on Linux only: macOS can fork, but
system frameworks there are not fork-safe (Python's own default there has been spawn since 3.8).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from multiprocessing.context import BaseContext


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fork_context() -> BaseContext | None:
    """The fork start method where it is safe to use, else None (the caller then works in this process)."""
    if not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods():
        return None
    return mp.get_context("fork")
