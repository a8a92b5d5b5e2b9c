"""Readers of the four traffic benchmarks' official annotation files.

Each loader reads a benchmark exactly as its owners distribute it (one root folder, named by an
environment variable) and yields *normalized questions*::

    {"question_id": str,      # stable and unique within the benchmark
     "benchmark": str,        # "mmau", "vru_accident", "trafficqa", "accidentbench"
     "video": str,            # path relative to the root: an mp4 file or a frame folder
     "question": str,
     "options": list[str],    # K non-empty option texts in presentation order
     "answer_index": int,     # 0-based index into options
     "category": str | None,  # reasoning type / question category
     "source": str}           # sub-dataset (CAP, DADA, DoTA, ...)

Only annotation files are read: no video has to exist for a loader to succeed. The module
imports nothing heavy (no torch, no lmms-eval) so metrics and the test-set stress test can use it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LETTERS = string.ascii_uppercase


class BenchmarkDataError(ValueError):
    """A benchmark root, file or record that cannot be read as the official format."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    env_var: str
    layout: str  # what the root must contain, shown in every data error
    load: Callable[[Path], list[dict]]
    categories: tuple[str, ...] = ()


# --------------------------------------------------------------------------- helpers
def _fail(path: Path | str, message: str) -> BenchmarkDataError:
    return BenchmarkDataError(f"{path}: {message}")


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise _fail(path, f"not valid JSON ({e})") from e


def _record(qid, benchmark, video, question, options, answer_index, category, source, where) -> dict:
    """Validate one normalized question; `where` names the file and record for errors."""
    options = [str(o).strip() for o in options]
    if len(options) < 2:
        raise BenchmarkDataError(f"{where}: needs at least 2 options, got {options!r}")
    if any(not o for o in options):
        raise BenchmarkDataError(f"{where}: empty option text in {options!r}")
    if not isinstance(answer_index, int) or not 0 <= answer_index < len(options):
        raise BenchmarkDataError(f"{where}: answer index {answer_index!r} outside 0..{len(options) - 1}")
    if not str(question).strip():
        raise BenchmarkDataError(f"{where}: empty question")
    return {"question_id": str(qid), "benchmark": benchmark, "video": str(video), "question": str(question).strip(),
            "options": options, "answer_index": answer_index, "category": category, "source": source}


def _check_unique(records: list[dict], root: Path) -> list[dict]:
    seen: set[str] = set()
    for r in records:
        if r["question_id"] in seen:
            raise _fail(root, f"duplicate question_id {r['question_id']!r}")
        seen.add(r["question_id"])
    return records


