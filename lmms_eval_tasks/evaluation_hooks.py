"""A failed evaluation ends the `lmms-eval` process with status 1.

lmms-eval 0.7.3's command line catches every exception raised while evaluating, prints it and exits 0
(unless `--verbosity DEBUG`), so a shell loop over models carries on after a run that produced nothing:
an unset `*_ROOT`, a malformed annotation file, a missing or unreadable video. visdep wraps
`lmms_eval.evaluator.simple_evaluate`, which the command line looks up when it calls it: an exception
there is logged with its traceback and turned into `SystemExit(1)`, which the command line's `except
Exception` lets through. This holds for every evaluation in a process where visdep is installed, not only
for visdep's tasks: a run that raised is a failed run.
"""

from __future__ import annotations

import functools
import traceback

from loguru import logger


def root_cause(error: BaseException) -> BaseException:
    """The exception behind lmms-eval's retry wrapper (tenacity's RetryError around its dataset download)."""
    last = getattr(error, "last_attempt", None)
    inner = last.exception() if last is not None and last.failed else None
    return error if inner is None else root_cause(inner)


def exit_nonzero_on_failure() -> None:
    """Wrap `lmms_eval.evaluator.simple_evaluate` once (idempotent)."""
    from lmms_eval import evaluator

    if getattr(evaluator.simple_evaluate, "_visdep_exit_status", False):
        return
    original = evaluator.simple_evaluate

    @functools.wraps(original)
    def simple_evaluate(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as e:
            traceback.print_exc()
            cause = root_cause(e)
            logger.error(f"Error during evaluation: {type(cause).__name__}: {cause}")
            logger.error("visdep: the evaluation failed; lmms-eval exits with status 1")
            raise SystemExit(1) from e

    simple_evaluate._visdep_exit_status = True
    simple_evaluate._visdep_original = original
    evaluator.simple_evaluate = simple_evaluate
