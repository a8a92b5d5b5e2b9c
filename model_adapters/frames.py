"""Video frames for the adapters: mp4 files through PyAV and MM-AU frame folders.

Both are sampled uniformly over the whole video to at most `max_frames` frames and returned as
one contiguous uint8 array (T, H, W, 3), the layout every video processor of transformers takes,
together with their timing as transformers' `VideoMetadata` (source fps, total frame count, the
sampled indices). The timing matters: without it transformers assumes 24 fps, and Qwen2.5-VL
places the frames on its rotary time axis at `temporal_patch_size / sampled fps` seconds per
temporal patch (16 frames of a 10 s clip: 1.25 s, not 2/24 s).

Frame folders carry no frame rate. MM-AU's (CAP-DATA and DADA-2000) are taken at 30 fps, the rate
the dataset authors' own code uses for them (JWFanggit/LOTVS-CAP `Test.py` and `src/eval_tools.py`
compute time-to-accident in seconds with `fps=30`; jeffreychou777/LOTVS-MM-AU ships per-frame
detections as "30fps" labels); no paper states it. `visdep_vlm`'s `frame_folder_fps` overrides it.

A `FrameSource` (one `max_frames`) keeps the last few videos it decoded, keyed by path, and counts
decodes per path, so the bench and the tests can check that no video is decoded twice.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
from transformers.video_utils import VideoMetadata

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")
FRAME_FOLDER_FPS = 30.0  # MM-AU's frame folders (see the module docstring)


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


def frame_files(folder: Path) -> list[Path]:
    """The frames of an image folder (MM-AU `images/000001.jpg`, DADA `0001.png`), ordered by frame number."""
    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_frame_number)
    if not files:
        raise VideoReadError(f"no {'/'.join(FRAME_SUFFIXES)} frames in folder {folder}")
    return files


def _metadata(total: int, fps: float, indices: np.ndarray, frames: np.ndarray, backend: str) -> VideoMetadata:
    return VideoMetadata(total_num_frames=int(total), fps=float(fps), duration=total / fps, video_backend=backend,
                         frames_indices=[int(i) for i in indices], height=frames.shape[1], width=frames.shape[2])


def read_frame_folder(folder: Path, max_frames: int, fps: float = FRAME_FOLDER_FPS,
                      ) -> tuple[np.ndarray, VideoMetadata]:
    """Uniformly sampled frames of an image folder, ordered by frame number, and their timing at `fps`."""
    from PIL import Image

    files = frame_files(folder)
    indices = sample_indices(len(files), max_frames)
    frames = []
    for i in indices:
        try:
            with Image.open(files[i]) as image:
                frames.append(np.asarray(image.convert("RGB")))
        except OSError as e:
            raise VideoReadError(f"cannot read frame {files[i]}: {e}") from e
    if len({f.shape for f in frames}) > 1:
        raise VideoReadError(f"frames of different sizes in {folder}: {sorted({f.shape for f in frames})}")
    array = np.ascontiguousarray(np.stack(frames))
    return array, _metadata(len(files), fps, indices, array, "frames")


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


def _stream_fps(stream) -> float | None:
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return float(rate) if rate else None


def read_video_file(path: Path, max_frames: int) -> tuple[np.ndarray, VideoMetadata]:
    """Uniformly sampled frames of a video file and their timing (the stream's average frame rate),
    decoded in one pass when the container states its frame count."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"no video stream in {path}")
            stream = container.streams.video[0]
            stated, fps = stream.frames, _stream_fps(stream)
        if not fps:
            raise VideoReadError(f"no frame rate in the video stream of {path}")
        if stated > 0:
            wanted = sample_indices(stated, max_frames)
            frames, n = _decode(path, wanted)
            if len(frames) == len(wanted):
                array = np.ascontiguousarray(np.stack(frames))
                return array, _metadata(stated, fps, wanted, array, "pyav")
            # The header overstated the frame count: sample again over the frames that exist.
            stated = n
        else:  # no count in the header: count by decoding
            _, stated = _decode(path, np.array([np.iinfo(np.int64).max]))
        if stated == 0:
            raise VideoReadError(f"no decodable frame in {path}")
        wanted = sample_indices(stated, max_frames)
        frames, _ = _decode(path, wanted)
        array = np.ascontiguousarray(np.stack(frames))
        return array, _metadata(stated, fps, wanted, array, "pyav")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoReadError(f"cannot read video {path}: {e}") from e


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


class FrameSource:
    """Frames and their timing by path, sampled to `max_frames`, with a small LRU cache and a decode counter.

    `decodes[path]` counts how often a video was really decoded (cache misses)."""

    def __init__(self, max_frames: int, frame_folder_fps: float = FRAME_FOLDER_FPS, cache_size: int = 8) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        if not frame_folder_fps > 0:
            raise ValueError(f"frame_folder_fps must be > 0, got {frame_folder_fps}")
        self.max_frames = max_frames
        self.frame_folder_fps = frame_folder_fps
        self.cache_size = cache_size
        self.decodes: Counter[str] = Counter()
        self._cache: OrderedDict[str, tuple[np.ndarray, VideoMetadata]] = OrderedDict()

    def __call__(self, path: str | Path) -> tuple[np.ndarray, VideoMetadata]:
        key = str(path)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        video = read_frames(Path(path), self.max_frames, self.frame_folder_fps)
        self.decodes[key] += 1
        self._cache[key] = video
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return video


def read_frames(path: Path, max_frames: int, frame_folder_fps: float = FRAME_FOLDER_FPS,
                ) -> tuple[np.ndarray, VideoMetadata]:
    """(T, H, W, 3) uint8 frames of an mp4 (or any container PyAV reads) or of a frame folder, and their timing."""
    if path.is_dir():
        return read_frame_folder(path, max_frames, frame_folder_fps)
    if not path.exists():
        raise VideoReadError(f"video not found: {path}")
    return read_video_file(path, max_frames)
