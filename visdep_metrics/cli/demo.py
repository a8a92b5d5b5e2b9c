"""`visdep demo`: the whole audit on an embedded default, offline (see `visdep_metrics.demo.pipeline`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole audit offline on synthetic benchmarks and tiny models",
                       description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="visdep-demo", help="output folder (default: visdep-demo)")
    p.add_argument("--max-frames", type=int, default=8, help="frames per video for the VLMs (default 8)")
    p.add_argument("--no-smollm2", action="store_true", help="leave SmolLM2-135M out even when installed")
    p.set_defaults(func=_demo)


def _description() -> str:
    from visdep_metrics.demo import pipeline

    return pipeline.__doc__


def _demo(args) -> int:
    from visdep_metrics.demo.pipeline import run_demo

    return run_demo(Path(args.out), args.max_frames, not args.no_smollm2)
