"""Records a benchmark's files hold but visdep cannot use, and the one switch that runs on the rest.

A loader reads every record; each one it cannot use (an answer that is not among the options, a missing field, a
repeated id, ...) becomes an `Unusable` entry instead of stopping the read. Without the switch, one error lists
them all, counted by reason; with it (`VISDEP_SKIP_UNUSABLE=1`, or `skip_unusable: true` in a spec) they are left
out, logged, and listed in each run's results (`results["visdep"]["dropped"]`). The same switch drops the questions
whose video is missing or unreadable from a video task. Nothing is left out silently.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.records import BenchmarkDataError, Question, RecordError
from lmms_eval_tasks.writing import write_file

SKIP_ENV = "VISDEP_SKIP_UNUSABLE"
# Scripts that skip missing videos set this name: it is the same switch.
SKIP_ENV_ALIASES = ("VISDEP_SKIP_MISSING_VIDEOS",)
SPEC_KEY = "skip_unusable"
SHOWN = 10  # records named in an error or warning; the rest are counted (and listed in a file where there is one)


def skip_requested() -> bool:
    """Whether the environment asks to run on the usable questions."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes") for v in (SKIP_ENV, *SKIP_ENV_ALIASES))


@dataclass(frozen=True)
class Unusable:
    """A record (or a question's video) that cannot be used, and why."""

    where: str  # "<file> record <n>" (line, row: as the format counts), or the video's path
    reason: str  # the same text for every record with this problem
    question_id: str | None = None
    detail: str = ""  # this record's values

    def entry(self) -> dict:
        """The JSON record the results and the audit carry."""
        return {"question_id": self.question_id, "where": self.where, "reason": self.reason}

    def line(self) -> str:
        qid = f" ({self.question_id})" if self.question_id is not None else ""
        return f"{self.where}{qid}: {self.reason}" + (f": {self.detail}" if self.detail else "")


def by_reason(unusable: Iterable[Unusable]) -> Counter:
    return Counter(u.reason for u in unusable)


def describe(unusable: list[Unusable], what: str, shown: int = SHOWN) -> str:
    """'<n> <what> cannot be used: <count> <reason>; ...' and the first `shown` named, one per line."""
    counts = "; ".join(f"{n:,} {reason}" for reason, n in by_reason(unusable).most_common())
    lines = [f"{len(unusable):,} {what} cannot be used: {counts}"]
    lines += [f"  {u.line()}" for u in unusable[:shown]]
    if len(unusable) > shown:
        lines.append(f"  ... and {len(unusable) - shown:,} more")
    return "\n".join(lines)


def write_unusable(path: Path, unusable: list[Unusable]) -> Path:
    """Every entry, one JSON object per line (question_id, where, reason, detail)."""
    return write_file(path.parent, path.name,
                      "".join(json.dumps({**u.entry(), "detail": u.detail}) + "\n" for u in unusable))


class UnusableRecordsError(BenchmarkDataError):
    """Records of a benchmark that cannot be used, all of them (`unusable`), with the switch not set."""

    def __init__(self, message: str, benchmark: str, unusable: list[Unusable]):
        super().__init__(message)
        self.benchmark, self.unusable = benchmark, unusable


@dataclass
class BenchmarkData:
    """What a loader read: the usable questions in file order (`wheres`: where each was read), the records it
    cannot use, and the quirks it handled ({what: question ids}, e.g. padding options dropped) for the data report."""

    benchmark: str
    questions: list[Question] = field(default_factory=list)
    wheres: list[str] = field(default_factory=list)
    unusable: list[Unusable] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)
    origin: str = ""  # where the records were read, for messages ("MLVU_ANNOTATIONS=/data/mlvu")

    def read(self, where: str, question_id: str | None, build: Callable[..., Question | None], *args) -> None:
        """Add the question `build(*args)` makes from one record (None: a record that is no question, left out), or
        the record as unusable where it raises. A malformed record (a missing field, a value of the wrong type) is
        unusable as well: the entry names what is wrong."""
        try:
            question = build(*args)
        except RecordError as e:
            self.unusable.append(Unusable(where, e.reason, question_id, e.detail))
            return
        except KeyError as e:
            self.unusable.append(Unusable(where, "a field is missing", question_id, f"no field {e.args[0]!r}"))
            return
        except (TypeError, AttributeError, ValueError) as e:
            self.unusable.append(Unusable(where, "malformed record", question_id, f"{type(e).__name__}: {e}"))
            return
        if question is not None:
            self.questions.append(question)
            self.wheres.append(where)

    def note(self, what: str, question_id: str) -> None:
        self.notes.setdefault(what, []).append(question_id)

    def finish(self, repeated: str = "the question id repeats an earlier record's") -> BenchmarkData:
        """Leave out each question whose id an earlier question has (reason: `repeated`): ids must be unique."""
        first: dict[str, str] = {}
        kept = []
        for q, where in zip(self.questions, self.wheres, strict=True):
            if q.question_id in first:
                self.unusable.append(Unusable(where, repeated, q.question_id, f"first at {first[q.question_id]}"))
            else:
                first[q.question_id] = where
                kept.append((q, where))
        self.questions, self.wheres = [q for q, _ in kept], [w for _, w in kept]
        return self

    def usable(self, skip: bool) -> list[Question]:
        """The questions. Unusable records raise `UnusableRecordsError` naming them unless `skip`, which logs them."""
        if not self.unusable:
            return self.questions
        origin = f" ({self.origin})" if self.origin else ""
        report = describe(self.unusable, f"of the {len(self.questions) + len(self.unusable):,} records of "
                                         f"{self.benchmark}{origin}")
        if not self.questions:
            raise UnusableRecordsError(f"no record of {self.benchmark} can be used: {report}", self.benchmark,
                                       self.unusable)
        if not skip:
            raise UnusableRecordsError(
                f"{report}\nSet {SKIP_ENV}=1 (a spec: {SPEC_KEY}: true) to run on the other {len(self.questions):,} "
                f"questions; the results then list the records left out.", self.benchmark, self.unusable)
        logger.warning(f"visdep: {report}\n  left out ({SKIP_ENV}); the results list them")
        return self.questions
