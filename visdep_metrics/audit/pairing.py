"""Read every run found under the audit's folders and pair them into per-benchmark results, question by question.

- of several runs of the same model and task the latest (results.json ``date``) is used and the replaced files are
  reported;
- a blind run is paired with the video run of the same model (checkpoint and score-changing settings); where both
  record their checkpoint's identity, the identities must match: a checkpoint folder whose weights changed between
  the blind and the video run is refused; a frame condition of the temporal ladder (`frames=middle`,
  `frame_order=shuffled|reversed`) without blind runs of its own takes its checkpoint's (`ladder.py`);
- every run of a benchmark must cover the same questions with the same option counts, answers, videos and prompts;
  a video run may lack questions its blind runs have (``VISDEP_SKIP_MISSING_VIDEOS=1`` drops questions whose video
  is missing): those are left out of the audit and listed. Otherwise the error says which runs differ and how;
- a samples file with fewer lines than its results file's ``n-samples`` is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from loguru import logger

from lmms_eval_tasks.loaders import known_benchmarks
from model_adapters.settings import LADDER_SETTINGS, condition_of
from visdep_metrics.audit.runs import ModelInfo, RunFile, find_run_files, latest_runs, name_models
from visdep_metrics.audit.samples import PERCENT_ABSENT, RunDataError, Samples, read_samples
from visdep_metrics.provenance import HashCache


@dataclass
class TaskRun:
    """One task of one run, read."""

    file: RunFile
    samples: Samples

    @property
    def mode(self) -> str:
        return self.samples.mode

    def describe(self) -> str:
        return self.file.describe()


@dataclass
class BenchmarkResults:
    """All models' results on one benchmark, aligned question by question.

    Arrays are (models, questions) in the order of `models` and `questions`; the video arrays hold NaN rows for
    models without a video run (text-only models). `missing_in_video` lists the questions left out because a video
    run lacks them (question_id, runs: the video runs without it)."""

    benchmark: str
    questions: pd.DataFrame  # question_id, category, source, video, prompt_id, n_options, answer_index
    models: list[str]
    correct_blind: np.ndarray
    p_answer_blind: np.ndarray
    entropy_blind: np.ndarray
    correct_video: np.ndarray
    p_answer_video: np.ndarray
    has_video: np.ndarray
    files: list[RunFile]
    sha256: dict[str, str] = field(default_factory=dict)  # each samples file read -> its sha256
    states: dict[str, list[int] | None] = field(default_factory=dict)  # and its provenance.file_state when read
    missing_in_video: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["question_id", "runs"]))
    # model -> mode -> ((questions, K_max) option probabilities in hundredths, uint8, PERCENT_ABSENT where the run lacks
    # the question or beyond its K; the option picked, -1 where it lacks it): what the explorer shows
    percent: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def model_rows(self, names: Iterable[str]) -> np.ndarray:
        position = {m: i for i, m in enumerate(self.models)}
        return np.array([position[m] for m in names if m in position], dtype=int)

    @property
    def videos(self) -> np.ndarray | None:
        """Each question's video, one unit the intervals' design effects count; None where some question's is
        unknown."""
        return self._labels("video")

    @property
    def prompts(self) -> np.ndarray | None:
        """Each question's blind prompt, the other unit the intervals' design effects count; None where some
        question's is unknown."""
        return self._labels("prompt_id")

    def _labels(self, column: str) -> np.ndarray | None:
        values = self.questions[column]
        return None if values.isna().any() else values.to_numpy()


