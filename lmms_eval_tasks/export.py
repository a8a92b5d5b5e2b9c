"""Publish a question subset back to lmms-eval as task YAMLs (grounded, debiased, ...).

`write_subset_tasks(out_dir, "mmau", ids, "grounded")` writes

    out_dir/mmau_grounded_ids.jsonl        one {"question_id": ...} per kept question
    out_dir/mmau_blind_grounded.yaml       the mmau_blind task restricted to those ids
    out_dir/mmau_video_grounded.yaml       the mmau_video task restricted to those ids

usable as `lmms-eval --include_path out_dir --tasks mmau_video_grounded`. The YAMLs load the same
official data through the same functions as the full tasks (the ids file replaces the placeholder
data file, and `process_docs` keeps the listed ids), so they need the same `*_ROOT` variable and
no absolute path. The ids file is the task's split named by the suffix, which is how the task functions know
the subset task's name. For a benchmark of a spec each id line also names the spec file, by its absolute path,
as the full task's data file does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from lmms_eval_tasks.loaders import get_benchmark
from lmms_eval_tasks.records import BenchmarkDataError
from lmms_eval_tasks.task_yaml import FULL_SPLIT, TASKS_DIR, spec_task_path, task_yaml

_SUFFIX = re.compile(r"^[a-z][a-z0-9_]*$")


def full_task_file(benchmark: str, mode: str) -> Path:
    """The full task's YAML: the built-in file, or the one `visdep spec init` wrote beside a benchmark's spec."""
    spec = get_benchmark(benchmark).spec
    if spec is None:
        return TASKS_DIR / benchmark / f"{benchmark}_{mode}.yaml"
    path = spec_task_path(spec, benchmark, mode)
    if not path.is_file():
        raise BenchmarkDataError(f"{path}: not found; write the tasks of {benchmark} first: visdep spec init {spec}")
    return path


def write_subset_tasks(out_dir: str | Path, benchmark: str, question_ids: Iterable[str], suffix: str,
                       description: str = "") -> list[Path]:
    """Write the id list and the blind and video `<benchmark>_<mode>_<suffix>` task YAMLs.

    Returns the written paths. An empty subset is refused: lmms-eval cannot run a task without documents."""
    spec = get_benchmark(benchmark).spec
    if not _SUFFIX.match(suffix) or suffix == FULL_SPLIT:
        raise ValueError(f"suffix {suffix!r}: use lowercase letters, digits and underscores (not {FULL_SPLIT!r})")
    ids = [str(q) for q in question_ids]
    if not ids:
        raise ValueError(f"the {suffix} subset of {benchmark} is empty: no task written")
    if len(set(ids)) != len(ids):
        raise ValueError(f"the {suffix} subset of {benchmark} lists a question id twice")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids_file = out / f"{benchmark}_{suffix}_ids.jsonl"
    # a spec's benchmark: each line also names the spec, which the task's documents are read through
    names_spec = {"spec": str(spec)} if spec is not None else {}
    ids_file.write_text("".join(json.dumps({"question_id": q, **names_spec}) + "\n" for q in ids))
    written = [ids_file]
    for mode in ("blind", "video"):
        comments = [f"{benchmark}_{mode} restricted to {len(ids)} question(s) listed in {ids_file.name}.",
                    *(description.splitlines() if description else [])]
        own = full_task_file(benchmark, mode).read_text().splitlines()
        path = out / f"{benchmark}_{mode}_{suffix}.yaml"
        path.write_text(task_yaml(comments, f"{benchmark}_{mode}_{suffix}", ids_file.name, own,
                                  tag=f"visdep_{mode}_{suffix}", split=suffix))
        written.append(path)
    return written
