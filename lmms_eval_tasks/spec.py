"""Benchmark specs: audit a benchmark of your own from a short YAML, before you release it.

A spec names the annotation files and says which fields hold what; visdep reads it like a built-in loader
reads an official download (`register_spec` adds it to `loaders.BENCHMARKS`), so `load_benchmark`, the
blind and video tasks (`visdep spec init`), `visdep check-data`, `visdep tst`, `visdep ibp`,
`visdep audit` and the grounded export work on it. The language (configs/specs/*.yaml are examples):

    name: my_bench                  # tasks my_bench_blind / my_bench_video; [a-z][a-z0-9_]*
    root_variable: MY_BENCH_ROOT    # folder that annotations and videos are relative to (default <NAME>_ROOT)
    root_default: .                 # optional: the root when the variable is unset, relative to this file
    annotations: questions.csv      # a path or a list of paths under the root; glob patterns allowed
    format: csv                     # optional: json, jsonl, csv, parquet, hf_disk (default: from the suffix;
                                    #   a folder is a Hugging Face dataset saved with save_to_disk)
    split: test                     # hf_disk only: the split of a saved DatasetDict
    nesting: [video_key, category]  # JSON only: the file is an object keyed by video_key, whose values are
                                    #   objects keyed by category, whose values are the records (or lists of
                                    #   records); each key becomes a field of its records
    extract:                        # optional: regular expressions whose named groups become fields
      video_name: '(?P<type>\\d+)-(?P<clip>\\d+)'   #   (re.search; applied in order; must match)
    fields:                         # every value is a template: {field} is the record's field, anything
      question_id: 'q-{id}'         #   else literal text; a value that is exactly one {field} keeps the
      question: '{question}'        #   field's type; '{n:03d}' formats (numbers stored as text too).
      options: ['{a}', '{b}', '{c}']  # separate columns; or '{choices}' (a list, or a JSON list as text);
                                    #   or {lettered: '{options}'} ('A. x, B. y, ...' split at the markers
                                    #   as VRU-Accident's are, n_options required)
      answer: '{answer}'
      video: 'videos/{id}.mp4'      # a video file or frame folder under the root; '*' matches a folder
                                    #   level the annotations do not name (exactly one path must match)
      category: '{type}'            # optional
      source: 'my_bench'            # optional
    answer_is: index                # index (0-based), index1 (1-based), letter (A, 'b', 'C.'), text
    n_options: 4                    # optional: every question must have this many options (K)
    drop_options: ['', 'N/A']       # optional: option texts that are padding, dropped (answer remapped)
    description: ...                # optional, free text for the reader (not used)

Built-in fields: `_file` (the annotation file, relative to the root) and `_index` (the record's position
in it). Errors name the spec file and key, and for a record the annotation file and the record.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from lmms_eval_tasks.loaders import BENCHMARKS, Benchmark, split_lettered_options
from lmms_eval_tasks.records import LETTERS, BenchmarkDataError, as_int, make_record, read_json

FORMATS = ("json", "jsonl", "csv", "parquet", "hf_disk")
_SUFFIX_FORMATS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
ANSWER_KINDS = ("index", "index1", "letter", "text")
REQUIRED_FIELDS = ("question_id", "question", "options", "answer", "video")
OPTIONAL_FIELDS = ("category", "source")
SPEC_KEYS = ("name", "root_variable", "root_default", "annotations", "format", "split", "nesting", "extract",
             "fields", "answer_is", "n_options", "drop_options", "description")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BUILT_IN_FIELDS = ("_file", "_index")
# Beside the spec, `visdep spec init` writes <name>_blind.yaml, <name>_video.yaml and this data file, whose one
# line names the spec: lmms-eval hands it to `tasks.spec_docs_*`, which read the spec it names.
DATA_FILE_SUFFIX = "_spec.jsonl"
YAML_HEADER = "# visdep spec task"


class SpecError(BenchmarkDataError):
    """A spec, or an annotation record read through it, that cannot be used; the message names the spec key."""


def _spec_error(spec_path: Path, key: str, message: str) -> SpecError:
    return SpecError(f"{spec_path}: key {key!r}: {message}")


# --------------------------------------------------------------------------- templates
@dataclass(frozen=True)
class Template:
    """`text` parsed once: literal parts and {field[:format]} references."""

    key: str  # the spec key it came from, for errors ('fields.video')
    text: str
    parts: tuple[tuple[str, str | None, str], ...]  # (literal, field or None, format spec)

    @property
    def fields(self) -> list[str]:
        return [f for _, f, _ in self.parts if f is not None]

    @property
    def single_field(self) -> str | None:
        """The field when the template is exactly '{field}' (the value then keeps its type)."""
        if len(self.parts) == 1 and self.parts[0][0] == "" and self.parts[0][1] is not None and not self.parts[0][2]:
            return self.parts[0][1]
        return None

    def render(self, record: dict, spec_path: Path, where: str, optional: bool = False) -> Any:
        """The template's value for `record`; None where `optional` and a field it names is empty (null)."""
        for name in self.fields:
            if name not in record:
                raise _spec_error(spec_path, self.key, f"{where}: the template {self.text!r} names field {name!r}, "
                                                       f"which the record does not have (its fields: "
                                                       f"{', '.join(map(str, record))})")
            if _missing(record[name]):
                if optional:
                    return None
                raise _spec_error(spec_path, self.key, f"{where}: field {name!r} is empty (template {self.text!r})")
        single = self.single_field
        if single is not None:
            return record[single]
        out = []
        for literal, name, spec in self.parts:
            out.append(literal)
            if name is not None:
                out.append(_format(record[name], spec, spec_path, self.key, where))
        return "".join(out)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _format(value, spec: str, spec_path: Path, key: str, where: str) -> str:
    if not spec:
        return str(value)
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        pass
    try:  # numbers stored as text (CSV cells, string ids): format them as numbers
        number = float(value)
        return format(int(number) if number == int(number) else number, spec)
    except (ValueError, TypeError, OverflowError):
        raise _spec_error(spec_path, key, f"{where}: cannot format {value!r} with ':{spec}'") from None


