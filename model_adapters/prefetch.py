"""Video prefixes prepared ahead of the model, in a bounded window, handed over in order.

Building a video prefix has a CPU part (decode and sample the video, the processor's resize, normalisation
and patching) and a device part (move to the device, position ids). While the model scores one video's
questions, worker threads run the CPU part of the next videos; the model takes each prepared prefix in
order and runs the device part itself (`scoring.Prefix`). The values are those of the serial path, bit for
bit: the same functions run on the same inputs, only earlier and on another thread.

Threads, not processes: PyAV decodes with the GIL released (`avcodec_send_packet` / `avcodec_receive_frame`
and the colour conversion run `with nogil`), Pillow decodes JPEGs outside the GIL, and the processors'
resize and normalisation are torch operations, which release it too; what holds the GIL is the Python
around them (`docs/performance.md` has the measurement, `bench/bench_pipeline.py` repeats it). Processes
would copy every prepared video between processes and a processor into each.

The window is bounded twice: at most `max_videos` prefixes prepared or in preparation beyond the one the
model is on, and at most `max_bytes` of prepared inputs held (a prefix in preparation counts as the largest
prepared so far; until the first is done only one is prepared). The prefix the model needs next is always
prepared, whatever its size.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

DEFAULT_PREFETCH_MB = 768  # with the frame cache's 256 MiB (model_adapters.frames): about 1 GB of frames held
MAX_DEFAULT_WORKERS = 16


def cores_per_rank() -> int:
    """The CPU cores this process may use, shared among the data-parallel ranks of one machine (torchrun's
    LOCAL_WORLD_SIZE)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def default_workers() -> int:
    """One worker per core but the one the model's loop runs on, at least one, at most MAX_DEFAULT_WORKERS."""
    return max(1, min(MAX_DEFAULT_WORKERS, cores_per_rank() - 1))


def decoder_threads_for(workers: int) -> int:
    """FFmpeg decoding threads per video for `workers` workers: the cores the model's loop leaves, shared among
    them (at least 1); decoding in the loop (0 workers) leaves the choice to FFmpeg (0)."""
    return max(1, (cores_per_rank() - 1) // workers) if workers else 0


@dataclass(frozen=True)
class Prefetch:
    """How prefixes are prepared: `workers` threads (0: each prefix prepared when the model reaches it, on the
    model's thread), at most `max_videos` prepared or in preparation ahead of the model, at most `max_bytes` of
    prepared inputs held."""

    workers: int
    max_videos: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"decode_workers must be >= 0, got {self.workers}")
        if self.max_videos < 1:
            raise ValueError(f"prefetch_videos must be >= 1, got {self.max_videos}")
        if self.max_bytes < 1:
            raise ValueError(f"prefetch_mb must be > 0, got {self.max_bytes / 2**20:g}")

    @classmethod
    def of(cls, workers: int | str | None = None, max_videos: int | str | None = None,
           max_mb: float | str = DEFAULT_PREFETCH_MB) -> Prefetch:
        """From `visdep_vlm`'s model_args (`decode_workers`, `prefetch_videos`, `prefetch_mb`, given as numbers or
        text), defaults filled in: `default_workers()` (also for "auto"), twice as many videos as workers (at
        least 2)."""
        try:
            workers = default_workers() if workers in (None, "auto") else int(workers)
            videos = max(2, 2 * workers) if max_videos is None else int(max_videos)
            budget = int(float(max_mb) * 2**20)
        except ValueError:
            raise ValueError(f"decode_workers must be an integer or auto, prefetch_videos an integer and prefetch_mb "
                             f"a number; got {workers!r}, {max_videos!r}, {max_mb!r}") from None
        return cls(workers, videos, budget)


def nbytes(value: object) -> int:
    """Bytes of the tensors and arrays in `value` (a processor's output: a mapping of tensors)."""
    if isinstance(value, torch.Tensor):
        return value.nelement() * value.element_size()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, Mapping):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    return 0


