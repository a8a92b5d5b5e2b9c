"""Readers of the four traffic benchmarks' official annotation files (MM-AU, VRU-Accident, SUTD-TrafficQA,
AccidentBench), exactly as their owners distribute them, and MM-AU's video lookup.

Each reader takes the download's root and returns every record as a question or as unusable
(`lmms_eval_tasks.unusable.BenchmarkData`); a question's `video` is relative to that root. A file that is missing or
not in the official format is an error naming it. Only annotation files are read: no video has to exist.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.reading import FileReadError, decode, parse_json, read_bytes, read_json
from lmms_eval_tasks.records import LETTERS, BenchmarkDataError, Question, RecordError, as_int, fail
from lmms_eval_tasks.unusable import BenchmarkData, Unusable

# --------------------------------------------------------------------------- MM-AU
MMAU_CAP = Path("ArA label") / "test.json"
MMAU_DADA = Path("Reason_Answering") / "data" / "dada" / "testData.xls"
MMAU_DADA_COLUMNS = ("video", "type", "abnormal start frame", "accident frame", "abnormal end frame", "total frames",
                     "question", "answer", "a0", "a1", "a2", "a3", "a4")
# CAP-DATA frame folders are grouped by accident type in these official archive folders.
_CAP_GROUPS = ((1, 10, "1-10"), (11, 11, "11"), (12, 42, "12-42"), (43, 43, "43"), (44, 62, "44-62"))


def cap_group(accident_type: int) -> str:
    for lo, hi, name in _CAP_GROUPS:
        if lo <= accident_type <= hi:
            return name
    raise RecordError("the accident type is in no official CAP group folder", str(accident_type))


def cap_frames(accident_type: int, clip: str) -> str:
    """A CAP clip's frame folder, relative to the root."""
    return f"CAP-DATA/{cap_group(accident_type)}/{accident_type}/{clip}/images"


def dada_frames(accident_type: int, video: str) -> str:
    """A DADA clip's frame folder (video number as three digits), relative to the root."""
    return f"DADA-DATA/{accident_type}/{video}/images"


def _cap_question(row: dict) -> Question:
    acc_type, clip = row["video_name"].split("-")
    options = [row[f"a{k}"] for k in range(int(row.get("num_option", 5)))]
    return Question(question_id=f"cap-{row['video_id']}", benchmark="mmau", video=cap_frames(int(acc_type), clip),
                    question=row["question"], options=options, answer_index=as_int(row["answer"], "answer"),
                    source="CAP")


def _dada_question(values: list, col: dict[str, int]) -> Question:
    video = f"{as_int(values[col['video']], 'video'):03d}"  # "093" as text, or 93.0 where Excel ate the zeros
    acc_type = as_int(values[col["type"]], "type")
    return Question(question_id=f"dada-{acc_type}-{video}", benchmark="mmau", video=dada_frames(acc_type, video),
                    question=values[col["question"]], options=[values[col[f"a{k}"]] for k in range(5)],
                    answer_index=as_int(values[col["answer"]], "answer"), source="DADA")


def load_mmau(root: Path) -> BenchmarkData:
    """MM-AU test = CAP-DATA `ArA label/test.json` (1,953) + DADA `testData.xls` (500).

    CAP answers are 0-based indices as strings; DADA's type/answer cells are floats and its video
    numbers repeat across accident types, so DADA ids are `dada-<type>-<video>`."""
    data = BenchmarkData("mmau")
    cap_path = root / MMAU_CAP
    rows = read_json(cap_path, "annotations", error=BenchmarkDataError)
    if not isinstance(rows, list):
        raise fail(cap_path, "expected a JSON list of question records")
    for i, row in enumerate(rows):
        qid = f"cap-{row['video_id']}" if isinstance(row, dict) and "video_id" in row else None
        data.read(f"{cap_path} record {i}", qid, _cap_question, row)

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
        data.read(f"{dada_path} row {r + 1}", None, _dada_question, sheet.row_values(r), col)
    return data.finish()


def find_mmau_frames(root: Path, rel: str) -> Path:
    """A frame folder under the root. The archives unpack with one more or one fewer folder level depending on the
    tool used: where `rel` is not there, the folder with the same last levels is looked for."""
    path = root / rel
    if path.exists():
        return path
    parts = Path(rel).parts  # CAP-DATA/<group>/<type>/<id>/images or DADA-DATA/<type>/<id>/images
    tail = Path(*parts[-3:]) if parts[0] == "CAP-DATA" else Path(*parts[1:])
    for candidate in sorted(root.glob(f"{parts[0]}/**/{tail.as_posix()}")):
        return candidate
    return path


# --------------------------------------------------------------------------- VRU-Accident
VRU_SOURCES = ("CAP_DATA", "DADA_2000", "DoTA", "MANUAL_DATA")
VRU_CATEGORIES = ("weather and light", "location", "road type", "accident type", "accident reason",
                  "prevention method")