def parse_template(text, key: str, spec_path: Path) -> Template:
    if not isinstance(text, str):
        raise _spec_error(spec_path, key, f"expected a template string, got {text!r}")
    parts = []
    try:
        for literal, name, spec, conversion in string.Formatter().parse(text):
            if name is not None and (not name.strip() or conversion):
                raise ValueError(f"'{{{name}}}' is not a field reference")
            parts.append((literal, name, spec or ""))
    except ValueError as e:
        raise _spec_error(spec_path, key, f"template {text!r} is not valid ({e}); write {{field}} for a field, "
                                          f"{{{{ and }}}} for literal braces") from None
    return Template(key, text, tuple(parts))


# --------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class BenchmarkSpec:
    path: Path  # absolute
    name: str
    root_variable: str
    root_default: Path | None
    annotations: tuple[str, ...]
    format: str | None
    split: str | None
    nesting: tuple[str, ...]
    extract: tuple[tuple[str, re.Pattern], ...]
    fields: dict[str, Template]  # question_id, question, answer, video, category, source
    options: tuple[Template, ...] | Template  # separate columns, or one list-valued field
    lettered: bool  # options is one template whose text holds 'A. x, B. y, ...'
    answer_is: str
    n_options: int | None
    drop_options: frozenset[str]

    @property
    def task_names(self) -> tuple[str, str]:
        return f"{self.name}_blind", f"{self.name}_video"


