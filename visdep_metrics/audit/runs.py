"""Read lmms-eval output trees into per-question results and pair each model's blind and video runs.

An lmms-eval run with ``--log_samples`` writes, in ``OUT/`` or ``OUT/<model>/``,
``<date>_results.json`` and one ``<date>_samples_<task>.jsonl`` per task. Every sample line of a
visdep task carries a ``visdep`` record (question_id, benchmark, mode, category, source, video, n_options,
answer_index, option_logprobs, scoring; unknown fields are ignored). Here:

- any nesting of folders is searched; several runs and models may share one tree;
- a model is a set of settings that change scores: ``pretrained=`` of ``config.model_args`` (else
  ``config.model``), every other model_arg except those in NOT_SCORE_CHANGING, the lmms-eval model
  (``config.model``) and the record's ``scoring``. Two frame budgets of one checkpoint are two models;
  a blind run is paired only with a video run of the same settings;
- of several runs of the same model and task the latest (results.json ``date``) is used and the
  replaced files are reported;
- every run of a benchmark must cover the same questions with the same option counts, answers and
  videos; a video run may lack questions its blind runs have (``VISDEP_SKIP_MISSING_VIDEOS=1`` drops
  questions whose video is missing): those are left out of the audit and listed. Otherwise the error
  says which runs differ and how;
- a samples file with fewer lines than its results file's ``n-samples`` is an error;
- values lmms-eval stringified (numbers as strings, a record as a string) are read back;
- the sha256 of every file read is kept, for the audit's provenance.

Files are decoded by msgspec into the typed record only (the prompt and responses are skipped, not
built); a file it cannot decode or whose values fail the checks is read again line by line, which
either reads it (stringified values) or raises an error naming the file, the line and what is wrong.
Large trees are read by one process per core (the decoder holds the GIL). Nothing here imports torch
or lmms-eval.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import glob
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from loguru import logger
from tqdm.auto import tqdm

from lmms_eval_tasks.loaders import BENCHMARKS
from visdep_metrics.audit.diagnostics import (
    answer_probability,
    normalised_entropy,
    option_probabilities,
    predicted_index,
)
from visdep_metrics.parallel import fork_context, usable_cores
from visdep_metrics.provenance import file_sha256

RESULTS_SUFFIX = "_results.json"
MODES = ("blind", "video")
SCORINGS = ("letter", "option")
# Trees smaller than this are read in this process: forking saves little there (two files, 61 MB: 0.20 s
# in this process, 0.16 s by two forked readers) and small audits, like the tests', stay single-process.
PARALLEL_READ_BYTES = 64 * 2**20
_REQUIRED = ("question_id", "benchmark", "mode", "n_options", "answer_index", "option_logprobs", "scoring")
# model_args that decide where and how fast a model runs or how its files are fetched, not what it scores
# (attention kernels and devices change float rounding only). Runs that differ only in these are one model;
# every other model_arg (max_frames, frame_folder_fps, dtype, revision, subfolder, variant, gguf_file, ...,
# and any argument not listed here) tells runs apart.
NOT_SCORE_CHANGING = frozenset({
    "device", "device_map", "batch_size", "max_batch_size", "attn_implementation", "cache_dir",
    "local_files_only", "token", "low_cpu_mem_usage", "offload_folder", "trust_remote_code", "use_safetensors",
})
FRAMES_SETTING = "max_frames"


class RunDataError(ValueError):
    """An lmms-eval output file or record that cannot be audited; the message names it."""


@dataclass(frozen=True)
class RunFile:
    """One task of one lmms-eval run, as found on disk (before its samples are read).

    `model` is the model's name in the audit (pretrained plus the settings that tell it apart from other runs
    of that checkpoint, see `name_models`); `settings` the score-changing settings behind it."""

    model: str
    model_args: str
    task: str
    date: str
    results_path: Path
    samples_path: Path
    pretrained: str = ""
    settings: tuple[tuple[str, str], ...] = ()
    n_samples: int | None = None  # results.json n-samples[task].effective: the lines the samples file must hold
    limit: float | None = None  # results.json config.limit (--limit)
    results_sha256: str = ""

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What makes two runs the same model: the checkpoint and its score-changing settings."""
        return self.pretrained, self.settings


