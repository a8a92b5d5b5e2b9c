"""Where a question's video is, and whether it opens: the data side of the videos (the adapters decode them).

A benchmark's `video` paths are relative to its video folder (`loaders.video_root`): a video file, or a frame folder
(MM-AU's `images/000001.jpg`, DADA's `0001.png`) whose frames are ordered by the number in their names.
"""

from __future__ import annotations

import re
from pathlib import Path

from lmms_eval_tasks.loaders import get_benchmark, video_root
from lmms_eval_tasks.spec import resolve_spec_video

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")


class VideoReadError(RuntimeError):
    """A video file or frame folder that cannot be read; the message names it."""


def _frame_number(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    if not digits:
        raise VideoReadError(f"frame file without a frame number: {path}")
    return int(digits[-1])


def frame_files(folder: Path) -> list[Path]:
    """The frames of an image folder (MM-AU `images/000001.jpg`, DADA `0001.png`), ordered by frame number."""
    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_frame_number)
    if not files:
        raise VideoReadError(f"no {'/'.join(FRAME_SUFFIXES)} frames in folder {folder}")
    return files


def resolve_video(name: str, rel: str) -> Path:
    """Absolute path of a question's video (video file or frame folder) under the benchmark's video folder."""
    root = video_root(name)
    if get_benchmark(name).spec is not None:
        return resolve_spec_video(root, rel)
    path = root / rel
    if path.exists() or name not in ("mmau", "videomme"):
        return path
    if name == "videomme":  # lmms-eval's own task: <videoID>.mp4, else .MP4, else .mkv
        for other in (path.with_suffix(".MP4"), path.with_suffix(".mkv")):
            if other.exists():
                return other
        return path
    # MM-AU archives unpack with one more or one fewer folder level depending on the tool used.
    parts = Path(rel).parts  # CAP-DATA/<group>/<type>/<id>/images or DADA-DATA/<type>/<id>/images
    tail = Path(*parts[-3:]) if parts[0] == "CAP-DATA" else Path(*parts[1:])
    for candidate in sorted(root.glob(f"{parts[0]}/**/{tail.as_posix()}")):
        return candidate
    return path


def probe_video(path: Path) -> None:
    """Raise `VideoReadError` unless `path` is a frame folder holding frames, or a file PyAV opens with a video
    stream (its header only: cheap enough to check every video of a benchmark before a run)."""
    if path.is_dir():
        frame_files(path)
        return
    if not path.exists():
        raise VideoReadError(f"not found: {path}")
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"no video stream in {path}")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoReadError(f"cannot open {path}: {e}") from e