def read_spec(path: str | Path) -> BenchmarkSpec:
    """Parse and validate a spec file (not its annotations: see `load_spec_records`)."""
    spec_path = Path(path).expanduser().resolve()
    if not spec_path.is_file():
        raise SpecError(f"{spec_path}: spec file not found")
    try:
        raw = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise SpecError(f"{spec_path}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{spec_path}: expected a mapping of spec keys ({', '.join(SPEC_KEYS)})")
    unknown = [k for k in raw if k not in SPEC_KEYS]
    if unknown:
        raise _spec_error(spec_path, str(unknown[0]), f"unknown key; a spec has {', '.join(SPEC_KEYS)}")

    def need(key: str):
        if raw.get(key) in (None, "", [], {}):
            raise _spec_error(spec_path, key, "missing (required)")
        return raw[key]

    name = need("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _spec_error(spec_path, "name", f"{name!r}: use lowercase letters, digits and underscores, starting "
                                             f"with a letter (the tasks are <name>_blind and <name>_video)")
    variable = raw.get("root_variable") or f"{name.upper()}_ROOT"
    if not isinstance(variable, str) or not _VARIABLE.match(variable):
        raise _spec_error(spec_path, "root_variable", f"{variable!r} is not an environment variable name")
    default = raw.get("root_default")
    root_default = None if default is None else (spec_path.parent / str(default)).resolve()

    annotations = need("annotations")
    annotations = [annotations] if isinstance(annotations, str) else annotations
    if not isinstance(annotations, list) or not all(isinstance(a, str) and a for a in annotations):
        raise _spec_error(spec_path, "annotations", f"expected a path or a list of paths, got {raw['annotations']!r}")
    fmt = raw.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise _spec_error(spec_path, "format", f"{fmt!r}: expected one of {', '.join(FORMATS)}")
    nesting = raw.get("nesting") or []
    if not isinstance(nesting, list) or not all(isinstance(n, str) and n for n in nesting):
        raise _spec_error(spec_path, "nesting", f"expected a list of field names, got {nesting!r}")
    if nesting and fmt not in (None, "json"):
        raise _spec_error(spec_path, "nesting", f"applies to JSON files only, not format {fmt!r}")
    extract = raw.get("extract") or {}
    if not isinstance(extract, dict):
        raise _spec_error(spec_path, "extract", f"expected a mapping field: regular expression, got {extract!r}")
    patterns = []
    for source_field, pattern in extract.items():
        try:
            compiled = re.compile(str(pattern))
        except re.error as e:
            raise _spec_error(spec_path, f"extract.{source_field}", f"{pattern!r} is not a regular expression "
                                                                    f"({e})") from None
        if not compiled.groupindex:
            raise _spec_error(spec_path, f"extract.{source_field}", f"{pattern!r} has no named group "
                                                                    f"((?P<name>...)): it would add no field")
        patterns.append((str(source_field), compiled))

    fields_raw = need("fields")
    if not isinstance(fields_raw, dict):
        raise _spec_error(spec_path, "fields", f"expected a mapping, got {fields_raw!r}")
    unknown = [k for k in fields_raw if k not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
    if unknown:
        raise _spec_error(spec_path, f"fields.{unknown[0]}",
                          f"unknown field; fields are {', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)}")
    for key in REQUIRED_FIELDS:
        if fields_raw.get(key) in (None, "", []):
            raise _spec_error(spec_path, f"fields.{key}", "missing (required)")
    templates = {key: parse_template(fields_raw[key], f"fields.{key}", spec_path)
                 for key in REQUIRED_FIELDS + OPTIONAL_FIELDS if key != "options" and fields_raw.get(key) is not None}
    options_raw = fields_raw["options"]
    lettered = isinstance(options_raw, dict)
    if lettered:
        if list(options_raw) != ["lettered"]:
            raise _spec_error(spec_path, "fields.options", f"a mapping must be {{lettered: '{{field}}'}}, got "
                                                           f"{options_raw!r}")
        options = parse_template(options_raw["lettered"], "fields.options.lettered", spec_path)
    elif isinstance(options_raw, list):
        if len(options_raw) < 2:
            raise _spec_error(spec_path, "fields.options", "a list of columns needs at least 2")
        options = tuple(parse_template(t, f"fields.options[{i}]", spec_path) for i, t in enumerate(options_raw))
    else:
        options = parse_template(options_raw, "fields.options", spec_path)
        if options.single_field is None:
            raise _spec_error(spec_path, "fields.options", f"{options_raw!r}: one template must be exactly "
                                                           f"'{{field}}' (a list-valued field); use a list of "
                                                           f"templates for separate columns")
    answer_is = need("answer_is")
    if answer_is not in ANSWER_KINDS:
        raise _spec_error(spec_path, "answer_is", f"{answer_is!r}: expected one of {', '.join(ANSWER_KINDS)}")
    n_options = raw.get("n_options")
    if n_options is not None and (not isinstance(n_options, int) or isinstance(n_options, bool) or n_options < 2
                                  or n_options > len(LETTERS)):
        raise _spec_error(spec_path, "n_options", f"{n_options!r}: expected a whole number from 2 to {len(LETTERS)}")
    if lettered and n_options is None:
        raise _spec_error(spec_path, "n_options", "required with fields.options.lettered: the splitter looks for "
                                                  "the markers A. to the K-th letter")
    if isinstance(options, tuple) and n_options is not None and len(options) < n_options:
        raise _spec_error(spec_path, "n_options", f"{n_options} declared but fields.options lists {len(options)} "
                                                  f"columns")
    drop = raw.get("drop_options") or []
    if not isinstance(drop, list):
        raise _spec_error(spec_path, "drop_options", f"expected a list of option texts, got {drop!r}")
    return BenchmarkSpec(
        path=spec_path, name=name, root_variable=variable, root_default=root_default, annotations=tuple(annotations),
        format=fmt, split=raw.get("split"), nesting=tuple(nesting), extract=tuple(patterns), fields=templates,
        options=options, lettered=lettered, answer_is=answer_is, n_options=n_options,
        drop_options=frozenset(str(d).strip() for d in drop))


# --------------------------------------------------------------------------- reading the annotation files
def annotation_files(spec: BenchmarkSpec, root: Path) -> list[Path]:
    """The files (or saved-dataset folders) `annotations` names under `root`, in the spec's order."""
    files: list[Path] = []
    for entry in spec.annotations:
        target = Path(entry).expanduser()
        target = target if target.is_absolute() else root / target
        if glob.has_magic(entry):
            found = sorted(Path(p) for p in glob.glob(str(target), recursive=True))
            if not found:
                raise _spec_error(spec.path, "annotations", f"{entry!r} matches no file under {root}")
            files += found
        elif not target.exists():
            raise _spec_error(spec.path, "annotations", f"{target}: not found")
        else:
            files.append(target)
    return files


def _file_format(spec: BenchmarkSpec, path: Path) -> str:
    if spec.format is not None:
        return spec.format
    if path.is_dir():
        return "hf_disk"
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise _spec_error(spec.path, "format", f"{path}: cannot tell the format from the suffix "
                                               f"{path.suffix!r}; set format: one of {', '.join(FORMATS)}")
    return fmt


def _json_records(spec: BenchmarkSpec, path: Path) -> Iterator[tuple[dict, str]]:
    data = read_json(path)

    def walk(value, level: int, keys: dict, trail: list[str]):
        if level < len(spec.nesting):
            if not isinstance(value, dict):
                where = f"{path} record {' / '.join(trail) or '(top level)'}"
                raise _spec_error(spec.path, "nesting", f"{where}: expected an object keyed by "
                                                        f"{spec.nesting[level]!r}, found {type(value).__name__}")
            for key, inner in value.items():
                yield from walk(inner, level + 1, {**keys, spec.nesting[level]: key}, [*trail, repr(key)])
            return
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            where = f"{path} record {' / '.join([*trail, str(i)] if isinstance(value, list) else trail)}"
            if not isinstance(item, dict):
                hint = (" (the file is an object: declare `nesting` to say what its keys are)"
                        if not spec.nesting and isinstance(data, dict) else "")
                raise _spec_error(spec.path, "nesting" if spec.nesting or hint else "annotations",
                                  f"{where}: expected a record (a JSON object), found {type(item).__name__}{hint}")
            clash = [k for k in keys if k in item]
            if clash:
                raise _spec_error(spec.path, "nesting", f"{where}: the record has a field {clash[0]!r} too; name "
                                                        f"the nesting level otherwise")
            yield {**item, **keys}, where

    if isinstance(data, dict) and not spec.nesting:
        raise _spec_error(spec.path, "nesting", f"{path}: the file is a JSON object, not a list of records: declare "
                                                f"`nesting` (one field name per level of keys above the records)")
    yield from walk(data, 0, {}, [])


def _rows(spec: BenchmarkSpec, path: Path) -> Iterator[tuple[dict, str]]:
    """(record, where) of one annotation file, in file order."""
    fmt = _file_format(spec, path)
    if fmt == "json":
        yield from _json_records(spec, path)
    elif fmt == "jsonl":
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path} line {lineno}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise _spec_error(spec.path, "annotations", f"{where}: not JSON ({e})") from None
                if not isinstance(row, dict):
                    raise _spec_error(spec.path, "annotations", f"{where}: expected a JSON object per line")
                yield row, where
    elif fmt == "csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            for row in reader:
                yield dict(row), f"{path} row {reader.line_num}"
    elif fmt == "parquet":
        import pandas as pd

        for i, row in enumerate(pd.read_parquet(path).to_dict("records")):
            yield row, f"{path} row {i}"
    else:  # hf_disk
        import datasets

        try:
            dataset = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as e:
            raise _spec_error(spec.path, "annotations", f"{path}: not a dataset saved with save_to_disk ({e})") \
                from None
        if isinstance(dataset, datasets.DatasetDict):
            if spec.split not in dataset:
                raise _spec_error(spec.path, "split", f"{path} holds splits {list(dataset)}: name one "
                                                      f"(got {spec.split!r})")
            dataset = dataset[spec.split]
        for i, row in enumerate(dataset):
            yield row, f"{path} row {i}"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _option_list(spec: BenchmarkSpec, record: dict, where: str) -> list:
    if spec.lettered:
        text = spec.options.render(record, spec.path, where)
        try:
            return split_lettered_options(str(text), spec.n_options, where)
        except BenchmarkDataError as e:
            raise _spec_error(spec.path, "fields.options.lettered", str(e)) from None
    if isinstance(spec.options, tuple):
        return [t.render(record, spec.path, where) for t in spec.options]
    value = spec.options.render(record, spec.path, where)
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise _spec_error(spec.path, "fields.options", f"{where}: expected a list of option texts in "
                                                       f"{spec.options.text!r}, got {value!r}")
    return list(value)


