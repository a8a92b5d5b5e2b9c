"""Read lmms-eval output trees into per-question results and pair each model's blind and video runs.

An lmms-eval run with ``--log_samples`` writes, in ``OUT/`` or ``OUT/<model>/``,
``<date>_results.json`` and one ``<date>_samples_<task>.jsonl`` per task. Every sample line of a
visdep task carries a ``visdep`` record (question_id, benchmark, mode, category, source, n_options,
answer_index, option_logprobs, scoring). Here:

- any nesting of folders is searched; several runs and models may share one tree;
- the model is ``pretrained=`` of ``config.model_args`` in results.json, else ``config.model``;
- of several runs of the same model and task the latest (results.json ``date``) is used and the
  replaced files are reported;
- every run of a benchmark must cover the same questions with the same option counts and answers;
  otherwise the error says which runs differ and how;
- values lmms-eval stringified (numbers as strings, a record as a string) are read back.

Files are decoded by msgspec into the typed record only (the prompt and responses are skipped, not
built); a file it cannot decode or whose values fail the checks is read again line by line, which
either reads it (stringified values) or raises an error naming the file, the line and what is wrong.
Large trees are read by one process per core (the decoder holds the GIL). Nothing here imports torch
or lmms-eval.
"""

from __future__ import annotations

import ast
import gc
import glob
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

RESULTS_SUFFIX = "_results.json"
MODES = ("blind", "video")
SCORINGS = ("letter", "option")
# Trees smaller than this are read in this process: forking saves little there (two files, 61 MB: 0.20 s
# in this process, 0.16 s by two forked readers) and small audits, like the tests', stay single-process.
PARALLEL_READ_BYTES = 64 * 2**20
_REQUIRED = ("question_id", "benchmark", "mode", "n_options", "answer_index", "option_logprobs", "scoring")


class RunDataError(ValueError):
    """An lmms-eval output file or record that cannot be audited; the message names it."""


@dataclass(frozen=True)
class RunFile:
    """One task of one lmms-eval run, as found on disk (before its samples are read)."""

    model: str
    model_args: str
    task: str
    date: str
    results_path: Path
    samples_path: Path


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
    n_options: np.ndarray
    answer_index: np.ndarray
    correct: np.ndarray  # 1.0 where argmax_k p_k == answer_index
    p_answer: np.ndarray  # p_{y*}
    entropy: np.ndarray  # H_norm

    def describe(self) -> str:
        return f"{self.file.task} of {self.file.model} ({self.file.samples_path})"


@dataclass
class BenchmarkResults:
    """All models' results on one benchmark, aligned question by question.

    Arrays are (models, questions) in the order of `models` and `questions`; the video arrays hold NaN
    rows for models without a video run (text-only models)."""

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

    def model_rows(self, names: Iterable[str]) -> np.ndarray:
        position = {m: i for i, m in enumerate(self.models)}
        return np.array([position[m] for m in names if m in position], dtype=int)


@dataclass
class RunSet:
    """What `load_runs` found: per-benchmark aligned results and the files behind them."""

    benchmarks: dict[str, BenchmarkResults]
    used: list[RunFile]
    replaced: list[tuple[RunFile, RunFile]] = field(default_factory=list)  # (replaced, by)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (samples file, why)

    @property
    def models(self) -> list[str]:
        return sorted({m for b in self.benchmarks.values() for m in b.models})

    @property
    def vision_models(self) -> set[str]:
        """Models with a video run of some benchmark; every other model is text-only."""
        return {m for b in self.benchmarks.values() for m, v in zip(b.models, b.has_video, strict=True) if v}


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
    """The model's name: `pretrained=` of model_args (a Hugging Face id or a path), else the model type."""
    args = parse_model_args(config.get("model_args"))
    if args.get("pretrained"):
        return args["pretrained"]
    return str(config.get("model") or "")


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


def _run_files_of(results_path: Path, skipped: list) -> list[RunFile]:
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunDataError(f"{results_path}: not valid JSON ({e})") from e
    config = results.get("config") if isinstance(results, dict) else None
    if not isinstance(config, dict):
        raise RunDataError(f"{results_path}: no 'config' section; not an lmms-eval results file")
    model = model_identity(config)
    if not model:
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
    files = []
    for task, path in sorted(samples.items()):
        if not _visdep_task(configs.get(task)):
            skipped.append((path, f"task {task!r} is not a visdep task"))
            continue
        files.append(RunFile(model=model, model_args=str(config.get("model_args") or ""), task=task, date=date,
                             results_path=results_path, samples_path=path))
    return files


# --------------------------------------------------------------------------- samples files
@dataclass
class _Columns:
    """A samples file's visdep records as columns (one row per question)."""

    doc_id: np.ndarray | None
    question_id: list[str]
    category: list[str | None]
    source: list[str | None]
    n_options: np.ndarray
    answer_index: np.ndarray
    logprobs: np.ndarray  # flat, row i at offsets[i]:offsets[i+1]
    offsets: np.ndarray
    benchmarks: set
    modes: set
    scorings: set


class _NeedsCarefulRead(Exception):
    """The fast reader found something it cannot vouch for; the line-by-line reader decides."""