@dataclass(frozen=True)
class ModelInfo:
    """A model of the audit: one checkpoint under one set of score-changing settings."""

    name: str  # pretrained, plus " [k=v, ...]" for the settings that differ between runs of that checkpoint
    pretrained: str
    settings: tuple[tuple[str, str], ...]  # every score-changing setting (adapter, model_args, scoring)
    distinguishing: tuple[tuple[str, str], ...]  # those that differ from other models of the same pretrained
    label: str  # short: the last part of pretrained plus the distinguishing settings, or --label's alias

    @property
    def max_frames(self) -> int | None:
        value = dict(self.settings).get(FRAMES_SETTING)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    def without(self, setting: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The checkpoint and its settings but one: models equal here differ only in `setting`."""
        return self.pretrained, tuple((k, v) for k, v in self.settings if k != setting)

    def checkpoint_label(self, setting: str) -> str:
        """The label without `setting`: what models that differ only in `setting` share."""
        rest = ", ".join(f"{k}={v}" for k, v in self.distinguishing if k != setting)
        return f"{self.short} [{rest}]" if rest else self.short

    @property
    def short(self) -> str:
        """The label without its settings suffix."""
        suffix = ", ".join(f"{k}={v}" for k, v in self.distinguishing)
        return self.label[: -len(f" [{suffix}]")] if suffix and self.label.endswith(f" [{suffix}]") else self.label


@dataclass
class TaskRun:
    """One task of one run, read: per-question results in the file's doc_id order."""

    file: RunFile
    benchmark: str
    mode: str
    scoring: str
    question_id: pa.Array
    category: pa.Array
    source: pa.Array
    video: pa.Array  # the record's video (null in runs written before visdep recorded it)
    n_options: np.ndarray
    answer_index: np.ndarray
    correct: np.ndarray  # 1.0 where argmax_k p_k == answer_index
    p_answer: np.ndarray  # p_{y*}
    entropy: np.ndarray  # H_norm
    sha256: str = ""
    file_row: np.ndarray | None = None  # each question's sample among the file's non-blank lines (for prompts)

    def prompts(self, question_ids: Sequence[str]) -> dict[str, str | None]:
        """The prompt lmms-eval logged for each of these questions (see `read_prompts`)."""
        wanted = pa.array(list(question_ids), pa.string())
        positions = pc.index_in(wanted, value_set=self.question_id).fill_null(-1).to_numpy()
        rows = {q: int(self.file_row[i]) for q, i in zip(question_ids, positions, strict=True) if i >= 0}
        return {q: None for q in question_ids} | read_prompts(self.file.samples_path, rows)

    def describe(self) -> str:
        return f"{self.file.task} of {self.file.model} ({self.file.samples_path})"


@dataclass
class BenchmarkResults:
    """All models' results on one benchmark, aligned question by question.

    Arrays are (models, questions) in the order of `models` and `questions`; the video arrays hold NaN
    rows for models without a video run (text-only models). `dropped` lists questions left out because a
    video run lacks them (question_id, runs: the video runs without it)."""

    benchmark: str
    questions: pd.DataFrame
    models: list[str]
    correct_blind: np.ndarray
    p_answer_blind: np.ndarray
    entropy_blind: np.ndarray
    correct_video: np.ndarray
    p_answer_video: np.ndarray
    has_video: np.ndarray
    runs: list[TaskRun]
    dropped: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["question_id", "runs"]))

    def model_rows(self, names: Iterable[str]) -> np.ndarray:
        position = {m: i for i, m in enumerate(self.models)}
        return np.array([position[m] for m in names if m in position], dtype=int)

    @property
    def clusters(self) -> np.ndarray | None:
        """Each question's video, the unit the bootstrap resamples; None where a question has none."""
        videos = self.questions["video"]
        return None if videos.isna().any() else videos.to_numpy()


@dataclass
class RunSet:
    """What `load_runs` found: per-benchmark aligned results and the files behind them."""

    benchmarks: dict[str, BenchmarkResults]
    used: list[RunFile]
    replaced: list[tuple[RunFile, RunFile]] = field(default_factory=list)  # (replaced, by)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (samples file, why)
    model_info: dict[str, ModelInfo] = field(default_factory=dict)
    sha256: dict[str, str] = field(default_factory=dict)  # every file read -> its sha256

    @property
    def models(self) -> list[str]:
        return sorted({m for b in self.benchmarks.values() for m in b.models})

    @property
    def vision_models(self) -> set[str]:
        """Models with a video run of some benchmark; every other model is text-only."""
        return {m for b in self.benchmarks.values() for m, v in zip(b.models, b.has_video, strict=True) if v}

    def label(self, model: str) -> str:
        return self.model_info[model].label if model in self.model_info else model


# --------------------------------------------------------------------------- results.json
def parse_model_args(model_args: str | dict | None) -> dict[str, str]:
    """`config.model_args` of results.json ("k=v,k=v" or a dict) as a dict of strings."""
    if isinstance(model_args, dict):
        return {str(k): str(v) for k, v in model_args.items()}
    if model_args is None:
        return {}
    pairs = [item.split("=", 1) for item in str(model_args).split(",") if "=" in item]
    return {k.strip(): v.strip() for k, v in pairs}


def model_identity(config: dict) -> str:
    """The checkpoint: `pretrained=` of model_args (a Hugging Face id or a path), else the model type."""
    args = parse_model_args(config.get("model_args"))
    if args.get("pretrained"):
        return args["pretrained"]
    return str(config.get("model") or "")