def _answer_position(spec: BenchmarkSpec, value, options: list[str], where: str) -> int:
    """The answer's position among the options as read (before padding is dropped)."""
    key = "fields.answer"
    if spec.answer_is in ("index", "index1"):
        try:
            index = as_int(value, where, "answer") - (spec.answer_is == "index1")
        except BenchmarkDataError as e:
            raise _spec_error(spec.path, key, f"{e} (answer_is: {spec.answer_is})") from None
        if not 0 <= index < len(options):
            first = 1 if spec.answer_is == "index1" else 0
            raise _spec_error(spec.path, key, f"{where}: answer {value!r} is not among the {len(options)} options "
                                              f"(answer_is {spec.answer_is}: {first}..{len(options) - 1 + first})")
        return index
    if spec.answer_is == "letter":
        letter = str(value).strip().rstrip(".").strip().upper()
        if len(letter) != 1 or letter not in LETTERS[: len(options)]:
            raise _spec_error(spec.path, key, f"{where}: answer {value!r} is not among the options' letters "
                                              f"{', '.join(LETTERS[: len(options)])}")
        return LETTERS.index(letter)
    text = str(value).strip()
    matches = [k for k, o in enumerate(options) if str(o).strip() == text]
    if not matches:
        raise _spec_error(spec.path, key, f"{where}: answer {value!r} is not among the options {options!r}")
    if len(matches) > 1:
        raise _spec_error(spec.path, key, f"{where}: answer {value!r} is the text of options "
                                          f"{', '.join(LETTERS[k] for k in matches)}: say which with answer_is "
                                          f"index or letter")
    return matches[0]


