"""Find the runs in lmms-eval output trees and tell models apart (reading samples: `samples.py`; pairing: `pairing.py`).

An lmms-eval run with ``--log_samples`` writes, in ``OUT/`` or ``OUT/<model>/``, ``<date>_results.json`` and one
``<date>_samples_<task>.jsonl`` per task; any nesting of folders is searched and several runs may share a tree.

A model is a checkpoint under one set of score-changing settings: the adapter, its arguments with the adapter's
defaults filled in (`model_adapters.registry.score_settings`: a run with default arguments and one that writes
`max_frames=16` out are one model, one with `max_frames=8` another) and the records' scoring. Where the results file
holds visdep's own section (`results["visdep"]["model"]`, written by visdep's adapters) its `pretrained`, `settings`
and `checkpoint` identity are used; otherwise `pretrained=` and the other `model_args` of `config`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import zoneinfo
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.loaders import known_benchmarks
from lmms_eval_tasks.reading import read_bytes, read_json_text
from model_adapters.registry import score_settings
from model_adapters.settings import LADDER_SETTINGS, condition_of
from visdep_metrics.audit.samples import MODES, RunDataError, first_record, read_samples

RESULTS_SUFFIX = "_results.json"
FRAMES_SETTING = "max_frames"

Settings = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RunFile:
    """One task of one lmms-eval run, as found on disk (before its samples are read)."""

    model: str  # the model's name in the audit (see `name_models`); pretrained until named
    model_args: str
    task: str
    date: str
    results_path: Path
    samples_path: Path
    benchmark: str = ""  # as the first record says (the full read checks that every record says the same)
    mode: str = ""
    pretrained: str = ""
    settings: Settings = ()  # every score-changing setting: adapter, model arguments with defaults, scoring
    checkpoint: str | None = None  # results["visdep"]["model"]["checkpoint"]["identity"]; None where not recorded
    checkpoint_source: str | None = None  # the hub commit or folder it was taken from
    n_samples: int | None = None  # results.json n-samples[task].effective: the lines the samples file must hold
    limit: float | None = None  # results.json config.limit (--limit)
    results_sha256: str = ""
    dropped: tuple[dict, ...] = ()  # results["visdep"]["dropped"][task]: the questions the task left out, and why
    accuracy: float | None = None  # results.json results[task]["acc,none"]: what lmms-eval reported for the task
    time: datetime.datetime | None = None  # when the run was written (`run_time`), timezone-aware
    time_source: str = ""  # what `time` was read from

    @property
    def key(self) -> tuple[str, Settings]:
        """What makes two runs the same model: the checkpoint and its score-changing settings."""
        return self.pretrained, self.settings

    def describe(self) -> str:
        return f"{self.task} of {self.model} ({self.samples_path})"


@dataclass(frozen=True)
class ModelInfo:
    """A model of the audit: one checkpoint under one set of score-changing settings."""

    name: str  # pretrained, plus " [k=v, ...]" for the settings that differ between runs of that checkpoint
    pretrained: str
    settings: Settings
    distinguishing: Settings  # those that differ from other models of the same pretrained
    label: str  # short: the last part of pretrained plus the distinguishing settings, or --label's alias

    @property
    def max_frames(self) -> int | None:
        value = dict(self.settings).get(FRAMES_SETTING)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    def without(self, setting: str) -> tuple[str, Settings]:
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
    return args.get("pretrained") or str(config.get("model") or "")


@dataclass(frozen=True)
class RunModel:
    """What a results file says its model was."""

    pretrained: str
    settings: dict[str, str]  # adapter and score-changing arguments, defaults filled in (scoring comes per file)
    checkpoint: str | None
    checkpoint_source: str | None


MAX_MODEL_NAME = 4096  # a path's length on Linux; a hub id is at most 96 characters


def run_model(results: dict, results_path: Path) -> RunModel:
    """The model of a run: visdep's section of the results file where there is one, else `config`. A model name
    longer than MAX_MODEL_NAME is refused: it would be every table's and plot's label."""
    model = _run_model(results, results_path)
    if len(model.pretrained) > MAX_MODEL_NAME:
        raise RunDataError(f"{results_path}: the model name is {len(model.pretrained):,} characters long "
                           f"({excerpt(model.pretrained, 40)}); a model name or path is at most {MAX_MODEL_NAME:,}")
    return model


def _run_model(results: dict, results_path: Path) -> RunModel:
    config = results.get("config")
    section = (results.get("visdep") or {}).get("model") if isinstance(results.get("visdep"), dict) else None
    if isinstance(section, dict) and isinstance(section.get("settings"), dict):
        adapter = str(section.get("adapter") or config.get("model") or "")
        checkpoint = section.get("checkpoint") if isinstance(section.get("checkpoint"), dict) else {}
        identity = checkpoint.get("identity")
        return RunModel(pretrained=str(section.get("pretrained") or model_identity(config)),
                        settings={"adapter": adapter, **score_settings(adapter, section["settings"])},
                        checkpoint=None if identity is None else str(identity),
                        checkpoint_source=None if checkpoint.get("source") is None else str(checkpoint["source"]))
    pretrained = model_identity(config)
    if not pretrained:
        raise RunDataError(f"{results_path}: config names no model (neither model_args pretrained= nor model)")
    adapter = str(config.get("model") or "")
    arguments = parse_model_args(config.get("model_args"))
    return RunModel(pretrained=pretrained, settings={"adapter": adapter, **score_settings(adapter, arguments)},
                    checkpoint=None, checkpoint_source=None)


def _visdep_task(task_config) -> bool:
    """False only for tasks whose config says they are not visdep tasks (no visdep_* tag)."""
    if not isinstance(task_config, dict) or "tag" not in task_config:
        return True
    tags = task_config["tag"] if isinstance(task_config["tag"], list) else [task_config["tag"]]
    return any(str(t).startswith("visdep") for t in tags)


def _walk(run_dir: Path, seen: set) -> tuple[list[Path], list[Path]]:
    """The results and samples files under `run_dir`, symlinked folders followed (scratch storage on clusters is
    often linked in); a folder already searched (a link loop, or two links to one folder) is searched once."""
    def unreadable(error: OSError) -> None:
        raise RunDataError(f"{error.filename}: cannot read this folder ({error.strerror})")

    results, samples = [], []
    for folder, dirs, files in os.walk(run_dir, onerror=unreadable, followlinks=True):
        here = Path(folder)
        info = here.stat()
        if (info.st_dev, info.st_ino) in seen:
            logger.info(f"{here}: already searched (reached again through a link), skipped")
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        if here.is_symlink():
            logger.info(f"following the link {here} -> {here.resolve()}")
        dirs.sort()
        results += [here / name for name in sorted(files) if name.endswith(RESULTS_SUFFIX)]
        samples += [here / name for name in sorted(files) if "_samples_" in name and name.endswith(".jsonl")]
    return results, samples


def find_run_files(run_dirs: Iterable[str | Path]) -> tuple[list[RunFile], list[tuple[Path, str]]]:
    """Every (results.json, samples file) pair under `run_dirs`, and the samples files skipped."""
    found: list[RunFile] = []
    skipped: list[tuple[Path, str]] = []
    seen: set = set()
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise RunDataError(f"{run_dir}: not a folder")
        results_files, samples_files = _walk(run_dir, seen)
        prefixes = {p.parent / p.name[: -len(RESULTS_SUFFIX)] for p in results_files}
        for orphan in samples_files:
            if orphan.parent / orphan.name.split("_samples_", 1)[0] not in prefixes:
                raise RunDataError(f"{orphan}: no matching *{RESULTS_SUFFIX} beside it, so the model that wrote "
                                   f"it is unknown (lmms-eval writes both; was the results file removed?)")
        if not results_files and not seen_before(run_dir, found):
            raise RunDataError(f"{run_dir}: no lmms-eval results (*{RESULTS_SUFFIX}) in this folder or below; "
                               f"run lmms-eval with --output_path {run_dir} --log_samples")
        for results_path in results_files:
            found += _run_files_of(results_path, skipped, samples_files)
    return found, skipped


def seen_before(run_dir: Path, found: list[RunFile]) -> bool:
    """Whether `run_dir`'s runs were found already under an earlier RUN_DIR (it lies inside one)."""
    real = run_dir.resolve()
    return any(real == f.results_path.resolve().parent or real in f.results_path.resolve().parents for f in found)