def score_settings(config: dict, scoring: str | None) -> tuple[tuple[str, str], ...]:
    """The settings besides the checkpoint that change a run's scores, sorted: the lmms-eval model
    (`adapter`), every model_arg but `pretrained` and NOT_SCORE_CHANGING, and the scoring mode."""
    args = parse_model_args(config.get("model_args"))
    settings = {k: v for k, v in args.items() if k != "pretrained" and k not in NOT_SCORE_CHANGING}
    settings["adapter"] = str(config.get("model") or "")
    if scoring is not None:
        settings["scoring"] = scoring
    return tuple(sorted(settings.items()))


def _visdep_task(task_config) -> bool:
    """False only for tasks whose config says they are not visdep tasks (no visdep_* tag)."""
    if not isinstance(task_config, dict) or "tag" not in task_config:
        return True
    tags = task_config["tag"] if isinstance(task_config["tag"], list) else [task_config["tag"]]
    return any(str(t).startswith("visdep") for t in tags)


def find_run_files(run_dirs: Iterable[str | Path]) -> tuple[list[RunFile], list[tuple[Path, str]]]:
    """Every (results.json, samples file) pair under `run_dirs`, and the samples files skipped."""
    found: list[RunFile] = []
    skipped: list[tuple[Path, str]] = []
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise RunDataError(f"{run_dir}: not a folder")
        results_files = sorted(run_dir.rglob(f"*{RESULTS_SUFFIX}"))
        prefixes = {p.parent / p.name[: -len(RESULTS_SUFFIX)] for p in results_files}
        for orphan in sorted(run_dir.rglob("*_samples_*.jsonl")):
            if orphan.parent / orphan.name.split("_samples_", 1)[0] not in prefixes:
                raise RunDataError(f"{orphan}: no matching *{RESULTS_SUFFIX} beside it, so the model that wrote "
                                   f"it is unknown (lmms-eval writes both; was the results file removed?)")
        if not results_files:
            raise RunDataError(f"{run_dir}: no lmms-eval results (*{RESULTS_SUFFIX}) in this folder or below; "
                               f"run lmms-eval with --output_path {run_dir} --log_samples")
        for results_path in results_files:
            found += _run_files_of(results_path, skipped)
    return found, skipped


def _effective_samples(results: dict, task: str, results_path: Path) -> int | None:
    """n-samples[task].effective of results.json (the documents lmms-eval evaluated), None where absent."""
    entry = (results.get("n-samples") or {}).get(task)
    if not isinstance(entry, dict) or entry.get("effective") is None:
        return None
    try:
        return int(entry["effective"])
    except (TypeError, ValueError):
        raise RunDataError(f"{results_path}: n-samples of {task!r} is not a number: {entry!r}") from None


def _peek_scoring(path: Path) -> str | None:
    """The scoring of a samples file's first record (the file is read in full later), None if unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            line = next((line for line in f if line.strip()), "")
        record = _destringify(json.loads(line).get("visdep"), str(path))
        scoring = record.get("scoring") if isinstance(record, dict) else None
        return None if scoring is None else str(scoring)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, RunDataError):
        return None  # the full read says what is wrong with the file


def _run_files_of(results_path: Path, skipped: list) -> list[RunFile]:
    raw = results_path.read_bytes()
    try:
        results = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunDataError(f"{results_path}: not valid JSON ({e})") from e
    config = results.get("config") if isinstance(results, dict) else None
    if not isinstance(config, dict):
        raise RunDataError(f"{results_path}: no 'config' section; not an lmms-eval results file")
    pretrained = model_identity(config)
    if not pretrained:
        raise RunDataError(f"{results_path}: config names no model (neither model_args pretrained= nor model)")
    prefix = results_path.name[: -len(RESULTS_SUFFIX)]
    date = str(results.get("date") or prefix)
    configs = results.get("configs") or {}
    samples = {p.name[len(prefix) + len("_samples_"): -len(".jsonl")]: p
               for p in results_path.parent.glob(f"{glob.escape(prefix)}_samples_*.jsonl")}
    for task in sorted(set(configs) - set(samples)):
        if _visdep_task(configs[task]):
            raise RunDataError(f"{results_path}: task {task!r} has no samples file {prefix}_samples_{task}.jsonl; "
                               f"rerun it with --log_samples")
    limit = config.get("limit")
    sha = hashlib.sha256(raw).hexdigest()
    files = []
    for task, path in sorted(samples.items()):
        if not _visdep_task(configs.get(task)):
            skipped.append((path, f"task {task!r} is not a visdep task"))
            continue
        files.append(RunFile(model=pretrained, model_args=str(config.get("model_args") or ""), task=task, date=date,
                             results_path=results_path, samples_path=path, pretrained=pretrained,
                             settings=score_settings(config, _peek_scoring(path)),
                             n_samples=_effective_samples(results, task, results_path),
                             limit=None if limit is None else float(limit), results_sha256=sha))
    return files


def _short_name(pretrained: str, parts: int) -> str:
    return "/".join(pretrained.rstrip("/").split("/")[-parts:])


def name_models(files: Sequence[RunFile], aliases: dict[str, str] | None = None) -> dict[tuple, ModelInfo]:
    """A name and a short label for each model (a checkpoint under one set of score-changing settings).

    name = pretrained, plus " [k=v, ...]" listing the settings in which the runs of that checkpoint differ
    (a setting one run leaves unset reads "default"); label = the last part of pretrained (more parts where two
    checkpoints share it) with the same suffix. `aliases` (--label NAME=ALIAS) replace labels; NAME may be a
    model's name, its label or its pretrained (when that checkpoint has one model only)."""
    keys = sorted({f.key for f in files})
    by_pretrained: dict[str, list[tuple]] = {}
    for key in keys:
        by_pretrained.setdefault(key[0], []).append(key)
    suffixes = {}
    for group in by_pretrained.values():
        settings = [dict(k[1]) for k in group]
        differing = sorted({name for s in settings for name in s if len({t.get(name) for t in settings}) > 1})
        for key, s in zip(group, settings, strict=True):
            suffixes[key] = tuple((name, s.get(name, "default")) for name in differing)
    parts = {p: 1 for p in by_pretrained}
    while True:  # lengthen the labels of checkpoints whose last path parts coincide
        short = {}
        for p in by_pretrained:
            short.setdefault(_short_name(p, parts[p]), []).append(p)
        clashing = [p for same in short.values() if len(same) > 1 for p in same if parts[p] < len(p.split("/"))]
        if not clashing:
            break
        for p in clashing:
            parts[p] += 1
    models = {}
    for key in keys:
        suffix = ", ".join(f"{k}={v}" for k, v in suffixes[key])
        name = f"{key[0]} [{suffix}]" if suffix else key[0]
        label = f"{_short_name(key[0], parts[key[0]])} [{suffix}]" if suffix else _short_name(key[0], parts[key[0]])
        models[key] = ModelInfo(name=name, pretrained=key[0], settings=key[1], distinguishing=suffixes[key],
                                label=label)
    for reference, alias in (aliases or {}).items():
        (key,) = resolve_model_keys(reference, models, "--label")
        models[key] = dataclasses.replace(models[key], label=alias)
    labels = [m.label for m in models.values()]
    clashes = sorted({label for label in labels if labels.count(label) > 1})
    if clashes:
        raise RunDataError(f"two models would share the label(s) {clashes}; give them distinct --label NAME=ALIAS")
    return models


