"""`visdep tasks-path`, `visdep fixtures`, `visdep check-data`: the task side of the command line."""

from __future__ import annotations

import argparse
import collections
import os
import re

from lmms_eval_tasks.discovery import tasks_path
from lmms_eval_tasks.loaders import BENCHMARKS, BenchmarkDataError, load_benchmark

_STRAY_MARKER = re.compile(r"(^|[\s,.])[A-Z]\.\s")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks-path", help="print the folder of the visdep task YAMLs (for --include_path)")
    p.set_defaults(func=lambda args: print(tasks_path()))

    p = sub.add_parser("fixtures", help="write small synthetic copies of the four benchmarks in their official layouts")
    p.add_argument("out", help="folder to write into")
    p.add_argument("--scale", type=int, default=1, help="multiply the number of questions (default 1)")
    p.add_argument("--no-videos", action="store_true", help="annotation files only")
    p.set_defaults(func=_fixtures)

    p = sub.add_parser("check-data", help="load the benchmarks whose *_ROOT variable is set (the others are skipped) "
                                          "and report what was read, warning where a benchmark has fewer questions "
                                          "than its official count")
    p.add_argument("benchmarks", nargs="*", help=f"default: all ({', '.join(BENCHMARKS)}), or with --spec the "
                                                 f"specs' benchmarks")
    from lmms_eval_tasks.spec import add_spec_argument

    add_spec_argument(p)  # a spec's benchmark is also checked for its videos (fields.video)
    p.set_defaults(func=_check_data)


def _fixtures(args) -> int:
    from visdep_metrics.demo.fixtures import write_fixtures

    env = write_fixtures(args.out, videos=not args.no_videos, scale=args.scale)
    for key, value in env.items():
        print(f"export {key}={value}")
    return 0


# The official test sets' sizes, as their papers and files state them: (total, per source). AccidentBench's
# land-domain count is stated neither in its paper nor in its README (they give ~19,000 questions over all three
# domains), so it is not checked.
OFFICIAL_COUNTS: dict[str, tuple[int, dict[str, int]] | None] = {
    "mmau": (2453, {"CAP": 1953, "DADA": 500}),
    "vru_accident": (6000, {"CAP_DATA": 287 * 6, "DADA_2000": 223 * 6, "DoTA": 100 * 6, "MANUAL_DATA": 390 * 6}),
    "trafficqa": (6075, {}),  # R2_test.jsonl
    "accidentbench": None,
    # general VideoQA, as lmms-eval's own tasks read them (dataset cards; MLVU dev: its GitHub release's seven
    # multiple-choice task types)
    "videomme": (2700, {"short": 900, "medium": 900, "long": 900}),
    "longvideobench": (1337, {}),
    "mlvu": (2175, {}),
}


def count_warnings(name: str, records: list[dict]) -> list[str]:
    """Shortfalls against the official question count (total and per source); none where no count is known."""
    official = OFFICIAL_COUNTS.get(name)
    if official is None:
        return []
    total, per_source = official
    found = collections.Counter(r["source"] for r in records)
    warnings = []
    if len(records) < total:
        parts = f" ({' + '.join(f'{src} {n:,}' for src, n in per_source.items())})" if per_source else ""
        warnings.append(f"{len(records):,} questions, but the official test set has {total:,}{parts}: "
                        f"{total - len(records):,} missing (a partial download or an older release?)")
    warnings += [f"source {src}: {found.get(src, 0):,} questions of the official {n:,}"
                 for src, n in per_source.items() if found.get(src, 0) < n]
    return warnings


def _check_data(args) -> int:
    from lmms_eval_tasks.loaders import benchmark_root, get_benchmark
    from lmms_eval_tasks.spec import check_spec_videos, register_specs, registered_spec

    try:
        spec_names = register_specs(args.spec)
    except BenchmarkDataError as e:
        print(f"ERROR {e}")
        return 1
    args.benchmarks = args.benchmarks or spec_names or list(BENCHMARKS)
    status, checked = 0, 0
    for name in args.benchmarks:
        try:
            variable = get_benchmark(name).env_var
        except KeyError as e:
            print(f"{name}: ERROR {e.args[0]}")
            status = 1
            continue
        if not os.environ.get(variable) and get_benchmark(name).default_root is None:
            print(f"{name}: skipped ({variable} is not set)")
            continue
        checked += 1
        try:
            records = load_benchmark(name)
        except BenchmarkDataError as e:
            print(f"{name}: ERROR {e}")
            status = 1
            continue
        k = collections.Counter(len(r["options"]) for r in records)
        cats = collections.Counter(r["category"] for r in records if r["category"])
        dup = [r["question_id"] for r in records if len(set(r["options"])) < len(r["options"])]
        print(f"{name}: {len(records)} questions, options per question {dict(sorted(k.items()))}")
        for warning in count_warnings(name, records):
            print(f"  WARNING: {warning}")
        if name in OFFICIAL_COUNTS and OFFICIAL_COUNTS[name] is None:
            print("  (no official count to compare with: the land domain's size is not stated by AccidentBench)")
        if cats:
            print(f"  categories: {dict(cats)}")
        stray = [r["question_id"] for r in records if any(_STRAY_MARKER.search(o) for o in r["options"])]
        if stray:
            print(f"  {len(stray)} question(s) whose official option string holds a stray letter marker, kept inside "
                  f"one option's text, e.g. {stray[:3]}")
        if dup:
            print(f"  {len(dup)} question(s) with two identical option texts (option scoring cannot separate "
                  f"them), e.g. {dup[:3]}")
        if registered_spec(name) is not None:
            try:
                check_spec_videos(registered_spec(name), benchmark_root(name))
                print(f"  videos: all {len({r['video'] for r in records})} found")
            except BenchmarkDataError as e:
                print(f"  ERROR {e}")
                status = 1
    if not checked:
        variables = ", ".join(BENCHMARKS[b].env_var for b in args.benchmarks if b in BENCHMARKS)
        print(f"no benchmark checked: none of {variables} is set (point them at the official downloads)")
    return status
