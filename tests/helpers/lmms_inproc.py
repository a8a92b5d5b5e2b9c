"""lmms-eval's command line run inside the test process: the same entry `python -m lmms_eval` calls
(`lmms_eval.cli.dispatch.main`), with the same arguments, environment, working folder and exit status, so that a test
pays lmms-eval's imports (about 10 s) and its index of the ~2,000 YAMLs it ships once per worker, not once per run.

What a real process would not share with the next run is set up and taken back around each run: `os.environ`
(replaced by the run's whole environment), the working folder, `sys.argv`, standard output and error (captured, as a
subprocess's would be), loguru's handlers (lmms-eval replaces them with one on the captured stdout), and visdep's
per-evaluation state, which the evaluation itself owns (`lmms_eval_tasks.evaluation_hooks`).

Where the process is what a test checks (a kill and a resume, torchrun's ranks, another environment's interpreter, an
environment read when a library is imported), `run_lmms_eval(..., process=True)` runs a real subprocess instead;
`needs_process` says which environments cannot be honoured in process.
"""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

# Read once, when the library that reads them is imported: a run that sets them to another value than this process
# has needs a process of its own. (HF_DATASETS_CACHE is read per call: `datasets.config` is patched for the run.)
# OMP_NUM_THREADS is honoured by torch.set_num_threads for the run.
READ_AT_IMPORT = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE",
                  "CUDA_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM")
DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

# One in-process run at a time: the environment, cwd and stdout are the process's. A run asked for on another thread
# waits for the one in progress (the thread that started it takes no part in it, as with a subprocess it waits on;
# a subprocess started meanwhile is given its own environment and folder).
_lock = threading.Lock()
_default_index: dict | None = None


def needs_process(env: Mapping[str, str]) -> str | None:
    """Why a run with environment `env` cannot be honoured inside this process (None: it can)."""
    for name in READ_AT_IMPORT:
        if env.get(name) != os.environ.get(name):
            return f"{name} differs from this process's ({env.get(name)!r}, here {os.environ.get(name)!r})"
    if any(name in env for name in DISTRIBUTED):
        return "a distributed launch"
    return None


def _index_defaults_once() -> None:
    """lmms-eval's own tasks folder never changes during a session: index its ~2,000 YAMLs once per process. Every
    other folder (visdep's tasks, a test's --include_path) is read anew by every run, as the CLI reads it."""
    from lmms_eval.tasks import TaskManager

    if getattr(TaskManager._get_task_and_group, "_visdep_once", False):
        return
    original = TaskManager._get_task_and_group
    defaults = os.path.dirname(os.path.abspath(sys.modules[TaskManager.__module__].__file__))

    def _get_task_and_group(self, task_dir: str):
        global _default_index
        if os.path.abspath(task_dir) != defaults:
            return original(self, task_dir)
        if _default_index is None:
            _default_index = original(self, task_dir)
        return copy.deepcopy(_default_index)

    _get_task_and_group._visdep_once = True
    TaskManager._get_task_and_group = _get_task_and_group


def _retry_without_pauses() -> None:
    """lmms-eval retries a failed data download 5 times, 2 s apart, which a test of a broken download waits out
    at every run: the same attempts, without the pauses."""
    import tenacity
    from lmms_eval.api.task import ConfigurableTask

    ConfigurableTask.download.retry.wait = tenacity.wait_none()


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    patched = []
    threads = None
    if env.get("OMP_NUM_THREADS", "").isdigit():
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if "HF_DATASETS_CACHE" in env:  # `datasets` reads its cache folder from this attribute at every load
        import datasets.config

        patched.append((datasets.config, "HF_DATASETS_CACHE", datasets.config.HF_DATASETS_CACHE))
        datasets.config.HF_DATASETS_CACHE = Path(env["HF_DATASETS_CACHE"])
    try:
        yield
    finally:
        for module, name, value in patched:
            setattr(module, name, value)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _loguru_to(stream: io.StringIO) -> Iterator[None]:
    """loguru's output on the run's captured stream while it runs (lmms-eval replaces the handlers with one on
    sys.stdout, which is then the capture); after it, loguru's default (every level on stderr), on whatever stderr
    is when a message comes, as pytest swaps it per test."""
    from loguru import logger

    logger.remove()
    logger.add(stream)
    try:
        yield
    finally:
        logger.remove()
        logger.add(lambda message: sys.stderr.write(message))


def run_in_process(args: list[str], env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m lmms_eval ARGS` with environment `env` in folder `cwd`, in this process: what a subprocess.run of
    it returns (exit status, stdout, stderr)."""
    reason = needs_process(env)
    if reason is not None:
        raise RuntimeError(f"this run needs a process of its own: {reason}; use process=True")
    with _lock:
        stdout, stderr = io.StringIO(), io.StringIO()
        saved_argv, saved_cwd = sys.argv, os.getcwd()
        returncode = 0
        with _environment(env), redirect_stdout(stdout), redirect_stderr(stderr), _loguru_to(stderr):
            sys.argv = ["lmms_eval", *args]
            os.chdir(cwd)
            try:
                from lmms_eval.cli.dispatch import main

                _index_defaults_once()
                _retry_without_pauses()
                main()
            except SystemExit as e:  # what the process would exit with
                if e.code is None or isinstance(e.code, int):
                    returncode = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    returncode = 1
            except Exception:  # an exception out of the entry: Python prints it and exits 1
                traceback.print_exc()
                returncode = 1
            finally:
                sys.argv = saved_argv
                os.chdir(saved_cwd)
        return subprocess.CompletedProcess([sys.executable, "-m", "lmms_eval", *args], returncode,
                                           stdout.getvalue(), stderr.getvalue())
