"""Writers of the benchmarks' official layouts: the one place that knows how a download looks on disk, for the
synthetic fixtures (`visdep fixtures`), the planted-truth demo and the tests.

Each writer is the mirror of a loader: what it writes, the loader reads back as the questions it was given. A
writer takes the records as the official files hold them (one small dataclass per format, or the hub dataset's
rows) and, optionally, the clips: {path relative to the root: frames (T, H, W, 3) uint8}.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmms_eval_tasks.records import LETTERS
from lmms_eval_tasks.traffic import (
    MMAU_CAP,
    MMAU_DADA,
    MMAU_DADA_COLUMNS,
    TRAFFICQA_FILE,
    TRAFFICQA_HEADER,
    VRU_SOURCES,
    accidentbench_file,
    accidentbench_video,
    cap_frames,
    dada_frames,
    vru_annotation_file,
)


def write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> None:
    """frames (T, H, W, 3) uint8 as an MPEG-4 Part 2 video (every PyAV build has the encoder)."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_frame_folder(folder: Path, frames: np.ndarray, suffix: str, digits: int) -> None:
    """One image per frame, named by its 1-based number with `digits` digits (MM-AU: 000001.jpg, DADA: 0001.png)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for t, frame in enumerate(frames, start=1):
        Image.fromarray(frame).save(folder / f"{t:0{digits}d}{suffix}")


def write_clips(root: Path, clips: Mapping[str, np.ndarray] | None, fps: int = 8) -> None:
    """An mp4 per entry of `clips` (path relative to `root` -> frames)."""
    for rel, frames in (clips or {}).items():
        write_mp4(root / rel, frames, fps=fps)


# --------------------------------------------------------------------------- MM-AU
@dataclass(frozen=True)
class CapQuestion:
    """One record of MM-AU's CAP-DATA test file `ArA label/test.json`."""

    video_id: str
    accident_type: int
    clip: str  # six digits: the clip's frame folder
    question: str
    options: Sequence[str]
    answer_index: int

    @property
    def frames_folder(self) -> str:
        return cap_frames(self.accident_type, self.clip)

    def record(self) -> dict:
        """As the file holds it: options a0..a4, the answer a 0-based index as a string."""
        return {"video_id": self.video_id, "num_option": len(self.options), "qid": "0",
                **{f"a{k}": o for k, o in enumerate(self.options)}, "answer": str(self.answer_index),
                "question": self.question, "video_name": f"{self.accident_type}-{self.clip}"}


@dataclass(frozen=True)
class DadaQuestion:
    """One row of MM-AU's DADA test sheet `testData.xls`."""

    video: int  # written as three digits ("093")
    accident_type: int
    question: str
    options: Sequence[str]  # five
    answer_index: int
    frames: tuple[float, float, float, float]  # abnormal start frame, accident frame, abnormal end frame, total

    @property
    def frames_folder(self) -> str:
        return dada_frames(self.accident_type, f"{self.video:03d}")

    def row(self) -> list:
        """As the sheet holds it: the type and the answer as floats (what Excel stored)."""
        return [f"{self.video:03d}", float(self.accident_type), *self.frames, self.question,
                float(self.answer_index), *self.options]


def write_mmau(root: str | Path, cap: Iterable[CapQuestion], dada: Iterable[DadaQuestion],
               frames: Mapping[str, np.ndarray] | None = None) -> Path:
    """`ArA label/test.json` (CAP) and `Reason_Answering/data/dada/testData.xls` (DADA), and a frame folder per
    entry of `frames` (folder relative to the root -> frames): CAP `000001.jpg`, DADA `0001.png`. Returns the root."""
    import xlwt

    root = Path(root)
    for folder, clip in (frames or {}).items():
        cap_folder = folder.startswith("CAP-DATA/")
        write_frame_folder(root / folder, clip, ".jpg" if cap_folder else ".png", 6 if cap_folder else 4)
    (root / MMAU_CAP).parent.mkdir(parents=True, exist_ok=True)
    (root / MMAU_CAP).write_text(json.dumps([q.record() for q in cap], indent=1))
    book = xlwt.Workbook()
    sheet = book.add_sheet("Sheet1")
    for c, h in enumerate(MMAU_DADA_COLUMNS):
        sheet.write(0, c, h)
    for r, q in enumerate(dada, start=1):
        for c, v in enumerate(q.row()):
            sheet.write(r, c, v)
    (root / MMAU_DADA).parent.mkdir(parents=True, exist_ok=True)
    book.save(str(root / MMAU_DADA))
    return root


# --------------------------------------------------------------------------- VRU-Accident
@dataclass(frozen=True)
class VruQuestion:
    """One question of a VRU-Accident-layout benchmark, as the official annotation file holds it."""

    source: str  # CAP_DATA, DADA_2000, DoTA or MANUAL_DATA
    video: str  # "VRU_3": the file VRU_videos/<source>/VRU_3.mp4
    category: str  # the key under the video: "weather and light", ...
    question: str
    options: Sequence[str]
    answer_index: int
    options_text: str | None = None  # the official string where it is not "A. x, B. y, ..." (broken spacings)

    @property
    def question_id(self) -> str:
        """The id `load_vru_accident` gives it."""
        return f"{self.source}/{self.video}/{self.category}"

    @property
    def video_path(self) -> str:
        """The video, relative to the root."""
        return f"VRU_videos/{self.source}/{self.video}.mp4"


