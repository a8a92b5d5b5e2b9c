"""The `visdep` record: what each sample line of a visdep task carries beside lmms-eval's own fields, written by the
tasks (`lmms_eval_tasks.tasks._process_results`) and read by the audit (`visdep_metrics.audit.samples`) through the
one decoder here, which reads every version written so far.

Versions (`schema_version`):
- 1 (no `schema_version` field): every record written before visdep versioned it. The earliest lack `video` (the
  question's video) and `prompt_id` (its blind prompt's identity), later ones `continuations` (the strings the
  model scored); read with those None: unknown, which the audit treats as "not recorded".
- 2: `schema_version` written; `video`, `prompt_id` and `continuations` always present.

A record of a version newer than this code knows is refused: its fields may mean something this code does not.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from typing import Annotated, Literal

import msgspec

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.records import INT64_MAX, INT64_MIN

SCHEMA_VERSION = 2
UNVERSIONED = 1  # what a record without `schema_version` is
# checked by msgspec while it decodes (no pass over the records of its own)
Version = Annotated[int, msgspec.Meta(ge=UNVERSIONED, le=SCHEMA_VERSION)]
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]  # larger: the careful reader, which names it


class RecordVersionError(VisdepError):
    """A record of a schema version this code does not know; the message names it."""


class AuditedFields(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The fields of a visdep record the audit reads (`VisdepRecord` adds the rest): decoding into it skips
    `continuations`, which the audit does not need, instead of building its strings."""

    question_id: str
    benchmark: str
    mode: str
    n_options: Int64
    answer_index: Int64
    option_logprobs: list[float]
    scoring: str
    category: str | None = None
    source: str | None = None
    video: str | None = None
    prompt_id: str | None = None
    schema_version: Version = UNVERSIONED


class VisdepRecord(AuditedFields, frozen=True, kw_only=True, gc=False):
    """One sample's visdep record, as version SCHEMA_VERSION writes it: the audited fields and `continuations`, what
    the model scored after its prompt for each option (" A" after a base model's "Answer:"). `option_logprobs`: K
    log-probabilities (the negated losses the model returned), p_k = softmax(option_logprobs)."""

    continuations: list[str] | None = None


def new_record(**fields) -> dict:
    """A record of the current version as JSON data (what `process_results` returns under "visdep")."""
    return msgspec.to_builtins(VisdepRecord(**fields, schema_version=SCHEMA_VERSION))


class AuditedSample(msgspec.Struct, gc=False):
    """A sample line as the audit reads it: its record and lmms-eval's `doc_id` (everything else skipped)."""

    visdep: AuditedFields
    doc_id: Int64 | None = None


_SAMPLES = msgspec.json.Decoder(AuditedSample)


def check_versions(versions: Iterable[int], where: str) -> None:
    """Refuse versions this code does not know (`where` names the file)."""
    unknown = sorted(v for v in set(versions) if not UNVERSIONED <= v <= SCHEMA_VERSION)
    if unknown:
        raise RecordVersionError(f"{where}: visdep record schema_version {unknown[0]} is not one this visdep reads "
                                 f"({UNVERSIONED}..{SCHEMA_VERSION}); written by a newer visdep? Upgrade visdep")


def decode_samples(data: bytes, same: Mapping[str, str] | None = None,
                   without: Collection[str] = ()) -> list[AuditedSample]:
    """Every line of a samples file decoded into its typed record, any known version (msgspec.DecodeError where a
    line is not one: a stringified record, numbers as text, NaN, an unknown version; the careful reader decides and
    names the line).

    `same`: text fields every record must hold with these values (a file's benchmark, mode, scoring): each record
    then refers to the one string instead of a string of its own, and a record holding another value is a
    DecodeError. `without`: optional fields left unread (None), skipped like lmms-eval's own fields. Either way the
    records have AuditedFields' fields, in a type of their own."""
    if not same and not without:
        return _SAMPLES.decode_lines(data)
    return _decoder(tuple(sorted((same or {}).items())), frozenset(without)).decode_lines(data)


@functools.lru_cache(maxsize=64)
def _decoder(same: tuple[tuple[str, str], ...], without: frozenset[str]) -> msgspec.json.Decoder:
    """A decoder of AuditedSample whose record type is AuditedFields with `same`'s fields narrowed to their one
    value (a Literal) and `without`'s left out."""
    values = dict(same)
    fields = {f.name: f for f in msgspec.structs.fields(AuditedFields)}
    if not set(values) <= {name for name, f in fields.items() if f.type is str} \
            or not set(without) <= {name for name, f in fields.items() if not f.required}:
        raise ValueError(f"same={values} must name required text fields and without={sorted(without)} optional "
                         f"ones of {sorted(fields)}")
    record = msgspec.defstruct(
        "AuditedFieldsOfOneFile",
        [(f.name, Literal[values[f.name]] if f.name in values else f.type, *([] if f.required else [f.default]))
         for f in fields.values() if f.name not in without], kw_only=True, frozen=True, gc=False)
    sample = msgspec.defstruct(
        "AuditedSampleOfOneFile",
        [(f.name, record if f.name == "visdep" else f.type, *([] if f.required else [f.default]))
         for f in msgspec.structs.fields(AuditedSample)], gc=False)
    return msgspec.json.Decoder(sample)


def upgrade(record: Mapping, where: str) -> dict:
    """A record read as a plain mapping (the careful reader), as the current version has it: fields an older version
    lacks are None. Raises RecordVersionError for an unknown version."""
    version = record.get("schema_version", UNVERSIONED)
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordVersionError(f"{where}: visdep record schema_version {version!r} is not an integer")
    check_versions([version], where)
    return {"video": None, "prompt_id": None, "continuations": None, **record, "schema_version": version}
