"""One evaluation's state, and the accessor the task functions and adapters reach it by.

lmms-eval calls the task functions with no handle of ours, so they find the evaluation in progress through one
accessor, `current()`; it is a plain module attribute and not a `contextvars.ContextVar` because lmms-eval 0.7.3 runs
`process_results` in a thread pool (`evaluator._thread_map_ordered`), whose threads would not see a ContextVar set
on the main thread. lmms-eval's runner gets an `Evaluation` per evaluation from the wrapper in
`lmms_eval_tasks.evaluation_hooks`, which also hands it to the model it built. Code that scores outside lmms-eval's
runner (`visdep validate`, the tests) passes its own with `evaluating(...)`; outside any, `current()` is the
process's `SESSION`: the store off, the scoring mode the environment's whenever it is asked, and the question
sources that the commands of this process opened (`visdep audit --spec`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SCORING_ARGUMENT = "scoring"  # the model argument that sets an evaluation's scoring mode
SCORING_ENV = "VISDEP_SCORING"
SCORING_MODES = ("letter", "option")


def scoring_from(environ: Mapping[str, str]) -> str:
    """The scoring mode `VISDEP_SCORING` names in `environ` (default letter)."""
    mode = environ.get(SCORING_ENV, "letter").strip().lower() or "letter"
    if mode not in SCORING_MODES:
        raise ValueError(f"{SCORING_ENV}={mode!r}: expected one of {', '.join(SCORING_MODES)}")
    return mode


def scoring_argument(value: object) -> str:
    """A model's `scoring=` argument as a scoring mode."""
    mode = str(value).strip().lower()
    if mode not in SCORING_MODES:
        raise ValueError(f"model_args {SCORING_ARGUMENT}={str(value)[:40]!r}: expected one of "
                         f"{', '.join(SCORING_MODES)}")
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
    can name only the first few; `scoring`: letter or option (None: `VISDEP_SCORING` whenever it is asked, as for
    code outside any evaluation); `dropped`: task -> the questions it leaves out; `sources`: the question sources
    opened from files (specs, twins) by name (`loaders.open_source`), `specs` the specs among them."""

    store_root: Path | None = None
    output_path: Path | None = None
    scoring: str | None = "letter"
    dropped: dict[str, list[dict]] = field(default_factory=dict)
    model: object | None = None  # the model lmms-eval built, once it has (the wrapper of `evaluate` sets it)
    sources: dict[str, object] = field(default_factory=dict)
    specs: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scoring is not None and self.scoring not in SCORING_MODES:
            raise ValueError(f"scoring {self.scoring!r}: expected one of {', '.join(SCORING_MODES)}")

    @classmethod
    def create(cls, use_cache: str | os.PathLike | None = None, output_path: str | os.PathLike | None = None,
               environ: Mapping[str, str] = os.environ, scoring: str | None = None) -> Evaluation:
        """The state of an evaluation with these lmms-eval arguments; the scoring mode `scoring` (the model's
        argument), else read from `environ` now."""
        return cls(store_root=store_folder(use_cache), output_path=Path(output_path) if output_path else None,
                   scoring=scoring or scoring_from(environ))

    def scoring_mode(self) -> str:
        """letter or option: this evaluation's, or where it has none the environment's now."""
        return self.scoring if self.scoring is not None else scoring_from(os.environ)

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


SESSION = Evaluation(scoring=None)  # what code outside any evaluation records and opens
_current: Evaluation | None = None


def current() -> Evaluation:
    """The evaluation in progress, or outside one the process's `SESSION` (store off, scoring mode the
    environment's)."""
    return _current if _current is not None else SESSION


@contextmanager
def evaluating(evaluation: Evaluation) -> Iterator[Evaluation]:
    """Make `evaluation` the current one for the block (the previous one again after it)."""
    global _current
    previous, _current = _current, evaluation
    try:
        yield evaluation
    finally:
        _current = previous
