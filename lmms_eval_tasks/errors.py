"""The root of every error a user can fix: a file, record, key, option or path that cannot be used.

It lives in the lowest layer so that every layer's own errors derive from it (the benchmark readers' BenchmarkDataError,
the audit's RunDataError and PanelError, the output folders' OutputDirError...). `visdep`'s command line prints a
VisdepError as one line naming what is wrong and exits 2; any other exception is a bug and keeps its traceback. It is a
ValueError so that a library caller's `except ValueError` still catches bad input.
"""

from __future__ import annotations


class VisdepError(ValueError):
    """Input a user can fix; the message names the file, record, key, option or path."""


class OptionError(VisdepError):
    """A command-line option or a library argument outside what it can be; the message names the option."""
