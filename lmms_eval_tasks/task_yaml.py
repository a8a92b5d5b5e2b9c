"""The one writer of task YAMLs that are not the built-in files: a spec's blind and video tasks (`visdep spec init`),
an upstream task's twins (`visdep twin`) and exported subsets (`lmms_eval_tasks.export`).

The built-in YAMLs (`<benchmark>/<benchmark>_<mode>.yaml`) are static files that include `_default_template_yaml`.
A written task is self-contained: a comment, its name, tag and data file, then the template's keys that the task's
own lines do not set, then those lines. lmms-eval resolves `include` relative to the YAML's folder, so a task
written elsewhere inlines the template instead of including it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lmms_eval_tasks.spec import BenchmarkSpec, spec_error

TASKS_DIR = Path(__file__).resolve().parent
TEMPLATE = TASKS_DIR / "_default_template_yaml"
FULL_SPLIT = "test"  # the split of a full task's data file; a subset's is named by its suffix
# Beside the spec, `visdep spec init` writes <name>_blind.yaml, <name>_video.yaml and this data file, whose one
# line names the spec: lmms-eval hands it to `tasks.docs_*`, which read the spec it names.
SPEC_DATA_FILE_SUFFIX = "_spec.jsonl"
SPEC_YAML_HEADER = "# visdep spec task"


def category_metric(category: str) -> str:
    """`acc_<category>`, the per-category accuracy metric name (lowercase, underscores)."""
    return "acc_" + re.sub(r"[^0-9a-z]+", "_", category.lower()).strip("_")


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


def task_yaml(comments: list[str], task: str, data_file: str, own: list[str], tag: str | None = None,
              split: str = FULL_SPLIT) -> str:
    """A task YAML: `comments`, the task's name (and tag), its data file as `split`, the shared template's keys
    that `own` does not set, and `own` (the task's own lines, whose task, tag, include, dataset_kwargs and
    test_split are the writer's)."""
    written = {"task", "tag", "include", "dataset_kwargs", "test_split"}
    own = _without(own, written)
    own_keys = {key for key in map(_top_key, own) if key}
    template = _without(TEMPLATE.read_text().splitlines(), own_keys | written)
    lines = [*(f"# {c}" for c in comments), f"task: {task}", *([f"tag: {tag}"] if tag else []),
             "dataset_kwargs:", "  data_files:", f"    {split}: {data_file}", f"test_split: {split}", *template, *own]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- a spec's tasks
def spec_task_path(spec_path: Path, name: str, mode: str) -> Path:
    """Where `visdep spec init` writes the task YAML of `mode`: beside the spec."""
    return Path(spec_path).parent / f"{name}_{mode}.yaml"


def source_task_yaml(comment: str, name: str, mode: str, data_file: str, categories: list[str]) -> str:
    """The text of a full `<name>_<mode>` task of a question source its data file names: the generic document
    function, and accuracy overall and per category."""
    metrics = ["metric_list:", "  - metric: acc", "    aggregation: mean", "    higher_is_better: true"]
    for category in categories:
        metrics += [f"  - metric: {category_metric(category)}  # {category}", "    aggregation: mean",
                    "    higher_is_better: true"]
    own = [f"process_docs: !function lmms_eval_tasks.tasks.docs_{mode}",
           f"doc_to_visual: !function lmms_eval_tasks.tasks.doc_to_visual_{mode}",
           f"process_results: !function lmms_eval_tasks.tasks.process_results_{mode}", *metrics]
    return task_yaml([comment], f"{name}_{mode}", data_file, own)


def spec_task_yaml(spec: BenchmarkSpec, mode: str, categories: list[str]) -> str:
    """The text of `<name>_<mode>.yaml`: the spec's document function and accuracy per category."""
    comment = (f"{SPEC_YAML_HEADER.removeprefix('# ')} from {spec.path.name}: rerun `visdep spec init "
               f"{spec.path.name}` after editing the spec or moving this folder.")
    return source_task_yaml(comment, spec.name, mode, f"{spec.name}{SPEC_DATA_FILE_SUFFIX}", categories)


def write_spec_tasks(spec: BenchmarkSpec, categories: list[str], overwrite: bool = False) -> list[Path]:
    """Write `<name>_blind.yaml`, `<name>_video.yaml` and `<name>_spec.jsonl` beside the spec. Files of another
    origin are not overwritten unless `overwrite`."""
    data_file = spec.path.parent / f"{spec.name}{SPEC_DATA_FILE_SUFFIX}"
    yamls = [spec_task_path(spec.path, spec.name, mode) for mode in ("blind", "video")]
    for path in yamls:
        if path.exists() and not overwrite and not path.read_text(encoding="utf-8").startswith(SPEC_YAML_HEADER):
            raise spec_error(spec.path, "name", f"{path} exists and was not written by visdep spec init; choose "
                                                f"another name or pass --force")
    try:
        data_file.write_text(json.dumps({"spec": str(spec.path)}) + "\n", encoding="utf-8")
        for mode, path in zip(("blind", "video"), yamls, strict=True):
            path.write_text(spec_task_yaml(spec, mode, categories), encoding="utf-8")
    except OSError as e:
        raise spec_error(spec.path, "name", f"cannot write the tasks beside the spec: {e.filename}: {e.strerror} "
                                            f"(copy the spec into a folder of your own)") from e
    return [*yamls, data_file]