def resolve_model_keys(reference: str, models: dict, what: str) -> list:
    """The model `reference` names (its name, its label, or its pretrained when that checkpoint has one model);
    raises RunDataError when it names none or several."""
    exact = [k for k, m in models.items() if reference in (m.name, m.label)]
    if len(exact) == 1:
        return exact
    by_checkpoint = [k for k, m in models.items() if m.pretrained == reference]
    if len(by_checkpoint) == 1:
        return by_checkpoint
    if len(by_checkpoint) > 1 or len(exact) > 1:
        names = [models[k].name for k in (by_checkpoint or exact)]
        raise RunDataError(f"{what} {reference!r} names {len(names)} models (runs of one checkpoint with different "
                           f"settings): {names}; name one of them")
    raise RunDataError(f"{what} {reference!r} has no run here; models found: "
                       f"{', '.join(sorted(m.name for m in models.values()))}")


# --------------------------------------------------------------------------- samples files
@dataclass
class _Columns:
    """A samples file's visdep records as columns (one row per question)."""

    doc_id: np.ndarray | None
    question_id: list[str]
    category: list[str | None]
    source: list[str | None]
    video: list[str | None]
    n_options: np.ndarray
    answer_index: np.ndarray
    logprobs: np.ndarray  # flat, row i at offsets[i]:offsets[i+1]
    offsets: np.ndarray
    benchmarks: set
    modes: set
    scorings: set
    sha256: str


class _NeedsCarefulRead(Exception):
    """The fast reader found something it cannot vouch for; the line-by-line reader decides."""


class _Record(msgspec.Struct, gc=False):
    """The `visdep` record of a sample line, as the tasks write it (typed: anything else is read carefully;
    fields not named here, such as `continuations`, are skipped)."""

    question_id: str
    benchmark: str
    mode: str
    n_options: int
    answer_index: int
    option_logprobs: list[float]
    scoring: str
    category: str | None = None
    source: str | None = None
    video: str | None = None


class _Sample(msgspec.Struct, gc=False):
    """A sample line: msgspec skips every other field (the prompt, the responses) without building it."""

    visdep: _Record
    doc_id: int | None = None


_SAMPLE_LINES = msgspec.json.Decoder(_Sample)


