"""`visdep spec init` (blind and video tasks from a benchmark spec), `visdep spec report` (a first look without any
model: the stress test and the health figures), and the `--spec` option other commands take."""

from __future__ import annotations

import argparse
from pathlib import Path

from loguru import logger

from visdep_metrics.cli.options import add_stress_test_options, tst_config


def unusable_list(spec_path: Path, name: str) -> Path:
    """Where `spec init` and `spec report` list every record of a spec's benchmark that cannot be used."""
    return Path(spec_path).parent / f"{name}_unusable_records.jsonl"


def register(sub: argparse._SubParsersAction) -> None:
    spec = sub.add_parser(
        "spec", help="a benchmark of your own, described by a short YAML spec (configs/specs/*.yaml): tasks, report",
        description="A spec names the annotation files (JSON, JSONL, CSV, parquet, a saved Hugging Face dataset) and "
                    "which fields hold the question id, question, options, answer, video, category and source "
                    "(docs/specs.md). Other commands take it with --spec SPEC: check-data, tst, ibp, audit.")
    commands = spec.add_subparsers(dest="spec_command", metavar="SPEC_COMMAND", required=True)

    p = commands.add_parser(
        "init", help="check the spec and its data, and write <name>_blind.yaml, <name>_video.yaml and "
                     "<name>_spec.jsonl beside it (lmms-eval --include_path <that folder>)",
        description="Reads every annotation record through the spec (one error lists every record it cannot use, "
                    "naming the spec key, the file and the record; skip_unusable: true in the spec, or "
                    "VISDEP_SKIP_UNUSABLE=1, runs on the others; all are listed in <name>_unusable_records.jsonl "
                    "beside the spec), checks that every video exists (unless --no-videos), refuses task names that "
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
    add_stress_test_options(p)
    p.set_defaults(func=_report)


def _init(args) -> int:
    from lmms_eval_tasks.discovery import task_name_clashes
    from lmms_eval_tasks.loaders import benchmark_root, read_benchmark, skip_unusable
    from lmms_eval_tasks.spec import SpecError
    from lmms_eval_tasks.spec_data import check_spec_videos, register_spec, registered_spec
    from lmms_eval_tasks.task_yaml import write_spec_tasks
    from lmms_eval_tasks.unusable import SKIP_ENV, write_unusable

    name = register_spec(args.spec).name
    spec = registered_spec(name)
    data = read_benchmark(name)
    if data.unusable:  # listed in full beside the spec, whether the tasks are written or not
        listed = write_unusable(unusable_list(spec.path, name), data.unusable)
        logger.info(f"{len(data.unusable)} unusable records listed in {listed}")
    questions = data.usable(skip_unusable(name))
    videos = "not checked (--no-videos)"
    if not args.no_videos:
        try:
            check_spec_videos(spec, benchmark_root(name))
            videos = "all found"
        except SpecError as e:
            if not skip_unusable(name):
                raise
            logger.warning(str(e))
            videos = f"some not found: the video task leaves their questions out ({SKIP_ENV})"
    clashes = task_name_clashes(spec)
    if clashes:
        raise SpecError(f"{spec.path}: key 'name': lmms-eval or visdep already has the task(s) "
                        f"{', '.join(clashes)} (lmms-eval would silently run its own); choose another name")
    categories = list(dict.fromkeys(q.category for q in questions if q.category))
    written = write_spec_tasks(spec, categories, overwrite=args.force)
    left_out = f", {len(data.unusable)} unusable records left out" if data.unusable else ""
    print(f"{name}: {len(questions)} questions, {len({q.video for q in questions})} videos ({videos}), "
          f"{len(categories)} categories{left_out}")
    print("wrote " + ", ".join(str(p) for p in written))
    print(f"run: lmms-eval --include_path {spec.path.parent} --tasks {name}_blind,{name}_video --model ... "
          f"--log_samples --output_path runs/")
    return 0


def _report(args) -> int:
    from lmms_eval_tasks.loaders import read_benchmark, skip_unusable
    from lmms_eval_tasks.spec_data import register_spec
    from lmms_eval_tasks.unusable import write_unusable
    from visdep_metrics.outdir import check_out_dir, staged
    from visdep_metrics.tst.first_look import write_first_look

    inputs = [args.spec, *([args.root] if args.root else [])]
    check_out_dir(args.out, "spec report", inputs)
    bench = register_spec(args.spec)
    data = read_benchmark(bench.name, args.root)
    origin = f"spec {Path(args.spec)}"
    if data.unusable:  # listed in full beside the spec, as `spec init` lists them, whether the report goes on
        listed = write_unusable(unusable_list(bench.spec, bench.name), data.unusable)
        origin += f" ({len(data.unusable)} unusable records left out, listed in {listed})"
    records = data.usable(skip_unusable(bench.name))
    # a ValueError (fewer videos than folds) is the command's error
    with staged(args.out, "spec report", inputs) as target:
        written = target.final(write_first_look(records, bench.name, origin, target.folder, tst_config(args),
                                                args.top))
    print(Path(args.out) / "report.md")
    logger.info("wrote " + ", ".join(str(p) for p in written))
    return 0