@dataclass
class RunPlan:
    """The runs under the audit's folders, found and named, before their samples are read."""

    used: list[RunFile]  # the latest run of each model and task
    replaced: list[tuple[RunFile, RunFile]] = field(default_factory=list)  # (replaced, by)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (samples file, why)
    model_info: dict[str, ModelInfo] = field(default_factory=dict)

    @property
    def by_benchmark(self) -> dict[str, list[RunFile]]:
        """The files of each benchmark, benchmarks in the registry's order."""
        found = {b: [f for f in self.used if f.benchmark == b] for b in known_benchmarks()}
        return {b: files for b, files in found.items() if files}

    @property
    def models(self) -> list[str]:
        return sorted({f.model for f in self.used})

    @property
    def vision_models(self) -> set[str]:
        """Models with a video run of some benchmark; every other model is text-only."""
        return {f.model for f in self.used if f.mode == "video"}

    def label(self, model: str) -> str:
        return self.model_info[model].label if model in self.model_info else model

    @property
    def notes(self) -> list[str]:
        """The runs left out (an earlier run of the same model and task, a task that is not visdep's), and what the
        audit could not check because a run did not record its checkpoint."""
        notes = [f"left out {path}: {why}" for path, why in self.skipped]
        if self.replaced:
            notes.append(f"{len(self.replaced)} earlier run(s) left out, each replaced by a later run of the same "
                         f"model and task (listed in audit.json 'replaced'), e.g. {self.replaced[0][0].samples_path}")
        unknown = sorted({str(f.results_path) for f in self.used if f.checkpoint is None})
        if unknown:
            notes.append(f"{len(unknown)} run(s) record no checkpoint identity (results['visdep']['model'], written by "
                         f"visdep's adapters; older runs and other models lack it): they are told apart by their "
                         f"model_args with the adapters' defaults filled in, and their blind and video runs are paired "
                         f"without checking that they ran the same weights: {', '.join(unknown[:5])}"
                         f"{' ...' if len(unknown) > 5 else ''}")
        return notes


@dataclass
class RunSet(RunPlan):
    """A plan with every benchmark read and paired."""

    benchmarks: dict[str, BenchmarkResults] = field(default_factory=dict)

    @property
    def sha256(self) -> dict[str, str]:
        """Every file read -> its sha256."""
        found = {str(f.results_path): f.results_sha256 for f in self.used}
        for bench in self.benchmarks.values():
            found |= bench.sha256
        return found

    @property
    def dropped(self) -> dict[str, tuple[dict, ...]]:
        """task -> the questions the task left out before the model saw them (results["visdep"]["dropped"])."""
        return {f.task: f.dropped for f in self.used if f.dropped}


def plan_runs(run_dirs: Sequence[str | Path], labels: dict[str, str] | None = None) -> RunPlan:
    """Find and name every visdep run under `run_dirs`, keeping the latest of each model and task.

    labels: NAME -> ALIAS, short labels for the report (see `runs.name_models`)."""
    files, skipped = find_run_files(run_dirs)
    for path, why in skipped:
        logger.warning(f"left out {path}: {why}")
    if not files:
        raise RunDataError(f"no samples of visdep tasks under {', '.join(map(str, run_dirs))}")
    used, replaced = latest_runs(files)
    models = name_models(used, labels)

    def named(f: RunFile) -> RunFile:
        return dataclasses.replace(f, model=models[f.key].name)

    replaced = [(named(old), named(new)) for old, new in replaced]
    for old, new in replaced:
        logger.info(f"{old.task} of {old.model}: {new.samples_path} ({new.time_source}) replaces the earlier "
                    f"{old.samples_path} ({old.time_source})")
    for model in sorted(models.values(), key=lambda m: m.name):
        folders = sorted({str(f.results_path.parent) for f in used if f.key == (model.pretrained, model.settings)})
        logger.info(f"model {model.name}: runs in {', '.join(folders)}")
    return RunPlan(used=sorted(map(named, used), key=lambda f: (f.model, f.task)), replaced=replaced,
                   skipped=skipped, model_info={m.name: m for m in models.values()})


