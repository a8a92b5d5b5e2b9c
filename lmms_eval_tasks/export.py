"""Publish a question subset back to lmms-eval as task YAMLs (grounded, debiased, ...).

`write_subset_tasks(out_dir, "mmau", ids, "grounded")` writes

    out_dir/mmau_grounded_ids.jsonl        one {"question_id": ...} per kept question
    out_dir/mmau_blind_grounded.yaml       the mmau_blind task restricted to those ids
    out_dir/mmau_video_grounded.yaml       the mmau_video task restricted to those ids

usable as `lmms-eval --include_path out_dir --tasks mmau_video_grounded`. The YAMLs load the same
official data through the same functions as the full tasks (the ids file replaces the placeholder
data file, and `process_docs` keeps the listed ids), so they need the same `*_ROOT` variable and
no absolute path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from lmms_eval_tasks.discovery import TASKS_DIR
from lmms_eval_tasks.loaders import get_benchmark

_SUFFIX = re.compile(r"^[a-z][a-z0-9_]*$")


def _task_body(benchmark: str, mode: str) -> list[str]:
    """The full task's YAML lines without task/tag/include/data_files: template + task file."""
    template = (TASKS_DIR / "_default_template_yaml").read_text().splitlines()
    own = (TASKS_DIR / benchmark / f"{benchmark}_{mode}.yaml").read_text().splitlines()
    keep_template = []
    skip_block = False
    own_keys = {line.split(":", 1)[0] for line in own if line and not line.startswith((" ", "#"))}
    for line in template:
        key = line.split(":", 1)[0] if line and not line.startswith((" ", "#")) else None
        if key is not None:
            skip_block = key in own_keys or key == "dataset_kwargs"
        if not skip_block and not line.lstrip().startswith("#"):
            keep_template.append(line)
    keep_own = [line for line in own if not line.startswith(("task:", "tag:", "include:"))]
    return keep_template + keep_own


def write_subset_tasks(out_dir: str | Path, benchmark: str, question_ids: Iterable[str], suffix: str,
                       description: str = "") -> list[Path]:
    """Write the id list and the blind and video `<benchmark>_<mode>_<suffix>` task YAMLs.

    Returns the written paths. An empty subset is refused: lmms-eval cannot run a task without documents."""
    get_benchmark(benchmark)
    if not _SUFFIX.match(suffix):
        raise ValueError(f"suffix {suffix!r}: use lowercase letters, digits and underscores")
    ids = [str(q) for q in question_ids]
    if not ids:
        raise ValueError(f"the {suffix} subset of {benchmark} is empty: no task written")
    if len(set(ids)) != len(ids):
        raise ValueError(f"the {suffix} subset of {benchmark} lists a question id twice")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids_file = out / f"{benchmark}_{suffix}_ids.jsonl"
    ids_file.write_text("".join(json.dumps({"question_id": q}) + "\n" for q in ids))
    written = [ids_file]
    for mode in ("blind", "video"):
        lines = [f"# {benchmark}_{mode} restricted to {len(ids)} question(s) listed in {ids_file.name}."]
        if description:
            lines += [f"# {d}" for d in description.splitlines()]
        lines += [f"task: {benchmark}_{mode}_{suffix}", f"tag: visdep_{mode}_{suffix}",
                  "dataset_kwargs:", "  data_files:", f"    test: {ids_file.name}"]
        lines += _task_body(benchmark, mode)
        path = out / f"{benchmark}_{mode}_{suffix}.yaml"
        path.write_text("\n".join(lines) + "\n")
        written.append(path)
    return written
