"""The normalized question every loader and spec builds, its validation, and the errors that name a bad record.

A `Question` is built with keyword arguments and checks itself: K >= 2 non-empty option texts in presentation
order, an answer index among them, a non-empty question. `Question.document()` is the same question as the dict
lmms-eval hands the task functions (`lmms_eval_tasks.tasks`).
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lmms_eval_tasks.errors import VisdepError

LETTERS = string.ascii_uppercase


class BenchmarkDataError(VisdepError):
    """A benchmark root, file or record that cannot be read as the official format."""


class RecordError(BenchmarkDataError):
    """One record that cannot be used. `reason` is the same short text for every record with this problem (records
    are counted by it); `detail` names this record's values."""

    MAX_DETAIL = 300  # a record's values, shown: the unusable list and its summary stay readable lines

    def __init__(self, reason: str, detail: str = ""):
        if len(detail) > self.MAX_DETAIL:
            detail = f"{detail[:self.MAX_DETAIL]}... ({len(detail) - self.MAX_DETAIL:,} more characters)"
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


def fail(path: Path | str, message: str) -> BenchmarkDataError:
    return BenchmarkDataError(f"{path}: {message}")


INT64_MIN, INT64_MAX = -2**63, 2**63 - 1  # what every reader's integer arrays hold


def as_int(value, field: str) -> int:
    """A whole number from how files store one: 3, '3', 3.0, '3.0' (a spreadsheet's float, a CSV's text), within
    the 64-bit range every reader stores it in (an index, a count, lmms-eval's `doc_id`).

    Raises RecordError (a ValueError) for anything else: text that is no number, 2.5, NaN, infinity, a bool, a number
    of 2**63 or more in size."""
    if isinstance(value, bool):
        raise RecordError(f"field {field!r} is not a whole number", repr(value))
    whole = value if isinstance(value, int) else _whole_number(value, field)
    if not INT64_MIN <= whole <= INT64_MAX:
        raise RecordError(f"field {field!r} is outside the 64-bit range", f"{value!r:.40}")
    return whole


def _whole_number(value, field: str) -> int:
    if isinstance(value, str):
        try:
            return int(value.strip())  # exactly, beyond 2**53 as well
        except ValueError:
            pass  # '3.0', '1e3': a float's text
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RecordError(f"field {field!r} is not a whole number", repr(value)) from None
    if not math.isfinite(number) or number != int(number):
        raise RecordError(f"field {field!r} is not a whole number", repr(value))
    return int(number)


@dataclass(frozen=True)
class Question:
    """One multiple-choice question about one video, as every benchmark's loader yields it."""

    question_id: str  # stable and unique within the benchmark
    benchmark: str  # "mmau", "vru_accident", ..., "videomme", "longvideobench", "mlvu", or a spec's name
    video: str  # relative to the benchmark's video folder: a video file or a frame folder
    question: str
    options: tuple[str, ...]  # K non-empty option texts in presentation order
    answer_index: int  # 0-based index into options
    category: str | None = None  # reasoning type / question category
    source: str | None = None  # sub-dataset (CAP, DADA, DoTA, ...) or duration group
    facets: Mapping[str, str] = field(default_factory=dict)  # every category dimension the benchmark reports

    def __post_init__(self) -> None:
        options = tuple(str(o).strip() for o in self.options)
        if len(options) < 2:
            raise RecordError("fewer than 2 options", repr(list(options)))
        if any(not o for o in options):
            raise RecordError("an option text is empty", repr(list(options)))
        if len(options) > len(LETTERS):  # every prompt letters its options
            raise RecordError(f"more options than the {len(LETTERS)} letters", f"{len(options)} options")
        answer = self.answer_index
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(options):
            raise RecordError("the answer index is outside the options", f"{answer!r} of {len(options)} options")
        question = str(self.question).strip()
        if not question:
            raise RecordError("the question text is empty")
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "question_id", str(self.question_id))
        set_(self, "video", str(self.video))
        set_(self, "question", question)
        set_(self, "options", options)
        set_(self, "facets", {str(k): str(v) for k, v in self.facets.items()})

    def document(self) -> dict:
        """The question as an lmms-eval document: JSON types, and category '' where there is none (an Arrow
        column takes one type)."""
        doc = {"question_id": self.question_id, "benchmark": self.benchmark, "video": self.video,
               "question": self.question, "options": list(self.options), "answer_index": self.answer_index,
               "category": self.category or "", "source": self.source}
        if self.facets:
            doc["facets"] = dict(self.facets)
        return doc


def answer_letter(value, n_options: int) -> int:
    """The position a letter answer names ('B', 'b', 'B.'); RecordError unless it is one of the first n letters."""
    letter = str(value).strip().rstrip(".").strip().upper()
    if len(letter) != 1 or letter not in LETTERS[:n_options]:
        raise RecordError("the answer is not one of the options' letters",
                          f"{value!r}, letters {', '.join(LETTERS[:n_options])}")
    return LETTERS.index(letter)


def answer_text(value, options: Sequence[str], what: str = "options") -> int:
    """The position of the one option whose text is the answer; RecordError when none or several are."""
    text = str(value).strip()
    matches = [k for k, o in enumerate(options) if str(o).strip() == text]
    if not matches:
        raise RecordError(f"the answer is not among the {what}", f"answer {value!r}, {what} {list(options)!r}")
    if len(matches) > 1:
        raise RecordError(f"the answer is the text of two or more {what}",
                          f"answer {value!r} is {', '.join(LETTERS[k] for k in matches)} of {list(options)!r}")
    return matches[0]
