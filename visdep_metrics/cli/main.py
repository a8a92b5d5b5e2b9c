"""`visdep`: one command line for the whole audit.

Each subcommand lives in its own module, which exposes `register(subparsers)`; registering adds a parser whose
`func(args) -> int` runs the command. A command reports bad input by raising a `VisdepError` (every error class of
the project that means "this file, record, key, option or path cannot be used" derives from it: BenchmarkDataError
and SpecError, RunDataError, PanelError, StressTestError, OutputDirError, OptionError); `main` prints it as one line
`visdep <command>: error: <message>` on stderr and exits 2. Any other exception is a bug and propagates with its
traceback (exit 1).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

from lmms_eval_tasks.errors import VisdepError

# Modules that provide subcommands, in the order `visdep --help` lists them.
COMMAND_MODULES = [
    "visdep_metrics.cli.audit",
    "visdep_metrics.cli.demo",
    "visdep_metrics.cli.tst",
    "visdep_metrics.cli.spec",
    "visdep_metrics.cli.twin",
    "visdep_metrics.cli.data",
    "visdep_metrics.cli.explore",
    "visdep_metrics.cli.store",
]
ERROR_STATUS = 2


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command's arguments `command_name`, e.g. "spec init", for its error messages."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(command_name=sub.prog.removeprefix(f"{parser.prog.split()[0]} "))
                _name_commands(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="visdep",
        description="Audit whether video QA benchmarks need the video: blind/video lmms-eval runs in, "
                    "Blind Gap, Visual Gain, Shortcut Score and grounded task variants out.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _name_commands(parser)
    return parser


def printable(message: str) -> str:
    """`message` with every character that is not printable, but for its own line breaks, as its escape ('\\x1e',
    '\\u2028', '\\ud800'): a name from data can hold a line or record separator, which would break the message's
    one line, or a lone surrogate, which stderr cannot encode."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in message)


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names; None: the process's own command line (the `visdep` script, `python -m`), and
    the process ends when this returns."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except VisdepError as e:
        print(f"visdep {args.command_name}: error: {printable(str(e))}", file=sys.stderr)
        return ERROR_STATUS
    finally:
        if argv is None:
            # The interpreter's shutdown collects garbage again and again while it clears the modules, each time
            # traversing every object still alive (an audit's tables, pandas, scipy, matplotlib): half a second
            # after a large audit. Frozen, they are skipped: the process is ending (every output written and closed),
            # and the system takes its memory back at once.
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
