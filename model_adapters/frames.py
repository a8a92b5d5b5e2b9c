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

Decoding may use FFmpeg's own threads (`decoder_threads`: 0 lets FFmpeg choose, n uses n; frame and
slice threading): the frames are the same whatever the number, frame by frame (tested on H.264 with
B-frames, in order and by seeking, and on MPEG-4 Part 2).

The frame conditions of the temporal ladder (docs/ladder.md) are settings of a `FrameSource` too: `frames="middle"`
shows one frame, the middle one (`frame_indices`), not the first: a clip cut around an event opens before it, so a
single-frame condition built on its first frame would overstate what the rest of the video adds.
`frame_order="shuffled"` or `"reversed"` shows the same sampled frames with their pixels permuted and their timing
unchanged (`metadata` keeps the sampled indices in order): the model sees the same moments at the same timestamps,
only out of order. The shuffle is seeded by the video's content (`content_seed`), so every model, engine and rerun
sees one order per video.

A `FrameSource` (one `max_frames`, one condition) keeps the last few videos it decoded, keyed by path, within a byte
budget, and counts decodes per path, so the bench and the tests can check that no video is decoded
twice. It may be called from several threads at once (`model_adapters.prefetch`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
from transformers.video_utils import VideoMetadata

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.reading import FileReadError, open_file, regular_file
from lmms_eval_tasks.videos import VideoReadError, frame_files
from model_adapters.settings import DEFAULT_FRAME_FOLDER_FPS as FRAME_FOLDER_FPS
from model_adapters.settings import FRAME_ORDERS, FRAME_SAMPLINGS, MIDDLE_FRAME, ORIGINAL_ORDER, UNIFORM_FRAMES


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


def frame_indices(n_frames: int, max_frames: int, sampling: str = UNIFORM_FRAMES) -> np.ndarray:
    """The frames a condition samples: `sample_indices` for "uniform", the middle frame (n_frames - 1) // 2 alone
    for "middle" (whatever `max_frames`)."""
    if sampling == UNIFORM_FRAMES:
        return sample_indices(n_frames, max_frames)
    if sampling != MIDDLE_FRAME:
        raise ValueError(f"frames must be one of {', '.join(FRAME_SAMPLINGS)}, got {sampling!r}")
    if n_frames < 1:
        raise ValueError("a video needs at least one frame")
    return np.array([(n_frames - 1) // 2])


def content_seed(path: Path) -> int:
    """A seed from a video's content alone (not its path or modification time, so a copy shuffles alike): the
    `identity.sampled_sha256` of a file, or of each frame of a frame folder with its name."""
    from model_adapters.identity import sampled_sha256

    h = hashlib.sha256()
    if path.is_dir():
        for file in frame_files(path):
            h.update(file.name.encode() + b"\0" + sampled_sha256(file).encode())
    else:
        h.update(sampled_sha256(path).encode())
    return int.from_bytes(h.digest()[:8], "little")


def frame_permutation(n: int, order: str, seed: int) -> np.ndarray:
    """The order in which `n` sampled frames are shown: as sampled ("original"), last first ("reversed"), or a
    permutation drawn from `seed` ("shuffled") that is never the identity where n > 1 (for n = 2 it is the
    reversal)."""
    if order not in FRAME_ORDERS:
        raise ValueError(f"frame_order must be one of {', '.join(FRAME_ORDERS)}, got {order!r}")
    if order == ORIGINAL_ORDER or n < 2:
        return np.arange(n)
    if order == "reversed":
        return np.arange(n)[::-1].copy()
    rng = np.random.default_rng(seed)
    while True:
        permutation = rng.permutation(n)
        if (permutation != np.arange(n)).any():
            return permutation


def _metadata(total: int, fps: float, indices: np.ndarray, frames: np.ndarray, backend: str) -> VideoMetadata:
    return VideoMetadata(total_num_frames=int(total), fps=float(fps), duration=total / fps, video_backend=backend,
                         frames_indices=[int(i) for i in indices], height=frames.shape[1], width=frames.shape[2])


def read_frame_folder(folder: Path, max_frames: int, fps: float = FRAME_FOLDER_FPS, sampling: str = UNIFORM_FRAMES,
                      ) -> tuple[np.ndarray, VideoMetadata]:
    """Sampled frames of an image folder (`frame_indices`), ordered by frame number, and their timing at `fps`."""
    from PIL import Image

    files = frame_files(folder)
    indices = frame_indices(len(files), max_frames, sampling)
    images = []
    for i in indices:
        try:
            with open_file(files[i], "frame") as f, Image.open(f) as image:
                images.append(np.asarray(image.convert("RGB")))
        except FileReadError as e:
            raise VideoReadError(f"cannot read frame {e}") from None
        except OSError as e:
            raise VideoReadError(f"cannot read frame {files[i]}: {e}") from e
    if len({f.shape for f in images}) > 1:
        raise VideoReadError(f"frames of different sizes in {folder}: {sorted({f.shape for f in images})}")
    array = np.ascontiguousarray(np.stack(images))
    return array, _metadata(len(files), fps, indices, array, "frames")


# Sampled frames farther apart than this are reached by seeking. x264's default keyframe interval is 250
# frames, so a seek then decodes at most about one group of pictures per sampled frame, fewer than decoding
# straight on; closer frames (10-second traffic clips: 190 frames for 16 samples) are decoded in one pass.
SEEK_GAP_FRAMES = 250


def _decode_in_order(container, stream, wanted: np.ndarray) -> tuple[list[np.ndarray], int]:
    """Decode from the start, keeping the frames at the sorted indices `wanted` (frames counted as decoded);
    also return how many frames were decoded."""
    keep = set(wanted.tolist())
    last = int(wanted[-1])
    frames, n = [], 0
    for frame in container.decode(stream):
        if n in keep:
            frames.append(frame.to_ndarray(format="rgb24"))
        n += 1
        if n > last:
            break
    return frames, n


def _decode_by_seeking(container, stream, wanted: np.ndarray, fps: float) -> list[np.ndarray]:
    """The frames shown at times index / fps: for each, seek to the keyframe before it and decode up to the first
    frame whose timestamp reaches it (half a frame's tolerance). For a constant frame rate this is the frame the
    in-order decode counts to that index; past the last frame (a frame count estimated from the duration), the
    last frame."""
    base = stream.time_base
    start = stream.start_time or 0
    half = 0.5 / fps / base
    frames = []
    for index in wanted.tolist():
        target = start + index / fps / base
        container.seek(int(target), stream=stream, backward=True, any_frame=False)
        chosen = None
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            chosen = frame
            if frame.pts >= target - half:
                break
        if chosen is None:
            raise VideoReadError(f"no frame decoded after seeking to {index / fps:.2f} s")
        frames.append(chosen.to_ndarray(format="rgb24"))
    return frames


def _stream_fps(stream) -> float | None:
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    return float(rate) if rate else None


def _frame_count(container, stream, fps: float) -> int:
    """The stream's stated frame count, else one estimated from its duration (Matroska states none)."""
    if stream.frames > 0:
        return int(stream.frames)
    if stream.duration:
        return int(round(float(stream.duration * stream.time_base) * fps))
    if container.duration:
        return int(round(container.duration / 1_000_000 * fps))  # microseconds
    return 0


def read_video_file(path: Path, max_frames: int, decoder_threads: int = 0, sampling: str = UNIFORM_FRAMES,
                    ) -> tuple[np.ndarray, VideoMetadata]:
    """Sampled frames of a video file (`frame_indices`) and their timing (the stream's average frame rate).

    Frames are decoded in one pass when they are close together, reached by seeking when they are far apart
    (`SEEK_GAP_FRAMES`; a single frame when it lies that far from the start): an hour-long video costs a few groups
    of pictures, not the whole file.
    `decoder_threads`: FFmpeg's decoding threads (0: its own choice)."""
    import av

    if decoder_threads < 0:
        raise ValueError(f"decoder_threads must be >= 0, got {decoder_threads}")
    regular_file(path, "video", error=VideoReadError)  # a FIFO would keep the decoder waiting for ever
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"no video stream in {path}")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.thread_count = decoder_threads
            fps = _stream_fps(stream)
            if not fps:
                raise VideoReadError(f"no frame rate in the video stream of {path}")
            total = _frame_count(container, stream, fps)
            if total > 0:
                wanted = frame_indices(total, max_frames, sampling)
                if (np.diff(wanted) if len(wanted) > 1 else wanted).min() > SEEK_GAP_FRAMES:
                    frames = _decode_by_seeking(container, stream, wanted, fps)
                    array = np.ascontiguousarray(np.stack(frames))
                    return array, _metadata(total, fps, wanted, array, "pyav")
                frames, n = _decode_in_order(container, stream, wanted)
                if len(frames) == len(wanted):
                    array = np.ascontiguousarray(np.stack(frames))
                    return array, _metadata(total, fps, wanted, array, "pyav")
                # The header overstated the frame count: sample again over the frames that exist.
                total = n
            else:  # neither a count nor a duration: count by decoding
                _, total = _decode_in_order(container, stream, np.array([np.iinfo(np.int64).max]))
            if total == 0:
                raise VideoReadError(f"no decodable frame in {path}")
            container.seek(0)
            wanted = frame_indices(total, max_frames, sampling)
            frames, _ = _decode_in_order(container, stream, wanted)
            array = np.ascontiguousarray(np.stack(frames))
            return array, _metadata(total, fps, wanted, array, "pyav")
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoReadError(f"cannot read video {path}: {e}") from e


CACHE_BYTES = 256 * 2**20  # 16 frames at 720p are 44 MB


class FrameSource:
    """Frames and their timing by path, sampled to `max_frames` (or the middle frame: `frames`) and shown in
    `frame_order`, with an LRU cache (at most `cache_size` videos and `cache_bytes` of frames) and a decode counter;
    safe to call from several threads.

    `decodes[path]` counts how often a video was really decoded (cache misses)."""

    def __init__(self, max_frames: int, frame_folder_fps: float = FRAME_FOLDER_FPS, cache_size: int = 8,
                 cache_bytes: int = CACHE_BYTES, decoder_threads: int = 0, frames: str = UNIFORM_FRAMES,
                 frame_order: str = ORIGINAL_ORDER) -> None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        if frames not in FRAME_SAMPLINGS:
            raise ValueError(f"frames must be one of {', '.join(FRAME_SAMPLINGS)}, got {frames!r}")
        if frame_order not in FRAME_ORDERS:
            raise ValueError(f"frame_order must be one of {', '.join(FRAME_ORDERS)}, got {frame_order!r}")
        if not frame_folder_fps > 0:
            raise ValueError(f"frame_folder_fps must be > 0, got {frame_folder_fps}")
        if decoder_threads < 0:
            raise ValueError(f"decoder_threads must be >= 0, got {decoder_threads}")
        self.max_frames = max_frames
        self.frames, self.frame_order = frames, frame_order
        self.frame_folder_fps = frame_folder_fps
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self.decoder_threads = decoder_threads
        self.decodes: Counter[str] = Counter()
        self._cache: OrderedDict[str, tuple[np.ndarray, VideoMetadata]] = OrderedDict()
        self._lock = threading.Lock()  # the cache and the counter; decoding runs outside it

    def settings(self) -> dict[str, object]:
        """The score-changing settings this source stands for (as model_args)."""
        return {"max_frames": self.max_frames, "frame_folder_fps": self.frame_folder_fps, "frames": self.frames,
                "frame_order": self.frame_order}

    def __call__(self, path: str | Path) -> tuple[np.ndarray, VideoMetadata]:
        key = str(path)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        video = read_frames(Path(path), self.max_frames, self.frame_folder_fps, self.decoder_threads, self.frames)
        if self.frame_order != ORIGINAL_ORDER:
            pixels, metadata = video
            order = frame_permutation(len(pixels), self.frame_order, content_seed(Path(path)))
            video = np.ascontiguousarray(pixels[order]), metadata  # the timing stays as sampled
        with self._lock:
            self.decodes[key] += 1
            self._cache[key] = video
            while self._cache and (len(self._cache) > self.cache_size
                                   or sum(frames.nbytes for frames, _ in self._cache.values()) > self.cache_bytes):
                self._cache.popitem(last=False)
        return video


def frame_source(adapter: str, max_frames: int | str, frame_folder_fps: float | str, frames: str, frame_order: str,
                 **kwargs) -> FrameSource:
    """An adapter's `FrameSource` from its model_args as lmms-eval passes them (text or numbers), the values written
    one way (`settings.canonical_value`); a bad value is an error naming the adapter and the argument."""
    from model_adapters.settings import canonical_value

    try:
        return FrameSource(int(canonical_value("max_frames", max_frames)), float(frame_folder_fps),
                           frames=canonical_value("frames", frames),
                           frame_order=canonical_value("frame_order", frame_order), **kwargs)
    except ValueError as e:
        raise VisdepError(f"{adapter}: {e}") from None


def read_frames(path: Path, max_frames: int, frame_folder_fps: float = FRAME_FOLDER_FPS, decoder_threads: int = 0,
                sampling: str = UNIFORM_FRAMES) -> tuple[np.ndarray, VideoMetadata]:
    """(T, H, W, 3) uint8 frames of an mp4 (or any container PyAV reads) or of a frame folder, and their timing."""
    if path.is_dir():
        return read_frame_folder(path, max_frames, frame_folder_fps, sampling)
    if not path.exists():
        raise VideoReadError(f"video not found: {path}")
    return read_video_file(path, max_frames, decoder_threads, sampling)
