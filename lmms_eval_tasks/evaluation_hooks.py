"""What visdep adds around each lmms-eval evaluation, by wrapping `lmms_eval.evaluator.simple_evaluate`
(which the command line looks up when it calls it; the wrapper is installed when the TaskManager is built).

One `Evaluation` object per evaluation (`lmms_eval_tasks.evaluation`) holds what visdep needs during it: the
durable store's root, lmms-eval's `--output_path`, the scoring mode (the model's `scoring=` argument, else
`VISDEP_SCORING`, read once when the evaluation starts), the question sources its tasks opened from files (specs,
twins) and what the task functions record. The wrapper creates it, makes it the current one for the evaluation's
duration and hands it to the model lmms-eval built (`model.evaluation`), so that two evaluations in one process
share nothing.

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
import traceback
from collections.abc import Mapping

from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.evaluation import SCORING_ARGUMENT, Evaluation, current, evaluating, scoring_argument


def scoring_in_model_args(model_args: object) -> str | None:
    """The scoring mode lmms-eval's `model_args` (its comma-separated text, or a mapping from a --config file)
    sets, or None where it sets none."""
    if isinstance(model_args, Mapping):
        value = model_args.get(SCORING_ARGUMENT)
    elif isinstance(model_args, str) and model_args.strip():
        from lmms_eval.utils import simple_parse_args_string

        value = simple_parse_args_string(model_args).get(SCORING_ARGUMENT)
    else:
        value = None
    return None if value is None else scoring_argument(value)


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
        model = kwargs["lm"] if "lm" in kwargs else args[0]
        current().model = model
        if hasattr(model, "evaluation"):  # a visdep adapter: the evaluation it scores for, handed to it
            model.evaluation = current()
        return original_evaluate(*args, **kwargs)

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        try:
            evaluation = Evaluation.create(kwargs.get("use_cache"),
                                           getattr(kwargs.get("evaluation_tracker"), "output_path", None),
                                           scoring=scoring_in_model_args(kwargs.get("model_args")))
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