def _optional_text(spec: BenchmarkSpec, key: str, record: dict, where: str) -> str | None:
    template = spec.fields.get(key)
    if template is None:
        return None
    value = template.render(record, spec.path, where, optional=True)
    return None if _missing(value) or not str(value).strip() else str(value).strip()


def _video_path(spec: BenchmarkSpec, record: dict, where: str) -> str:
    video = str(spec.fields["video"].render(record, spec.path, where)).strip()
    video = video[2:] if video.startswith("./") else video
    if not video or Path(video).is_absolute() or ".." in Path(video).parts:
        raise _spec_error(spec.path, "fields.video", f"{where}: {video!r} is not a path under the root")
    return video


def _spec_record(spec: BenchmarkSpec, record: dict, where: str) -> dict:
    for source_field, pattern in spec.extract:
        key = f"extract.{source_field}"
        if source_field not in record or _missing(record[source_field]):
            raise _spec_error(spec.path, key, f"{where}: the record has no field {source_field!r} (its fields: "
                                              f"{', '.join(map(str, record))})")
        match = pattern.search(str(record[source_field]))
        if match is None:
            raise _spec_error(spec.path, key, f"{where}: {pattern.pattern!r} does not match "
                                              f"{record[source_field]!r}")
        clash = [g for g in match.groupdict() if g in record]
        if clash:
            raise _spec_error(spec.path, key, f"{where}: group {clash[0]!r} would overwrite the record's field "
                                              f"of that name")
        record.update(match.groupdict())

    raw_options = [None if _missing(o) else str(o).strip() for o in _option_list(spec, record, where)]
    answer = _answer_position(spec, spec.fields["answer"].render(record, spec.path, where),
                              [o or "" for o in raw_options], where)
    kept = [k for k, o in enumerate(raw_options) if o is not None and o not in spec.drop_options]
    if answer not in kept:
        raise _spec_error(spec.path, "fields.answer", f"{where}: the answer is option {LETTERS[answer]}, "
                                                      f"{raw_options[answer]!r}, which drop_options removes")
    options = [raw_options[k] for k in kept]
    if spec.n_options is not None and len(options) != spec.n_options:
        raise _spec_error(spec.path, "n_options", f"{where}: {spec.n_options} options declared, but the record has "
                                                  f"{len(options)}: {options!r}")
    empty = [LETTERS[i] for i, o in enumerate(options) if not o]
    if empty:
        raise _spec_error(spec.path, "fields.options", f"{where}: option {empty[0]} is empty (list empty texts "
                                                       f"in drop_options if they are padding)")
    question = spec.fields["question"].render(record, spec.path, where)
    if _missing(question) or not str(question).strip():
        raise _spec_error(spec.path, "fields.question", f"{where}: empty question")
    qid = str(spec.fields["question_id"].render(record, spec.path, where)).strip()
    if not qid:
        raise _spec_error(spec.path, "fields.question_id", f"{where}: empty question id")
    return make_record(qid, spec.name, _video_path(spec, record, where), str(question), options, kept.index(answer),
                       _optional_text(spec, "category", record, where), _optional_text(spec, "source", record, where),
                       where)