def run_time(results: dict, results_path: Path) -> tuple[datetime.datetime, str]:
    """When a run was written: lmms-eval's `date` in the timezone it was written in (`--timezone`, recorded in
    config.resolved_cli_args), else the results file's modification time; and what it was read from. A date alone
    is no time: lmms-eval writes it in a timezone of the user's choosing without naming it in the date."""
    date = results.get("date")
    cli = (results.get("config") or {}).get("resolved_cli_args")
    timezone = cli.get("timezone") if isinstance(cli, dict) else None
    if isinstance(date, str) and isinstance(timezone, str):
        try:
            written = datetime.datetime.strptime(date, "%Y%m%d_%H%M%S").replace(tzinfo=zoneinfo.ZoneInfo(timezone))
            return written.astimezone(datetime.timezone.utc), f"date {date} ({timezone})"
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            pass
    modified = datetime.datetime.fromtimestamp(results_path.stat().st_mtime, tz=datetime.timezone.utc)
    return modified, f"modification time {modified.isoformat()}"


def _section(results: dict, name: str, results_path: Path) -> dict:
    """A section of results.json that maps tasks (or names) to values: {} where absent, RunDataError where it is
    no object."""
    section = results.get(name)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise RunDataError(f"{results_path}: {name!r} must be an object, got {type(section).__name__} "
                           f"{section!r:.80}; not an lmms-eval results file")
    return section


