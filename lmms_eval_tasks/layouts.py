"""Writers of the benchmarks' official layouts: the one place that knows how a download looks on disk, for the
synthetic fixtures (`visdep fixtures`), the planted-truth demo and the tests.

Each writer is the mirror of a loader: what it writes, the loader reads back as the questions it was given.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmms_eval_tasks.loaders import VRU_SOURCES
from lmms_eval_tasks.records import LETTERS


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
        path = root / "MetaData" / src / f"{src}_VQA_annotation.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
    for video_path, frames in (clips or {}).items():
        write_mp4(root / video_path, frames, fps=fps)
    return root
