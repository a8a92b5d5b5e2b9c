"""`visdep demo`: the whole audit on an embedded default, offline (see `visdep_metrics.demo.pipeline`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    register_demo(sub)
    register_validate(sub)


def register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole audit offline on synthetic benchmarks and tiny models",
                       description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="visdep-demo", help="output folder (default: visdep-demo)")
    p.add_argument("--max-frames", type=int, default=4, help="frames per clip for the VLMs (default 4)")
    p.add_argument("--videos", type=int, default=60, help="clips of the planted benchmark, five questions each "
                                                          "(default 60)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="where trained checkpoints are kept between runs (default ~/.cache/visdep/demo)")
    p.add_argument("--no-smollm2", action="store_true", help="leave SmolLM2-135M out even when installed")
    p.set_defaults(func=_demo)


def register_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="sweep the planted benchmark's dials and print which settings let the "
                                        "Shortcut Score, with the paper's T(q) and each chance-aware variant, "
                                        "recover its planted shortcuts",
                       description=_validate_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="also write OUT/validate.csv (every row) and "
                                                          "OUT/recovery.csv (the counts per variant)")
    p.add_argument("--videos", type=int, default=40, help="clips per setting, five questions each (default 40)")
    p.add_argument("--shares", type=float, nargs="+", default=[0.3, 0.7],
                   help="shares of accident-reason and prevention questions carrying a give-away (default 0.3 0.7)")
    p.add_argument("--strengths", type=float, nargs="+", default=[1.0, 0.8, 0.6],
                   help="probabilities that a give-away points at the right answer (default 1.0 0.8 0.6)")
    p.add_argument("--taus", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3], help="thresholds τ")
    p.add_argument("--cache-dir", type=Path, default=None, help="trained checkpoints (default ~/.cache/visdep/demo)")
    p.add_argument("--no-smollm2", action="store_true", help="leave SmolLM2-135M out of the text panel")
    p.set_defaults(func=_validate)


def _validate_description() -> str:
    from visdep_metrics.demo import validate

    return validate.__doc__


def _validate(args) -> int:
    import pandas as pd

    from visdep_metrics.demo.validate import recovery_counts, validate

    table = validate(args.out, args.cache_dir, args.videos, shares=args.shares, strengths=args.strengths,
                     taus=args.taus, with_smollm2=not args.no_smollm2)
    # one row per setting, one column per variant of T(q): "precision / recall", * where it recovers the shortcuts
    rows = zip(table["precision"], table["recall"], table["recovers"], strict=True)
    cells = table.assign(cell=[f"{p:.2f} / {r:.2f}{' *' if ok else ''}" if p == p else f"– / {r:.2f}"
                               for p, r, ok in rows])
    wide = cells.pivot(index=["shortcut_share", "strength", "panel_size", "tau"], columns="variant", values="cell")
    wide = wide[list(dict.fromkeys(table["variant"]))]
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(wide.reset_index().to_string(index=False))
    print("\nsettings (shortcut share, strength, text panel size, τ) in which S recovers the planted shortcuts "
          "(precision and recall >= 0.8, >= 90% of the video-only questions kept; * above), per variant of T(q):")
    for row in recovery_counts(table).itertuples():
        print(f"  {row.variant}: {row.recovers} of {row.settings}")
    return 0


def _description() -> str:
    from visdep_metrics.demo import pipeline

    return pipeline.__doc__


def _demo(args) -> int:
    from visdep_metrics.demo.pipeline import run_demo
    from visdep_metrics.demo.planted import PlantedConfig

    return run_demo(Path(args.out), args.max_frames, not args.no_smollm2, args.cache_dir,
                    PlantedConfig(videos=args.videos))
