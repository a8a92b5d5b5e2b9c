"""Readers of three general VideoQA benchmarks, as lmms-eval 0.7.3's own tasks read them.

- Video-MME: `lmms-eval/Video-MME`, split test, 2,700 records; `options` carry their letter ("A. ..."),
  `answer` is a letter; videos `$HF_HOME/videomme/data/<videoID>.mp4` (else `.MP4`, else `.mkv`).
- LongVideoBench: `longvideobench/LongVideoBench`, split validation, 1,337 records; `option0..4`, unused
  ones "N/A"; `correct_choice` an index; videos `$HF_HOME/datasets/longvideobench/videos/<video_path>`.
- MLVU dev: `sy1998/MLVU_dev`, split test, the multiple-choice task types; `candidates` are the options,
  `question` repeats them as "(A) ..." lines; `answer` a letter (or a candidate's text in the GitHub
  release); videos `$HF_HOME/mlvu/<video_name>`.

(`tasks/videomme/utils.py`, `tasks/longvideobench/utils.py`, `tasks/mlvu/utils.py` and `api/task.py` of
lmms-eval 0.7.3.) The annotations come from the Hugging Face dataset through `datasets.load_dataset` with
the same arguments as lmms-eval's own task, so the datasets cache its runs left serves them offline; or from
a local copy named by `<NAME>_ANNOTATIONS` (a parquet, json or jsonl file, a folder holding the split's
parquet file, or a folder saved by `save_to_disk`). The videos are looked up under `<NAME>_VIDEOS` when set.
Reading annotations never touches the videos: blind tasks download no video.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmms_eval_tasks.records import LETTERS, BenchmarkDataError, as_int, check_unique, fail, make_record


@dataclass(frozen=True)
class HubDataset:
    """Where lmms-eval's own task reads a general benchmark: its dataset, split and video folder."""

    repo: str
    split: str
    video_cache_dir: str  # under $HF_HOME, as lmms-eval's `dataset_kwargs.cache_dir` (+ its subfolder)
    videos_env_var: str

    def video_root(self) -> Path:
        value = os.environ.get(self.videos_env_var)
        if value:
            return Path(value).expanduser()
        return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / self.video_cache_dir


VIDEOMME = HubDataset("lmms-eval/Video-MME", "test", "videomme", "VIDEOMME_VIDEOS")
LONGVIDEOBENCH = HubDataset("longvideobench/LongVideoBench", "validation", "datasets/longvideobench",
                            "LONGVIDEOBENCH_VIDEOS")
MLVU = HubDataset("sy1998/MLVU_dev", "test", "mlvu", "MLVU_VIDEOS")

VIDEOMME_DURATIONS = ("short", "medium", "long")
VIDEOMME_DOMAINS = ("Knowledge", "Film & Television", "Sports Competition", "Artistic Performance", "Life Record",
                    "Multilingual")
VIDEOMME_TASK_TYPES = ("Temporal Perception", "Spatial Perception", "Attribute Perception", "Action Recognition",
                       "Object Recognition", "OCR Problems", "Counting Problem", "Temporal Reasoning",
                       "Spatial Reasoning", "Action Reasoning", "Object Reasoning", "Information Synopsis")
LONGVIDEOBENCH_DURATION_GROUPS = ("15", "60", "600", "3600")
LONGVIDEOBENCH_CATEGORIES = ("S2E", "S2O", "S2A", "E2O", "O2E", "T2E", "T2O", "T2A", "E3E", "O3O", "SSS", "SOS", "SAA",
                             "T3E", "T3O", "TOS", "TAA")
MLVU_TASK_TYPES = ("plotQA", "needle", "ego", "count", "order", "anomaly_reco", "topic_reasoning")


