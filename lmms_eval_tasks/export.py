"""Publish a question subset back to lmms-eval as task YAMLs (grounded, debiased, ...).

`write_subset_tasks(out_dir, "mmau", ids, "grounded")` writes

    out_dir/mmau_grounded_ids.jsonl        one {"question_id": ..., "benchmark": "mmau"} per kept question
    out_dir/mmau_blind_grounded.yaml       the mmau_blind task restricted to those ids
    out_dir/mmau_video_grounded.yaml       the mmau_video task restricted to those ids

usable as `lmms-eval --include_path out_dir --tasks mmau_video_grounded`. The YAMLs load the same
official data through the same functions as the full tasks (the ids file replaces the placeholder
data file, and `process_docs` keeps the listed ids), so they need the same `*_ROOT` variable. Each id line also
names the question source as the full task's data file does (`QuestionSource.reference`: the built-in benchmark,
or a spec's or a twin's file by its absolute path). The ids file is the task's split named by the suffix, which is
how the task functions know the subset task's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from lmms_eval_tasks.loaders import get_benchmark
from lmms_eval_tasks.task_yaml import FULL_SPLIT, read_task_yaml, task_yaml
from lmms_eval_tasks.writing import write_file

_SUFFIX = re.compile(r"^[a-z][a-z0-9_]*$")


def full_task_file(benchmark: str, mode: str) -> Path:
    """The full task's YAML: the built-in file, or the one `visdep spec init` or `visdep twin` wrote."""
    return get_benchmark(benchmark).task_file(mode)


def write_subset_tasks(out_dir: str | Path, benchmark: str, question_ids: Iterable[str], suffix: str,
                       description: str = "") -> list[Path]:
    """Write the id list and the blind and video `<benchmark>_<mode>_<suffix>` task YAMLs.

    Returns the written paths. An empty subset is refused: lmms-eval cannot run a task without documents."""
    source = get_benchmark(benchmark)
    if not _SUFFIX.match(suffix) or suffix == FULL_SPLIT:
        raise ValueError(f"suffix {suffix!r}: use lowercase letters, digits and underscores (not {FULL_SPLIT!r})")
    ids = [str(q) for q in question_ids]
    if not ids:
        raise ValueError(f"the {suffix} subset of {benchmark} is empty: no task written")
    if len(set(ids)) != len(ids):
        raise ValueError(f"the {suffix} subset of {benchmark} lists a question id twice")
    out = Path(out_dir)
    # each line also names the source, which the task's documents are read through; a benchmark name that reads as
    # a path is refused by write_file
    ids_file = write_file(out, f"{benchmark}_{suffix}_ids.jsonl",
                          "".join(json.dumps({"question_id": q, **source.reference()}) + "\n" for q in ids))
    written = [ids_file]
    for mode in ("blind", "video"):
        comments = [f"{benchmark}_{mode} restricted to {len(ids)} question(s) listed in {ids_file.name}.",
                    *(description.splitlines() if description else [])]
        own = read_task_yaml(full_task_file(benchmark, mode).read_text())
        path = write_file(out, f"{benchmark}_{mode}_{suffix}.yaml",
                          task_yaml(comments, f"{benchmark}_{mode}_{suffix}", ids_file.name, own,
                                    tag=f"visdep_{mode}_{suffix}", split=suffix))
        written.append(path)
    return written
