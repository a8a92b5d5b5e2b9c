"""Publish a question subset back to lmms-eval as task YAMLs (grounded, debiased, ...).

`write_subset_tasks(out_dir, "mmau", ids, "grounded")` writes

    out_dir/mmau_grounded_ids.jsonl        one {"question_id": ...} per kept question
    out_dir/mmau_blind_grounded.yaml       the mmau_blind task restricted to those ids
    out_dir/mmau_video_grounded.yaml       the mmau_video task restricted to those ids

usable as `lmms-eval --include_path out_dir --tasks mmau_video_grounded`. The YAMLs load the same
official data through the same functions as the full tasks (the ids file replaces the placeholder
data file, and `process_docs` keeps the listed ids), so they need the same `*_ROOT` variable and
no absolute path. For a benchmark of a spec (`lmms_eval_tasks.spec`) each id line also names the spec
file, by its absolute path, as the full task's data file does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from lmms_eval_tasks.discovery import TASKS_DIR
from lmms_eval_tasks.loaders import get_benchmark

_SUFFIX = re.compile(r"^[a-z][a-z0-9_]*$")


def _top_key(line: str) -> str | None:
    return line.split(":", 1)[0] if line and not line.startswith((" ", "#", "-")) else None


def _without(lines: list[str], keys: set[str]) -> list[str]:
    """`lines` without the top-level blocks of `keys` and without comment lines."""
    kept, skipping = [], False
    for line in lines:
        key = _top_key(line)
        if key is not None:
            skipping = key in keys
        if not skipping and not line.lstrip().startswith("#"):
            kept.append(line)
    return kept


def task_yaml_body(own: list[str]) -> list[str]:
    """A task's YAML lines without task/tag/include/data_files: the shared template's keys that `own` does not
    set, then `own` (the task's own lines)."""
    own = _without(own, {"task", "tag", "include", "dataset_kwargs"})
    own_keys = {key for key in map(_top_key, own) if key}
    template = (TASKS_DIR / "_default_template_yaml").read_text().splitlines()
    return _without(template, own_keys | {"dataset_kwargs"}) + own


def _task_body(benchmark: str, mode: str) -> list[str]:
    """The full task's YAML lines without task/tag/include/data_files: template + task file (for a benchmark
    of a spec, the task file `visdep spec init` wrote beside it)."""
    spec = get_benchmark(benchmark).spec
    if spec is None:
        own_path = TASKS_DIR / benchmark / f"{benchmark}_{mode}.yaml"
    else:
        from lmms_eval_tasks.spec import spec_task_path

        own_path = spec_task_path(spec, benchmark, mode)
        if not own_path.is_file():
            raise FileNotFoundError(f"{own_path}: not found; write the tasks of {benchmark} first: visdep spec init "
                                    f"{spec}")
    return task_yaml_body(own_path.read_text().splitlines())


def write_subset_tasks(out_dir: str | Path, benchmark: str, question_ids: Iterable[str], suffix: str,
                       description: str = "") -> list[Path]:
    """Write the id list and the blind and video `<benchmark>_<mode>_<suffix>` task YAMLs.

    Returns the written paths. An empty subset is refused: lmms-eval cannot run a task without documents."""
    spec = get_benchmark(benchmark).spec
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
    # a spec's benchmark: each line also names the spec, which the task's documents are read through
    names_spec = {"spec": str(spec)} if spec is not None else {}
    ids_file.write_text("".join(json.dumps({"question_id": q, **names_spec}) + "\n" for q in ids))
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
