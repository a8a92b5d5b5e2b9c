"""`visdep twin TASK... --out DIR [--data PATH]` and `visdep twin --list`: the blind and video twins of lmms-eval's
own multiple-choice video tasks (docs/twins.md)."""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from lmms_eval_tasks.errors import OptionError, VisdepError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "twin", help="twin lmms-eval's own multiple-choice video tasks: <task>_visdep_blind / <task>_visdep_video",
        description="Read each upstream lmms-eval task (its YAML as lmms-eval loads it, its documents with datasets "
                    "as the task reads them, its process_docs applied), turn every document into a question (stem, "
                    "options, gold, video) or an unusable record with its reason, and write into DIR "
                    "<task>_twin.jsonl (the frozen questions), <task>_twin.json (manifest: lmms-eval version, the "
                    "YAML's sha256, the adapter, dropped records by reason) and the tasks <task>_visdep_blind.yaml / "
                    "<task>_visdep_video.yaml, run with `lmms-eval --include_path DIR` and audited with "
                    "`visdep audit ... --twin DIR`. A blind run reads the frozen file only; a video run finds each "
                    "video through the upstream task's doc_to_visual. Offline: the documents come from --data, the "
                    "task's own local files, or the datasets cache of an earlier lmms-eval run.")
    p.add_argument("tasks", nargs="*", metavar="TASK",
                   help="an upstream task, a glob of task names ('mvbench_*': the ones not refused), or a group or "
                        "tag of lmms-eval (its video tasks)")
    p.add_argument("--out", metavar="DIR", help="folder the twins are written to (created; a twin's own files in it "
                                                "are replaced)")
    p.add_argument("--data", metavar="PATH", help="a local copy of the task's documents: a parquet, json, jsonl or "
                                                  "csv file, a save_to_disk folder, or a copy of the dataset's "
                                                  "repository (default: where the task reads them)")
    p.add_argument("--list", action="store_true", help="print every upstream video task, tab-separated: task, "
                                                       "benchmark, status (automatic, adapter, refused: <reason>)")
    p.add_argument("--force", action="store_true", help="replace task YAMLs in DIR that visdep twin did not write")
    p.set_defaults(func=_twin)


def _group_members(name: str, index: dict) -> list[str] | None:
    """The tasks a group or tag of lmms-eval's index holds (groups of groups followed), or None for no group."""
    entry = index.get(name)
    if entry is None or entry.get("type") not in ("group", "tag"):
        return None
    if entry["type"] == "tag":
        members = list(entry.get("task") or [])
    else:
        from lmms_eval.utils import load_yaml_config

        listed = load_yaml_config(entry["yaml_path"], mode="simple").get("task") or []
        members = [m["task"] if isinstance(m, dict) else m for m in listed]
    tasks: list[str] = []
    for member in members:
        tasks += _group_members(str(member), index) or [str(member)]
    return tasks


def expand_tasks(patterns: list[str], listed: dict[str, str]) -> tuple[list[str], list[str]]:
    """(the tasks `patterns` name, in order and once each; the listed tasks a glob or group matched that are
    refused, skipped). `listed`: task -> status of every upstream video task."""
    chosen: dict[str, None] = {}
    skipped: list[str] = []
    for pattern in patterns:
        if pattern in listed:
            chosen.setdefault(pattern, None)
            continue
        if any(c in pattern for c in "*?["):
            matched = fnmatch.filter(listed, pattern)
        else:
            from lmms_eval_tasks.upstream.config import task_index

            members = _group_members(pattern, task_index())
            if members is None:
                chosen.setdefault(pattern, None)  # not a video task: read_upstream says what it is
                continue
            matched = [m for m in members if m in listed]
        if not matched:
            raise OptionError(f"{pattern}: names no upstream video task (`visdep twin --list` lists them)")
        for task in matched:
            if listed[task].startswith("refused"):
                skipped.append(task)
            else:
                chosen.setdefault(task, None)
    return list(chosen), skipped


def _twin(args) -> int:
    from lmms_eval_tasks.upstream import list_upstream

    if args.list:
        if args.tasks or args.out:
            raise OptionError("--list takes no TASK and no --out")
        for status in list_upstream():
            print(f"{status.task}\t{status.benchmark}\t{status.status}")
        return 0
    if not args.tasks or not args.out:
        raise OptionError("name the tasks and the folder: visdep twin TASK... --out DIR (or visdep twin --list)")
    from lmms_eval_tasks.twin import freeze_twin
    from lmms_eval_tasks.upstream import read_upstream

    tasks, skipped = expand_tasks(args.tasks, {s.task: s.status for s in list_upstream()})
    for task in skipped:
        print(f"visdep twin: {task}: skipped, refused (`visdep twin --list` says why)", file=sys.stderr)
    data = Path(args.data).expanduser() if args.data else None
    failed = []
    for task in tasks:
        try:
            twin = read_upstream(task, data)
            files = freeze_twin(twin, args.out, overwrite=args.force)
        except VisdepError as e:
            failed.append(task)
            print(f"visdep twin: error: {e}", file=sys.stderr)
            continue
        dropped = "; ".join(f"{n:,} {reason}" for reason, n in _dropped(twin).items()) or "none"
        print(f"{task}: {len(twin.questions):,} questions ({twin.adapter}), dropped: {dropped} -> "
              f"{files['blind'].name}, {files['video'].name}")
    if failed:
        raise VisdepError(f"{len(failed)} of {len(tasks)} task(s) not twinned: {', '.join(failed)}")
    names = ",".join(f"{t}_visdep_{mode}" for t in tasks for mode in ("blind", "video"))
    print(f"run: lmms-eval --include_path {Path(args.out).expanduser().resolve()} --tasks {names} ...")
    return 0


def _dropped(twin) -> dict[str, int]:
    from lmms_eval_tasks.unusable import by_reason

    return dict(by_reason(twin.unusable).most_common())