@contextmanager
def _gc_paused():
    """Each record's list of log-probabilities is a container the collector tracks: a file's tens of thousands
    of them trigger collections that find nothing to free (no cycles). Pausing it cut the read by a quarter."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_fast(path: Path) -> _Columns:
    data = path.read_bytes()
    try:
        samples = _SAMPLE_LINES.decode_lines(data)
    except msgspec.DecodeError as e:  # also a wrong type, a missing field, NaN (not JSON): the careful reader says
        raise _NeedsCarefulRead(str(e)) from e
    if not samples:
        raise _NeedsCarefulRead("no sample")
    # map/attrgetter/chain iterate in C: Python-level loops over the records would cost as much as decoding.
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
    return _Columns(
        doc_id=None if None in doc_ids else np.array(doc_ids, dtype=np.int64),
        question_id=list(map(attrgetter("question_id"), records)), category=list(map(attrgetter("category"), records)),
        source=list(map(attrgetter("source"), records)), video=list(map(attrgetter("video"), records)),
        n_options=n_options, answer_index=answer, logprobs=values, offsets=np.concatenate([[0], np.cumsum(lengths)]),
        benchmarks=set(map(attrgetter("benchmark"), records)), modes=set(map(attrgetter("mode"), records)),
        scorings=set(map(attrgetter("scoring"), records)), sha256=hashlib.sha256(data).hexdigest())


def _destringify(value, where: str):
    """A value lmms-eval stringified back into JSON data (a record or a list written as a string)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise RunDataError(f"{where}: cannot read {value[:80]!r}") from None


def _as_int(value, where: str, name: str) -> int:
    try:
        number = float(value) if isinstance(value, str) else value
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number != int(number):
            raise ValueError
        return int(number)
    except (ValueError, TypeError, OverflowError):
        raise RunDataError(f"{where}: {name} must be an integer, got {value!r}") from None


def _as_finite(value, where: str, question_id: str, values) -> float:
    try:
        number = float(value)
    except (ValueError, TypeError):
        raise RunDataError(f"{where}: question {question_id!r}: option log-probability {value!r} is not a number")\
            from None
    if not math.isfinite(number):
        raise RunDataError(f"{where}: question {question_id!r}: non-finite option log-probabilities {values} "
                           f"(NaN or infinity); the model's scores for this question are broken, rerun it")
    return number


def _read_careful(path: Path) -> _Columns:
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                sample = json.loads(line)
            except json.JSONDecodeError as e:
                raise RunDataError(f"{where}: not valid JSON ({e.msg}); the file looks truncated (a run that was "
                                   f"killed or is still writing)") from None
            if not isinstance(sample, dict):
                raise RunDataError(f"{where}: a sample line must be a JSON object")
            if sample.get("visdep") is None:
                raise RunDataError(f"{where}: sample (doc_id {sample.get('doc_id')!r}) has no 'visdep' record; only "
                                   f"visdep tasks (lmms_eval_tasks) write it")
            record = _destringify(sample["visdep"], where)
            if not isinstance(record, dict):
                raise RunDataError(f"{where}: the 'visdep' record must be an object, got {record!r:.80}")
            missing = [k for k in _REQUIRED if record.get(k) is None]
            if missing:
                raise RunDataError(f"{where}: the 'visdep' record lacks {', '.join(missing)}")
            qid = str(record["question_id"])
            k = _as_int(record["n_options"], where, "n_options")
            answer = _as_int(record["answer_index"], where, "answer_index")
            raw = _destringify(record["option_logprobs"], where)
            if not isinstance(raw, list):
                raise RunDataError(f"{where}: option_logprobs must be a list, got {raw!r:.80}")
            logprobs = [_as_finite(v, where, qid, raw) for v in raw]
            if k < 2 or len(logprobs) != k:
                raise RunDataError(f"{where}: question {qid!r} has n_options={k} but {len(logprobs)} log-probabilities")
            if not 0 <= answer < k:
                raise RunDataError(f"{where}: question {qid!r}: answer_index {answer} outside 0..{k - 1}")
            doc_id = sample.get("doc_id")
            rows.append((None if doc_id is None else _as_int(doc_id, where, "doc_id"), qid,
                         _text(record.get("category")), _text(record.get("source")), _text(record.get("video")), k,
                         answer, logprobs, str(record["benchmark"]), str(record["mode"]), str(record["scoring"])))
    if not rows:
        raise RunDataError(f"{path}: empty samples file (the run wrote no sample)")
    (doc_ids, qids, categories, sources, videos, ks, answers, logprobs, benchmarks, modes,
     scorings) = zip(*rows, strict=True)
    lengths = np.array(ks, dtype=np.int64)
    return _Columns(
        doc_id=None if any(d is None for d in doc_ids) else np.array(doc_ids, dtype=np.int64),
        question_id=list(qids), category=list(categories), source=list(sources), video=list(videos),
        n_options=lengths,
        answer_index=np.array(answers, dtype=np.int64),
        logprobs=np.fromiter((v for row in logprobs for v in row), dtype=np.float64, count=int(lengths.sum())),
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        benchmarks=set(benchmarks), modes=set(modes), scorings=set(scorings), sha256=file_sha256(path))


def _text(value) -> str | None:
    return None if value is None else str(value)