_MARKER = re.compile(r"(?:^|(?<=[\s,.]))([A-Z])\.")
_STRAY_MARKER = re.compile(r"(^|[\s,.])[A-Z]\.\s")
STRAY_MARKER_KEPT = "a stray letter marker kept inside an option's text"


def stray_marker(options: list[str]) -> bool:
    """Whether a split option still holds a letter marker ('... pedestrians. B. The truck ...')."""
    return any(_STRAY_MARKER.search(o) for o in options)


def vru_annotation_file(source: str) -> Path:
    return Path("MetaData") / source / f"{source}_VQA_annotation.json"


def split_lettered_options(text: str, n: int) -> list[str]:
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
        raise RecordError("the option markers are not found in order",
                          f"{', '.join(LETTERS[:n])} in {text!r}")
    out = []
    for k, m in enumerate(best):
        end = best[k + 1].start() if k + 1 < n else len(text)
        out.append(text[m.end():end].strip().rstrip(",").strip())
    return out


def _vru_question(q: dict, question_id: str, video: str, category: str, source: str,
                  data: BenchmarkData) -> Question:
    gt = str(q["GT"]).strip().rstrip(".").upper()
    if gt not in LETTERS[:4]:
        raise RecordError("GT is not one of A-D", repr(q["GT"]))
    options = split_lettered_options(q["options"], 4)
    if stray_marker(options):
        data.note(STRAY_MARKER_KEPT, question_id)
    return Question(question_id=question_id, benchmark="vru_accident", video=video, question=q["question"],
                    options=options, answer_index=LETTERS.index(gt), category=category, source=source)


def load_vru_accident(root: Path) -> BenchmarkData:
    """VRU-Accident: `MetaData/<SRC>/<SRC>_VQA_annotation.json`, six questions per video, GT a letter."""
    data = BenchmarkData("vru_accident")
    for src in VRU_SOURCES:
        path = root / vru_annotation_file(src)
        if not path.is_file():
            raise fail(path, f"missing (VRU-Accident annotations of {src})")
        annotations = read_json(path, "annotations", error=BenchmarkDataError)
        if not isinstance(annotations, dict):
            raise fail(path, "expected a JSON object keyed by video path")
        for video_key, questions in annotations.items():
            video = video_key[2:] if video_key.startswith("./") else video_key
            if not isinstance(questions, dict):
                raise fail(path, f"video {video_key!r}: expected an object keyed by category")
            stem = Path(video).with_suffix("").as_posix().removeprefix("VRU_videos/")
            for category, q in questions.items():
                qid = f"{stem}/{category}"
                data.read(f"{path} video {video_key!r} category {category!r}", qid, _vru_question, q, qid, video,
                          category, src, data)
    return data.finish()


# --------------------------------------------------------------------------- SUTD-TrafficQA
TRAFFICQA_FILE = Path("annotations") / "R2_test.jsonl"
TRAFFICQA_HEADER = ["record_id", "vid_id", "vid_filename", "perspective", "q_body", "q_type", "option0", "option1",
                    "option2", "option3", "answer"]
TRAFFICQA_TYPES = {"U": "basic understanding", "A": "attribution", "F": "event forecasting",
                   "R": "reverse reasoning", "C": "counterfactual inference", "I": "introspection"}
PADDING_DROPPED = "padding options dropped (answer remapped)"


def trafficqa_file(root: Path) -> Path:
    # The request-form download unpacks R2_test.jsonl either at the root or under annotations/.
    for candidate in (root / TRAFFICQA_FILE, root / "R2_test.jsonl"):
        if candidate.is_file():
            return candidate
    raise fail(root / TRAFFICQA_FILE, "missing (also looked for R2_test.jsonl at the root)")


def _trafficqa_question(row, data: BenchmarkData) -> Question:
    if not isinstance(row, list) or len(row) != len(TRAFFICQA_HEADER):
        raise RecordError(f"not a list of {len(TRAFFICQA_HEADER)} fields", repr(row))
    col = dict(zip(TRAFFICQA_HEADER, row, strict=True))
    raw = [col[f"option{k}"] for k in range(4)]
    answer = as_int(col["answer"], "answer")
    if not 0 <= answer < 4 or not str(raw[answer]).strip():
        raise RecordError("the answer points at an empty or missing option", f"answer {answer} of {raw!r}")
    q_type = str(col["q_type"]).strip()
    if q_type not in TRAFFICQA_TYPES:
        raise RecordError("unknown q_type", f"{q_type!r} (expected one of {list(TRAFFICQA_TYPES)})")
    kept = [k for k, o in enumerate(raw) if str(o).strip()]
    question = Question(question_id=f"trafficqa-{col['record_id']}", benchmark="trafficqa",
                        video=f"raw_videos/{col['vid_filename']}", question=col["q_body"],
                        options=[raw[k] for k in kept], answer_index=kept.index(answer),
                        category=TRAFFICQA_TYPES[q_type], source=f"perspective-{col['perspective']}")
    if len(kept) < len(raw):
        data.note(PADDING_DROPPED, question.question_id)
    return question