def _effective_samples(results: dict, task: str, results_path: Path) -> int | None:
    """n-samples[task].effective of results.json (the documents lmms-eval evaluated), None where absent."""
    entry = _section(results, "n-samples", results_path).get(task)
    if not isinstance(entry, dict) or entry.get("effective") is None:
        return None
    try:
        return int(entry["effective"])
    except (TypeError, ValueError, OverflowError):  # OverflowError: infinity
        raise RunDataError(f"{results_path}: n-samples of {task!r} is not a number: {entry!r}") from None


def _dropped(results: dict, task: str, results_path: Path) -> tuple[dict, ...]:
    """results["visdep"]["dropped"][task], each entry {"question_id", "where", "reason"}."""
    section = results.get("visdep") if isinstance(results.get("visdep"), dict) else {}
    dropped = section.get("dropped") or {}
    if not isinstance(dropped, dict):
        raise RunDataError(f"{results_path}: visdep.dropped must map each task to its dropped questions, got "
                           f"{type(dropped).__name__} {dropped!r:.80}")
    entries = dropped.get(task) or []
    if not isinstance(entries, list):
        raise RunDataError(f"{results_path}: visdep.dropped[{task!r}] must be a list of questions, got {entries!r:.80}")
    return tuple({"question_id": None if e.get("question_id") is None else str(e["question_id"]),
                  "where": str(e.get("where", "")), "reason": str(e.get("reason", "not given"))}
                 for e in entries if isinstance(e, dict))


def _accuracy(results: dict, task: str, results_path: Path) -> float | None:
    """results[task]["acc,none"], what lmms-eval reported for the task; None where it reported none."""
    entry = _section(results, "results", results_path).get(task)
    value = entry.get("acc,none") if isinstance(entry, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise RunDataError(f"{results_path}: results of {task!r}: acc,none {value!r} is not an accuracy in [0, 1]")
    return float(value)


def _run_files_of(results_path: Path, skipped: list, samples_files: Sequence[Path]) -> list[RunFile]:
    raw = read_bytes(results_path, "results", error=RunDataError)
    try:
        results = read_json_text(raw, str(results_path), RunDataError)
    except json.JSONDecodeError as e:
        raise RunDataError(f"{results_path}: not valid JSON ({e})") from e
    config = results.get("config") if isinstance(results, dict) else None
    if not isinstance(config, dict):
        raise RunDataError(f"{results_path}: no 'config' section; not an lmms-eval results file")
    for name in ("configs", "n-samples", "results", "visdep"):
        _section(results, name, results_path)
    model = run_model(results, results_path)
    prefix = results_path.name[: -len(RESULTS_SUFFIX)]
    date = str(results.get("date") or prefix)
    configs = _section(results, "configs", results_path)
    samples = {p.name[len(prefix) + len("_samples_"): -len(".jsonl")]: p for p in samples_files
               if p.parent == results_path.parent and p.name.startswith(f"{prefix}_samples_")}
    for task in sorted(set(configs) - set(samples)):
        if _visdep_task(configs[task]):
            raise RunDataError(f"{results_path}: task {task!r} has no samples file "
                               f"{f'{prefix}_samples_{task}.jsonl'!r}; rerun it with --log_samples")
    limit = config.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)):
        raise RunDataError(f"{results_path}: config.limit {limit!r:.80} is not a number (lmms-eval's --limit)")
    sha = hashlib.sha256(raw).hexdigest()
    time, time_source = run_time(results, results_path)
    files = []
    for task, path in sorted(samples.items()):
        if not _visdep_task(configs.get(task)):
            skipped.append((path, f"task {task!r} is not a visdep task"))
            continue
        first = _first_record(path)
        settings = model.settings | {"scoring": first["scoring"]}  # the scoring is a setting too; the records say it
        files.append(RunFile(model=model.pretrained, model_args=str(config.get("model_args") or ""), task=task,
                             date=date, results_path=results_path, samples_path=path, benchmark=first["benchmark"],
                             mode=first["mode"], pretrained=model.pretrained,
                             settings=tuple(sorted(settings.items())), checkpoint=model.checkpoint,
                             checkpoint_source=model.checkpoint_source,
                             n_samples=_effective_samples(results, task, results_path),
                             limit=None if limit is None else float(limit), results_sha256=sha,
                             dropped=_dropped(results, task, results_path),
                             accuracy=_accuracy(results, task, results_path), time=time, time_source=time_source))
    return files


