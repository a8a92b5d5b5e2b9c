"""The one reader of lmms-eval samples files (`<date>_samples_<task>.jsonl`, one JSON object per line).

Each sample line of a visdep task carries a `visdep` record (`lmms_eval_tasks.record`: its fields, its versions and
the one decoder of every version). A file is read

- fast: msgspec decodes every line into the typed record only (`record.decode_samples`: the prompt, the responses
  and the scored strings are skipped, not built; the benchmark, mode and scoring decoded as the first line's, and
  category and source only where asked for); a file it cannot decode, or whose values fail the checks, is read
- carefully: line by line, which reads what lmms-eval stringified (a record or a list written as a string, numbers
  as text) or raises a RunDataError naming the file, the line and what is wrong.

The prompt lmms-eval logged (`input`) is read on demand, for a few questions, by the same two paths. The sha256 of
each file is taken from the bytes read, or kept from an earlier audit of the unchanged file
(`visdep_metrics.provenance.HashCache`). Nothing here imports torch or lmms-eval.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from loguru import logger

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.reading import FileReadError, open_file, read_bytes, read_json_text, unicode_text
from lmms_eval_tasks.record import RecordVersionError, decode_samples, upgrade
from lmms_eval_tasks.records import RecordError, as_int
from visdep_metrics import provenance
from visdep_metrics.audit.diagnostics import (
    answer_probability,
    normalised_entropy,
    option_probabilities,
    predicted_index,
)
from visdep_metrics.provenance import HashCache, file_state

MODES = ("blind", "video")
SCORINGS = ("letter", "option")
_REQUIRED = ("question_id", "benchmark", "mode", "n_options", "answer_index", "option_logprobs", "scoring")
_TEXT_FIELDS = ("question_id", "category", "source", "video", "prompt_id")
# what the audit takes from one run of each benchmark only (`read_samples`' descriptive)
DESCRIPTIVE_FIELDS = ("category", "source")
# How far above 0 a log-probability (and, with letter scoring, the log of the options' total probability) may lie
# from rounding: a model's log-softmax in float32 or bf16 overshoots by far less; a probability or a negated
# log-likelihood written in its place by far more.
LOGPROB_TOLERANCE = 1e-3
PERCENT_ABSENT = 255  # Samples.percent beyond a question's K


class RunDataError(VisdepError):
    """An lmms-eval output file or record that cannot be audited; the message names it."""


@dataclass
class Samples:
    """One samples file, read: per-question columns in doc_id order (file order where a line has no doc_id)."""

    path: Path
    benchmark: str
    mode: str
    scoring: str
    # strings as Arrow arrays: the audit keeps every file's, and millions of Python strings would slow every later
    # allocation and collection
    question_id: pa.Array
    category: pa.Array | None  # None where read without the descriptive fields
    source: pa.Array | None
    video: pa.Array  # null where the record does not say (version 1: `lmms_eval_tasks.record`)
    prompt_id: pa.Array  # the blind prompt's identity; null where the record does not say (version 1)
    n_options: np.ndarray
    answer_index: np.ndarray
    correct: np.ndarray  # 1.0 where argmax_k p_k == answer_index
    p_answer: np.ndarray  # p_{y*}
    entropy: np.ndarray  # H_norm
    # what the explorer shows: (n, K_max) option probabilities in hundredths (uint8, PERCENT_ABSENT beyond K), and
    # the option picked
    percent: np.ndarray
    predicted: np.ndarray
    sha256: str
    state: list[int] | None  # provenance.file_state when read (None: it changed while read)


@dataclass
class _Columns:
    """A file's records as columns, before the checks that concern the whole file."""

    doc_id: np.ndarray | None
    text: dict[str, list | None]  # _TEXT_FIELDS -> one value per record (None: not read)
    n_options: np.ndarray
    answer_index: np.ndarray
    logprobs: np.ndarray  # flat: record i holds offsets[i]:offsets[i+1]
    offsets: np.ndarray
    single: dict[str, set]  # benchmark, mode, scoring: the values found (one file holds one of each)