def _single(values: set, allowed, path: Path, name: str) -> str:
    if len(values) != 1:
        raise RunDataError(f"{path}: one samples file must hold one {name}, found {sorted(map(str, values))}")
    (value,) = values
    if value not in allowed:
        raise RunDataError(f"{path}: unknown {name} {value!r}; expected one of {', '.join(allowed)}")
    return value


def read_task_run(run: RunFile) -> TaskRun:
    """Read one samples file into per-question results (correct, p_answer, entropy)."""
    try:
        with _gc_paused():
            columns = _read_fast(run.samples_path)
    except _NeedsCarefulRead as why:
        logger.debug(f"{run.samples_path}: reading line by line ({why})")
        columns = _read_careful(run.samples_path)
    path = run.samples_path
    benchmark = _single(columns.benchmarks, BENCHMARKS, path, "benchmark")
    mode = _single(columns.modes, MODES, path, "mode")
    scoring = _single(columns.scorings, SCORINGS, path, "scoring")
    ids = pa.array(columns.question_id, pa.string())
    if run.n_samples is not None and len(ids) < run.n_samples:
        raise RunDataError(f"{path}: {len(ids)} sample line(s), but {run.results_path.name} beside it says lmms-eval "
                           f"evaluated {run.n_samples} (n-samples, effective): the file is incomplete (cut short when "
                           f"copied, or the run is still writing); copy it again or rerun {run.task}")
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        twice = counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist()
        raise RunDataError(f"{path}: {len(twice)} question(s) appear more than once, e.g. {twice[:3]}; "
                           f"were two runs appended to one file?")
    k = columns.n_options
    padded = np.full((len(k), int(k.max())), np.nan)
    rows = np.repeat(np.arange(len(k)), k)
    padded[rows, np.arange(len(columns.logprobs)) - columns.offsets[:-1][rows]] = columns.logprobs
    probabilities = option_probabilities(padded, k)
    answer = columns.answer_index
    order = np.argsort(columns.doc_id, kind="stable") if columns.doc_id is not None else np.arange(len(k))
    return TaskRun(file=run, benchmark=benchmark, mode=mode, scoring=scoring, question_id=ids.take(order),
                   category=pa.array(columns.category, pa.string()).take(order),
                   source=pa.array(columns.source, pa.string()).take(order),
                   video=pa.array(columns.video, pa.string()).take(order), n_options=k[order],
                   answer_index=answer[order], sha256=columns.sha256,
                   file_row=order,
                   correct=(predicted_index(probabilities) == answer).astype(np.float64)[order],
                   p_answer=answer_probability(probabilities, answer)[order],
                   entropy=normalised_entropy(probabilities, k)[order])


def _worker_count(files: Sequence[RunFile]) -> int:
    """Processes to read with: one per usable core, but none for small trees."""
    cores = usable_cores()
    size = sum(f.samples_path.stat().st_size for f in files)
    if cores < 2 or len(files) < 2 or size < PARALLEL_READ_BYTES or fork_context() is None:
        return 1
    return min(cores, len(files))


def _read_all(files: Sequence[RunFile]) -> list[TaskRun]:
    workers = _worker_count(files)
    progress = {"total": len(files), "desc": "reading samples", "unit": "file", "leave": False}
    if workers == 1:
        return [read_task_run(f) for f in tqdm(files, **progress)]
    # a worker's RunDataError comes back as it is
    with ProcessPoolExecutor(max_workers=workers, mp_context=fork_context()) as pool:
        return list(tqdm(pool.map(read_task_run, files), **progress))


# --------------------------------------------------------------------------- pairing
def latest_runs(files: list[RunFile]) -> tuple[list[RunFile], list[tuple[RunFile, RunFile]]]:
    """Keep the latest run of each (model, task); return the kept files and the (replaced, by) pairs."""
    latest: dict[tuple, RunFile] = {}
    replaced = []
    for f in sorted(files, key=lambda f: (f.date, str(f.samples_path))):
        key = (f.key, f.task)
        if key in latest:
            replaced.append((latest[key], f))
        latest[key] = f
    return sorted(latest.values(), key=lambda f: (f.model, f.task)), replaced


