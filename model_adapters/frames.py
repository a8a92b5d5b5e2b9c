"""Video frames for the adapters: mp4 files through PyAV and MM-AU frame folders.

Both are sampled uniformly over the whole video to at most `max_frames` frames and returned as
one contiguous uint8 array (T, H, W, 3), the layout every video processor of transformers takes.
A `FrameSource` keeps the last few videos it decoded, keyed by (path, max_frames), and counts
decodes per path, so the bench and the tests can check that no video is decoded twice.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")


class VideoReadError(RuntimeError):
    """A video file or frame folder that cannot be read; the message names it."""


def sample_indices(n_frames: int, max_frames: int) -> np.ndarray:
    """`min(n_frames, max_frames)` indices spread uniformly over [0, n_frames - 1], first and last included.

    index_i = round(i * (n_frames - 1) / (max_frames - 1)), i = 0 .. max_frames - 1."""
    if n_frames < 1:
        raise ValueError("a video needs at least one frame")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if n_frames <= max_frames:
        return np.arange(n_frames)
    return np.round(np.linspace(0, n_frames - 1, max_frames)).astype(int)


def _frame_number(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    if not digits:
        raise VideoReadError(f"frame file without a frame number: {path}")
    return int(digits[-1])


def read_frame_folder(folder: Path, max_frames: int) -> np.ndarray:
    """Frames of an image folder (MM-AU `images/000001.jpg`, DADA `0001.png`), ordered by frame number."""
    from PIL import Image

    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_frame_number)
    if not files:
        raise VideoReadError(f"no {'/'.join(FRAME_SUFFIXES)} frames in folder {folder}")
    frames = []
    for i in sample_indices(len(files), max_frames):
        try:
            with Image.open(files[i]) as image:
                frames.append(np.asarray(image.convert("RGB")))
        except OSError as e:
            raise VideoReadError(f"cannot read frame {files[i]}: {e}") from e
    if len({f.shape for f in frames}) > 1:
        raise VideoReadError(f"frames of different sizes in {folder}: {sorted({f.shape for f in frames})}")
    return np.ascontiguousarray(np.stack(frames))


def _decode(path: Path, wanted: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Decode frames at the sorted indices `wanted`; also return how many frames were decoded."""
    import av

    keep = set(wanted.tolist())
    last = int(wanted[-1])
    frames, n = [], 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            if n in keep:
                frames.append(frame.to_ndarray(format="rgb24"))
            n += 1
            if n > last:
                break
    return frames, n


def read_video_file(path: Path, max_frames: int) -> np.ndarray:
    """Uniformly sampled frames of a video file, decoded in one pass when the container states its frame count."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"no video stream in {path}")
            stated = container.streams.video[0].frames
        if stated > 0:
            wanted = sample_indices(stated, max_frames)
            frames, n = _decode(path, wanted)
            if len(frames) == len(wanted):
                return np.ascontiguousarray(np.stack(frames))
            # The header overstated the frame count: sample again over the frames that exist.
            stated = n
        else:  # no count in the header: count by decoding
            _, stated = _decode(path, np.array([np.iinfo(np.int64).max]))
        if stated == 0:
            raise VideoReadError(f"no decodable frame in {path}")
        frames, _ = _decode(path, sample_indices(stated, max_frames))
        return np.ascontiguousarray(np.stack(frames))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoReadError(f"cannot read video {path}: {e}") from e


class FrameSource:
    """Frames by path, sampled to `max_frames`, with a small LRU cache and a decode counter.

    `decodes[path]` counts how often a video was really decoded (cache misses)."""

    def __init__(self, max_frames: int, cache_size: int = 8) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        self.max_frames = max_frames
        self.cache_size = cache_size
        self.decodes: Counter[str] = Counter()
        self._cache: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()

    def __call__(self, path: str | Path) -> np.ndarray:
        key = (str(path), self.max_frames)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        frames = read_frames(Path(path), self.max_frames)
        self.decodes[str(path)] += 1
        self._cache[key] = frames
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return frames


def read_frames(path: Path, max_frames: int) -> np.ndarray:
    """(T, H, W, 3) uint8 frames of an mp4 (or any container PyAV reads) or of a frame folder."""
    if path.is_dir():
        return read_frame_folder(path, max_frames)
    if not path.exists():
        raise VideoReadError(f"video not found: {path}")
    return read_video_file(path, max_frames)