def read_task_run(file: RunFile, hashes: HashCache | None = None, descriptive: bool = True) -> TaskRun:
    """One samples file, read (`descriptive`: with each question's category and source) and checked against its
    results file."""
    samples = read_samples(file.samples_path, tuple(known_benchmarks()), hashes, descriptive)
    if (samples.benchmark, samples.mode) != (file.benchmark, file.mode):
        raise RunDataError(f"{file.samples_path}: its first record said {file.benchmark} {file.mode} when the audit "
                           f"found the runs, its records now say {samples.benchmark} {samples.mode}: the file changed "
                           f"while the audit read it; rerun the audit once the run has finished writing")
    n = len(samples.question_id)
    if file.n_samples is not None and n < file.n_samples:
        raise RunDataError(f"{file.samples_path}: {n} sample line(s), but {file.results_path.name} beside it says "
                           f"lmms-eval evaluated {file.n_samples} (n-samples, effective): the file is incomplete (cut "
                           f"short when copied, or the run is still writing); copy it again or rerun {file.task}")
    accuracy = float(samples.correct.mean())
    # more than half a question apart: not rounding, another run's samples (copied over, or a renamed file)
    if file.accuracy is not None and abs(accuracy - file.accuracy) * n > 0.5:
        raise RunDataError(f"{file.samples_path}: its samples give accuracy {100 * accuracy:.1f}% ({n} questions), but "
                           f"{file.results_path.name} beside it says lmms-eval measured {100 * file.accuracy:.1f}% "
                           f"(results[{file.task!r}]['acc,none']): the samples are not this run's (copied over from "
                           f"another run?)")
    return TaskRun(file=file, samples=samples)


def read_benchmark(benchmark: str, files: Sequence[RunFile], hashes: HashCache | None = None) -> BenchmarkResults:
    """Read every samples file of one benchmark and pair them (module docstring); `hashes`: sha256 of files
    already hashed."""
    reference = reference_file(files)
    bench = pair(benchmark, [read_task_run(f, hashes, descriptive=f is reference) for f in files])
    logger.info(f"{benchmark}: {len(bench.questions)} questions, {len(bench.models)} model(s), "
                f"{int(bench.has_video.sum())} with video")
    return bench


def load_runs(run_dirs: Sequence[str | Path], labels: dict[str, str] | None = None) -> RunSet:
    """Find, read, de-duplicate and pair every visdep run under `run_dirs`, in this process."""
    plan = plan_runs(run_dirs, labels)
    benchmarks = {b: read_benchmark(b, files) for b, files in plan.by_benchmark.items()}
    return RunSet(**vars(plan), benchmarks=benchmarks)


# --------------------------------------------------------------------------- pairing
def reference_file(files: Sequence[RunFile]) -> RunFile | None:
    """The run every other run of a benchmark is compared with, and whose categories and sources the audit keeps:
    the blind run of the first model by name (the others need not read theirs)."""
    return min((f for f in files if f.mode == "blind"), key=lambda f: f.model, default=None)


def _compare(reference: TaskRun, other: TaskRun, subset_allowed: bool = False) -> np.ndarray:
    """Positions of `other`'s questions in `reference`; raises if questions, K, answers, videos or prompts differ.

    With `subset_allowed`, `other` may lack some of `reference`'s questions (a video run that dropped questions
    whose video is missing), but never hold one `reference` lacks."""
    ref, run = reference.samples, other.samples
    positions = pc.index_in(run.question_id, value_set=ref.question_id).fill_null(-1).to_numpy()
    lacks = len(run.question_id) != len(ref.question_id)
    if (positions < 0).any() or (lacks and not subset_allowed):
        ref_set, other_set = set(ref.question_id.to_pylist()), set(run.question_id.to_pylist())
        only_ref, only_other = sorted(ref_set - other_set), sorted(other_set - ref_set)
        raise RunDataError(
            f"runs of {ref.benchmark} cover different questions: {reference.describe()} has {len(ref_set)}, "
            f"{other.describe()} has {len(other_set)}; {len(only_ref)} only in the first (e.g. {only_ref[:3]}), "
            f"{len(only_other)} only in the second (e.g. {only_other[:3]}). Every blind and video run of a benchmark "
            f"must cover the same questions (same task, same --limit; a video run may only lack questions, as "
            f"VISDEP_SKIP_MISSING_VIDEOS=1 drops those whose video is missing).")
    for name in ("n_options", "answer_index", "video", "prompt_id"):
        ref_values, values = getattr(ref, name), getattr(run, name)
        if isinstance(values, pa.Array):  # null: unknown in a version-1 record (lmms_eval_tasks.record)
            ref_values = ref_values.take(pa.array(positions))
            differ = pc.fill_null(pc.not_equal(ref_values, values), False)
            differ = np.flatnonzero(differ.to_numpy(zero_copy_only=False)) if pc.any(differ).as_py() else []
            if len(differ):
                ref_values, values = ref_values.to_pylist(), values.to_pylist()
        else:
            ref_values = ref_values[positions]
            differ = np.flatnonzero(ref_values != values)
        if len(differ):
            examples = ", ".join(f"{run.question_id[int(i)].as_py()!r}: {_shown(ref_values[i])} vs "
                                 f"{_shown(values[i])}" for i in differ[:3])
            raise RunDataError(f"runs of {ref.benchmark} disagree on {name} for {len(differ)} question(s) ({examples}) "
                               f"between {reference.describe()} and {other.describe()}; were they run on different "
                               f"versions of the benchmark files or tasks?")
    return positions


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _check_limits(benchmark: str, runs: list[TaskRun]) -> None:
    limits = {run.file.limit for run in runs}
    if len(limits) > 1:
        described = "; ".join(f"{run.describe()}: {run.file.limit}" for run in runs)
        raise RunDataError(f"runs of {benchmark} were made with different --limit values ({described}); run every "
                           f"model and mode on the same questions")


