"""Benchmark specs: the language of a short YAML that describes a benchmark of one's own, and its parser.

A spec names the annotation files and says which fields hold what; `lmms_eval_tasks.spec_data` reads the records
through it and registers the benchmark, so the tasks, `visdep check-data`, `tst`, `ibp`, `audit` and the grounded
export work on it (docs/specs.md; configs/specs/*.yaml are examples):

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
    skip_unusable: false            # optional: true runs on the usable records, listing the others
    description: ...                # optional, free text for the reader (not used)

Built-in fields: `_file` (the annotation file, relative to the root) and `_index` (the record's position
in it). Errors name the spec file and key, and for a record the annotation file and the record.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.reading import read_yaml, resolved
from lmms_eval_tasks.records import LETTERS, BenchmarkDataError, RecordError
from lmms_eval_tasks.rows import FORMATS

ANSWER_KINDS = ("index", "index1", "letter", "text")
REQUIRED_FIELDS = ("question_id", "question", "options", "answer", "video")
OPTIONAL_FIELDS = ("category", "source")
SPEC_KEYS = ("name", "root_variable", "root_default", "annotations", "format", "split", "nesting", "extract",
             "fields", "answer_is", "n_options", "drop_options", "skip_unusable", "description")
BUILT_IN_FIELDS = ("_file", "_index")
MAX_FORMAT_WIDTH = 1000  # '{question:>2000000000}' would ask for a 2 GB string per record
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(BenchmarkDataError):
    """A spec, or an annotation file read through it, that cannot be used; the message names the spec key."""


def spec_error(spec_path: Path, key: str, message: str) -> SpecError:
    return SpecError(f"{spec_path}: key {excerpt(key)}: {message}")


def missing(value) -> bool:
    """An empty cell: None (JSON null, parquet null) or NaN (a spreadsheet's empty number)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


# --------------------------------------------------------------------------- templates
@dataclass(frozen=True)
class Template:
    """`text` parsed once: literal parts and {field[:format]} references."""

    key: str  # the spec key it came from ('fields.video'), named by every error
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

    def render(self, record: dict, optional: bool = False) -> Any:
        """The template's value for `record`; None where `optional` and a field it names is empty (null). A
        record it cannot be rendered for raises RecordError."""
        for name in self.fields:
            if name not in record:
                raise RecordError(f"key {excerpt(self.key)}: the template {excerpt(self.text)} names field "
                                  f"{excerpt(name)}, which the record does not have",
                                  f"its fields: {excerpt(', '.join(map(str, record)), 200)}")
            if missing(record[name]):
                if optional:
                    return None
                raise RecordError(f"key {excerpt(self.key)}: field {excerpt(name)} is empty",
                                  f"template {excerpt(self.text)}")
        single = self.single_field
        if single is not None:
            return record[single]
        out = []
        for literal, name, spec in self.parts:
            out.append(literal)
            if name is not None:
                out.append(self._format(record[name], spec))
        return "".join(out)

    def _format(self, value, spec: str) -> str:
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
            raise RecordError(f"key {excerpt(self.key)}: a value cannot be formatted with ':{spec}'",
                              excerpt(value)) from None


def parse_template(text, key: str, spec_path: Path) -> Template:
    if not isinstance(text, str):
        raise spec_error(spec_path, key, f"expected a template string, got {excerpt(text)}")
    parts = []
    try:
        for literal, name, spec, conversion in string.Formatter().parse(text):
            if name is not None and (not name.strip() or conversion):
                raise ValueError(f"'{{{name}}}' is not a field reference")
            if any(int(number) > MAX_FORMAT_WIDTH for number in re.findall(r"\d+", spec or "")):
                raise ValueError(f"a width or precision above {MAX_FORMAT_WIDTH} in {excerpt(':' + spec, 20)}")
            parts.append((literal, name, spec or ""))
    except ValueError as e:
        raise spec_error(spec_path, key, f"template {excerpt(text)} is not valid ({e}); write {{field}} for a field, "
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
    extract: tuple[tuple[str, regex.Pattern], ...]
    fields: dict[str, Template]  # question_id, question, answer, video, category, source
    options: tuple[Template, ...] | Template  # separate columns, or one list-valued field
    lettered: bool  # options is one template whose text holds 'A. x, B. y, ...'
    answer_is: str
    n_options: int | None
    drop_options: frozenset[str]
    skip_unusable: bool = False

    @property
    def task_names(self) -> tuple[str, str]:
        return f"{self.name}_blind", f"{self.name}_video"


def _load_yaml(spec_path: Path) -> dict:
    if not spec_path.exists():
        raise SpecError(f"{spec_path}: spec file not found")
    raw = read_yaml(spec_path, "spec", error=SpecError)
    if not isinstance(raw, dict):
        raise SpecError(f"{spec_path}: expected a mapping of spec keys ({', '.join(SPEC_KEYS)})")
    unknown = [k for k in raw if k not in SPEC_KEYS]
    if unknown:
        raise spec_error(spec_path, str(unknown[0]), f"unknown key; a spec has {', '.join(SPEC_KEYS)}")
    for key in ("name", "annotations", "fields", "answer_is"):
        if raw.get(key) in (None, "", [], {}):
            raise spec_error(spec_path, key, "missing (required)")
    return raw


def _files(raw: dict, spec_path: Path) -> tuple[tuple[str, ...], str | None, tuple[str, ...]]:
    """annotations, format, nesting."""
    annotations = [raw["annotations"]] if isinstance(raw["annotations"], str) else raw["annotations"]
    if not isinstance(annotations, list) or not all(isinstance(a, str) and a for a in annotations):
        raise spec_error(spec_path, "annotations",
                         f"expected a path or a list of paths, got {excerpt(raw['annotations'])}")
    fmt = raw.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise spec_error(spec_path, "format", f"{excerpt(fmt)}: expected one of {', '.join(FORMATS)}")
    nesting = raw.get("nesting") or []
    if not isinstance(nesting, list) or not all(isinstance(n, str) and n for n in nesting):
        raise spec_error(spec_path, "nesting", f"expected a list of field names, got {excerpt(nesting)}")
    if nesting and fmt not in (None, "json"):
        raise spec_error(spec_path, "nesting", f"applies to JSON files only, not format {excerpt(fmt)}")
    return tuple(annotations), fmt, tuple(nesting)


def _extract(raw: dict, spec_path: Path) -> tuple[tuple[str, regex.Pattern], ...]:
    extract = raw.get("extract") or {}
    if not isinstance(extract, dict):
        raise spec_error(spec_path, "extract", f"expected a mapping field: regular expression, got {excerpt(extract)}")
    patterns = []
    for source_field, pattern in extract.items():
        key = f"extract.{source_field}"
        try:
            compiled = regex.compile(str(pattern))  # `regex`: matched with a timeout (spec_data._extract)
        except regex.error as e:
            raise spec_error(spec_path, key, f"{excerpt(pattern)} is not a regular expression ({e})") from None
        if not compiled.groupindex:
            raise spec_error(spec_path, key, f"{excerpt(pattern)} has no named group ((?P<name>...)): it would add "
                                             f"no field")
        patterns.append((str(source_field), compiled))
    return tuple(patterns)


def _fields(raw: dict, spec_path: Path) -> tuple[dict[str, Template], tuple[Template, ...] | Template, bool]:
    """The field templates, the options' template(s), and whether the options are one lettered string."""
    fields_raw = raw["fields"]
    if not isinstance(fields_raw, dict):
        raise spec_error(spec_path, "fields", f"expected a mapping, got {excerpt(fields_raw)}")
    unknown = [k for k in fields_raw if k not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
    if unknown:
        raise spec_error(spec_path, f"fields.{unknown[0]}",
                         f"unknown field; fields are {', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)}")
    for key in REQUIRED_FIELDS:
        if fields_raw.get(key) in (None, "", []):
            raise spec_error(spec_path, f"fields.{key}", "missing (required)")
    templates = {key: parse_template(fields_raw[key], f"fields.{key}", spec_path)
                 for key in REQUIRED_FIELDS + OPTIONAL_FIELDS if key != "options" and fields_raw.get(key) is not None}
    options_raw = fields_raw["options"]
    if isinstance(options_raw, dict):
        if list(options_raw) != ["lettered"]:
            raise spec_error(spec_path, "fields.options", f"a mapping must be {{lettered: '{{field}}'}}, got "
                                                          f"{excerpt(options_raw)}")
        return templates, parse_template(options_raw["lettered"], "fields.options.lettered", spec_path), True
    if isinstance(options_raw, list):
        if len(options_raw) < 2:
            raise spec_error(spec_path, "fields.options", "a list of columns needs at least 2")
        return templates, tuple(parse_template(t, f"fields.options[{i}]", spec_path)
                                for i, t in enumerate(options_raw)), False
    options = parse_template(options_raw, "fields.options", spec_path)
    if options.single_field is None:
        raise spec_error(spec_path, "fields.options", f"{excerpt(options_raw)}: one template must be exactly "
                                                      f"'{{field}}' "
                                                      f"(a list-valued field); use a list of templates for separate "
                                                      f"columns")
    return templates, options, False


def _n_options(raw: dict, spec_path: Path, options, lettered: bool) -> int | None:
    n_options = raw.get("n_options")
    if n_options is not None and (not isinstance(n_options, int) or isinstance(n_options, bool) or n_options < 2
                                  or n_options > len(LETTERS)):
        raise spec_error(spec_path, "n_options",
                         f"{excerpt(n_options)}: expected a whole number from 2 to {len(LETTERS)}")
    if lettered and n_options is None:
        raise spec_error(spec_path, "n_options", "required with fields.options.lettered: the splitter looks for the "
                                                 "markers A. to the K-th letter")
    if isinstance(options, tuple) and n_options is not None and len(options) < n_options:
        raise spec_error(spec_path, "n_options", f"{n_options} declared but fields.options lists {len(options)} "
                                                 f"columns")
    return n_options


def read_spec(path: str | Path) -> BenchmarkSpec:
    """Parse and validate a spec file (not its annotations: `spec_data.read_spec_records` reads those)."""
    spec_path = resolved(path, error=SpecError)
    raw = _load_yaml(spec_path)
    name = raw["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise spec_error(spec_path, "name", f"{excerpt(name)}: use lowercase letters, digits and underscores, starting "
                                            f"with a letter (the tasks are <name>_blind and <name>_video)")
    variable = raw.get("root_variable") or f"{name.upper()}_ROOT"
    if not isinstance(variable, str) or not _VARIABLE.match(variable):
        raise spec_error(spec_path, "root_variable", f"{excerpt(variable)} is not an environment variable name")
    default = raw.get("root_default")
    annotations, fmt, nesting = _files(raw, spec_path)
    templates, options, lettered = _fields(raw, spec_path)
    if raw["answer_is"] not in ANSWER_KINDS:
        raise spec_error(spec_path, "answer_is",
                         f"{excerpt(raw['answer_is'])}: expected one of {', '.join(ANSWER_KINDS)}")
    drop = raw.get("drop_options") or []
    if not isinstance(drop, list):
        raise spec_error(spec_path, "drop_options", f"expected a list of option texts, got {excerpt(drop)}")
    skip = raw.get("skip_unusable", False)
    if not isinstance(skip, bool):
        raise spec_error(spec_path, "skip_unusable", f"{excerpt(skip)}: expected true or false")
    return BenchmarkSpec(
        path=spec_path, name=name, root_variable=variable,
        root_default=None if default is None else (spec_path.parent / str(default)).resolve(),
        annotations=annotations, format=fmt, split=raw.get("split"), nesting=nesting, extract=_extract(raw, spec_path),
        fields=templates, options=options, lettered=lettered, answer_is=raw["answer_is"],
        n_options=_n_options(raw, spec_path, options, lettered), drop_options=frozenset(str(d).strip() for d in drop),
        skip_unusable=skip)