# --------------------------------------------------------------------------- fast: msgspec
class _PromptRecord(msgspec.Struct, gc=False):
    question_id: str


class _PromptSample(msgspec.Struct, gc=False):
    visdep: _PromptRecord
    input: str | None = None


_PROMPTS = msgspec.json.Decoder(_PromptSample)


class _SameInFile(msgspec.Struct, gc=False):
    """The text fields every record of one file holds with one value."""

    benchmark: str
    mode: str
    scoring: str


class _FirstSample(msgspec.Struct, gc=False):
    visdep: _SameInFile


_FIRST = msgspec.json.Decoder(_FirstSample)


class _NeedsCarefulRead(Exception):
    """The fast reader found something it cannot vouch for; the careful reader decides."""


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a file's records are decoded and turned into columns: the records
    hold no reference cycles (their structs are gc=False; their lists hold floats), yet the hundreds of thousands
    of lists a file decodes into would set off collection after collection, each traversing every list still
    alive."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _first_line(data: bytes) -> bytes:
    """Up to the end of the first line that is not blank."""
    start = re.search(rb"\S", data)
    end = data.find(b"\n", start.end()) if start else -1
    return data if end < 0 else data[:end]


def _read_fast(data: bytes, descriptive: bool = True) -> _Columns:
    """The records as columns; `descriptive`: read category and source too. Every record is decoded holding the
    benchmark, mode and scoring of the first (one string each, not one per record): a record holding another is
    left to the careful reader, which names it."""
    try:
        same = msgspec.structs.asdict(_FIRST.decode(_first_line(data)).visdep)
    except (msgspec.DecodeError, RecursionError) as e:  # RecursionError: a field nested too deeply to skip
        raise _NeedsCarefulRead(f"first line: {e}") from e
    with _collector_paused():
        return _columns(data, same, descriptive)  # its records are freed on return, before the collector is back


def _columns(data: bytes, same: dict[str, str], descriptive: bool) -> _Columns:
    try:
        samples = decode_samples(data, same, without=() if descriptive else DESCRIPTIVE_FIELDS)
    except (msgspec.DecodeError, RecursionError) as e:  # also a wrong type, a missing field, NaN (not JSON), an
        raise _NeedsCarefulRead(str(e)) from e            # unknown version, a field nested too deeply to skip
    if not samples:
        raise _NeedsCarefulRead("no sample")
    # map/attrgetter/chain iterate in C: a Python loop over the records would cost as much as the decoding.
    records = list(map(attrgetter("visdep"), samples))
    n = len(records)
    n_options = np.fromiter(map(attrgetter("n_options"), records), np.int64, n)
    answer = np.fromiter(map(attrgetter("answer_index"), records), np.int64, n)
    logprobs = list(map(attrgetter("option_logprobs"), records))
    lengths = np.fromiter(map(len, logprobs), np.int64, n)
    values = np.fromiter(chain.from_iterable(logprobs), np.float64, int(lengths.sum()))
    if (not np.isfinite(values).all() or (lengths != n_options).any() or (n_options < 2).any()
            or (answer < 0).any() or (answer >= n_options).any()):
        raise _NeedsCarefulRead("values fail the checks")
    doc_ids = list(map(attrgetter("doc_id"), samples))
    return _Columns(doc_id=None if None in doc_ids else np.array(doc_ids, dtype=np.int64),
                    text={name: list(map(attrgetter(name), records)) if descriptive or name not in DESCRIPTIVE_FIELDS
                          else None for name in _TEXT_FIELDS},
                    n_options=n_options, answer_index=answer, logprobs=values,
                    offsets=np.concatenate([[0], np.cumsum(lengths)]),
                    single={name: {value} for name, value in same.items()})