def _compare(reference: TaskRun, other: TaskRun, subset_allowed: bool = False) -> np.ndarray:
    """Positions of `other`'s questions in `reference`; raises if questions, K, answers or videos differ.

    With `subset_allowed`, `other` may lack some of `reference`'s questions (a video run that dropped questions
    whose video is missing), but never hold one `reference` lacks."""
    positions = pc.index_in(other.question_id, value_set=reference.question_id).fill_null(-1).to_numpy()
    lacks = len(other.question_id) != len(reference.question_id)
    if (positions < 0).any() or (lacks and not subset_allowed):
        ref_set, other_set = set(reference.question_id.to_pylist()), set(other.question_id.to_pylist())
        only_ref, only_other = sorted(ref_set - other_set), sorted(other_set - ref_set)
        raise RunDataError(
            f"runs of {reference.benchmark} cover different questions: {reference.describe()} has "
            f"{len(ref_set)}, {other.describe()} has {len(other_set)}; {len(only_ref)} only in the first "
            f"(e.g. {only_ref[:3]}), {len(only_other)} only in the second (e.g. {only_other[:3]}). Every blind and "
            f"video run of a benchmark must cover the same questions (same task, same --limit; a video run may "
            f"only lack questions, as VISDEP_SKIP_MISSING_VIDEOS=1 drops those whose video is missing).")
    for name in ("n_options", "answer_index", "video"):
        ref_values = getattr(reference, name)
        values = getattr(other, name)
        if name == "video":  # null in runs from before `video` was recorded: nothing to compare
            ref_values = ref_values.take(pa.array(positions))
            differ = pc.fill_null(pc.not_equal(ref_values, values), False)
            differ = np.flatnonzero(differ.to_numpy(zero_copy_only=False)) if pc.any(differ).as_py() else []
            if len(differ):
                ref_values, values = ref_values.to_pylist(), values.to_pylist()
        else:
            ref_values = ref_values[positions]
            differ = np.flatnonzero(ref_values != values)
        if len(differ):
            examples = ", ".join(f"{other.question_id[int(i)].as_py()!r}: {_shown(ref_values[i])} vs "
                                 f"{_shown(values[i])}" for i in differ[:3])
            raise RunDataError(f"runs of {reference.benchmark} disagree on {name} for {len(differ)} question(s) "
                               f"({examples}) between {reference.describe()} and {other.describe()}; "
                               f"were they run on different versions of the benchmark files?")
    return positions


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _check_limits(benchmark: str, runs: list[TaskRun]) -> None:
    limits = {run.file.limit for run in runs}
    if len(limits) > 1:
        described = "; ".join(f"{run.describe()}: {run.file.limit}" for run in runs)
        raise RunDataError(f"runs of {benchmark} were made with different --limit values ({described}); run every "
                           f"model and mode on the same questions")


def _pair(benchmark: str, runs: list[TaskRun]) -> BenchmarkResults:
    _check_limits(benchmark, runs)
    by_model: dict[str, dict[str, TaskRun]] = {}
    for run in runs:
        modes = by_model.setdefault(run.file.model, {})
        if run.mode in modes:
            first = modes[run.mode]
            raise RunDataError(
                f"{run.file.model} has two {run.mode} runs of {benchmark} from different tasks: {first.describe()} "
                f"and {run.describe()}; audit one variant at a time (pass their folders separately)")
        modes[run.mode] = run
    for model, modes in by_model.items():
        if "blind" not in modes:
            video = modes["video"]
            same_checkpoint = sorted(m for m, other in by_model.items()
                                     if "blind" in other and other["blind"].file.pretrained == video.file.pretrained)
            hint = (f"; blind runs of that checkpoint have other settings: {same_checkpoint} (a blind run is paired "
                    f"only with a video run of the same score-changing settings)" if same_checkpoint else "")
            raise RunDataError(f"{model} has a video run of {benchmark} ({video.describe()}) but no blind run with "
                               f"the same settings{hint}; Blind Gap and Visual Gain need both: run {benchmark}_blind "
                               f"with the same --model_args and VISDEP_SCORING")
        if "video" in modes and modes["video"].scoring != modes["blind"].scoring:
            raise RunDataError(f"{model} scored {benchmark} by {modes['blind'].scoring} blind but by "
                               f"{modes['video'].scoring} with video ({modes['video'].describe()}); "
                               f"rerun both with one VISDEP_SCORING")
    models = sorted(by_model)
    reference = by_model[models[0]]["blind"]
    n = len(reference.question_id)
    shape = (len(models), n)
    arrays = {name: np.full(shape, np.nan) for name in
              ("correct_blind", "p_answer_blind", "entropy_blind", "correct_video", "p_answer_video")}
    covered = np.ones(n, dtype=bool)  # by every video run
    lacking: dict[int, list[str]] = {}
    videos = reference.video.to_numpy(zero_copy_only=False).astype(object)
    videos_missing = reference.video.null_count > 0
    for i, model in enumerate(models):
        for mode, run in by_model[model].items():
            positions = _compare(reference, run, subset_allowed=mode == "video")
            arrays[f"correct_{mode}"][i, positions] = run.correct
            arrays[f"p_answer_{mode}"][i, positions] = run.p_answer
            if mode == "blind":
                arrays["entropy_blind"][i, positions] = run.entropy
            if videos_missing and run.video.null_count < len(run.video):  # take the videos other runs name
                missing = pd.isna(videos[positions])
                videos[positions[missing]] = run.video.to_numpy(zero_copy_only=False)[missing]
            if len(positions) < n:
                in_run = np.zeros(n, dtype=bool)
                in_run[positions] = True
                covered &= in_run
                for q in np.flatnonzero(~in_run):
                    lacking.setdefault(int(q), []).append(run.describe())
    questions = pd.DataFrame({"question_id": reference.question_id.to_pandas(),
                              "category": reference.category.to_pandas(), "source": reference.source.to_pandas(),
                              "video": pd.Series(videos, dtype=object).where(pd.notna(videos), None),
                              "n_options": reference.n_options, "answer_index": reference.answer_index})
    dropped = pd.DataFrame({"question_id": [questions["question_id"].iloc[q] for q in sorted(lacking)],
                            "runs": ["; ".join(lacking[q]) for q in sorted(lacking)]}, columns=["question_id", "runs"])
    if not covered.all():
        logger.warning(f"{benchmark}: {int((~covered).sum())} question(s) lack a result in some video run "
                       f"(VISDEP_SKIP_MISSING_VIDEOS=1 drops questions whose video is missing): audited without them")
        questions = questions[covered].reset_index(drop=True)
        arrays = {name: values[:, covered] for name, values in arrays.items()}
    return BenchmarkResults(benchmark=benchmark, questions=questions, models=models,
                            has_video=np.array(["video" in by_model[m] for m in models]), runs=runs, dropped=dropped,
                            **arrays)


