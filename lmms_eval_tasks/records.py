"""The normalized question every loader yields, its validation, and the errors that name the bad record.

    {"question_id": str,      # stable and unique within the benchmark
     "benchmark": str,        # "mmau", "vru_accident", ..., "videomme", "longvideobench", "mlvu"
     "video": str,            # path relative to the benchmark's video folder: a video file or a frame folder
     "question": str,
     "options": list[str],    # K non-empty option texts in presentation order
     "answer_index": int,     # 0-based index into options
     "category": str | None,  # reasoning type / question category
     "source": str | None,    # sub-dataset (CAP, DADA, DoTA, ...) or duration group
     "facets": {str: str}}    # optional: every category dimension the benchmark reports accuracy by
"""

from __future__ import annotations

import json
import string
from pathlib import Path

LETTERS = string.ascii_uppercase


class BenchmarkDataError(ValueError):
    """A benchmark root, file or record that cannot be read as the official format."""


def fail(path: Path | str, message: str) -> BenchmarkDataError:
    return BenchmarkDataError(f"{path}: {message}")


def read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise fail(path, f"not valid JSON ({e})") from e


def make_record(qid, benchmark, video, question, options, answer_index, category, source, where,
                facets: dict[str, str] | None = None) -> dict:
    """Validate one normalized question; `where` names the file and record for errors."""
    options = [str(o).strip() for o in options]
    if len(options) < 2:
        raise BenchmarkDataError(f"{where}: needs at least 2 options, got {options!r}")
    if any(not o for o in options):
        raise BenchmarkDataError(f"{where}: empty option text in {options!r}")
    if not isinstance(answer_index, int) or not 0 <= answer_index < len(options):
        raise BenchmarkDataError(f"{where}: answer index {answer_index!r} outside 0..{len(options) - 1}")
    if not str(question).strip():
        raise BenchmarkDataError(f"{where}: empty question")
    record = {"question_id": str(qid), "benchmark": benchmark, "video": str(video), "question": str(question).strip(),
              "options": options, "answer_index": answer_index, "category": category, "source": source}
    if facets:
        record["facets"] = {str(k): str(v) for k, v in facets.items()}
    return record


def check_unique(records: list[dict], where: Path | str) -> list[dict]:
    seen: set[str] = set()
    for r in records:
        if r["question_id"] in seen:
            raise fail(where, f"duplicate question_id {r['question_id']!r}")
        seen.add(r["question_id"])
    return records


def as_int(value, where: str, field: str) -> int:
    """Official files store indices as int, '3', 3.0 or '3.0'."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BenchmarkDataError(f"{where}: field {field!r} is not a number: {value!r}") from None
    if f != int(f):
        raise BenchmarkDataError(f"{where}: field {field!r} is not a whole number: {value!r}")
    return int(f)
