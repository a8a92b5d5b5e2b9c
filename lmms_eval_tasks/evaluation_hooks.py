"""What visdep adds around each lmms-eval evaluation, by wrapping `lmms_eval.evaluator.simple_evaluate`
(which the command line looks up when it calls it; the wrapper is installed when the TaskManager is built).

One `Evaluation` object per evaluation holds what visdep needs during it: the durable store's root, lmms-eval's
`--output_path`, the scoring mode (`VISDEP_SCORING`, read once when the evaluation starts) and what the task
functions record. The wrapper creates it and makes it the current one for the evaluation's duration. lmms-eval
calls the task functions and the adapters with no handle of ours, so they find it through one accessor,
`current()`; it is a plain module attribute and not a `contextvars.ContextVar` because lmms-eval 0.7.3 runs
`process_results` in a thread pool (`evaluator._thread_map_ordered`), whose threads would not see a ContextVar set
on the main thread. Code that scores outside lmms-eval's runner (`visdep validate`, the tests) passes its own
`Evaluation` with `evaluating(...)`; outside any, `current()` is a fresh one read from the environment (store off).

1. `--use_cache PATH` reaches the visdep adapters (`model_adapters.pipeline`): they make each scored batch durable
   under `Evaluation.store_root`, so that a killed run resumes where it stopped.
2. A failed evaluation ends the `lmms-eval` process with status 1. lmms-eval 0.7.3's command line catches
   every exception raised while evaluating, prints it and exits 0 (unless `--verbosity DEBUG`), so a shell
   loop over models carries on after a run that produced nothing: an unset `*_ROOT`, a malformed annotation
   file, a missing or unreadable video. In the wrapper an exception is logged (a VisdepError, input the user can
   fix, in its one line; anything else with its traceback) and turned into `SystemExit(1)`, which the command
   line's `except Exception` lets through. This holds for every
   evaluation in a process where visdep is installed, not only for visdep's tasks: a run that raised is a
   failed run.
3. Each results file gets visdep's own section, `results["visdep"]`: `model`, what the visdep adapter that ran
   says it was (asked after the evaluation: `run_identity()` of the model lmms-eval built, which the wrapper of
   `lmms_eval.evaluator.evaluate` sees; its arguments with defaults filled in, its checkpoint's identity), and
   `dropped`, the questions each task left out and why (`Evaluation.record_dropped`). The audit reads both beside
   the samples.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.errors import VisdepError

SCORING_ENV = "VISDEP_SCORING"
SCORING_MODES = ("letter", "option")


def scoring_from(environ: Mapping[str, str]) -> str:
    """The scoring mode `VISDEP_SCORING` names in `environ` (default letter)."""
    mode = environ.get(SCORING_ENV, "letter").strip().lower() or "letter"
    if mode not in SCORING_MODES:
        raise ValueError(f"{SCORING_ENV}={mode!r}: expected one of {', '.join(SCORING_MODES)}")
    return mode


def store_folder(use_cache: str | os.PathLike | None) -> Path | None:
    """Where the adapters keep their durable scores for lmms-eval's `--use_cache` value (a `.db` path means its
    folder), or None for off."""
    if use_cache is None or str(use_cache) == "":
        return None
    path = Path(use_cache).expanduser()
    return (path.parent if path.suffix == ".db" else path).resolve()


@dataclass
class Evaluation:
    """One evaluation's state. `store_root`: the durable store's folder (None: off); `output_path`: lmms-eval's
    `--output_path`, where the task functions write the full list of a benchmark's unusable records when an error
    can name only the first few; `scoring`: letter or option; `dropped`: task -> the questions it leaves out."""

    store_root: Path | None = None
    output_path: Path | None = None
    scoring: str = "letter"
    dropped: dict[str, list[dict]] = field(default_factory=dict)
    model: object | None = None  # the model lmms-eval built, once it has (the wrapper of `evaluate` sets it)

    def __post_init__(self) -> None:
        if self.scoring not in SCORING_MODES:
            raise ValueError(f"scoring {self.scoring!r}: expected one of {', '.join(SCORING_MODES)}")

    @classmethod
    def create(cls, use_cache: str | os.PathLike | None = None, output_path: str | os.PathLike | None = None,
               environ: Mapping[str, str] = os.environ) -> Evaluation:
        """The state of an evaluation with these lmms-eval arguments; the scoring mode read from `environ` now."""
        return cls(store_root=store_folder(use_cache), output_path=Path(output_path) if output_path else None,
                   scoring=scoring_from(environ))

    def record_dropped(self, task: str, dropped: list[dict]) -> None:
        """The questions `task` leaves out, each {"question_id": str | None, "where": "<file> record <n>" or the
        video's path, "reason": the same text for every question left out for it}."""
        self.dropped[task] = list(dropped)

    def section(self) -> dict:
        """`results["visdep"]`: what the model says it was (None for models other than visdep's), and what each task
        left out."""
        describe = getattr(self.model, "run_identity", None)
        return {"model": describe() if callable(describe) else None,
                "dropped": {t: list(d) for t, d in self.dropped.items()}}


_current: Evaluation | None = None


def current() -> Evaluation:
    """The evaluation in progress, or outside one a fresh `Evaluation` read from the environment (store off, and
    what is recorded into it is kept by no one)."""
    return _current if _current is not None else Evaluation.create()


@contextmanager
def evaluating(evaluation: Evaluation) -> Iterator[Evaluation]:
    """Make `evaluation` the current one for the block (the previous one again after it)."""
    global _current
    previous, _current = _current, evaluation
    try:
        yield evaluation
    finally:
        _current = previous


def root_cause(error: BaseException) -> BaseException:
    """The exception behind lmms-eval's retry wrapper (tenacity's RetryError around its dataset download)."""
    last = getattr(error, "last_attempt", None)
    inner = last.exception() if last is not None and last.failed else None
    return error if inner is None else root_cause(inner)


def wrap_simple_evaluate() -> None:
    """Wrap `lmms_eval.evaluator.simple_evaluate` and `evaluate` once (idempotent)."""
    from lmms_eval import evaluator

    if getattr(evaluator.simple_evaluate, "_visdep_wrapped", False):
        return
    original, original_evaluate = evaluator.simple_evaluate, evaluator.evaluate

    @functools.wraps(original_evaluate)
    def evaluate(*args, **kwargs):  # simple_evaluate calls it with the model it built
        current().model = kwargs["lm"] if "lm" in kwargs else args[0]
        return original_evaluate(*args, **kwargs)

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        try:
            evaluation = Evaluation.create(kwargs.get("use_cache"),
                                           getattr(kwargs.get("evaluation_tracker"), "output_path", None))
            with evaluating(evaluation):
                results = original(*args, **kwargs)
            if isinstance(results, dict):  # rank 0; the others get None
                results["visdep"] = evaluation.section()
            return results
        except Exception as e:
            cause = root_cause(e)
            if not isinstance(cause, VisdepError):  # a user's error is its one line; a bug keeps its traceback
                traceback.print_exc()
            logger.error(f"Error during evaluation: {type(cause).__name__}: {cause}")
            logger.error("visdep: the evaluation failed; lmms-eval exits with status 1")
            raise SystemExit(1) from e

    simple_evaluate._visdep_wrapped = True
    simple_evaluate._visdep_original = original
    evaluate._visdep_original = original_evaluate
    evaluator.simple_evaluate = simple_evaluate
    evaluator.evaluate = evaluate
