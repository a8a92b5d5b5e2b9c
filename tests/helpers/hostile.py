"""What every test of a hostile file asserts: one line or a result, never a traceback, never a hang."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest

from lmms_eval_tasks.errors import VisdepError

MAX_MESSAGE = 1500  # a message names a file and a short excerpt: never the bad value in full


@contextmanager
def deadline(seconds: int = 20):
    """SIGALRM raises TimeoutError in the test after `seconds`: a blocking open of a FIFO is interrupted too."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line(message: str) -> str:
    assert "\n" not in message and len(message) < MAX_MESSAGE, message[:3000]
    return message


def refused(read: Callable, *args, match: str, error: type[BaseException] = VisdepError, seconds: int = 20,
            **kwargs) -> str:
    """`read(*args, **kwargs)` raises `error` within `seconds`, with one short line matching `match`."""
    with deadline(seconds), pytest.raises(error) as raised:
        read(*args, **kwargs)
    message = one_line(str(raised.value))
    assert re.search(match, message), message
    return message


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def deeply_nested(levels: int = 100_000) -> str:
    return "[" * levels + "]" * levels


BILLION_LAUGHS = "\n".join(["a: &a ['lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol']",
                            *(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]"
                              for i in range(8))]) + "\n"


def laughs_value() -> str:
    """A flow list of nine levels whose last holds nine aliases of the level below: 387 million strings once
    expanded, a few hundred bytes as written."""
    levels = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"&{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
    return "[" + ", ".join(levels) + "]"