def _as_int(value, where: str, field: str) -> int:
    """Official files store indices as int, '3', 3.0 or '3.0'."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BenchmarkDataError(f"{where}: field {field!r} is not a number: {value!r}") from None
    if f != int(f):
        raise BenchmarkDataError(f"{where}: field {field!r} is not a whole number: {value!r}")
    return int(f)


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
    rows = _read_json(cap_path)
    if not isinstance(rows, list):
        raise _fail(cap_path, "expected a JSON list of question records")
    for i, row in enumerate(rows):
        where = f"{cap_path} record {i}"
        try:
            n = int(row.get("num_option", 5))
            options = [row[f"a{k}"] for k in range(n)]
            acc_type, clip = row["video_name"].split("-")
            answer = _as_int(row["answer"], where, "answer")
            video = f"CAP-DATA/{cap_group(int(acc_type))}/{int(acc_type)}/{clip}/images"
            records.append(_record(f"cap-{row['video_id']}", "mmau", video, row["question"], options, answer,
                                   None, "CAP", where))
        except (KeyError, AttributeError, TypeError, ValueError) as e:
            if isinstance(e, BenchmarkDataError):
                raise
            raise BenchmarkDataError(f"{where}: malformed record ({type(e).__name__}: {e}): {row!r}") from e

    dada_path = root / MMAU_DADA
    if not dada_path.is_file():
        raise _fail(dada_path, "missing (DADA part of the MM-AU test set)")
    import xlrd  # only MM-AU needs it

    try:
        sheet = xlrd.open_workbook(dada_path).sheet_by_index(0)
    except xlrd.XLRDError as e:
        raise _fail(dada_path, f"not a readable .xls workbook ({e})") from e
    header = [str(h).strip() for h in sheet.row_values(0)]
    need = ["video", "type", "question", "answer", "a0", "a1", "a2", "a3", "a4"]
    missing = [h for h in need if h not in header]
    if missing:
        raise _fail(dada_path, f"missing columns {missing}; header is {header}")
    col = {h: header.index(h) for h in need}
    for r in range(1, sheet.nrows):
        values = sheet.row_values(r)
        where = f"{dada_path} row {r + 1}"
        video_cell = values[col["video"]]
        video_num = _as_int(video_cell, where, "video")  # "093" as text, or 93.0 where Excel ate the zeros
        acc_type = _as_int(values[col["type"]], where, "type")
        answer = _as_int(values[col["answer"]], where, "answer")
        options = [values[col[f"a{k}"]] for k in range(5)]
        vid = f"{video_num:03d}"
        records.append(_record(f"dada-{acc_type}-{vid}", "mmau", f"DADA-DATA/{acc_type}/{vid}/images",
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
            raise _fail(path, f"missing (VRU-Accident annotations of {src})")
        data = _read_json(path)
        if not isinstance(data, dict):
            raise _fail(path, "expected a JSON object keyed by video path")
        for video_key, questions in data.items():
            rel = video_key[2:] if video_key.startswith("./") else video_key
            if not isinstance(questions, dict):
                raise _fail(path, f"video {video_key!r}: expected an object keyed by category")
            for category, q in questions.items():
                where = f"{path} video {video_key!r} category {category!r}"
                try:
                    options = split_lettered_options(q["options"], 4, where)
                    gt = str(q["GT"]).strip().rstrip(".").upper()
                    if gt not in LETTERS[:4]:
                        raise BenchmarkDataError(f"{where}: GT {q['GT']!r} is not one of A-D")
                    stem = Path(rel).with_suffix("").as_posix().removeprefix("VRU_videos/")
                    records.append(_record(f"{stem}/{category}", "vru_accident", rel, q["question"], options,
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
    raise _fail(root / TRAFFICQA_FILE, "missing (also looked for R2_test.jsonl at the root)")


def load_trafficqa(root: Path) -> list[dict]:
    """SUTD-TrafficQA `R2_test.jsonl`: each line a JSON list, the first line the header.

    Questions with fewer real options are padded with "" at random positions: those are dropped
    and the answer index remapped (K becomes 2 or 3)."""
    path = _trafficqa_file(root)
    records = []
    with open(path, encoding="utf-8") as f:
        lines = [(i + 1, line) for i, line in enumerate(f) if line.strip()]
    if not lines:
        raise _fail(path, "empty file")
    try:
        header = json.loads(lines[0][1])
    except json.JSONDecodeError as e:
        raise _fail(path, f"line 1 (header) is not JSON ({e})") from e
    if header != _TRAFFICQA_HEADER:
        raise _fail(path, f"unexpected header {header}; expected {_TRAFFICQA_HEADER}")
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
        answer = _as_int(row[col["answer"]], where, "answer")
        if not 0 <= answer < 4 or not str(raw[answer]).strip():
            raise BenchmarkDataError(f"{where}: answer {answer} points at an empty or missing option in {raw!r}")
        kept = [k for k, o in enumerate(raw) if str(o).strip()]
        q_type = str(row[col["q_type"]]).strip()
        if q_type not in TRAFFICQA_TYPES:
            raise BenchmarkDataError(f"{where}: unknown q_type {q_type!r} (expected one of {list(TRAFFICQA_TYPES)})")
        records.append(_record(f"trafficqa-{row[col['record_id']]}", "trafficqa",
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
        raise _fail(root / ACCIDENTBENCH_DOMAIN, "no <length>/<level>/<style>.json annotation file found")
    for path in present:
        length, level = path.parts[-3], path.parts[-2]
        rows = _read_json(path)
        if not isinstance(rows, list):
            raise _fail(path, "expected a JSON list of question records")
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
                records.append(_record(f"{length}/{level}/{path.stem}/{row['id']}", "accidentbench", video,
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
        load_mmau),
    "vru_accident": Benchmark(
        "vru_accident", "VRU_ACCIDENT_ROOT",
        "the VRU-Accident download: 'MetaData/<SRC>/<SRC>_VQA_annotation.json' for SRC in "
        f"{', '.join(VRU_SOURCES)}, videos in 'VRU_videos/<SRC>/VRU_<n>.mp4'",
        load_vru_accident, VRU_CATEGORIES),
    "trafficqa": Benchmark(
        "trafficqa", "TRAFFICQA_ROOT",
        "the SUTD-TrafficQA download: 'annotations/R2_test.jsonl' (or 'R2_test.jsonl'), videos in "
        "'raw_videos/<vid_filename>'",
        load_trafficqa, tuple(TRAFFICQA_TYPES.values())),
    "accidentbench": Benchmark(
        "accidentbench", "ACCIDENTBENCH_ROOT",
        "the AccidentBench download: 'land_space/{short,medium,long}/{easy,medium,hard}/<reasoning_style>.json', "
        "videos in 'videos/<scene_name>.mp4'",
        load_accidentbench, ACCIDENTBENCH_STYLES),
}


def benchmark_root(name: str, root: str | os.PathLike | None = None) -> Path:
    """The root folder of a benchmark: `root` if given, else its environment variable."""
    bench = get_benchmark(name)
    if root is None:
        value = os.environ.get(bench.env_var)
        if not value:
            raise BenchmarkDataError(
                f"{bench.env_var} is not set. Point it at {bench.layout}, e.g. export {bench.env_var}=/data/{name}")
        root = value
    path = Path(root).expanduser()
    if not path.is_dir():
        raise BenchmarkDataError(f"{bench.env_var}={root}: not a directory. Expected {bench.layout}")
    return path


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


def load_benchmark(name: str, root: str | os.PathLike | None = None) -> list[dict]:
    """All normalized questions of benchmark `name` from `root` (default: its environment variable).

    Raises BenchmarkDataError naming the variable, the path tried and the layout expected."""
    bench = get_benchmark(name)
    path = benchmark_root(name, root)
    try:
        records = bench.load(path)
    except FileNotFoundError as e:
        raise BenchmarkDataError(
            f"{bench.env_var}={path}: {e.filename} not found. Expected {bench.layout}") from e
    except BenchmarkDataError as e:
        raise BenchmarkDataError(f"{bench.env_var}={path}: {e}. Expected {bench.layout}") from e
    if not records:
        raise BenchmarkDataError(f"{bench.env_var}={path}: no questions found. Expected {bench.layout}")
    return _check_unique(records, path)
