"""The root of every error a user can fix: a file, record, key, option or path that cannot be used.

It lives in the lowest layer so that every layer's own errors derive from it (the benchmark readers' BenchmarkDataError,
the audit's RunDataError and PanelError, the output folders' OutputDirError...). `visdep`'s command line prints a
VisdepError as one line naming what is wrong and exits 2; any other exception is a bug and keeps its traceback. It is a
ValueError so that a library caller's `except ValueError` still catches bad input.
"""

from __future__ import annotations

import reprlib


class VisdepError(ValueError):
    """Input a user can fix; the message names the file, record, key, option or path."""


class OptionError(VisdepError):
    """A command-line option or a library argument outside what it can be; the message names the option."""



def excerpt(value: object, limit: int = 80) -> str:
    """A bad value as an error message may show it: escaped onto one line, at most about `limit` characters, with
    the length of a long string's rest (a 10 MB field or a billion-laughs list stays a short line: `reprlib` stops
    at a few levels and items)."""
    if isinstance(value, str):
        shown = repr(value[:limit])
        return shown if len(value) <= limit else f"{shown}... ({len(value) - limit:,} more characters)"
    short = reprlib.Repr()  # Python 3.11's takes no arguments
    short.maxlevel = 3
    short.maxstring = short.maxother = short.maxlong = limit // 2
    shown = short.repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}..."


def flat(text: str, limit: int = 300) -> str:
    """A library's message (a YAML parser's marks, pyarrow's context) on one line, at most `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else f"{text[:limit]}..."
