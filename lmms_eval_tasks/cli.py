"""`visdep tasks-path`, `visdep fixtures`, `visdep check-data`: the task side of the command line."""

from __future__ import annotations

import argparse
import collections
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

    p = sub.add_parser("check-data", help="load benchmarks from their *_ROOT variables and report what was read")
    p.add_argument("benchmarks", nargs="*", default=list(BENCHMARKS), help=f"default: all ({', '.join(BENCHMARKS)})")
    p.set_defaults(func=_check_data)


def _fixtures(args) -> int:
    from lmms_eval_tasks.fixtures import write_fixtures

    env = write_fixtures(args.out, videos=not args.no_videos, scale=args.scale)
    for key, value in env.items():
        print(f"export {key}={value}")
    return 0


def _check_data(args) -> int:
    status = 0
    for name in args.benchmarks:
        try:
            records = load_benchmark(name)
        except (BenchmarkDataError, KeyError) as e:
            print(f"{name}: ERROR {e}")
            status = 1
            continue
        k = collections.Counter(len(r["options"]) for r in records)
        cats = collections.Counter(r["category"] for r in records if r["category"])
        dup = [r["question_id"] for r in records if len(set(r["options"])) < len(r["options"])]
        print(f"{name}: {len(records)} questions, options per question {dict(sorted(k.items()))}")
        if cats:
            print(f"  categories: {dict(cats)}")
        stray = [r["question_id"] for r in records if any(_STRAY_MARKER.search(o) for o in r["options"])]
        if stray:
            print(f"  {len(stray)} question(s) whose official option string holds a stray letter marker, kept inside "
                  f"one option's text, e.g. {stray[:3]}")
        if dup:
            print(f"  {len(dup)} question(s) with two identical option texts (option scoring cannot separate "
                  f"them), e.g. {dup[:3]}")
    return status
