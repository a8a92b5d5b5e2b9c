"""`visdep tasks-path`, `visdep fixtures`, `visdep check-data`: the task side of the command line."""

from __future__ import annotations

import argparse
import collections
import os
from collections.abc import Sequence

from lmms_eval_tasks.discovery import tasks_path
from lmms_eval_tasks.loaders import BENCHMARKS
from lmms_eval_tasks.records import BenchmarkDataError, Question
from lmms_eval_tasks.unusable import SKIP_ENV, BenchmarkData
from visdep_metrics.cli.options import add_spec_argument

SHOWN_PER_REASON = 10


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks-path", help="print the folder of the visdep task YAMLs (for --include_path)")
    p.set_defaults(func=lambda args: print(tasks_path()))

    p = sub.add_parser("fixtures", help="write small synthetic copies of the four benchmarks in their official layouts")
    p.add_argument("out", help="folder to write into")
    p.add_argument("--scale", type=int, default=1, help="multiply the number of questions (default 1)")
    p.add_argument("--no-videos", action="store_true", help="annotation files only")
    p.set_defaults(func=_fixtures)

    p = sub.add_parser("check-data", help="load the benchmarks whose variable is set (the others are skipped) and "
                                          "report what was read: counts against the official ones, the records "
                                          "that cannot be used by reason, and the files' oddities",
                       description="Exits 1 where a benchmark cannot be loaded, where records cannot be used and "
                                   f"{SKIP_ENV}=1 is not set (the tasks would stop), where a spec's videos are "
                                   "missing, or where a benchmark named (or a --spec's) is not checked because its "
                                   "variable is unset or empty; 2 where a --spec cannot be read.")
    p.add_argument("benchmarks", nargs="*", help=f"default: all ({', '.join(BENCHMARKS)}), or with --spec the "
                                                 f"specs' benchmarks")
    add_spec_argument(p)  # a spec's benchmark is also checked for its videos (fields.video)
    p.set_defaults(func=_check_data)


def _fixtures(args) -> int:
    from visdep_metrics.demo.fixtures import write_fixtures
    from visdep_metrics.outdir import OutputDirError

    try:
        env = write_fixtures(args.out, videos=not args.no_videos, scale=args.scale)
    except OSError as e:  # the folder the user named cannot be written
        raise OutputDirError(f"{args.out}: cannot write there ({e.filename}: {e.strerror})") from e
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


def count_warnings(name: str, sources: Sequence[str | None], n_unusable: int = 0) -> list[str]:
    """Shortfalls against the official question count: the records read (`sources`, one per usable question, and
    `n_unusable`) against the total, the usable questions against each source's count; none where no count is
    known."""
    official = OFFICIAL_COUNTS.get(name)
    if official is None:
        return []
    total, per_source = official
    found = collections.Counter(sources)
    read = len(sources) + n_unusable
    warnings = []
    if read < total:
        parts = f" ({' + '.join(f'{src} {n:,}' for src, n in per_source.items())})" if per_source else ""
        warnings.append(f"{read:,} records, but the official test set has {total:,}{parts}: "
                        f"{total - read:,} missing (a partial download or an older release?)")
    warnings += [f"source {src}: {found.get(src, 0):,} questions of the official {n:,}"
                 for src, n in per_source.items() if found.get(src, 0) < n]
    return warnings


def oddities(questions: Sequence[Question], notes: dict[str, list[str]]) -> list[str]:
    """What the files hold that a reader of the results should know: what the loader handled (`notes`: padding
    dropped, open-ended records left out, stray letter markers kept, ...), option texts repeated within a question,
    answers whose text another option repeats."""
    lines = [f"{what}: {len(ids):,}, e.g. {ids[:3]}" for what, ids in notes.items()]
    repeated = [q for q in questions if len(set(q.options)) < len(q.options)]
    ambiguous = [q for q in repeated if q.options.count(q.options[q.answer_index]) > 1]
    if repeated:
        lines.append(f"{len(repeated):,} question(s) with two identical option texts (option scoring cannot "
                     f"separate them), e.g. {[q.question_id for q in repeated[:3]]}")
    if ambiguous:
        lines.append(f"{len(ambiguous):,} of them with the answer's text under two letters (the letter decides), "
                     f"e.g. {[q.question_id for q in ambiguous[:3]]}")
    return lines