def load_spec_questions(spec: BenchmarkSpec, root: Path) -> list[tuple[dict, str]]:
    """(normalized question, where it was read) for every record of the spec's annotation files."""
    out: list[tuple[dict, str]] = []
    first_seen: dict[str, str] = {}
    for path in annotation_files(spec, root):
        relative = _relative(path, root)
        for index, (row, where) in enumerate(_rows(spec, path)):
            record = {**row, "_file": relative, "_index": index}
            question = _spec_record(spec, record, where)
            earlier = first_seen.get(question["question_id"])
            if earlier is not None:
                raise _spec_error(spec.path, "fields.question_id", f"{where}: question id "
                                                                   f"{question['question_id']!r} again (first at "
                                                                   f"{earlier}); ids must be unique")
            first_seen[question["question_id"]] = where
            out.append((question, where))
    if not out:
        raise _spec_error(spec.path, "annotations", f"no records in {', '.join(spec.annotations)} under {root}")
    return out


def load_spec_records(spec: BenchmarkSpec, root: Path) -> list[dict]:
    return [question for question, _ in load_spec_questions(spec, root)]


# --------------------------------------------------------------------------- videos
def resolve_spec_video(root: Path, video: str) -> Path:
    """root/video; a '*' in `video` matches one folder level the annotations do not name (MM-AU's group folders).
    Where no path or several match, the unmatched pattern is returned (it does not exist: the video check says
    'not found')."""
    path = root / video
    if not glob.has_magic(video):
        return path
    found = glob.glob(str(path))
    return Path(found[0]) if len(found) == 1 else path


