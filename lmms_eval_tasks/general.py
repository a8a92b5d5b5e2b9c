"""Readers of three general VideoQA benchmarks, as lmms-eval 0.7.3's own tasks read them, and the MLVU release.

- Video-MME: `lmms-eval/Video-MME`, split test, 2,700 records; `options` carry their letter ("A. ..."),
  `answer` is a letter; videos `$HF_HOME/videomme/data/<videoID>.mp4` (else `.MP4`, else `.mkv`).
- LongVideoBench: `longvideobench/LongVideoBench`, split validation, 1,337 records; `option0..4`, unused
  ones "N/A" (or a `candidates` list); `correct_choice` an index; videos
  `$HF_HOME/datasets/longvideobench/videos/<video_path>`.
- MLVU dev: the hub copy `sy1998/MLVU_dev` (split test: `video_name`, `task_type`, `question` repeating the
  candidates as "(A) ..." lines, `answer` a letter; videos `$HF_HOME/mlvu/<video_name>`), or the release its authors
  publish on GitHub (`data/<n>_<type>.json`: `video`, `question_type`, `answer` a candidate's text; videos
  `<n>_<type>/<video>` under `$MLVU_VIDEOS`, the release's `video/` folder). Multiple-choice records only (those
  with candidates).

(`tasks/videomme/utils.py`, `tasks/longvideobench/utils.py`, `tasks/mlvu/utils.py` and `api/task.py` of
lmms-eval 0.7.3.) The annotations come from the Hugging Face dataset through `datasets.load_dataset` with
the same arguments as lmms-eval's own task, so the datasets cache its runs left serves them offline; or from
a local copy named by `<NAME>_ANNOTATIONS` (a parquet, json or jsonl file, a folder holding the split's
parquet file, a folder saved by `save_to_disk`, or for MLVU the release's `data/` folder or one of its files).
Reading annotations never touches the videos: blind tasks download no video.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lmms_eval_tasks.records import (
    LETTERS,
    BenchmarkDataError,
    Question,
    RecordError,
    answer_letter,
    answer_text,
    as_int,
    fail,
)
from lmms_eval_tasks.rows import SAVED_DATASET_MARKERS, read_rows
from lmms_eval_tasks.unusable import BenchmarkData


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
# The release names one task type otherwise than the hub copy and lmms-eval do.
MLVU_RELEASE_TYPES = {"findNeedle": "needle"}
PADDING_DROPPED = "padding options dropped (answer remapped)"
NOT_MULTIPLE_CHOICE = "open-ended records (no candidates) left out"


def _lmms_eval_datasets_cache() -> str | None:
    """The datasets cache lmms-eval's own tasks load into (`$LMMS_EVAL_DATASETS_CACHE`, else
    `$HF_DATASETS_CACHE`, else `$HF_HOME/datasets`), so that their downloads serve these tasks offline."""
    try:
        from lmms_eval.api.task import _resolve_hf_datasets_cache_dir
    except ImportError:  # a later lmms-eval: the datasets library's own default
        return None
    return _resolve_hf_datasets_cache_dir()


def _release_number(path: Path) -> tuple[int, str]:
    """MLVU's files sort by their leading number (1_plotQA.json ... 9_summary.json)."""
    head = path.name.split("_", 1)[0]
    return (int(head), path.name) if head.isdigit() else (10**9, path.name)


def annotation_rows(source: Path | None, hub: HubDataset) -> list[tuple[dict, str, Path | None]]:
    """(record, where, the file it came from) of a local copy, or of the hub dataset (or its cache)."""
    if source is None:
        import datasets

        try:
            dataset = datasets.load_dataset(hub.repo, split=hub.split, cache_dir=_lmms_eval_datasets_cache())
        except Exception as e:  # noqa: BLE001 - offline without a cache, gated, renamed: say what to do
            raise BenchmarkDataError(
                f"cannot load {hub.repo} (split {hub.split}) from the Hugging Face hub or the datasets cache "
                f"({type(e).__name__}: {e})") from e
        return [(row, f"{hub.repo} ({hub.split}) record {i}", None) for i, row in enumerate(dataset.to_list())]
    if not source.exists():
        raise fail(source, "not found")
    files = [source]
    if source.is_dir() and not any((source / marker).exists() for marker in SAVED_DATASET_MARKERS):
        files = sorted(source.rglob(f"{hub.split}-*.parquet")) or sorted(source.rglob(f"{hub.split}.parquet"))
        if hub is MLVU and not files:  # the release: data/<n>_<type>.json
            files = sorted(source.glob("*.json"), key=_release_number)
            if not files:
                raise fail(source, f"expected the hub dataset's {hub.split}-*.parquet file or the release's "
                                   f"<n>_<type>.json files")
        elif len(files) != 1:
            raise fail(source, f"expected one {hub.split}-*.parquet file (as in the hub dataset), found {files}")
    return [(row, where, path) for path in files
            for row, where in read_rows(path, split=hub.split, keyed_records=True)]


_LETTERED = re.compile(r"^\s*([A-Z])\s*[.)]\s*(.*)$", re.S)


def _as_list(value, name: str) -> list:
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise RecordError(f"{name!r} is not a list", repr(value))
    return list(value)


def _videomme_question(row: dict) -> Question:
    options = []
    for k, option in enumerate(_as_list(row["options"], "options")):
        match = _LETTERED.match(str(option))
        if not match or match.group(1) != LETTERS[k]:
            raise RecordError("an option does not start with its letter", f"option {k} {option!r}")
        options.append(match.group(2))
    duration, task_type = str(row["duration"]), str(row["task_type"])
    return Question(question_id=row["question_id"], benchmark="videomme", video=f"data/{row['videoID']}.mp4",
                    question=row["question"], options=options, answer_index=answer_letter(row["answer"], len(options)),
                    category=task_type, source=duration,
                    facets={"duration": duration, "domain": row["domain"], "task_type": task_type})


