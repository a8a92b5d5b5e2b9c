"""Where the audit may use more than one core: the cores it may run on, forked processes, and the CPU time spent.

Forked processes start at once with this process's imports and data (only each job's arguments are pickled on the
way in), which is what makes them pay off for the audit's second-long steps. Forking is used on Linux only: macOS
can fork, but system frameworks there are not fork-safe (Python's own default there has been spawn since 3.8).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import resource
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import TypeVar

from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def fork_context() -> BaseContext | None:
    """The fork start method where it is safe to use, else None (the caller then works in this process)."""
    if not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods():
        return None
    return mp.get_context("fork")


def cpu_seconds() -> float:
    """User and system CPU time of this process, its threads and the child processes it has waited for: on a busy
    machine a fairer measure of work than wall time."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# Work of at least this many bytes of input is spread over forked processes; smaller work, like the tests' audits,
# stays in this process, where starting processes and sending results back would cost about what they save.
PARALLEL_BYTES = 64 * 2**20
PROCESSES_ENV = "VISDEP_AUDIT_PROCESSES"


def process_count(n_items: int, total_bytes: int) -> int:
    """Processes to spread `n_items` over: one per usable core (at most $VISDEP_AUDIT_PROCESSES) where there are two
    or more items of PARALLEL_BYTES in all and the platform forks safely; else 1 (this process)."""
    cores = min(usable_cores(), int(os.environ.get(PROCESSES_ENV) or usable_cores()))
    if cores < 2 or n_items < 2 or total_bytes < PARALLEL_BYTES or fork_context() is None:
        return 1
    return min(cores, n_items)


def forked_map(function: Callable[[T], R], items: Sequence[T], sizes: Sequence[int], desc: str) -> list[R]:
    """[function(item) for item in items], in forked processes where `process_count` says so (the largest items
    first, so that the processes end about together); an error in a process is raised here as raised there."""
    processes = process_count(len(items), sum(sizes))
    with tqdm(total=len(items), desc=desc, leave=False) as progress:  # closed on an error too: it starts a new line
        if processes == 1:
            return [_counted(function(item), progress) for item in items]
        order = sorted(range(len(items)), key=lambda i: -sizes[i])
        # The Python docs' advice before fork(): frozen, the objects the children inherit are never touched by their
        # collections, so their pages are not copied and not traversed.
        gc.freeze()
        try:
            with ProcessPoolExecutor(max_workers=processes, mp_context=fork_context(), initializer=_one_core) as pool:
                done = dict(zip(order, (_counted(r, progress) for r in pool.map(function, [items[i] for i in order])),
                                strict=True))
        finally:
            gc.unfreeze()
    return [done[i] for i in range(len(items))]


def _one_core() -> None:
    """A forked process is one core's worth of work: BLAS threads of its own would only compete with the other
    processes for the same cores (OpenBLAS's waiting threads spin, burning CPU the other processes need)."""
    threadpool_limits(limits=1, user_api="blas")


def _counted(result: R, progress: tqdm) -> R:
    progress.update()
    return result