class _Record(msgspec.Struct, gc=False):
    """The `visdep` record of a sample line, as the tasks write it (typed: anything else is read carefully)."""

    question_id: str
    benchmark: str
    mode: str
    n_options: int
    answer_index: int
    option_logprobs: list[float]
    scoring: str
    category: str | None = None
    source: str | None = None


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
    try:
        samples = _SAMPLE_LINES.decode_lines(path.read_bytes())
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
        source=list(map(attrgetter("source"), records)), n_options=n_options, answer_index=answer, logprobs=values,
        offsets=np.concatenate([[0], np.cumsum(lengths)]), benchmarks=set(map(attrgetter("benchmark"), records)),
        modes=set(map(attrgetter("mode"), records)), scorings=set(map(attrgetter("scoring"), records)))


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
                         _text(record.get("category")), _text(record.get("source")), k, answer, logprobs,
                         str(record["benchmark"]), str(record["mode"]), str(record["scoring"])))
    if not rows:
        raise RunDataError(f"{path}: empty samples file (the run wrote no sample)")
    doc_ids, qids, categories, sources, ks, answers, logprobs, benchmarks, modes, scorings = zip(*rows, strict=True)
    lengths = np.array(ks, dtype=np.int64)
    return _Columns(
        doc_id=None if any(d is None for d in doc_ids) else np.array(doc_ids, dtype=np.int64),
        question_id=list(qids), category=list(categories), source=list(sources), n_options=lengths,
        answer_index=np.array(answers, dtype=np.int64),
        logprobs=np.fromiter((v for row in logprobs for v in row), dtype=np.float64, count=int(lengths.sum())),
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        benchmarks=set(benchmarks), modes=set(modes), scorings=set(scorings))


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
                   source=pa.array(columns.source, pa.string()).take(order), n_options=k[order],
                   answer_index=answer[order],
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
    latest: dict[tuple[str, str], RunFile] = {}
    replaced = []
    for f in sorted(files, key=lambda f: (f.date, str(f.samples_path))):
        key = (f.model, f.task)
        if key in latest:
            replaced.append((latest[key], f))
        latest[key] = f
    return sorted(latest.values(), key=lambda f: (f.model, f.task)), replaced


def _compare(reference: TaskRun, other: TaskRun) -> np.ndarray:
    """Positions of `other`'s questions in `reference`; raises if questions, K or answers differ."""
    positions = pc.index_in(other.question_id, value_set=reference.question_id).fill_null(-1).to_numpy()
    if (positions < 0).any() or len(other.question_id) != len(reference.question_id):
        ref_set, other_set = set(reference.question_id.to_pylist()), set(other.question_id.to_pylist())
        only_ref, only_other = sorted(ref_set - other_set), sorted(other_set - ref_set)
        raise RunDataError(
            f"runs of {reference.benchmark} cover different questions: {reference.describe()} has "
            f"{len(ref_set)}, {other.describe()} has {len(other_set)}; {len(only_ref)} only in the first "
            f"(e.g. {only_ref[:3]}), {len(only_other)} only in the second (e.g. {only_other[:3]}). Every blind and "
            f"video run of a benchmark must cover the same questions (same task, no --limit).")
    for name in ("n_options", "answer_index"):
        ref_values = getattr(reference, name)[positions]
        values = getattr(other, name)
        differ = np.flatnonzero(ref_values != values)
        if differ.size:
            examples = ", ".join(f"{other.question_id[int(i)].as_py()!r}: {ref_values[i]} vs {values[i]}"
                                 for i in differ[:3])
            raise RunDataError(f"runs of {reference.benchmark} disagree on {name} for {differ.size} question(s) "
                               f"({examples}) between {reference.describe()} and {other.describe()}; "
                               f"were they run on different versions of the benchmark files?")
    return positions


def _pair(benchmark: str, runs: list[TaskRun]) -> BenchmarkResults:
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
            raise RunDataError(f"{model} has a video run of {benchmark} ({modes['video'].describe()}) but no blind "
                               f"run; Blind Gap and Visual Gain need both: run {benchmark}_blind too")
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
    for i, model in enumerate(models):
        for mode, run in by_model[model].items():
            positions = _compare(reference, run)
            arrays[f"correct_{mode}"][i, positions] = run.correct
            arrays[f"p_answer_{mode}"][i, positions] = run.p_answer
            if mode == "blind":
                arrays["entropy_blind"][i, positions] = run.entropy
    questions = pd.DataFrame({"question_id": reference.question_id.to_pandas(),
                              "category": reference.category.to_pandas(), "source": reference.source.to_pandas(),
                              "n_options": reference.n_options, "answer_index": reference.answer_index})
    return BenchmarkResults(benchmark=benchmark, questions=questions, models=models,
                            has_video=np.array(["video" in by_model[m] for m in models]), runs=runs, **arrays)


def load_runs(run_dirs: Sequence[str | Path]) -> RunSet:
    """Find, read, de-duplicate and pair every visdep run under `run_dirs` (see the module docstring)."""
    files, skipped = find_run_files(run_dirs)
    for path, why in skipped:
        logger.info(f"skipping {path}: {why}")
    if not files:
        raise RunDataError(f"no samples of visdep tasks under {', '.join(map(str, run_dirs))}")
    used, replaced = latest_runs(files)
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
    return RunSet(benchmarks=benchmarks, used=used, replaced=replaced, skipped=skipped)