def _check_checkpoints(model: str, benchmark: str, blind: TaskRun, video: TaskRun) -> None:
    """A blind and a video run are one model's only if they ran the same weights (where both recorded them)."""
    b, v = blind.file, video.file
    if b.checkpoint is not None and v.checkpoint is not None and b.checkpoint != v.checkpoint:
        raise RunDataError(
            f"{model}: the blind and the video run of {benchmark} ran different checkpoints: {b.results_path} "
            f"recorded {b.checkpoint[:16]}... ({b.checkpoint_source}), {v.results_path} recorded "
            f"{v.checkpoint[:16]}... ({v.checkpoint_source}); the weights or a file that changes a score (config, "
            f"tokenizer, chat template, processor settings) changed between them. Rerun both on one checkpoint")


def _by_model(benchmark: str, runs: list[TaskRun]) -> dict[str, dict[str, TaskRun]]:
    by_model: dict[str, dict[str, TaskRun]] = {}
    for run in runs:
        modes = by_model.setdefault(run.file.model, {})
        if run.mode in modes:
            raise RunDataError(f"{run.file.model} has two {run.mode} runs of {benchmark} from different tasks: "
                               f"{modes[run.mode].describe()} and {run.describe()}; audit one variant at a time (pass "
                               f"their folders separately)")
        modes[run.mode] = run
    for model, modes in by_model.items():
        if "blind" not in modes and (shared := _checkpoint_blind(modes["video"], by_model)) is not None:
            modes["blind"] = shared
            logger.info(f"{model} (a frame condition) takes the blind answers of {shared.describe()}")
        if "blind" not in modes:
            video = modes["video"]
            same = sorted(m for m, other in by_model.items()
                          if "blind" in other and other["blind"].file.pretrained == video.file.pretrained)
            hint = (f"; blind runs of that checkpoint have other settings: {same} (a blind run is paired only with a "
                    f"video run of the same score-changing settings)" if same else "")
            raise RunDataError(f"{model} has a video run of {benchmark} ({video.describe()}) but no blind run with "
                               f"the same settings{hint}; Blind Gap and Visual Gain need both: run {benchmark}_blind "
                               f"with the same --model_args and VISDEP_SCORING")
        if "video" in modes:
            _check_checkpoints(model, benchmark, modes["blind"], modes["video"])
    return by_model


def _checkpoint_blind(video: TaskRun, by_model: dict[str, dict[str, TaskRun]]) -> TaskRun | None:
    """For a frame condition of the temporal ladder (`ladder.py`) without blind runs of its own: a blind run of the
    same checkpoint whose settings differ only in the ladder's (frames never enter a blind answer), preferring the
    full-video model's; None for any other model."""
    def rest(file: RunFile) -> tuple:
        return file.pretrained, tuple((k, v) for k, v in file.settings if k not in LADDER_SETTINGS)

    if condition_of(dict(video.file.settings)) == "video":
        return None
    candidates = sorted(((condition_of(dict(modes["blind"].file.settings)) != "video", model, modes["blind"])
                         for model, modes in by_model.items()
                         if "blind" in modes and rest(modes["blind"].file) == rest(video.file)), key=lambda c: c[:2])
    return candidates[0][2] if candidates else None