def check_spec_videos(spec: BenchmarkSpec, root: Path) -> None:
    """Every question's video exists under the root (a file or folder; `*` must match exactly one path); raises
    SpecError naming fields.video, the template, the first record whose video is missing and how many are."""
    missing: list[tuple[str, str, int]] = []
    questions = load_spec_questions(spec, root)
    videos = {}
    for question, where in questions:
        videos.setdefault(question["video"], where)
    for video, where in videos.items():
        n = len(glob.glob(str(root / video))) if glob.has_magic(video) else int((root / video).exists())
        if n != 1:
            missing.append((video, where, n))
    if missing:
        video, where, n = missing[0]
        what = "matches no path" if n == 0 else f"matches {n} paths"
        raise _spec_error(spec.path, "fields.video",
                          f"{len(missing)} of {len(videos)} videos {'is' if len(missing) == 1 else 'are'} not found "
                          f"under {root} with the template {spec.fields['video'].text!r}; the first: {where} -> "
                          f"{video!r} {what}")


# --------------------------------------------------------------------------- registration
_REGISTERED: dict[str, BenchmarkSpec] = {}


def register_spec(path: str | Path) -> Benchmark:
    """Read a spec and add its benchmark to `loaders.BENCHMARKS` (again for the same file: replaced, so an edited
    spec is read anew). A name taken by a built-in benchmark or another spec is refused."""
    spec = read_spec(path)
    existing = BENCHMARKS.get(spec.name)
    if existing is not None and existing.spec != spec.path:
        owner = "a built-in visdep benchmark" if existing.spec is None else f"the benchmark of {existing.spec}"
        raise _spec_error(spec.path, "name", f"{spec.name!r} is already {owner}; choose another name")
    layout = f"the files {spec.path.name} names"
    bench = Benchmark(spec.name, spec.root_variable, layout, lambda root: load_spec_records(spec, root),
                      spec=spec.path, default_root=spec.root_default)
    BENCHMARKS[spec.name] = bench
    _REGISTERED[spec.name] = spec
    return bench


def register_specs(paths: list[str] | None) -> list[str]:
    """Register every spec of a repeatable `--spec` option; returns their benchmark names."""
    return [register_spec(p).name for p in paths or []]


def registered_spec(name: str) -> BenchmarkSpec | None:
    return _REGISTERED.get(name)


def spec_task_path(spec_path: Path, name: str, mode: str) -> Path:
    """Where `visdep spec init` writes the task YAML of `mode`: beside the spec."""
    return Path(spec_path).parent / f"{name}_{mode}.yaml"


def add_spec_argument(parser) -> None:
    """`--spec SPEC`, repeatable: benchmarks described by specs, registered before the command runs."""
    parser.add_argument("--spec", action="append", default=[], metavar="SPEC",
                        help="a benchmark spec YAML (configs/specs/*.yaml, README 'Audit your own benchmark'); "
                             "its benchmark is then known by its name; repeatable")


def benchmark_from_arguments(benchmark: str | None, spec_names: list[str]) -> str:
    """--benchmark, or the benchmark of the one --spec when --benchmark is not given."""
    if benchmark:
        if benchmark not in BENCHMARKS:
            raise KeyError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)} (a benchmark of your "
                           f"own: --spec SPEC)")
        return benchmark
    if len(spec_names) == 1:
        return spec_names[0]
    raise KeyError(f"name the benchmark: --benchmark NAME (one of {', '.join(BENCHMARKS)}), or one --spec SPEC")


