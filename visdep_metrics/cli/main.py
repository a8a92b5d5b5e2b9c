"""`visdep`: one command line for the whole audit.

Each subcommand lives in its own module, which exposes `register(subparsers)`; registering adds a
parser whose `func(args) -> int` runs the command.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that provide subcommands, in the order `visdep --help` lists them.
COMMAND_MODULES = [
    "visdep_metrics.cli.audit",
    "visdep_metrics.cli.demo",
    "visdep_metrics.cli.tst",
    "visdep_metrics.cli.spec",
    "visdep_metrics.cli.data",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="visdep",
        description="Audit whether video QA benchmarks need the video: blind/video lmms-eval runs in, "
                    "Blind Gap, Visual Gain, Shortcut Score and grounded task variants out.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