def _labels_from_all(reference: pa.Array, runs: list[tuple[np.ndarray, pa.Array]]) -> np.ndarray:
    """A column the reference run lacks for some questions (null: a version-1 record, `record`), filled from
    the runs that have it: (positions in the reference, their values)."""
    values = reference.to_numpy(zero_copy_only=False).astype(object)
    for positions, column in runs:
        if reference.null_count and column.null_count < len(column):
            missing = pd.isna(values[positions])
            values[positions[missing]] = column.to_numpy(zero_copy_only=False)[missing]
    return values


def pair(benchmark: str, runs: list[TaskRun]) -> BenchmarkResults:
    """Align every run of one benchmark question by question (module docstring)."""
    _check_limits(benchmark, runs)
    by_model = _by_model(benchmark, runs)
    models = sorted(by_model)
    reference = by_model[models[0]]["blind"].samples  # reference_file's
    n = len(reference.question_id)
    arrays = {name: np.full((len(models), n), np.nan) for name in
              ("correct_blind", "p_answer_blind", "entropy_blind", "correct_video", "p_answer_video")}
    covered = np.ones(n, dtype=bool)  # by every video run
    percent: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    lacking: dict[int, list[str]] = {}
    aligned = []
    for i, model in enumerate(models):
        for mode, run in by_model[model].items():
            positions = _compare(by_model[models[0]]["blind"], run, subset_allowed=mode == "video")
            s = run.samples
            arrays[f"correct_{mode}"][i, positions] = s.correct
            arrays[f"p_answer_{mode}"][i, positions] = s.p_answer
            if mode == "blind":
                arrays["entropy_blind"][i, positions] = s.entropy
            shown = np.full((n, int(reference.n_options.max())), PERCENT_ABSENT, dtype=np.uint8)
            shown[positions, :s.percent.shape[1]] = s.percent
            picked = np.full(n, -1, dtype=np.int8)
            picked[positions] = s.predicted
            percent.setdefault(model, {})[mode] = (shown, picked)
            aligned.append((positions, s))
            if len(positions) < n:
                in_run = np.zeros(n, dtype=bool)
                in_run[positions] = True
                covered &= in_run
                for q in np.flatnonzero(~in_run):
                    lacking.setdefault(int(q), []).append(run.describe())
    labels = {name: _labels_from_all(getattr(reference, name), [(p, getattr(s, name)) for p, s in aligned])
              for name in ("video", "prompt_id")}
    questions = pd.DataFrame({"question_id": reference.question_id.to_pandas(),
                              "category": reference.category.to_pandas(), "source": reference.source.to_pandas(),
                              **{name: pd.Series(values, dtype=object).where(pd.notna(values), None)
                                 for name, values in labels.items()},
                              "n_options": reference.n_options, "answer_index": reference.answer_index})
    missing = pd.DataFrame({"question_id": [questions["question_id"].iloc[q] for q in sorted(lacking)],
                            "runs": ["; ".join(lacking[q]) for q in sorted(lacking)]}, columns=["question_id", "runs"])
    if not covered.all():
        logger.warning(f"{benchmark}: {int((~covered).sum())} question(s) lack a result in some video run "
                       f"(VISDEP_SKIP_MISSING_VIDEOS=1 drops questions whose video is missing): audited without them")
        questions = questions[covered].reset_index(drop=True)
        arrays = {name: values[:, covered] for name, values in arrays.items()}
        percent = {m: {mode: (p[covered], pick[covered]) for mode, (p, pick) in modes.items()}
                   for m, modes in percent.items()}
    return BenchmarkResults(benchmark=benchmark, questions=questions, models=models,
                            has_video=np.array(["video" in by_model[m] for m in models]),
                            files=[run.file for run in runs],
                            sha256={str(run.file.samples_path): run.samples.sha256 for run in runs},
                            states={str(run.file.samples_path): run.samples.state for run in runs},
                            missing_in_video=missing, percent=percent, **arrays)