# --------------------------------------------------------------------------- task YAMLs
@lru_cache(maxsize=1)
def lmms_eval_task_names() -> frozenset[str]:
    """Every task, group and tag lmms-eval's own TaskManager indexes (about 20 s: it reads ~2,000 YAMLs)."""
    from lmms_eval.tasks import TaskManager
    from loguru import logger

    logger.disable("lmms_eval")  # its index logs a line per YAML it cannot read
    try:
        return frozenset(TaskManager(verbosity="ERROR").all_tasks)
    finally:
        logger.enable("lmms_eval")


def task_name_clashes(spec: BenchmarkSpec, known: frozenset[str] | None = None) -> list[str]:
    """The spec's task names that lmms-eval or visdep already use (lmms-eval would silently run the built-in)."""
    known = lmms_eval_task_names() if known is None else known
    ours = {f"{b}_{mode}" for b in BENCHMARKS if b != spec.name for mode in ("blind", "video")}
    return [t for t in spec.task_names if t in known or t in ours]


def task_yaml(spec: BenchmarkSpec, mode: str, categories: list[str]) -> str:
    """The text of `<name>_<mode>.yaml`: the shared template's keys, the data file naming the spec, the spec's
    document function and accuracy per category."""
    from lmms_eval_tasks.export import task_yaml_body
    from lmms_eval_tasks.tasks import category_metric

    metrics = ["metric_list:", "  - metric: acc", "    aggregation: mean", "    higher_is_better: true"]
    for category in categories:
        metrics += [f"  - metric: {category_metric(category)}  # {category}", "    aggregation: mean",
                    "    higher_is_better: true"]
    own = [f"process_docs: !function lmms_eval_tasks.tasks.spec_docs_{mode}",
           f"doc_to_visual: !function lmms_eval_tasks.tasks.doc_to_visual_{mode}",
           f"process_results: !function lmms_eval_tasks.tasks.process_results_{mode}", *metrics]
    lines = [f"{YAML_HEADER} from {spec.path.name}: rerun `visdep spec init {spec.path.name}` after editing the spec "
             f"or moving this folder.",
             f"task: {spec.name}_{mode}",
             "dataset_kwargs:",
             "  data_files:",
             f"    test: {spec.name}{DATA_FILE_SUFFIX}",
             *task_yaml_body(own)]
    return "\n".join(lines) + "\n"


def write_spec_tasks(spec: BenchmarkSpec, categories: list[str], overwrite: bool = False) -> list[Path]:
    """Write `<name>_blind.yaml`, `<name>_video.yaml` and `<name>_spec.jsonl` beside the spec. Files of another
    origin are not overwritten unless `overwrite`."""
    folder = spec.path.parent
    data_file = folder / f"{spec.name}{DATA_FILE_SUFFIX}"
    yamls = [spec_task_path(spec.path, spec.name, mode) for mode in ("blind", "video")]
    for path in yamls:
        if path.exists() and not overwrite and not path.read_text(encoding="utf-8").startswith(YAML_HEADER):
            raise _spec_error(spec.path, "name", f"{path} exists and was not written by visdep spec init; choose "
                                                 f"another name or pass --force")
    data_file.write_text(json.dumps({"spec": str(spec.path)}) + "\n", encoding="utf-8")
    for mode, path in zip(("blind", "video"), yamls, strict=True):
        path.write_text(task_yaml(spec, mode, categories), encoding="utf-8")
    return [*yamls, data_file]


def spec_of_documents(dataset) -> Path:
    """The spec a task's data file names (the full task's one line, or a subset's id list)."""
    if dataset is None or "spec" not in dataset.column_names or not len(dataset):
        raise SpecError("the task's data file names no spec: rerun `visdep spec init SPEC` to write the task YAMLs")
    paths = set(dataset["spec"])
    if len(paths) != 1:
        raise SpecError(f"the task's data file names several specs: {sorted(paths)}")
    (path,) = paths
    if not Path(path).is_file():
        raise SpecError(f"the task's data file names the spec {path}, which does not exist (moved?): rerun "
                        f"`visdep spec init SPEC` where it is now")
    return Path(path)