def load_runs(run_dirs: Sequence[str | Path], labels: dict[str, str] | None = None) -> RunSet:
    """Find, read, de-duplicate and pair every visdep run under `run_dirs` (see the module docstring).

    labels: NAME -> ALIAS, short labels for the report (see `name_models`)."""
    files, skipped = find_run_files(run_dirs)
    for path, why in skipped:
        logger.info(f"skipping {path}: {why}")
    if not files:
        raise RunDataError(f"no samples of visdep tasks under {', '.join(map(str, run_dirs))}")
    used, replaced = latest_runs(files)
    models = name_models(used, labels)

    def named(f: RunFile) -> RunFile:
        return dataclasses.replace(f, model=models[f.key].name)

    used = sorted(map(named, used), key=lambda f: (f.model, f.task))
    replaced = [(named(old), named(new)) for old, new in replaced]
    for old, new in replaced:
        logger.info(f"{old.task} of {old.model}: {new.samples_path} replaces the earlier {old.samples_path}")
    task_runs = _read_all(used)
    by_benchmark: dict[str, list[TaskRun]] = {}
    for run in task_runs:
        by_benchmark.setdefault(run.benchmark, []).append(run)
    benchmarks = {b: _pair(b, by_benchmark[b]) for b in BENCHMARKS if b in by_benchmark}
    for b in benchmarks.values():
        logger.info(f"{b.benchmark}: {len(b.questions)} questions, {len(b.models)} model(s), "
                    f"{int(b.has_video.sum())} with video")
    sha256 = {str(f.results_path): f.results_sha256 for f in used}
    sha256.update({str(run.file.samples_path): run.sha256 for run in task_runs})
    return RunSet(benchmarks=benchmarks, used=used, replaced=replaced, skipped=skipped,
                  model_info={m.name: m for m in models.values()}, sha256=sha256)


class _PromptRecord(msgspec.Struct, gc=False):
    question_id: str


class _PromptLine(msgspec.Struct, gc=False):
    visdep: _PromptRecord
    input: str | None = None


_PROMPT_LINES = msgspec.json.Decoder(_PromptLine)


def read_prompts(path: Path, rows: dict[str, int]) -> dict[str, str | None]:
    """The prompt lmms-eval logged (a sample line's `input`: the task's text, i.e. the question and its lettered
    options) for questions at known rows (question_id -> the sample's position among the file's non-blank lines);
    None where the line has no `input`. Only those lines are parsed; should a line not hold its question (a
    whitespace-only line shifts the rows), the whole file is decoded instead."""
    data = path.read_bytes()
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
    starts, stops = np.r_[0, ends + 1], np.r_[ends, len(data)]
    starts, stops = starts[stops > starts], stops[stops > starts]
    found = {}
    for qid, row in rows.items():
        try:
            sample = json.loads(data[starts[row]:stops[row]]) if row < len(starts) else {}
            record = _destringify(sample.get("visdep"), str(path))
        except (json.JSONDecodeError, UnicodeDecodeError, RunDataError):
            record = None
        if not isinstance(record, dict) or str(record.get("question_id")) != qid:
            return _decode_prompts(path, data, list(rows))
        found[qid] = sample.get("input") if isinstance(sample.get("input"), str) else None
    return found


def _decode_prompts(path: Path, data: bytes, question_ids: list[str]) -> dict[str, str | None]:
    wanted = set(question_ids)
    try:
        lines = [(s.visdep.question_id, s.input) for s in _PROMPT_LINES.decode_lines(data)]
    except msgspec.DecodeError:  # stringified records: line by line
        lines = []
        for line in data.decode("utf-8").splitlines():
            if line.strip():
                sample = json.loads(line)
                record = _destringify(sample.get("visdep"), str(path))
                lines.append((str(record.get("question_id")), sample.get("input")))
    found = {qid: (text if isinstance(text, str) else None) for qid, text in lines if qid in wanted}
    return {qid: found.get(qid) for qid in question_ids}