# --------------------------------------------------------------------------- careful: line by line
def _destringify(value, where: str):
    """A value lmms-eval stringified back into JSON data (a record or a list written as a string), its strings
    checked as a file's are (`reading.read_json_text`)."""
    if not isinstance(value, str):
        return value
    try:
        return read_json_text(value, where, RunDataError)
    except json.JSONDecodeError:
        pass
    try:
        data = ast.literal_eval(value)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        raise RunDataError(f"{where}: cannot read {value[:80]!r}") from None
    return unicode_text(data, where, RunDataError)


def _lines(data: bytes, path: Path):
    """(where, sample) of every non-blank line; raises on a line that is not a JSON object."""
    for lineno, line in enumerate(data.split(b"\n"), start=1):  # JSON Lines ends lines at \n only
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            sample = read_json_text(line, where, RunDataError)
        except json.JSONDecodeError as e:
            raise RunDataError(f"{where}: not valid JSON ({e.msg}); the file looks truncated (a run that was killed or "
                               f"is still writing)") from None
        if not isinstance(sample, dict):
            raise RunDataError(f"{where}: a sample line must be a JSON object")
        yield where, sample


def _record(sample: dict, where: str) -> dict:
    """A sample's `visdep` record as a dict, read back where stringified."""
    if sample.get("visdep") is None:
        raise RunDataError(f"{where}: sample (doc_id {sample.get('doc_id')!r}) has no 'visdep' record; only visdep "
                           f"tasks (lmms_eval_tasks) write it")
    record = _destringify(sample["visdep"], where)
    if not isinstance(record, dict):
        raise RunDataError(f"{where}: the 'visdep' record must be an object, got {record!r:.80}")
    try:
        return upgrade(record, where)
    except RecordVersionError as e:
        raise RunDataError(str(e)) from None


def _integer(value, where: str, name: str) -> int:
    try:
        return as_int(value, name)
    except RecordError as e:
        raise RunDataError(f"{where}: {e}") from None


def _finite(value, where: str, question_id: str, values) -> float:
    try:
        number = float(value)
    except (ValueError, TypeError):
        raise RunDataError(f"{where}: question {question_id!r}: option log-probability {value!r} is not a number")\
            from None
    if not math.isfinite(number):
        raise RunDataError(f"{where}: question {question_id!r}: non-finite option log-probabilities {values} (NaN or "
                           f"infinity); the model's scores for this question are broken, rerun it")
    return number


def _checked(sample: dict, where: str) -> tuple:
    """One line's values, checked: (doc_id, texts, K, answer, log-probabilities, benchmark, mode, scoring)."""
    record = _record(sample, where)
    missing = [k for k in _REQUIRED if record.get(k) is None]
    if missing:
        raise RunDataError(f"{where}: the 'visdep' record lacks {', '.join(missing)}")
    qid = str(record["question_id"])
    k = _integer(record["n_options"], where, "n_options")
    answer = _integer(record["answer_index"], where, "answer_index")
    raw = _destringify(record["option_logprobs"], where)
    if not isinstance(raw, list):
        raise RunDataError(f"{where}: option_logprobs must be a list, got {raw!r:.80}")
    logprobs = [_finite(v, where, qid, raw) for v in raw]
    if k < 2 or len(logprobs) != k:
        raise RunDataError(f"{where}: question {qid!r} has n_options={k} but {len(logprobs)} log-probabilities")
    if not 0 <= answer < k:
        raise RunDataError(f"{where}: question {qid!r}: answer_index {answer} outside 0..{k - 1}")
    doc_id = sample.get("doc_id")
    texts = tuple(None if record.get(name) is None else str(record[name]) for name in _TEXT_FIELDS)
    return (None if doc_id is None else _integer(doc_id, where, "doc_id"), texts, k, answer, logprobs,
            str(record["benchmark"]), str(record["mode"]), str(record["scoring"]))


