"""What visdep adds around each lmms-eval evaluation, by wrapping `lmms_eval.evaluator.simple_evaluate`
(which the command line looks up when it calls it; the wrapper is installed when the TaskManager is built).

1. `--use_cache PATH` reaches the visdep adapters (`model_adapters.durable`): they make each scored batch
   durable there, so that a killed run resumes where it stopped.
2. A failed evaluation ends the `lmms-eval` process with status 1. lmms-eval 0.7.3's command line catches
   every exception raised while evaluating, prints it and exits 0 (unless `--verbosity DEBUG`), so a shell
   loop over models carries on after a run that produced nothing: an unset `*_ROOT`, a malformed annotation
   file, a missing or unreadable video. In the wrapper an exception is logged with its traceback and turned
   into `SystemExit(1)`, which the command line's `except Exception` lets through. This holds for every
   evaluation in a process where visdep is installed, not only for visdep's tasks: a run that raised is a
   failed run.
3. Each results file gets visdep's own section, `results["visdep"]`: `model`, what the visdep adapter that ran
   says it was (`record_model`: its arguments with defaults filled in, its checkpoint's identity), and `dropped`,
   the questions each task left out and why (`record_dropped`). The audit reads both beside the samples.
"""

from __future__ import annotations

import functools
import os
import traceback
from pathlib import Path

from loguru import logger

_store_root: Path | None = None
_model: dict | None = None
_dropped: dict[str, list[dict]] = {}
_output_path: Path | None = None


def record_model(identity: dict) -> None:
    """Called by a visdep adapter once it is loaded: what the run's model is (JSON data), for `results["visdep"]`."""
    global _model
    _model = identity


def record_dropped(task: str, dropped: list[dict]) -> None:
    """Called by the task functions: the questions `task` leaves out, each {"question_id": str | None, "where":
    "<file> record <n>" or the video's path, "reason": the same text for every question left out for it}."""
    _dropped[task] = dropped


def output_path() -> Path | None:
    """lmms-eval's `--output_path` during an evaluation (None outside one): where the task functions write the full
    list of a benchmark's unusable records when an error can name only the first few."""
    return _output_path


def set_store_root(path: str | os.PathLike | None) -> None:
    """Where the adapters keep their durable scores: lmms-eval's `--use_cache` folder (a `.db` path means its
    folder), or None for off. Set around each evaluation; the adapters read it (`model_adapters.durable`)."""
    global _store_root
    if path is None or str(path) == "":
        _store_root = None
        return
    path = Path(path).expanduser()
    _store_root = (path.parent if path.suffix == ".db" else path).resolve()


def store_root() -> Path | None:
    return _store_root


def root_cause(error: BaseException) -> BaseException:
    """The exception behind lmms-eval's retry wrapper (tenacity's RetryError around its dataset download)."""
    last = getattr(error, "last_attempt", None)
    inner = last.exception() if last is not None and last.failed else None
    return error if inner is None else root_cause(inner)


def wrap_simple_evaluate() -> None:
    """Wrap `lmms_eval.evaluator.simple_evaluate` once (idempotent)."""
    from lmms_eval import evaluator

    if getattr(evaluator.simple_evaluate, "_visdep_wrapped", False):
        return
    original = evaluator.simple_evaluate

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        global _model, _output_path
        set_store_root(kwargs.get("use_cache"))
        tracker_path = getattr(kwargs.get("evaluation_tracker"), "output_path", None)
        _output_path = Path(tracker_path) if tracker_path else None
        _model = None
        _dropped.clear()
        try:
            results = original(*args, **kwargs)
            if isinstance(results, dict):  # rank 0; the others get None
                results["visdep"] = {"model": _model, "dropped": {t: list(d) for t, d in _dropped.items()}}
            return results
        except Exception as e:
            traceback.print_exc()
            cause = root_cause(e)
            logger.error(f"Error during evaluation: {type(cause).__name__}: {cause}")
            logger.error("visdep: the evaluation failed; lmms-eval exits with status 1")
            raise SystemExit(1) from e
        finally:
            set_store_root(None)
            _output_path = None

    simple_evaluate._visdep_wrapped = True
    simple_evaluate._visdep_original = original
    evaluator.simple_evaluate = simple_evaluate
