"""Make `lmms-eval --tasks mmau_blind,...` find the visdep tasks without `--include_path`.

lmms-eval 0.7.x has no entry point for tasks, but it loads the `lmms_eval.models` entry points
when its model registry is imported, which happens before it builds its TaskManager. This entry
point registers no model: it adds this package's folder to every TaskManager's search path.
`--include_path <this folder>` remains the documented fallback (`visdep tasks-path` prints it).

The same patch wraps lmms-eval's evaluation (`lmms_eval_tasks.evaluation_hooks`: a failed evaluation exits
with status 1, `--use_cache` reaches the adapters): the TaskManager is built just before the evaluation
starts, when lmms-eval is fully imported. `task_name_clashes` reads lmms-eval's own task index, so that a spec's
tasks are not silently replaced by lmms-eval's tasks of the same name.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from lmms_eval_tasks.loaders import BENCHMARKS
from lmms_eval_tasks.spec import BenchmarkSpec
from lmms_eval_tasks.task_yaml import TASKS_DIR


def tasks_path() -> str:
    return str(TASKS_DIR)


@lru_cache(maxsize=1)
def lmms_eval_task_names() -> frozenset[str]:
    """Every task, group and tag lmms-eval's own TaskManager indexes (about 20 s: it reads ~2,000 YAMLs)."""
    from lmms_eval.tasks import TaskManager
    from loguru import logger

    logger.disable("lmms_eval")  # its index logs a line per YAML it cannot read
    try:
        return frozenset(TaskManager(verbosity="ERROR").all_tasks)
    finally:
        logger.enable("lmms_eval")


def task_name_clashes(spec: BenchmarkSpec, known: frozenset[str] | None = None) -> list[str]:
    """The spec's task names that lmms-eval or visdep already use (lmms-eval would silently run the built-in)."""
    known = lmms_eval_task_names() if known is None else known
    ours = {f"{b}_{mode}" for b in BENCHMARKS if b != spec.name for mode in ("blind", "video")}
    return [t for t in spec.task_names if t in known or t in ours]


def register_task_path() -> list:
    """Entry-point payload for `lmms_eval.models`: patches TaskManager, returns no model manifest."""
    from lmms_eval.tasks import TaskManager

    if getattr(TaskManager.initialize_tasks, "_visdep_patched", False):
        return []
    original = TaskManager.initialize_tasks

    def initialize_tasks(self, include_path=None, include_defaults=True):
        from lmms_eval_tasks.evaluation_hooks import wrap_simple_evaluate

        wrap_simple_evaluate()
        paths = [] if include_path is None else [include_path] if isinstance(include_path, str) else list(include_path)
        if not any(Path(p).resolve() == TASKS_DIR for p in paths):
            paths.append(str(TASKS_DIR))
        return original(self, include_path=paths, include_defaults=include_defaults)

    initialize_tasks._visdep_patched = True
    initialize_tasks._visdep_original = original
    TaskManager.initialize_tasks = initialize_tasks
    return []
