"""The one reader of annotation rows: JSON (a list, a nested object, or one list per split), JSONL, CSV, parquet and
a Hugging Face dataset saved with `save_to_disk`, each yielding (row as a dict of JSON values, where it was read).

`where` names the file and the record as the format counts it: `record <i>` in a JSON list (`record 'key' / <i>`
under nesting), `line <n>` in JSONL, `row <n>` in CSV (the line number) and in parquet or a saved dataset (0-based).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

from lmms_eval_tasks.errors import excerpt, flat
from lmms_eval_tasks.reading import (
    FileReadError,
    check_nesting,
    decode,
    json_lines,
    parse_json,
    read_bytes,
    regular_file,
    unicode_text,
)
from lmms_eval_tasks.records import BenchmarkDataError

FORMATS = ("json", "jsonl", "csv", "parquet", "hf_disk")
SUFFIX_FORMATS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
SAVED_DATASET_MARKERS = ("state.json", "dataset_dict.json")


class RowsError(BenchmarkDataError):
    """A file that cannot be read as rows. `option` names the reading option to look at: 'format', 'nesting',
    'split', or 'file' (the file itself)."""

    def __init__(self, path: Path | str, message: str, option: str = "file"):
        super().__init__(f"{path}: {message}")
        self.option = option


def file_format(path: Path) -> str:
    """The format a path's suffix says (a folder: a saved dataset)."""
    if path.is_dir():
        return "hf_disk"
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise RowsError(path, f"cannot tell the format from the suffix {path.suffix!r}; expected one of "
                              f"{', '.join(SUFFIX_FORMATS)} or a folder saved with save_to_disk", "format")
    return fmt


def read_rows(path: Path, fmt: str | None = None, split: str | None = None, nesting: Sequence[str] = (),
              keyed_records: bool = False) -> Iterator[tuple[dict, str]]:
    """(row, where) of one annotation file in file order.

    `split`: the split of a saved DatasetDict, or of a JSON object {split: [records]}. `nesting`: JSON only, one
    field name per level of object keys above the records; each key becomes that field of its records.
    `keyed_records`: a JSON object whose values are the records (its keys are dropped)."""
    path = Path(path)
    fmt = fmt or file_format(path)
    if fmt not in FORMATS:
        raise RowsError(path, f"format {fmt!r}: expected one of {', '.join(FORMATS)}", "format")
    try:
        if fmt != "hf_disk":
            regular_file(path, "annotations")
        yield from _rows(path, fmt, split, nesting, keyed_records)
    except FileReadError as e:
        raise RowsError(path, str(e).removeprefix(f"{path}: ")) from None
    except PermissionError as e:
        raise RowsError(path, f"cannot read it ({e.strerror})") from e


def _rows(path: Path, fmt: str, split: str | None, nesting: Sequence[str],
          keyed_records: bool) -> Iterator[tuple[dict, str]]:
    if fmt == "json":
        yield from _json_rows(path, split, tuple(nesting), keyed_records)
    elif fmt == "jsonl":
        yield from _jsonl_rows(path)
    elif fmt == "csv":
        yield from _csv_rows(path)
    elif fmt == "parquet":
        yield from _parquet_rows(path)
    else:
        yield from _saved_dataset_rows(path, split)


def _csv_rows(path: Path) -> Iterator[tuple[dict, str]]:
    # the whole file is one field at most: a 50 MB cell is a cell, not csv's "field larger than field limit"
    text = decode(read_bytes(path, "annotations"), path)
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            yield dict(row), f"{path} row {reader.line_num}"
    except csv.Error as e:
        raise RowsError(f"{path} row {reader.line_num}", f"not CSV ({e})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[dict, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:  # a damaged or truncated file, or not parquet at all
        raise RowsError(path, f"not a readable parquet file ({flat(e, 200)})") from None
    for i, row in enumerate(rows):
        where = f"{path} row {i}"
        yield unicode_text(check_nesting(row, where), where), where


def _jsonl_rows(path: Path) -> Iterator[tuple[dict, str]]:
    for lineno, row in json_lines(read_bytes(path, "annotations"), path):
        where = f"{path} line {lineno}"
        if not isinstance(row, dict):
            raise RowsError(where, "expected a JSON object per line")
        yield row, where


def _json_rows(path: Path, split: str | None, nesting: tuple[str, ...],
               keyed_records: bool) -> Iterator[tuple[dict, str]]:
    data = parse_json(read_bytes(path, "annotations"), path)
    if isinstance(data, dict) and not nesting:
        if split is not None and isinstance(data.get(split), list):
            data = data[split]
        elif keyed_records:
            data = list(data.values())
        else:
            raise RowsError(path, "the file is a JSON object, not a list of records: declare `nesting` (one field "
                                  "name per level of keys above the records)", "nesting")

    def walk(value, level: int, keys: dict, trail: list[str]) -> Iterator[tuple[dict, str]]:
        if level < len(nesting):
            if not isinstance(value, dict):
                raise RowsError(f"{path} record {' / '.join(trail) or '(top level)'}",
                                f"expected an object keyed by {nesting[level]!r}, found {type(value).__name__}",
                                "nesting")
            for key, inner in value.items():
                yield from walk(inner, level + 1, {**keys, nesting[level]: key}, [*trail, excerpt(key, 40)])
            return
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            where = f"{path} record {' / '.join([*trail, str(i)] if isinstance(value, list) else trail)}"
            if not isinstance(item, dict):
                raise RowsError(where, f"expected a record (a JSON object), found {type(item).__name__}",
                                "nesting" if nesting else "file")
            clash = [k for k in keys if k in item]
            if clash:
                raise RowsError(where, f"the record has a field {clash[0]!r} too; name the nesting level otherwise",
                                "nesting")
            yield {**item, **keys}, where

    yield from walk(data, 0, {}, [])


def _saved_dataset_rows(path: Path, split: str | None) -> Iterator[tuple[dict, str]]:
    import datasets

    try:
        dataset = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as e:
        raise RowsError(path, f"not a dataset saved with save_to_disk ({e})") from None
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise RowsError(path, f"holds splits {list(dataset)}: name one (got {split!r})", "split")
        dataset = dataset[split]
    for i, row in enumerate(dataset):
        yield row, f"{path} row {i}"