def _first_record(path: Path) -> dict[str, str]:
    """Benchmark, mode and scoring of a samples file, from its first record; where that cannot be read or names no
    known benchmark or mode, the whole file is read, which says what is wrong with it."""
    record = first_record(path) or {}
    peeked = {name: None if record.get(name) is None else str(record[name]) for name in ("benchmark", "mode",
                                                                                         "scoring")}
    known = tuple(known_benchmarks())
    if None in peeked.values() or peeked["benchmark"] not in known or peeked["mode"] not in MODES:
        samples = read_samples(path, known)
        peeked = {"benchmark": samples.benchmark, "mode": samples.mode, "scoring": samples.scoring}
    return peeked


# --------------------------------------------------------------------------- models
def latest_runs(files: list[RunFile]) -> tuple[list[RunFile], list[tuple[RunFile, RunFile]]]:
    """Keep the latest run of each (model, task) by `RunFile.time`; return the kept files and the (replaced, by)
    pairs. Two runs of one model and task written at the same time cannot be ordered: an error naming both."""
    latest: dict[tuple, RunFile] = {}
    replaced = []
    for f in sorted(files, key=lambda f: (f.time, str(f.samples_path))):
        key = (f.key, f.task)
        if key in latest:
            if latest[key].time == f.time:
                raise RunDataError(f"{latest[key].samples_path} and {f.samples_path}: two runs of {f.task} by "
                                   f"{f.model}, both written at {f.time.isoformat()} ({latest[key].time_source}; "
                                   f"{f.time_source}), so neither is the latest; move one of them out of the run "
                                   f"folders")
            replaced.append((latest[key], f))
        latest[key] = f
    return sorted(latest.values(), key=lambda f: (f.model, f.task)), replaced


def _short_name(pretrained: str, parts: int) -> str:
    return "/".join(pretrained.rstrip("/").split("/")[-parts:])


def _suffixes(group: list[tuple]) -> dict[tuple, Settings]:
    """The settings each model of one checkpoint is named by: those its models differ in, where a frame condition of
    the temporal ladder (`settings.condition_of`) is named by its condition (and the frame budget where the models
    that sample frames differ in it) and a full-video model by what tells it from the others."""
    settings = {key: dict(key[1]) for key in group}

    def differing(among) -> set[str]:
        return {name for s in among for name in s if len({t.get(name) for t in among}) > 1}

    condition = {key: condition_of(s) for key, s in settings.items()}
    budgets = "max_frames" in differing([s for key, s in settings.items() if condition[key] != "single"])
    found = {}
    for key, s in settings.items():
        names = {name for name in differing(list(settings.values())) if name not in LADDER_SETTINGS}
        names |= ({"frames"} if condition[key] == "single" else {"frame_order"} if condition[key] != "video"
                  else set()) | ({"max_frames"} if budgets and condition[key] != "single" else set())
        found[key] = tuple((name, s.get(name, "default")) for name in sorted(names))
    return found


def name_models(files: Sequence[RunFile], aliases: dict[str, str] | None = None) -> dict[tuple, ModelInfo]:
    """A name and a short label for each model (a checkpoint under one set of score-changing settings).

    name = pretrained, plus " [k=v, ...]" listing the settings in which the runs of that checkpoint differ
    (a setting one run leaves unset reads "default"; a frame condition named by its condition: `_suffixes`); label =
    the last part of pretrained (more parts where two checkpoints share it) with the same suffix. `aliases` (--label
    NAME=ALIAS) replace labels; NAME may be a model's name, its label or its pretrained (one model of it only)."""
    keys = sorted({f.key for f in files})
    by_pretrained: dict[str, list[tuple]] = {}
    for key in keys:
        by_pretrained.setdefault(key[0], []).append(key)
    suffixes = {key: suffix for group in by_pretrained.values() for key, suffix in _suffixes(group).items()}
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


__all__ = ["FRAMES_SETTING", "ModelInfo", "RunDataError", "RunFile", "find_run_files",
           "latest_runs", "model_identity", "name_models", "parse_model_args", "resolve_model_keys", "run_model"]
