"""Whether a question's video opens, and a frame folder's frames: the data side of the videos (the adapters decode
them; `loaders.resolve_video` says where a question's video is).

A benchmark's `video` paths are relative to its video folder: a video file, or a frame folder (MM-AU's
`images/000001.jpg`, DADA's `0001.png`) whose frames are ordered by the number in their names. An upstream task's
twin finds each video through the upstream task (`lmms_eval_tasks.twin`), which may fail for a question: that video
cannot be used either, for the reason it gave.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from lmms_eval_tasks.loaders import get_benchmark, resolve_video
from lmms_eval_tasks.reading import regular_file
from lmms_eval_tasks.records import Question, RecordError
from lmms_eval_tasks.roots import OUTSIDE_ROOT, OutsideRootError, under_root
from lmms_eval_tasks.unusable import Unusable

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")
NOT_FOUND = "the video is not found"
NO_FRAMES = "the frame folder holds no frames"
UNREADABLE = "the video cannot be opened"


class VideoReadError(RuntimeError):
    """A video file or frame folder that cannot be read; the message names it."""


def _frame_number(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    if not digits:
        raise VideoReadError(f"frame file without a frame number: {path}")
    return int(digits[-1])


def frame_files(folder: Path) -> list[Path]:
    """The frames of an image folder (MM-AU `images/000001.jpg`, DADA `0001.png`), ordered by frame number; a frame
    that links out of the folder is refused (`roots.under_root`), as its video would be."""
    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_frame_number)
    if not files:
        raise VideoReadError(f"no {'/'.join(FRAME_SUFFIXES)} frames in folder {folder}")
    for file in files:
        try:
            under_root(folder, file.name, "a frame is not under its frame folder")
        except OutsideRootError as e:
            raise VideoReadError(f"{e.reason}: {e.detail}") from None
    return files


def probe_video(path: Path) -> None:
    """Raise `VideoReadError` unless `path` is a frame folder holding frames, or a file PyAV opens with a video
    stream (its header only: cheap enough to check every video of a benchmark before a run)."""
    if path.is_dir():
        frame_files(path)
        return
    if not path.exists():
        raise VideoReadError(f"not found: {path}")
    regular_file(path, "video", error=VideoReadError)  # a FIFO would keep the decoder waiting for ever
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"no video stream in {path}")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoReadError(f"cannot open {path}: {e}") from e


def video_problems(name: str, questions: Sequence[Question]) -> dict[str, tuple[str, str]]:
    """{video as the annotation names it: (reason, what was found)} over the distinct videos of `questions`: not
    found, an empty or unreadable file, a folder without frames (each opened, its header read), or a video its
    source cannot find (the source's reason)."""
    problems = {}
    videos = {}
    for q in questions:  # each video through the first question that asks about it
        videos.setdefault(q.video, q.question_id)
    for rel in tqdm(sorted(videos), desc=f"visdep: checking the {name} videos", unit="video",
                    disable=len(videos) < 500):
        try:
            path = resolve_video(name, rel, videos[rel])
        except RecordError as e:
            problems[rel] = (e.reason, e.detail or e.reason)
            continue
        try:
            probe_video(path)
        except VideoReadError as e:
            reason = NOT_FOUND if not path.exists() else NO_FRAMES if path.is_dir() else UNREADABLE
            problems[rel] = (reason, str(e))
    return problems


def _where(name: str, question: Question) -> str:
    try:
        return str(resolve_video(name, question.video, question.question_id))
    except RecordError:
        return question.video


def unusable_questions(name: str, questions: Sequence[Question],
                       problems: dict[str, tuple[str, str]]) -> list[Unusable]:
    """One entry per question whose video is in `problems`, `where` the video's path."""
    return [Unusable(_where(name, q), problems[q.video][0], q.question_id, problems[q.video][1])
            for q in questions if q.video in problems]


def describe_video_problems(name: str, questions: Sequence[Question], problems: dict[str, tuple[str, str]]) -> str:
    n_videos = len({q.video for q in questions})
    n_questions = sum(q.video in problems for q in questions)
    missing = sum(reason == NOT_FOUND for reason, _ in problems.values())
    outside = sum(reason == OUTSIDE_ROOT for reason, _ in problems.values())
    shown = "\n".join(f"  {rel}: {why}" for rel, (_, why) in list(problems.items())[:10])
    more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
    origin = get_benchmark(name).video_origin()
    origin = f"\n  ({origin})" if origin else ""
    counts = f"{missing} not found, " + (f"{outside} not under the root, " if outside else "")
    return (f"{len(problems)} of {n_videos} videos of {name} cannot be used ({counts}"
            f"{len(problems) - missing - outside} unreadable), asked about in {n_questions} questions:\n{shown}{more}"
            f"{origin}")