def read_trafficqa_file(path: Path) -> BenchmarkData:
    """A file in `R2_test.jsonl`'s format: each line a JSON list, the first line the header.

    Questions with fewer real options are padded with "" at random positions: those are dropped and the answer
    index remapped (K becomes 2 or 3)."""
    data = BenchmarkData("trafficqa")
    text = decode(read_bytes(path, "annotations", error=BenchmarkDataError), path, error=BenchmarkDataError)
    lines = [(i + 1, line) for i, line in enumerate(text.split("\n")) if line.strip()]
    if not lines:
        raise fail(path, "empty file")
    header = parse_json(lines[0][1], f"{path} line {lines[0][0]} (the header)", error=BenchmarkDataError)
    if header != TRAFFICQA_HEADER:
        raise fail(path, f"unexpected header {excerpt(header)}; expected {TRAFFICQA_HEADER}")
    for lineno, line in lines[1:]:
        where = f"{path} line {lineno}"
        try:
            row = parse_json(line, where)
        except FileReadError as e:
            data.unusable.append(Unusable(where, "the line is not JSON", None, str(e).removeprefix(f"{where}: ")))
            continue
        qid = f"trafficqa-{row[0]}" if isinstance(row, list) and row else None
        data.read(where, qid, _trafficqa_question, row, data)
    return data.finish()


def load_trafficqa(root: Path) -> BenchmarkData:
    """SUTD-TrafficQA `R2_test.jsonl` (6,075 questions)."""
    return read_trafficqa_file(trafficqa_file(root))


# --------------------------------------------------------------------------- AccidentBench
ACCIDENTBENCH_DOMAIN = "land_space"
ACCIDENTBENCH_LENGTHS = ("short", "medium", "long")
ACCIDENTBENCH_LEVELS = ("easy", "medium", "hard")
ACCIDENTBENCH_STYLES = ("temporal_causal_reasoning", "spatial_reasoning", "intent_goal_reasoning")
_EMBEDDED_LETTER = re.compile(r"^\s*([A-La-l])\s*[.)]\s*(.*)$", re.S)


def accidentbench_file(length: str, level: str, style: str) -> Path:
    return Path(ACCIDENTBENCH_DOMAIN) / length / level / f"{style}.json"


def accidentbench_video(scene_name: str) -> str:
    """Land scene names carry no extension ('000002' -> videos/000002.mp4)."""
    return f"videos/{scene_name}" if scene_name.endswith(".mp4") else f"videos/{scene_name}.mp4"


def _accidentbench_question(row: dict, path: Path) -> Question:
    lettered = {}
    for opt in row["options"]:
        m = _EMBEDDED_LETTER.match(str(opt))
        if m is None:
            raise RecordError("an option carries no letter", repr(opt))
        letter = m.group(1).upper()
        if letter in lettered:
            raise RecordError("an option letter appears twice", f"{letter} in {row['options']!r}")
        lettered[letter] = m.group(2)
    letters = sorted(lettered)
    if letters != list(LETTERS[: len(letters)]):
        raise RecordError("the option letters are not consecutive from A", str(letters))
    gt = str(row["ground_truth"]).strip().rstrip(".").upper()
    if gt not in lettered:
        raise RecordError("ground_truth names no option", repr(row["ground_truth"]))
    length, level = path.parts[-3], path.parts[-2]
    return Question(question_id=f"{length}/{level}/{path.stem}/{row['id']}", benchmark="accidentbench",
                    video=accidentbench_video(str(row["scene_name"])), question=row["question"],
                    options=[lettered[k] for k in letters], answer_index=letters.index(gt),
                    category=row.get("reasoning_style") or path.stem, source=f"{length}/{level}")


def load_accidentbench(root: Path) -> BenchmarkData:
    """AccidentBench land domain: `land_space/<length>/<level>/<style>.json`.

    Options are shuffled and carry their own letter ("E. [0,1]"); `ground_truth` names that letter.
    They are re-ordered by letter (upper or lower case) and presented without it."""
    data = BenchmarkData("accidentbench")
    files = [root / accidentbench_file(ln, lv, st) for ln in ACCIDENTBENCH_LENGTHS for lv in ACCIDENTBENCH_LEVELS
             for st in ACCIDENTBENCH_STYLES]
    present = [p for p in files if p.is_file()]
    if not present:
        raise fail(root / ACCIDENTBENCH_DOMAIN, "no <length>/<level>/<style>.json annotation file found")
    for path in present:
        rows = read_json(path, "annotations", error=BenchmarkDataError)
        if not isinstance(rows, list):
            raise fail(path, "expected a JSON list of question records")
        for i, row in enumerate(rows):
            qid = (f"{path.parts[-3]}/{path.parts[-2]}/{path.stem}/{row['id']}"
                   if isinstance(row, dict) and "id" in row else None)
            data.read(f"{path} record {i}", qid, _accidentbench_question, row, path)
    return data.finish()