def _lmms_eval_datasets_cache() -> str | None:
    """The datasets cache lmms-eval's own tasks load into (`$LMMS_EVAL_DATASETS_CACHE`, else
    `$HF_DATASETS_CACHE`, else `$HF_HOME/datasets`), so that their downloads serve these tasks offline."""
    try:
        from lmms_eval.api.task import _resolve_hf_datasets_cache_dir
    except ImportError:  # a later lmms-eval: the datasets library's own default
        return None
    return _resolve_hf_datasets_cache_dir()


def read_rows(source: Path | None, hub: HubDataset) -> tuple[list[dict], str]:
    """(records as dicts, where they came from) from a local copy, or from the hub dataset (or its cache)."""
    if source is None:
        import datasets

        try:
            dataset = datasets.load_dataset(hub.repo, split=hub.split, cache_dir=_lmms_eval_datasets_cache())
        except Exception as e:  # noqa: BLE001 - offline without a cache, gated, renamed: say what to do
            raise BenchmarkDataError(
                f"cannot load {hub.repo} (split {hub.split}) from the Hugging Face hub or the datasets cache "
                f"({type(e).__name__}: {e})") from e
        return dataset.to_list(), f"{hub.repo} ({hub.split})"
    if source.is_dir():
        if any((source / marker).exists() for marker in ("state.json", "dataset_dict.json")):
            import datasets

            dataset = datasets.load_from_disk(str(source))
            if isinstance(dataset, datasets.DatasetDict):
                if hub.split not in dataset:
                    raise fail(source, f"no split {hub.split!r} in the saved dataset (splits: {list(dataset)})")
                dataset = dataset[hub.split]
            return dataset.to_list(), str(source)
        found = sorted(source.rglob(f"{hub.split}-*.parquet")) or sorted(source.rglob(f"{hub.split}.parquet"))
        if len(found) != 1:
            raise fail(source, f"expected one {hub.split}-*.parquet file (as in the hub dataset), found {found}")
        source = found[0]
    if not source.is_file():
        raise fail(source, "not found")
    suffix = source.suffix.lower()
    if suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(source).to_dict("records"), str(source)
    if suffix == ".jsonl":
        with open(source, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()], str(source)
    if suffix == ".json":
        with open(source, encoding="utf-8") as f:
            data = json.load(f)
        if isinstance(data, dict):  # {"test": [...]} or one record per key
            data = data.get(hub.split, list(data.values()))
        if not isinstance(data, list):
            raise fail(source, "expected a JSON list of records")
        return data, str(source)
    raise fail(source, "expected a .parquet, .json or .jsonl file, or a folder saved with save_to_disk")


def _field(row: dict, name: str, where: str):
    if name not in row:
        raise BenchmarkDataError(f"{where}: missing field {name!r} (fields: {sorted(row)})")
    return row[name]


def _as_list(value, where: str, name: str) -> list:
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise BenchmarkDataError(f"{where}: {name!r} is not a list: {value!r}")
    return list(value)


_LETTERED = re.compile(r"^\s*([A-Z])\s*[.)]\s*(.*)$", re.S)


def load_videomme(source: Path | None) -> list[dict]:
    """Video-MME: options "A. Apples." with their letter, `answer` a letter; category = task type, source =
    duration; accuracy also by duration, domain and task type."""
    rows, origin = read_rows(source, VIDEOMME)
    records = []
    for i, row in enumerate(rows):
        where = f"{origin} record {i} (question_id {row.get('question_id')!r})"
        options = []
        for k, option in enumerate(_as_list(_field(row, "options", where), where, "options")):
            match = _LETTERED.match(str(option))
            if not match or match.group(1) != LETTERS[k]:
                raise BenchmarkDataError(f"{where}: option {k} {option!r} does not start with '{LETTERS[k]}.'")
            options.append(match.group(2))
        answer = str(_field(row, "answer", where)).strip().upper()
        if answer not in LETTERS[: len(options)]:
            raise BenchmarkDataError(f"{where}: answer {answer!r} names no option")
        duration, task_type = str(_field(row, "duration", where)), str(_field(row, "task_type", where))
        records.append(make_record(
            _field(row, "question_id", where), "videomme", f"data/{_field(row, 'videoID', where)}.mp4",
            _field(row, "question", where), options, LETTERS.index(answer), task_type, duration, where,
            facets={"duration": duration, "domain": _field(row, "domain", where), "task_type": task_type}))
    return check_unique(records, origin)