def _read_careful(data: bytes, path: Path) -> _Columns:
    rows = [_checked(sample, where) for where, sample in _lines(data, path)]
    if not rows:
        raise RunDataError(f"{path}: empty samples file (the run wrote no sample)")
    doc_ids, texts, ks, answers, logprobs, benchmarks, modes, scorings = zip(*rows, strict=True)
    lengths = np.array(ks, dtype=np.int64)
    return _Columns(doc_id=None if None in doc_ids else np.array(doc_ids, dtype=np.int64),
                    text={name: list(column) for name, column in zip(_TEXT_FIELDS, zip(*texts, strict=True),
                                                                     strict=True)},
                    n_options=lengths, answer_index=np.array(answers, dtype=np.int64),
                    logprobs=np.fromiter(chain.from_iterable(logprobs), np.float64, int(lengths.sum())),
                    offsets=np.concatenate([[0], np.cumsum(lengths)]),
                    single={"benchmark": set(benchmarks), "mode": set(modes), "scoring": set(scorings)})


# --------------------------------------------------------------------------- the reader
def _percent(probabilities: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Probabilities in hundredths, as uint8; PERCENT_ABSENT beyond a question's K."""
    percent = np.rint(probabilities * 100).astype(np.uint8)
    percent[np.arange(percent.shape[1])[None, :] >= k[:, None]] = PERCENT_ABSENT
    return percent


def _probabilities(columns: _Columns) -> np.ndarray:
    """(n, K_max) option probabilities, 0 beyond a question's K."""
    k = columns.n_options
    padded = np.full((len(k), int(k.max())), np.nan)
    rows = np.repeat(np.arange(len(k)), k)
    padded[rows, np.arange(len(columns.logprobs)) - columns.offsets[:-1][rows]] = columns.logprobs
    return option_probabilities(padded, k)


def _check_log_probabilities(columns: _Columns, path: Path, scoring: str) -> None:
    """Refuse values that cannot be what they claim: a log-probability above 0, or letter scores whose probabilities
    add up to more than 1 (the letters are distinct continuations of one prompt, so their probabilities add up to at
    most 1; option texts may repeat or extend each other, so option scoring's need not)."""
    values, starts = columns.logprobs, columns.offsets[:-1]
    bad = np.flatnonzero(values > LOGPROB_TOLERANCE)
    if bad.size:
        i = int(np.searchsorted(columns.offsets, bad[0], side="right") - 1)
        raise RunDataError(f"{path}: record {i + 1} (question {columns.text['question_id'][i]!r}): option "
                           f"log-probability {float(values[bad[0]])!r} is above 0, and {bad.size} value(s) in all; a "
                           f"log-probability is never positive (probabilities, or negated log-likelihoods, written "
                           f"in its place?)")
    if scoring != "letter":
        return
    top = np.maximum.reduceat(values, starts)
    total = top + np.log(np.add.reduceat(np.exp(values - np.repeat(top, columns.n_options)), starts))
    over = np.flatnonzero(total > LOGPROB_TOLERANCE)
    if over.size:
        i = int(over[0])
        raise RunDataError(f"{path}: record {i + 1} (question {columns.text['question_id'][i]!r}): the options' "
                           f"letter probabilities add up to {np.exp(total[i]):.4g} > 1 ({over.size} record(s) in "
                           f"all); these are not log-probabilities of one prompt's continuations")


def _single(values: set, allowed: Sequence[str], path: Path, name: str) -> str:
    if len(values) != 1:
        raise RunDataError(f"{path}: one samples file must hold one {name}, found {sorted(map(str, values))}")
    (value,) = values
    if value not in allowed:
        known = " (a spec's benchmark: --spec SPEC; an upstream task's twin: --twin DIR)" if name == "benchmark" else ""
        raise RunDataError(f"{path}: unknown {name} {value!r}; expected one of {', '.join(allowed)}{known}")
    return value


def read_samples(path: Path, benchmarks: Sequence[str], hashes: HashCache | None = None,
                 descriptive: bool = True) -> Samples:
    """Read one samples file into per-question results (correct, p_answer, entropy); `benchmarks`: the names a
    record's benchmark may take. Its sha256 is that of the bytes read, or the one `hashes` kept for it unchanged.
    `descriptive`: read each question's category and source (DESCRIPTIVE_FIELDS; else None: the audit takes them
    from one run of the benchmark)."""
    try:
        before = file_state(os.stat(path))
        data = read_bytes(path, "samples", error=RunDataError)
        state = file_state(os.stat(path))
    except OSError as e:
        raise RunDataError(f"{path}: cannot read it ({e.strerror})") from e
    # changed while it was read, or so recently that a later write could leave the same times: neither a kept hash
    # nor one to keep
    state = state if state == before and provenance.settled(state) else None
    try:
        columns = _read_fast(data, descriptive)
    except _NeedsCarefulRead as why:
        logger.debug(f"{path}: reading line by line ({why})")
        columns = _read_careful(data, path)
        if not descriptive:
            columns.text |= dict.fromkeys(DESCRIPTIVE_FIELDS)
    ids = pa.array(columns.text["question_id"], pa.string())
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        twice = counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist()
        raise RunDataError(f"{path}: {len(twice)} question(s) appear more than once, e.g. {twice[:3]}; were two runs "
                           f"appended to one file?")
    scoring = _single(columns.single["scoring"], SCORINGS, path, "scoring")
    _check_log_probabilities(columns, path, scoring)
    k = columns.n_options
    probabilities = _probabilities(columns)
    answer = columns.answer_index
    doc_id = columns.doc_id
    # doc_id order; most files are in it already, and then nothing is copied
    order = None if doc_id is None or (doc_id[1:] >= doc_id[:-1]).all() else np.argsort(doc_id, kind="stable")
    taken = None if order is None else pa.array(order)

    def ordered(values):
        if order is None or values is None:
            return values
        return values.take(taken) if isinstance(values, pa.Array) else values[order]

    text = {name: None if values is None else ordered(pa.array(values, pa.string()))
            for name, values in columns.text.items() if name != "question_id"}
    return Samples(path=path, benchmark=_single(columns.single["benchmark"], benchmarks, path, "benchmark"),
                   mode=_single(columns.single["mode"], MODES, path, "mode"), scoring=scoring,
                   question_id=ordered(ids), **text, n_options=ordered(k), answer_index=ordered(answer),
                   correct=ordered((predicted_index(probabilities) == answer).astype(np.float64)),
                   p_answer=ordered(answer_probability(probabilities, answer)),
                   entropy=ordered(normalised_entropy(probabilities, k)), percent=ordered(_percent(probabilities, k)),
                   predicted=ordered(predicted_index(probabilities).astype(np.int8)), state=state,
                   sha256=(hashes and state and hashes.known(path, state)) or hashlib.sha256(data).hexdigest())


def first_record(path: Path) -> dict | None:
    """The `visdep` record of a samples file's first line, read carefully; None where it cannot be read (the full
    read says why)."""
    try:
        with open_file(path, "samples") as f:
            line = next((line for line in f if line.strip()), b"")
        return next((_record(sample, where) for where, sample in _lines(line, path)), None)
    except (OSError, UnicodeDecodeError, RunDataError, FileReadError):
        return None


def read_prompts(path: Path, question_ids: Sequence[str] | None) -> dict[str, str | None]:
    """The prompt lmms-eval logged for each of these questions (a sample's `input`: the task's text, the question and
    its lettered options), for every question of the file where `question_ids` is None; None where a line has no
    `input` or the file lacks the question."""
    data = read_bytes(path, "samples", error=RunDataError)
    try:
        logged = {s.visdep.question_id: s.input for s in _PROMPTS.decode_lines(data)}
    except (msgspec.DecodeError, RecursionError):
        logged = {str(_record(sample, where).get("question_id")): sample.get("input")
                  for where, sample in _lines(data, path)}
    return {q: text if isinstance(text := logged.get(q), str) else None
            for q in (logged if question_ids is None else question_ids)}
