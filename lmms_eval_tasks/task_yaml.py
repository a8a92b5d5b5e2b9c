"""The one writer of task YAMLs that are not the built-in files: a spec's blind and video tasks (`visdep spec init`),
an upstream task's twins (`visdep twin`) and exported subsets (`lmms_eval_tasks.export`).

The built-in YAMLs (`<benchmark>/<benchmark>_<mode>.yaml`) are static files that include `_default_template_yaml`.
A written task is self-contained: comments, its name, tag and data file, then the template's keys that the task's
own keys do not set, then those. lmms-eval resolves `include` relative to the YAML's folder, so a task written
elsewhere inlines the template instead of including it.

A task YAML is data that lmms-eval executes (`!function` imports and runs a module), and what goes into it comes
from other people's files (a spec's name and file name, a twin's task, categories). So it is emitted by a YAML
emitter from a mapping, never formatted as text: a value is always a value, whatever newlines, `!function`, `#`,
`: ` or `{{ }}` it holds; `!function` is written only for `FunctionRef`s naming visdep's own task functions; a
comment holds its text escaped onto one line, and a category is named by its metric only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from lmms_eval_tasks.spec import BenchmarkSpec, spec_error
from lmms_eval_tasks.writing import WriteError, starts_with, write_file

TASKS_DIR = Path(__file__).resolve().parent
TEMPLATE = TASKS_DIR / "_default_template_yaml"
FULL_SPLIT = "test"  # the split of a full task's data file; a subset's is named by its suffix
# Beside the spec, `visdep spec init` writes <name>_blind.yaml, <name>_video.yaml and this data file, whose one
# line names the spec: lmms-eval hands it to `tasks.docs_*`, which read the spec it names.
SPEC_DATA_FILE_SUFFIX = "_spec.jsonl"
SPEC_YAML_HEADER = "# visdep spec task"
TASK_FUNCTIONS = "lmms_eval_tasks.tasks."  # the only module a written task's `!function` may name


class FunctionRef(str):
    """A `!function module.name` of a task YAML: one of visdep's task functions (`TASK_FUNCTIONS`)."""

    def __new__(cls, name: str) -> FunctionRef:
        if not re.fullmatch(re.escape(TASK_FUNCTIONS) + r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"!function {name[:80]!r}: a written task names only {TASK_FUNCTIONS}* functions")
        return super().__new__(cls, name)


class _Dumper(yaml.SafeDumper):
    pass


class _Loader(yaml.SafeLoader):
    pass


_Dumper.add_representer(FunctionRef, lambda dumper, ref: dumper.represent_scalar("!function", str(ref)))
_Loader.add_constructor("!function", lambda loader, node: FunctionRef(loader.construct_scalar(node)))


def read_task_yaml(text: str) -> dict:
    """A task YAML visdep ships or wrote, as a mapping (`!function` as FunctionRef; another module is an error)."""
    config = yaml.load(text, Loader=_Loader)
    if not isinstance(config, dict):
        raise ValueError("a task YAML is a mapping")
    return config


def one_line(text: str) -> str:
    """`text` for a comment: on one line, its newlines and other control characters escaped (JSON's escapes)."""
    return json.dumps(str(text), ensure_ascii=False)[1:-1]


def category_metric(category: str) -> str:
    """`acc_<category>`, the per-category accuracy metric name (lowercase, underscores)."""
    return "acc_" + re.sub(r"[^0-9a-z]+", "_", category.lower()).strip("_")


def task_yaml(comments: list[str], task: str, data_file: str, own: Mapping[str, object], tag: str | None = None,
              split: str = FULL_SPLIT) -> str:
    """A task YAML: `comments` (each on one line), the task's name (and tag), its data file as `split`, the shared
    template's keys that `own` does not set, and `own` (the task's own keys; its task, tag, include, dataset_kwargs
    and test_split are the writer's)."""
    written = {"task", "tag", "include", "dataset_kwargs", "test_split"}
    own = {key: value for key, value in own.items() if key not in written}
    template = {key: value for key, value in read_task_yaml(TEMPLATE.read_text()).items()
                if key not in own and key not in written}
    config = {"task": str(task), **({"tag": str(tag)} if tag else {}),
              "dataset_kwargs": {"data_files": {str(split): str(data_file)}}, "test_split": str(split),
              **template, **own}
    header = "".join(f"# {one_line(c)}\n" for c in comments)
    return header + yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1_000_000)


# --------------------------------------------------------------------------- a spec's tasks
def spec_task_path(spec_path: Path, name: str, mode: str) -> Path:
    """Where `visdep spec init` writes the task YAML of `mode`: beside the spec."""
    return Path(spec_path).parent / f"{name}_{mode}.yaml"


def source_task_yaml(comment: str, name: str, mode: str, data_file: str, categories: list[str]) -> str:
    """The text of a full `<name>_<mode>` task of a question source its data file names: the generic document
    function, and accuracy overall and per category."""
    metrics = [{"metric": metric, "aggregation": "mean", "higher_is_better": True}
               for metric in ["acc", *map(category_metric, categories)]]
    own = {"process_docs": FunctionRef(f"{TASK_FUNCTIONS}docs_{mode}"),
           "doc_to_visual": FunctionRef(f"{TASK_FUNCTIONS}doc_to_visual_{mode}"),
           "process_results": FunctionRef(f"{TASK_FUNCTIONS}process_results_{mode}"), "metric_list": metrics}
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
        if (path.exists() or path.is_symlink()) and not overwrite and not starts_with(path, SPEC_YAML_HEADER):
            raise spec_error(spec.path, "name", f"{path} exists and was not written by visdep spec init; choose "
                                                f"another name or pass --force")
    try:
        write_file(data_file.parent, data_file.name, json.dumps({"spec": str(spec.path)}) + "\n")
        for mode, path in zip(("blind", "video"), yamls, strict=True):
            write_file(path.parent, path.name, spec_task_yaml(spec, mode, categories))
    except WriteError as e:
        raise spec_error(spec.path, "name", f"cannot write the tasks beside the spec: {e} (copy the spec into a "
                                            f"folder of your own)") from None
    return [*yamls, data_file]