def write_vru_accident(root: str | Path, questions: Iterable[VruQuestion],
                       clips: Mapping[str, np.ndarray] | None = None, fps: int = 8) -> Path:
    """`MetaData/<SRC>/<SRC>_VQA_annotation.json` for the four sources (a dict keyed by "./<video path>", then by
    category, each {"question", "options": "A. x, B. y, ...", "GT": letter}), and an mp4 per entry of `clips`
    (video path relative to the root -> frames). Sources without questions get an empty file, as the loader reads
    all four. Returns the root."""
    root = Path(root)
    annotations: dict[str, dict[str, dict]] = {src: {} for src in VRU_SOURCES}
    for q in questions:
        if q.source not in annotations:
            raise ValueError(f"unknown VRU-Accident source {q.source!r}; expected one of {', '.join(VRU_SOURCES)}")
        text = q.options_text or ", ".join(f"{LETTERS[k]}. {o}" for k, o in enumerate(q.options))
        entry = annotations[q.source].setdefault(f"./{q.video_path}", {})
        entry[q.category] = {"question": q.question, "options": text, "GT": LETTERS[q.answer_index]}
    for src, data in annotations.items():
        path = root / vru_annotation_file(src)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
    write_clips(root, clips, fps)
    return root


# --------------------------------------------------------------------------- SUTD-TrafficQA
@dataclass(frozen=True)
class TrafficQaRecord:
    """One line of SUTD-TrafficQA's `R2_test.jsonl` (a JSON list in the header's order)."""

    record_id: int
    vid_id: int
    vid_filename: str
    perspective: int
    q_body: str
    q_type: str  # U, A, F, R, C or I
    options: Sequence[str]  # four, "" where padded
    answer: int  # index into the padded options

    def row(self) -> list:
        return [self.record_id, self.vid_id, self.vid_filename, self.perspective, self.q_body, self.q_type,
                *self.options, self.answer]


def write_trafficqa(root: str | Path, records: Iterable[TrafficQaRecord],
                    clips: Mapping[str, np.ndarray] | None = None) -> Path:
    """`annotations/R2_test.jsonl`: the header line, then one JSON list per record; videos under `raw_videos/`."""
    root = Path(root)
    lines = [json.dumps(TRAFFICQA_HEADER)] + [json.dumps(r.row()) for r in records]
    (root / TRAFFICQA_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / TRAFFICQA_FILE).write_text("\n".join(lines) + "\n")
    write_clips(root, clips)
    return root


# --------------------------------------------------------------------------- AccidentBench
@dataclass(frozen=True)
class AccidentBenchQuestion:
    """One record of an AccidentBench land file `land_space/<length>/<level>/<reasoning_style>.json`."""

    length: str
    level: str
    id: int
    dataset: str
    scene_name: str  # without extension: the video videos/<scene_name>.mp4
    reasoning_style: str
    question: str
    ground_truth: str  # the letter an option carries
    options: Sequence[str]  # as written: shuffled, each with its own letter ("E. [0,1]")

    @property
    def video_path(self) -> str:
        return accidentbench_video(self.scene_name)

    def record(self) -> dict:
        return {"id": self.id, "dataset": self.dataset, "scene_name": self.scene_name,
                "reasoning_style": self.reasoning_style, "question": self.question,
                "ground_truth": self.ground_truth, "options": list(self.options)}


def write_accidentbench(root: str | Path, questions: Iterable[AccidentBenchQuestion],
                        clips: Mapping[str, np.ndarray] | None = None) -> Path:
    """One JSON list per (length, level, reasoning style) file, in the questions' order; videos under `videos/`."""
    root = Path(root)
    files: dict[Path, list[dict]] = {}
    for q in questions:
        files.setdefault(accidentbench_file(q.length, q.level, q.reasoning_style), []).append(q.record())
    for rel, rows in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(rows, indent=1))
    write_clips(root, clips)
    return root


# --------------------------------------------------------------------------- general VideoQA
# Where each hub dataset's split lies in its repository (a local copy keeps these paths).
HUB_SPLIT_FILES = {"videomme": Path("videomme") / "test-00000-of-00001.parquet",
                   "longvideobench": Path("validation-00000-of-00001.parquet"),
                   "mlvu": Path("mlvu") / "test-00000-of-00001.parquet"}


def write_hub_split(annotations: str | Path, benchmark: str, rows: Sequence[Mapping]) -> Path:
    """A general benchmark's split as its Hugging Face dataset repository holds it (a parquet file of the rows);
    returns the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(annotations) / HUB_SPLIT_FILES[benchmark]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), path)
    return path


def write_mlvu_release(folder: str | Path, files: Mapping[str, Sequence[Mapping]]) -> Path:
    """The MLVU release's `data/` folder: {file stem ('1_plotQA'): records} as JSON lists (indent 4, as published).
    Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stem, rows in files.items():
        (folder / f"{stem}.json").write_text(json.dumps([dict(r) for r in rows], indent=4))
    return folder