class PreparedInOrder:
    """The results of `prepares`, taken one by one in order with `take()`, computed ahead by `prefetch.workers`
    threads within the window `prefetch` bounds (None or 0 workers: each computed by `take()`).

    A `prepare` that raised raises its error from the `take()` that reaches it. Use it as a context manager:
    leaving it cancels what has not started and waits for the workers. `waited` is the time `take()` spent
    waiting (serially: preparing), `peak_bytes` the most prepared bytes held at once."""

    def __init__(self, prepares: Sequence[Callable[[], object]], prefetch: Prefetch | None = None) -> None:
        self._prepares = list(prepares)
        self.workers = 0 if prefetch is None else prefetch.workers
        self._prefetch = prefetch
        self._futures: dict[int, Future] = {}
        self._sizes: dict[int, int] = {}  # prepared and not yet taken
        self._largest: int | None = None
        self._next_submit = self._next_take = 0
        self._lock = threading.RLock()
        self._closed = False
        self._pool = (ThreadPoolExecutor(self.workers, thread_name_prefix="visdep-prepare") if self.workers
                      else None)
        self.waited = 0.0
        self.peak_bytes = 0
        self.started = time.perf_counter()

    def __enter__(self) -> PreparedInOrder:
        if self._pool is not None:
            self._top_up()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    @property
    def taken(self) -> int:
        return self._next_take

    def summary(self) -> str:
        """Videos per second and the share of the time the model waited for them, since the start."""
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        return f"{self.taken / elapsed:.2f} videos/s, waited {self.waited / elapsed:.0%} for frames"

    def report(self) -> str:
        """The summary line of a finished run."""
        return (f"{self.taken} videos, decode workers {self.workers}: {self.summary()} ({self.waited:.1f} s); "
                f"at most {self.peak_bytes / 2**20:.0f} MiB of prepared videos held ahead")

    def _run(self, index: int) -> object:
        with torch.inference_mode():  # as on the model's thread: no autograd records
            value = self._prepares[index]()
        size = nbytes(value)
        with self._lock:
            self._sizes[index] = size
            self._largest = max(size, self._largest or 0)
            self.peak_bytes = max(self.peak_bytes, sum(self._sizes.values()))
        return value

    def _held_bytes(self) -> int:
        """Prepared bytes not taken, plus the largest prepared size for each prefix still in preparation."""
        in_preparation = self._next_submit - self._next_take - len(self._sizes)
        return sum(self._sizes.values()) + in_preparation * (self._largest or 0)

    def _top_up(self) -> None:
        """Start preparing further prefixes while the window allows (called by `take()` and as each finishes)."""
        with self._lock:
            while not self._closed and self._next_submit < len(self._prepares):
                ahead = self._next_submit - self._next_take
                if ahead > 0:  # beyond the prefix the model needs next: within the bounds only
                    if ahead >= self._prefetch.max_videos or self._largest is None:
                        break
                    if self._held_bytes() + self._largest > self._prefetch.max_bytes:
                        break
                index = self._next_submit
                self._next_submit += 1
                future = self._pool.submit(self._run, index)
                self._futures[index] = future
                future.add_done_callback(lambda _: self._top_up())

    def take(self) -> object:
        """The next prefix's prepared inputs, in order; raises what its `prepare` raised."""
        if self._next_take >= len(self._prepares):
            raise IndexError("every prepared prefix has been taken")
        start = time.perf_counter()
        try:
            if self._pool is None:
                with torch.inference_mode():
                    return self._prepares[self._next_take]()
            self._top_up()
            return self._futures[self._next_take].result()
        finally:
            self.waited += time.perf_counter() - start
            with self._lock:
                self._futures.pop(self._next_take, None)
                self._sizes.pop(self._next_take, None)
                self._next_take += 1
            if self._pool is not None:
                self._top_up()