def load_videomme(source: Path | None) -> BenchmarkData:
    """Video-MME: options "A. Apples." with their letter, `answer` a letter; category = task type, source =
    duration; accuracy also by duration, domain and task type."""
    data = BenchmarkData("videomme")
    for row, where, _ in annotation_rows(source, VIDEOMME):
        data.read(where, row.get("question_id"), _videomme_question, row)
    return data.finish()


def find_videomme_video(root: Path, rel: str) -> Path:
    """lmms-eval's own task: <videoID>.mp4, else .MP4, else .mkv."""
    path = root / rel
    if path.exists():
        return path
    for other in (path.with_suffix(".MP4"), path.with_suffix(".mkv")):
        if other.exists():
            return other
    return path


def _padding(option) -> bool:
    return option is None or str(option).strip() == "N/A"


def _longvideobench_question(row: dict, data: BenchmarkData) -> Question:
    if "option0" in row:
        options = [row[f"option{k}"] for k in range(5) if f"option{k}" in row]
    else:
        options = _as_list(row["candidates"], "candidates")
    given = len(options)
    while options and _padding(options[-1]):
        options.pop()
    if any(_padding(o) for o in options):
        raise RecordError("'N/A' between real options", repr(options))
    group, category = str(row["duration_group"]), str(row["question_category"])
    question = Question(question_id=row["id"], benchmark="longvideobench", video=f"videos/{row['video_path']}",
                        question=row["question"], options=options,
                        answer_index=as_int(row["correct_choice"], "correct_choice"), category=category, source=group,
                        facets={"duration_group": group, "question_category": category})
    if len(options) < given:
        data.note(PADDING_DROPPED, question.question_id)
    return question


def load_longvideobench(source: Path | None) -> BenchmarkData:
    """LongVideoBench validation: `option0..4` with unused trailing options "N/A" (dropped, so K is 4 or 5), or
    a `candidates` list; `correct_choice` an index; category = question category, source = duration group."""
    data = BenchmarkData("longvideobench")
    for row, where, _ in annotation_rows(source, LONGVIDEOBENCH):
        data.read(where, row.get("id"), _longvideobench_question, row, data)
    return data.finish()


_OPTION_LINES = re.compile(r"\n\s*\(A\)")


def _mlvu_question(row: dict, question_id: str, file: Path | None, data: BenchmarkData) -> Question | None:
    """A hub record (`task_type`, `video_name`, answer a letter or a candidate's text) or a release record
    (`question_type`, `video` in the folder named as its `file`, answer a candidate's text). Empty candidates are
    dropped and the answer remapped; a record without candidates is open-ended: None (left out)."""
    candidates = row.get("candidates")
    if candidates is None or (hasattr(candidates, "__len__") and len(candidates) == 0):
        data.note(NOT_MULTIPLE_CHOICE, question_id)
        return None
    raw = [str(c) for c in _as_list(candidates, "candidates")]
    kept = [k for k, c in enumerate(raw) if c.strip()]
    options = [raw[k] for k in kept]
    release = "question_type" in row
    answer = str(row["answer"]).strip()
    if not release and len(answer) == 1 and answer.upper() in LETTERS[: len(raw)]:
        position = LETTERS.index(answer.upper())
        if position not in kept:
            raise RecordError("the answer is an empty candidate", f"answer {answer!r} of {raw!r}")
        answer_index = kept.index(position)
    else:
        try:
            answer_index = answer_text(answer, options, "candidates")
        except RecordError as e:  # named with the candidates as the file gives them
            raise RecordError(e.reason, f"answer {answer!r}, candidates {raw!r}") from None
    task_type = str(row["question_type"] if release else row["task_type"])
    task_type = MLVU_RELEASE_TYPES.get(task_type, task_type)
    video = f"{file.stem}/{row['video']}" if release else str(row["video_name"])
    question = _OPTION_LINES.split("\n" + str(row["question"]).strip(), maxsplit=1)[0].strip()
    if len(options) < len(raw):
        data.note(PADDING_DROPPED, question_id)
    return Question(question_id=question_id, benchmark="mlvu", video=video, question=question, options=options,
                    answer_index=answer_index, category=task_type, facets={"task_type": task_type})


def load_mlvu(source: Path | None) -> BenchmarkData:
    """MLVU dev, multiple-choice task types: options = `candidates`; the question text without the "(A) ..."
    lines it repeats them in; category = task type. Ids: the hub copy's `question_id`, else (the release has
    none, or they are missing or repeat) `<file stem>/<record index>` for the release, `<task type>/<video
    stem>/<record index>` for the hub copy."""
    data = BenchmarkData("mlvu")
    rows = annotation_rows(source, MLVU)
    given = [row.get("question_id") for row, _, _ in rows]
    own_ids = all(q not in (None, "") for q in given) and len(set(map(str, given))) == len(given)
    index_in_file: dict[Path | None, int] = {}
    for row, where, path in rows:
        i = index_in_file[path] = index_in_file.get(path, -1) + 1
        if own_ids:
            qid = str(row["question_id"])
        elif "question_type" in row and path is not None:
            qid = f"{path.stem}/{i}"
        else:
            qid = f"{row.get('task_type')}/{Path(str(row.get('video_name'))).stem}/{i}"
        data.read(where, qid, _mlvu_question, row, qid, path, data)
    if not data.questions and not data.unusable:
        raise fail(source if source is not None else MLVU.repo, "no multiple-choice record (none has candidates)")
    return data.finish()
