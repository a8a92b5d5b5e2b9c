"""`visdep spec init` (blind and video tasks from a benchmark spec) and `visdep spec report` (a first look
without any model: the stress test and the health figures)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loguru import logger


def register(sub: argparse._SubParsersAction) -> None:
    spec = sub.add_parser(
        "spec", help="a benchmark of your own, described by a short YAML spec (configs/specs/*.yaml): tasks, report",
        description="A spec names the annotation files (JSON, JSONL, CSV, parquet, a saved Hugging Face dataset) and "
                    "which fields hold the question id, question, options, answer, video, category and source "
                    "(README: 'Audit your own benchmark'). Other commands take it with --spec SPEC: check-data, "
                    "tst, ibp, audit.")
    commands = spec.add_subparsers(dest="spec_command", metavar="SPEC_COMMAND", required=True)

    p = commands.add_parser(
        "init", help="check the spec and its data, and write <name>_blind.yaml, <name>_video.yaml and "
                     "<name>_spec.jsonl beside it (lmms-eval --include_path <that folder>)",
        description="Reads every annotation record through the spec (errors name the spec key, the file and the "
                    "record), checks that every video exists (unless --no-videos), refuses task names that "
                    "lmms-eval or visdep already use (lmms-eval would silently run its own; reading lmms-eval's "
                    "task index takes about 20 s), and writes the two task YAMLs beside the spec. The root is "
                    "the spec's root_variable, else its root_default, as the tasks will read it.")
    p.add_argument("spec", metavar="SPEC", help="the spec YAML")
    p.add_argument("--no-videos", action="store_true",
                   help="do not check the videos (blind tasks need only the annotations)")
    p.add_argument("--force", action="store_true", help="overwrite task YAMLs of that name not written by spec init")
    p.set_defaults(func=_init)

    p = commands.add_parser(
        "report", help="a first look without any model or video: TsT-RF on the benchmark's own text plus health "
                       "figures, the most text-solvable questions with their text; writes OUT/report.md and CSVs",
        description="Writes OUT/report.md (a verdict from the stress test's interval against chance, answer-letter "
                    "balance, recurring correct answers, duplicate or near-duplicate options, negated near-copies "
                    "of the answer among the distractors, the --top most text-solvable questions), health.json, "
                    "answer_balance.csv, recurring_answers.csv, option_pairs.csv, most_text_solvable.csv and "
                    "tst/ (s_x.csv, summary.json, as `visdep tst` writes them).")
    p.add_argument("spec", metavar="SPEC", help="the spec YAML")
    p.add_argument("--out", required=True, help="output folder: new, empty, or an earlier spec report's")
    p.add_argument("--root", default=None, help="the benchmark's root (default: root_variable, else root_default)")
    p.add_argument("--top", type=int, default=10, help="most text-solvable questions shown (default 10)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--seed", type=int, default=42, help="seed of folds, forests and tie-breaking (default 42)")
    p.add_argument("--n-estimators", type=int, default=200, help="trees per forest (default 200)")
    p.add_argument("--min-samples-leaf", type=int, default=3, help="forest leaf size (default 3)")
    p.add_argument("--n-jobs", type=int, default=1, help="cores per forest (default 1; -1 = all)")
    p.set_defaults(func=_report)


def _fail(command: str, error: Exception) -> int:
    logger.error(str(error))
    print(f"visdep spec {command}: error: {error}", file=sys.stderr)
    return 2


def _init(args) -> int:
    from lmms_eval_tasks.loaders import BenchmarkDataError, benchmark_root, load_benchmark
    from lmms_eval_tasks.spec import (
        SpecError,
        check_spec_videos,
        register_spec,
        registered_spec,
        task_name_clashes,
        write_spec_tasks,
    )

    try:
        name = register_spec(args.spec).name
        spec = registered_spec(name)
        records = load_benchmark(name)
        if not args.no_videos:
            check_spec_videos(spec, benchmark_root(name))
        clashes = task_name_clashes(spec)
        if clashes:
            raise SpecError(f"{spec.path}: key 'name': lmms-eval or visdep already has the task(s) "
                            f"{', '.join(clashes)} (lmms-eval would silently run its own); choose another name")
        categories = list(dict.fromkeys(r["category"] for r in records if r["category"]))
        written = write_spec_tasks(spec, categories, overwrite=args.force)
    except BenchmarkDataError as e:
        return _fail("init", e)
    videos = "not checked (--no-videos)" if args.no_videos else "all found"
    print(f"{name}: {len(records)} questions, {len({r['video'] for r in records})} videos ({videos}), "
          f"{len(categories)} categories")
    print("wrote " + ", ".join(str(p) for p in written))
    print(f"run: lmms-eval --include_path {spec.path.parent} --tasks {name}_blind,{name}_video --model ... "
          f"--log_samples --output_path runs/")
    return 0


def _report(args) -> int:
    from lmms_eval_tasks.loaders import BenchmarkDataError, load_benchmark
    from lmms_eval_tasks.spec import register_spec
    from visdep_metrics.outdir import OutputDirError, check_out_dir
    from visdep_metrics.tst.first_look import MARKER, write_first_look
    from visdep_metrics.tst.stress_test import TstConfig

    try:
        check_out_dir(args.out, MARKER, "spec report")
        bench = register_spec(args.spec)
        records = load_benchmark(bench.name, args.root)
    except (BenchmarkDataError, OutputDirError) as e:
        return _fail("report", e)
    config = TstConfig(folds=args.folds, seed=args.seed, n_estimators=args.n_estimators,
                       min_samples_leaf=args.min_samples_leaf, n_jobs=args.n_jobs)
    try:
        written = write_first_look(records, bench.name, f"spec {Path(args.spec)}", args.out, config, args.top)
    except ValueError as e:  # e.g. fewer videos than folds
        return _fail("report", e)
    print(Path(args.out) / "report.md")
    logger.info("wrote " + ", ".join(str(p) for p in written))
    return 0
