"""Readers of the four traffic benchmarks' official annotation files, and the registry of every benchmark.

Each traffic loader reads a benchmark exactly as its owners distribute it (one root folder, named by an
environment variable) and yields normalized questions (`lmms_eval_tasks.records`), whose `video` is a
path relative to that root. The general VideoQA benchmarks (`lmms_eval_tasks.general`) are read as
lmms-eval's own tasks read them, from the Hugging Face dataset or a local copy.

Only annotation files are read: no video has to exist for a loader to succeed. The module
imports nothing heavy (no torch, no lmms-eval) so metrics and the test-set stress test can use it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmms_eval_tasks.general import HubDataset, hub_loaders
from lmms_eval_tasks.records import (  # noqa: F401  (LETTERS, BenchmarkDataError: imported from here elsewhere)
    LETTERS,
    BenchmarkDataError,
    as_int,
    check_unique,
    fail,
    make_record,
    read_json,
)


@dataclass(frozen=True)
class Benchmark:
    name: str
    env_var: str  # the download's root; for a hub benchmark, an optional local copy of the annotations
    layout: str  # what the root must contain, shown in every data error
    load: Callable[[Path | None], list[dict]]
    categories: tuple[str, ...] = ()
    hub: HubDataset | None = None  # general VideoQA: read from the Hugging Face dataset when env_var is unset
    general: bool = False  # tagged visdep_general; the traffic four are visdep_blind / visdep_video
    spec: Path | None = None  # a benchmark described by a spec file (lmms_eval_tasks.spec.register_spec)
    default_root: Path | None = None  # the root when env_var is unset (a spec's root_default)
    display: str = ""  # the name tables and plots show (default: the name)

    @property
    def title(self) -> str:
        return self.display or self.name


# --------------------------------------------------------------------------- MM-AU
MMAU_CAP = Path("ArA label") / "test.json"
MMAU_DADA = Path("Reason_Answering") / "data" / "dada" / "testData.xls"
# CAP-DATA frame folders are grouped by accident type in these official archive folders.
_CAP_GROUPS = ((1, 10, "1-10"), (11, 11, "11"), (12, 42, "12-42"), (43, 43, "43"), (44, 62, "44-62"))


def cap_group(accident_type: int) -> str:
    for lo, hi, name in _CAP_GROUPS:
        if lo <= accident_type <= hi:
            return name
    raise ValueError(f"CAP accident type {accident_type} is in no official group folder")


def load_mmau(root: Path) -> list[dict]:
    """MM-AU test = CAP-DATA `ArA label/test.json` (1,953) + DADA `testData.xls` (500).

    CAP answers are 0-based indices as strings; DADA's type/answer cells are floats and its video
    numbers repeat across accident types, so DADA ids are `dada-<type>-<video>`.
    """
    records = []
    cap_path = root / MMAU_CAP
    rows = read_json(cap_path)
    if not isinstance(rows, list):
        raise fail(cap_path, "expected a JSON list of question records")
    for i, row in enumerate(rows):
        where = f"{cap_path} record {i}"
        try:
            n = int(row.get("num_option", 5))
            options = [row[f"a{k}"] for k in range(n)]
            acc_type, clip = row["video_name"].split("-")
            answer = as_int(row["answer"], where, "answer")
            video = f"CAP-DATA/{cap_group(int(acc_type))}/{int(acc_type)}/{clip}/images"
            records.append(make_record(f"cap-{row['video_id']}", "mmau", video, row["question"], options, answer,
                                   None, "CAP", where))
        except (KeyError, AttributeError, TypeError, ValueError) as e:
            if isinstance(e, BenchmarkDataError):
                raise
            raise BenchmarkDataError(f"{where}: malformed record ({type(e).__name__}: {e}): {row!r}") from e

    dada_path = root / MMAU_DADA
    if not dada_path.is_file():
        raise fail(dada_path, "missing (DADA part of the MM-AU test set)")
    import xlrd  # only MM-AU needs it

    try:
        sheet = xlrd.open_workbook(dada_path).sheet_by_index(0)
    except xlrd.XLRDError as e:
        raise fail(dada_path, f"not a readable .xls workbook ({e})") from e
    header = [str(h).strip() for h in sheet.row_values(0)]
    need = ["video", "type", "question", "answer", "a0", "a1", "a2", "a3", "a4"]
    missing = [h for h in need if h not in header]
    if missing:
        raise fail(dada_path, f"missing columns {missing}; header is {header}")
    col = {h: header.index(h) for h in need}
    for r in range(1, sheet.nrows):
        values = sheet.row_values(r)
        where = f"{dada_path} row {r + 1}"
        video_cell = values[col["video"]]
        video_num = as_int(video_cell, where, "video")  # "093" as text, or 93.0 where Excel ate the zeros
        acc_type = as_int(values[col["type"]], where, "type")
        answer = as_int(values[col["answer"]], where, "answer")
        options = [values[col[f"a{k}"]] for k in range(5)]
        vid = f"{video_num:03d}"
        records.append(make_record(f"dada-{acc_type}-{vid}", "mmau", f"DADA-DATA/{acc_type}/{vid}/images",
                               values[col["question"]], options, answer, None, "DADA", where))
    return records


# --------------------------------------------------------------------------- VRU-Accident
VRU_SOURCES = ("CAP_DATA", "DADA_2000", "DoTA", "MANUAL_DATA")
VRU_CATEGORIES = ("weather and light", "location", "road type", "accident type", "accident reason",
                  "prevention method")


_MARKER = re.compile(r"(?:^|(?<=[\s,.]))([A-Z])\.")


def split_lettered_options(text: str, n: int, where: str) -> list[str]:
    """Split 'A. x, B. y, C. z, D. w' into n option texts at the letter markers.

    Not at commas: option texts contain commas, and 58 official strings read 'B.Cyclist' or
    '.,  B.'. Eleven strings also hold a stray extra marker ('... pedestrians. B. The truck ...,
    B. Bus ...'); of the marker sequences spelling A, B, C, ... in order, the one with the most
    markers after the official ', ' joiner wins, and the stray marker stays inside an option text."""
    marks = [m for m in _MARKER.finditer(text) if m.group(1) in LETTERS[:n]]
    best, best_joined = None, -1
    for combo in itertools.combinations(marks, n):
        if "".join(m.group(1) for m in combo) != LETTERS[:n]:
            continue
        joined = sum(text[: m.start()].rstrip().endswith(",") for m in combo)
        if joined > best_joined:
            best, best_joined = combo, joined
    if best is None:
        raise BenchmarkDataError(f"{where}: option markers {', '.join(LETTERS[:n])} not found in order in {text!r}")
    out = []
    for k, m in enumerate(best):
        end = best[k + 1].start() if k + 1 < n else len(text)
        out.append(text[m.end():end].strip().rstrip(",").strip())
    return out


def load_vru_accident(root: Path) -> list[dict]:
    """VRU-Accident: `MetaData/<SRC>/<SRC>_VQA_annotation.json`, six questions per video, GT a letter."""
    records = []
    for src in VRU_SOURCES:
        path = root / "MetaData" / src / f"{src}_VQA_annotation.json"
        if not path.is_file():
            raise fail(path, f"missing (VRU-Accident annotations of {src})")
        data = read_json(path)
        if not isinstance(data, dict):
            raise fail(path, "expected a JSON object keyed by video path")
        for video_key, questions in data.items():
            rel = video_key[2:] if video_key.startswith("./") else video_key
            if not isinstance(questions, dict):
                raise fail(path, f"video {video_key!r}: expected an object keyed by category")
            for category, q in questions.items():
                where = f"{path} video {video_key!r} category {category!r}"
                try:
                    options = split_lettered_options(q["options"], 4, where)
                    gt = str(q["GT"]).strip().rstrip(".").upper()
                    if gt not in LETTERS[:4]:
                        raise BenchmarkDataError(f"{where}: GT {q['GT']!r} is not one of A-D")
                    stem = Path(rel).with_suffix("").as_posix().removeprefix("VRU_videos/")
                    records.append(make_record(f"{stem}/{category}", "vru_accident", rel, q["question"], options,
                                           LETTERS.index(gt), category, src, where))
                except (KeyError, TypeError, AttributeError) as e:
                    raise BenchmarkDataError(f"{where}: malformed record ({type(e).__name__}: {e}): {q!r}") from e
    return records


# --------------------------------------------------------------------------- SUTD-TrafficQA
TRAFFICQA_FILE = Path("annotations") / "R2_test.jsonl"
TRAFFICQA_TYPES = {"U": "basic understanding", "A": "attribution", "F": "event forecasting",
                   "R": "reverse reasoning", "C": "counterfactual inference", "I": "introspection"}
_TRAFFICQA_HEADER = ["record_id", "vid_id", "vid_filename", "perspective", "q_body", "q_type", "option0", "option1",
                     "option2", "option3", "answer"]


def _trafficqa_file(root: Path) -> Path:
    # The request-form download unpacks R2_test.jsonl either at the root or under annotations/.
    for candidate in (root / TRAFFICQA_FILE, root / "R2_test.jsonl"):
        if candidate.is_file():
            return candidate
    raise fail(root / TRAFFICQA_FILE, "missing (also looked for R2_test.jsonl at the root)")


def load_trafficqa(root: Path) -> list[dict]:
    """SUTD-TrafficQA `R2_test.jsonl`: each line a JSON list, the first line the header.

    Questions with fewer real options are padded with "" at random positions: those are dropped
    and the answer index remapped (K becomes 2 or 3)."""
    path = _trafficqa_file(root)
    records = []
    with open(path, encoding="utf-8") as f:
        lines = [(i + 1, line) for i, line in enumerate(f) if line.strip()]
    if not lines:
        raise fail(path, "empty file")
    try:
        header = json.loads(lines[0][1])
    except json.JSONDecodeError as e:
        raise fail(path, f"line 1 (header) is not JSON ({e})") from e
    if header != _TRAFFICQA_HEADER:
        raise fail(path, f"unexpected header {header}; expected {_TRAFFICQA_HEADER}")
    col = {h: i for i, h in enumerate(header)}
    for lineno, line in lines[1:]:
        where = f"{path} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{where}: not JSON ({e})") from e
        if not isinstance(row, list) or len(row) != len(header):
            raise BenchmarkDataError(f"{where}: expected a list of {len(header)} fields, got {row!r}")
        raw = [row[col[f"option{k}"]] for k in range(4)]
        answer = as_int(row[col["answer"]], where, "answer")
        if not 0 <= answer < 4 or not str(raw[answer]).strip():
            raise BenchmarkDataError(f"{where}: answer {answer} points at an empty or missing option in {raw!r}")
        kept = [k for k, o in enumerate(raw) if str(o).strip()]
        q_type = str(row[col["q_type"]]).strip()
        if q_type not in TRAFFICQA_TYPES:
            raise BenchmarkDataError(f"{where}: unknown q_type {q_type!r} (expected one of {list(TRAFFICQA_TYPES)})")
        records.append(make_record(f"trafficqa-{row[col['record_id']]}", "trafficqa",
                               f"raw_videos/{row[col['vid_filename']]}", row[col["q_body"]], [raw[k] for k in kept],
                               kept.index(answer), TRAFFICQA_TYPES[q_type], f"perspective-{row[col['perspective']]}",
                               where))
    return records


# --------------------------------------------------------------------------- AccidentBench
ACCIDENTBENCH_DOMAIN = "land_space"
ACCIDENTBENCH_LENGTHS = ("short", "medium", "long")
ACCIDENTBENCH_LEVELS = ("easy", "medium", "hard")
ACCIDENTBENCH_STYLES = ("temporal_causal_reasoning", "spatial_reasoning", "intent_goal_reasoning")
_EMBEDDED_LETTER = re.compile(r"^\s*([A-La-l])\s*[.)]\s*(.*)$", re.S)


def load_accidentbench(root: Path) -> list[dict]:
    """AccidentBench land domain: `land_space/<length>/<level>/<style>.json`.

    Options are shuffled and carry their own letter ("E. [0,1]"); `ground_truth` names that letter.
    They are re-ordered by letter (upper or lower case) and presented without it."""
    records = []
    files = [root / ACCIDENTBENCH_DOMAIN / ln / lv / f"{st}.json" for ln in ACCIDENTBENCH_LENGTHS
             for lv in ACCIDENTBENCH_LEVELS for st in ACCIDENTBENCH_STYLES]
    present = [p for p in files if p.is_file()]
    if not present:
        raise fail(root / ACCIDENTBENCH_DOMAIN, "no <length>/<level>/<style>.json annotation file found")
    for path in present:
        length, level = path.parts[-3], path.parts[-2]
        rows = read_json(path)
        if not isinstance(rows, list):
            raise fail(path, "expected a JSON list of question records")
        for i, row in enumerate(rows):
            where = f"{path} record {i}"
            try:
                lettered = {}
                for opt in row["options"]:
                    m = _EMBEDDED_LETTER.match(str(opt))
                    if m is None:
                        raise BenchmarkDataError(f"{where}: option {opt!r} carries no letter")
                    letter = m.group(1).upper()
                    if letter in lettered:
                        raise BenchmarkDataError(f"{where}: letter {letter} appears twice in {row['options']!r}")
                    lettered[letter] = m.group(2)
                letters = sorted(lettered)
                if letters != list(LETTERS[: len(letters)]):
                    raise BenchmarkDataError(f"{where}: option letters {letters} are not A.. consecutive")
                gt = str(row["ground_truth"]).strip().rstrip(".").upper()
                if gt not in lettered:
                    raise BenchmarkDataError(f"{where}: ground_truth {row['ground_truth']!r} names no option")
                scene = str(row["scene_name"])
                video = f"videos/{scene}" if scene.endswith(".mp4") else f"videos/{scene}.mp4"
                style = row.get("reasoning_style") or path.stem
                records.append(make_record(f"{length}/{level}/{path.stem}/{row['id']}", "accidentbench", video,
                                       row["question"], [lettered[k] for k in letters], letters.index(gt), style,
                                       f"{length}/{level}", where))
            except (KeyError, TypeError, AttributeError) as e:
                raise BenchmarkDataError(f"{where}: malformed record ({type(e).__name__}: {e}): {row!r}") from e
    return records


# --------------------------------------------------------------------------- registry
BENCHMARKS: dict[str, Benchmark] = {
    "mmau": Benchmark(
        "mmau", "MMAU_ROOT",
        "the MM-AU download: 'ArA label/test.json' and 'Reason_Answering/data/dada/testData.xls' (annotations), "
        "'CAP-DATA/<group>/<type>/<id>/images/*.jpg' and 'DADA-DATA/<type>/<id>/images/*.png' (frames)",
        load_mmau, display="MM-AU"),
    "vru_accident": Benchmark(
        "vru_accident", "VRU_ACCIDENT_ROOT",
        "the VRU-Accident download: 'MetaData/<SRC>/<SRC>_VQA_annotation.json' for SRC in "
        f"{', '.join(VRU_SOURCES)}, videos in 'VRU_videos/<SRC>/VRU_<n>.mp4'",
        load_vru_accident, VRU_CATEGORIES, display="VRU-Accident"),
    "trafficqa": Benchmark(
        "trafficqa", "TRAFFICQA_ROOT",
        "the SUTD-TrafficQA download: 'annotations/R2_test.jsonl' (or 'R2_test.jsonl'), videos in "
        "'raw_videos/<vid_filename>'",
        load_trafficqa, tuple(TRAFFICQA_TYPES.values()), display="TrafficQA"),
    "accidentbench": Benchmark(
        "accidentbench", "ACCIDENTBENCH_ROOT",
        "the AccidentBench download: 'land_space/{short,medium,long}/{easy,medium,hard}/<reasoning_style>.json', "
        "videos in 'videos/<scene_name>.mp4'",
        load_accidentbench, ACCIDENTBENCH_STYLES, display="AccidentBench"),
}


def _register_general() -> None:
    from lmms_eval_tasks import general

    layouts = {
        "videomme": "a local copy of lmms-eval/Video-MME's test split (videomme/test-00000-of-00001.parquet, a json or "
                    "jsonl of its records, or a save_to_disk folder); videos in $VIDEOMME_VIDEOS or "
                    "$HF_HOME/videomme/data/<videoID>.mp4",
        "longvideobench": "a local copy of longvideobench/LongVideoBench's validation split "
                          "(validation-00000-of-00001.parquet, lvb_val.json, or a save_to_disk folder); videos in "
                          "$LONGVIDEOBENCH_VIDEOS or $HF_HOME/datasets/longvideobench/videos/<video_path>",
        "mlvu": "a local copy of sy1998/MLVU_dev's test split (mlvu/test-00000-of-00001.parquet, a json or jsonl of "
                "its records, or a save_to_disk folder); videos in $MLVU_VIDEOS or $HF_HOME/mlvu/<video_name>",
    }
    categories = {"videomme": general.VIDEOMME_TASK_TYPES, "longvideobench": general.LONGVIDEOBENCH_CATEGORIES,
                  "mlvu": general.MLVU_TASK_TYPES}
    displays = {"videomme": "Video-MME", "longvideobench": "LongVideoBench", "mlvu": "MLVU"}
    for name, (hub, load) in hub_loaders().items():
        BENCHMARKS[name] = Benchmark(name, f"{name.upper()}_ANNOTATIONS", layouts[name], load, categories[name],
                                     hub=hub, general=True, display=displays[name])


_register_general()
TRAFFIC_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if not b.general)
GENERAL_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if b.general)


def benchmark_root(name: str, root: str | os.PathLike | None = None) -> Path | None:
    """The root folder of a benchmark: `root` if given, else its environment variable, else a spec's root_default.
    For a hub benchmark, the local copy of its annotations (a file or folder), or None: the Hugging Face dataset
    (or its cache)."""
    bench = get_benchmark(name)
    if root is None:
        value = os.environ.get(bench.env_var)
        if not value:
            if bench.hub is not None:
                return None
            if bench.default_root is None:
                raise BenchmarkDataError(f"{bench.env_var} is not set. Point it at {bench.layout}, e.g. export "
                                         f"{bench.env_var}=/data/{name}")
            value = bench.default_root
        root = value
    path = Path(root).expanduser()
    if bench.hub is not None:
        if not path.exists():
            raise BenchmarkDataError(f"{bench.env_var}={root}: not found. Expected {bench.layout}")
        return path
    if not path.is_dir():
        raise BenchmarkDataError(f"{bench.env_var}={root}: not a directory. Expected {bench.layout}")
    return path


def video_root(name: str) -> Path:
    """The folder a benchmark's `video` paths are relative to: the download's root (traffic), or where
    lmms-eval's own task keeps the videos, `$<NAME>_VIDEOS` overriding it (general VideoQA)."""
    bench = get_benchmark(name)
    if bench.hub is not None:
        return bench.hub.video_root()
    return benchmark_root(name)


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


def load_benchmark(name: str, root: str | os.PathLike | None = None) -> list[dict]:
    """All normalized questions of benchmark `name` from `root` (default: its environment variable, or for a
    hub benchmark its Hugging Face dataset).

    Raises BenchmarkDataError naming the variable, the path tried and the layout expected."""
    bench = get_benchmark(name)
    path = benchmark_root(name, root)
    origin = f"{bench.env_var}={path}" if path is not None else f"{bench.env_var} unset, so {bench.hub.repo}"
    if root is None and bench.default_root is not None and not os.environ.get(bench.env_var):
        origin = f"{bench.env_var} unset, so the spec's root_default {path}"
    try:
        records = bench.load(path)
    except FileNotFoundError as e:
        raise BenchmarkDataError(f"{origin}: {e.filename} not found. Expected {bench.layout}") from e
    except BenchmarkDataError as e:  # its own class kept (a spec's SpecError)
        raise type(e)(f"{origin}: {e}. Expected {bench.layout}") from e
    if not records:
        raise BenchmarkDataError(f"{origin}: no questions found. Expected {bench.layout}")
    return check_unique(records, path if path is not None else bench.hub.repo)