def load_longvideobench(source: Path | None) -> list[dict]:
    """LongVideoBench validation: `option0..4` with unused trailing options "N/A" (dropped, so K is 4 or 5), or
    a `candidates` list; `correct_choice` an index; category = question category, source = duration group."""
    rows, origin = read_rows(source, LONGVIDEOBENCH)
    records = []
    for i, row in enumerate(rows):
        where = f"{origin} record {i} (id {row.get('id')!r})"
        if "option0" in row:
            options = [row[f"option{k}"] for k in range(5) if f"option{k}" in row]
        else:
            options = _as_list(_field(row, "candidates", where), where, "candidates")
        while options and (options[-1] is None or str(options[-1]).strip() == "N/A"):
            options.pop()
        if any(o is None or str(o).strip() == "N/A" for o in options):
            raise BenchmarkDataError(f"{where}: 'N/A' between real options in {options!r}")
        group, category = str(_field(row, "duration_group", where)), str(_field(row, "question_category", where))
        records.append(make_record(
            _field(row, "id", where), "longvideobench", f"videos/{_field(row, 'video_path', where)}",
            _field(row, "question", where), options, as_int(_field(row, "correct_choice", where), where,
                                                             "correct_choice"),
            category, group, where, facets={"duration_group": group, "question_category": category}))
    return check_unique(records, origin)


_OPTION_LINES = re.compile(r"\n\s*\(A\)")


def load_mlvu(source: Path | None) -> list[dict]:
    """MLVU dev, multiple-choice task types: options = `candidates`; the question text without the "(A) ..."
    lines it repeats them in; `answer` a letter (lmms-eval's copy) or a candidate's text (the GitHub release);
    category = task type. Rows without candidates (open-ended types) are not multiple choice: left out."""
    rows, origin = read_rows(source, MLVU)
    records = []
    for i, row in enumerate(rows):
        where = f"{origin} record {i} (video {row.get('video_name')!r}, {row.get('task_type')!r})"
        candidates = row.get("candidates")
        if candidates is None or (hasattr(candidates, "__len__") and len(candidates) == 0):
            continue
        options = [str(c) for c in _as_list(candidates, where, "candidates")]
        answer = str(_field(row, "answer", where)).strip()
        if answer.upper() in LETTERS[: len(options)] and len(answer) == 1:
            answer_index = LETTERS.index(answer.upper())
        elif answer in options:
            answer_index = options.index(answer)
        else:
            raise BenchmarkDataError(f"{where}: answer {answer!r} is neither an option letter nor an option text "
                                     f"of {options!r}")
        question = _OPTION_LINES.split("\n" + str(_field(row, "question", where)).strip(), maxsplit=1)[0].strip()
        task_type = str(_field(row, "task_type", where))
        video = str(_field(row, "video_name", where))
        records.append(make_record(row.get("question_id"), "mlvu", video, question, options, answer_index, task_type,
                                   None, where, facets={"task_type": task_type}))
    if not records:
        raise fail(origin, "no multiple-choice record (none has candidates)")
    given = [r["question_id"] for r in records]
    if "None" in given or "" in given or len(set(given)) < len(given):
        # the release's ids are not all there, or repeat: ids from what identifies a question, in file order
        for n, r in enumerate(records):
            r["question_id"] = f"{r['category']}/{Path(r['video']).stem}/{n}"
    return check_unique(records, origin)


def hub_loaders() -> dict[str, tuple[HubDataset, Callable[[Path | None], list[dict]]]]:
    return {"videomme": (VIDEOMME, load_videomme), "longvideobench": (LONGVIDEOBENCH, load_longvideobench),
            "mlvu": (MLVU, load_mlvu)}