def unusable_lines(data: BenchmarkData) -> list[str]:
    """The records that cannot be used, by reason: the count, then the first few with their values."""
    lines = []
    for reason, entries in _grouped(data).items():
        lines.append(f"{len(entries):,} x {reason}:")
        lines += [f"    {u.where}" + (f" ({u.question_id})" if u.question_id else "") +
                  (f": {u.detail}" if u.detail else "") for u in entries[:SHOWN_PER_REASON]]
        if len(entries) > SHOWN_PER_REASON:
            lines.append(f"    ... and {len(entries) - SHOWN_PER_REASON:,} more")
    return lines


def _grouped(data: BenchmarkData) -> dict[str, list]:
    groups: dict[str, list] = {}
    for u in data.unusable:
        groups.setdefault(u.reason, []).append(u)
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def _report(name: str, data: BenchmarkData, skip: bool) -> int:
    """Print what was read of one benchmark; 1 where its tasks would stop."""
    questions = data.questions
    k = collections.Counter(len(q.options) for q in questions)
    print(f"{name}: {len(questions):,} questions, options per question {dict(sorted(k.items()))}")
    for warning in count_warnings(name, [q.source for q in questions], len(data.unusable)):
        print(f"  WARNING: {warning}")
    if name in OFFICIAL_COUNTS and OFFICIAL_COUNTS[name] is None:
        print("  (no official count to compare with: the land domain's size is not stated by AccidentBench)")
    categories = collections.Counter(q.category for q in questions if q.category)
    if categories:
        print(f"  categories: {dict(categories)}")
    for line in oddities(questions, data.notes):
        print(f"  {line}")
    if not data.unusable:
        return 0
    if skip:
        print(f"  {len(data.unusable):,} record(s) cannot be used and are left out ({SKIP_ENV}):")
    else:
        print(f"  ERROR {len(data.unusable):,} record(s) cannot be used: the tasks stop (set {SKIP_ENV}=1, or "
              f"skip_unusable: true in a spec, to run on the {len(questions):,} others):")
    for line in unusable_lines(data):
        print(f"    {line}")
    return 0 if skip else 1


def _check_data(args) -> int:
    from lmms_eval_tasks.loaders import benchmark_root, get_benchmark, read_benchmark, skip_unusable
    from lmms_eval_tasks.spec_data import check_spec_videos, register_specs, registered_spec

    spec_names = register_specs(args.spec)  # a spec that cannot be read is the command's error
    named = bool(args.benchmarks or spec_names)  # a benchmark asked for by name must be checked, or the exit says so
    args.benchmarks = args.benchmarks or spec_names or list(BENCHMARKS)
    status, checked, unset = 0, 0, []
    for name in args.benchmarks:
        try:
            variable = get_benchmark(name).env_var
        except BenchmarkDataError as e:
            print(f"{name}: ERROR {e}")
            status = 1
            continue
        if not os.environ.get(variable) and get_benchmark(name).default_root is None:
            shown = "is set but empty" if variable in os.environ else "is not set"
            print(f"{name}: {'ERROR not checked' if named else 'skipped'} ({variable} {shown})")
            unset.append(variable)
            status = max(status, int(named))
            continue
        checked += 1
        try:
            data = read_benchmark(name)
        except BenchmarkDataError as e:
            print(f"{name}: ERROR {e}")
            status = 1
            continue
        status = max(status, _report(name, data, skip_unusable(name)))
        if registered_spec(name) is not None:
            try:
                check_spec_videos(registered_spec(name), benchmark_root(name))
                print(f"  videos: all {len({q.video for q in data.questions})} found")
            except BenchmarkDataError as e:
                print(f"  ERROR {e}")
                status = 1
    if not checked:
        if unset:
            print(f"no benchmark checked: none of {', '.join(unset)} is set (point them at the official downloads)")
        else:
            print("no benchmark checked")
    return status
