"""`visdep audit RUN_DIR... --out OUT`: Blind Gap, Visual Gain, Shortcut Score, filters and grounded tasks."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmms_eval_tasks.errors import OptionError
from visdep_metrics.cli.options import add_spec_argument, add_twin_argument


def register(sub: argparse._SubParsersAction) -> None:
    from visdep_metrics.audit.diagnostics import TEXTUAL_EVIDENCE

    p = sub.add_parser(
        "audit", help="audit lmms-eval runs of the visdep tasks: BG, VG, T/V/S, filters, grounded tasks, report",
        description="Read lmms-eval output folders (--log_samples runs of the <bench>_blind / <bench>_video tasks) "
                    "and write summary.csv, headline.csv, questions.csv, filters.csv, sweep.csv, top_shortcuts.csv "
                    "(frames.csv, ladder.csv and compare.csv where they apply), report.md, plots, audit.json "
                    "(provenance: package versions, sha256 of every input) and the grounded and temporal task YAMLs "
                    "(OUT/tasks, for lmms-eval --include_path). A model is a checkpoint under one set of "
                    "score-changing settings (max_frames, dtype, revision, scoring, ...; the adapter's defaults filled "
                    "in); runs of one checkpoint with frames=middle or frame_order=shuffled|reversed form its "
                    "temporal ladder (docs/ladder.md). Intervals count "
                    "the videos and blind prompts questions share (design effects, docs/statistics.md), within each "
                    "category and subset.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="lmms-eval --output_path folders (any nesting); put them before --tst")
    p.add_argument("--out", required=True, help="output folder (new, empty, or an earlier audit's, which is replaced)")
    p.add_argument("--panel", help="panel YAML, or the name of a shipped one (paper: configs/panels/paper.yaml); "
                                   "default: text-only models form T, VLMs form V")
    p.add_argument("--tau", type=float, help="keep questions with S(q) <= tau (default: the panel's, else 0.1)")
    p.add_argument("--tau-order", type=float,
                   help="the temporal subset keeps grounded questions with V_order(q) >= this (default: the panel's "
                        "tau_order, else 0.1; docs/ladder.md)")
    p.add_argument("--max-hits", type=int, help="LLM-Inspector drops a question answered correctly by more than "
                                                "this many LLMs (default: the panel's, else 1)")
    p.add_argument("--textual-evidence", default="paper", metavar="NAME",
                   help=f"T(q)'s formula over the text panel's blind results: {', '.join(sorted(TEXTUAL_EVIDENCE))} "
                        f"(default paper: the paper's eq. 3, correct times one minus the normalised entropy, averaged "
                        f"over the text LLMs)")
    p.add_argument("--tst", nargs="+", default=[], metavar="DIR", help="`visdep tst` output folders to join")
    p.add_argument("--baseline", metavar="MODEL",
                   help="compare every model with this one, question by question: compare.csv and a report section "
                        "with paired intervals of the changes in Acc_B (= BG), Acc_V and VG, their p-values (raw "
                        "and Holm-adjusted), and a flag where accuracy rose from text shortcuts. MODEL: as in "
                        "pretrained= (a checkpoint run under several settings, e.g. two max_frames, is named with "
                        "them: 'org/x [max_frames=8]', or by its label)")
    p.add_argument("--label", action="append", default=[], metavar="NAME=ALIAS", type=_label,
                   help="a short label for a model in the report's tables and plots (default: the last part of its "
                        "pretrained= plus the settings that tell it from other runs of that checkpoint, e.g. "
                        "'tiny_qwen [max_frames=8]'); repeatable")
    p.add_argument("--no-explorer", action="store_true",
                   help="do not write explorer.html and frames/ (the page of every question; docs/explorer.md)")
    p.add_argument("--video-root", action="append", default=[], metavar="BENCHMARK=DIR", type=_video_root,
                   help="where a benchmark's videos are, for the explorer's frames (default: its root variable, "
                        "e.g. VRU_ACCIDENT_ROOT, as lmms-eval found them); repeatable")
    add_spec_argument(p)  # runs of a benchmark of your own: its spec makes the benchmark known
    add_twin_argument(p)  # runs of upstream tasks' twins: their folder makes them known
    p.set_defaults(func=_audit)


def _label(text: str) -> tuple[str, str]:
    name, sep, alias = text.rpartition("=")
    if not sep or not name.strip() or not alias.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=ALIAS, got {text!r}")
    return name.strip(), alias.strip()


def _video_root(text: str) -> tuple[str, str]:
    benchmark, sep, folder = text.partition("=")
    if not sep or not benchmark.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"expected BENCHMARK=DIR, got {text!r}")
    return benchmark.strip(), folder.strip()


def _audit(args) -> int:
    # Imported here: `visdep --help` should not pay for pandas, scipy and matplotlib.
    from lmms_eval_tasks.shipped import config_file
    from lmms_eval_tasks.spec_data import register_specs
    from lmms_eval_tasks.twin import open_twins
    from visdep_metrics.audit.compute import run_audit
    from visdep_metrics.audit.report import check_out_dir, write_audit

    panel = config_file(args.panel, "panels") if args.panel else None
    inputs = [*args.run_dirs, *args.tst, *([panel] if panel else []), *(config_file(s, "specs") for s in args.spec),
              *args.twin]
    check_out_dir(args.out, inputs)  # before the long read of the runs
    for benchmark, folder in args.video_root:  # a root that is not there would show no frames, and say nothing
        if not Path(folder).expanduser().is_dir():
            raise OptionError(f"--video-root {benchmark}={folder}: not a folder (from {Path.cwd()})")
    register_specs(args.spec)
    open_twins(args.twin)
    audit = run_audit(args.run_dirs, panel_path=panel, tau=args.tau, max_hits=args.max_hits, tst_dirs=args.tst,
                      baseline=args.baseline, labels=dict(args.label),
                      textual_evidence=args.textual_evidence, tau_order=args.tau_order)
    roots = {benchmark: Path(folder) for benchmark, folder in args.video_root}
    print(write_audit(audit, args.out, inputs, video_roots=roots, explorer=not args.no_explorer) / "report.md")
    return 0
