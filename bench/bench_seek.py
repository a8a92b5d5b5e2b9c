"""Frames of a long video: seeking to each sampled frame against decoding every frame from the start.

    python bench/bench_seek.py [--minutes 30] [--fps 25] [--side 64] [--max-frames 16] [--repeats 3]

Writes a generated H.264 video (x264 defaults: a keyframe every 250 frames, B-frames; low resolution so that
writing it takes seconds), then reads `max_frames` uniformly sampled frames with `model_adapters.frames`
twice in one run: as it does (frames farther apart than `SEEK_GAP_FRAMES` are reached by seeking) and with
seeking switched off (every frame decoded up to the last sampled one). Prints both times, their ratio, and
checks that both give the same frames. Long general VideoQA videos (Video-MME, LongVideoBench, MLVU) run
from minutes to an hour.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from model_adapters import frames as frames_module


def write_video(path: Path, minutes: float, fps: int, side: int) -> int:
    n_frames = int(minutes * 60 * fps)
    rng = np.random.default_rng(0)
    palette = rng.integers(0, 256, (256, side, side, 3), dtype=np.uint8)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast"})
        stream.width = stream.height = side
        stream.pix_fmt = "yuv420p"
        for i in range(n_frames):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(palette[i % 256], format="rgb24")))
        container.mux(stream.encode())
    return n_frames


def timed(path: Path, max_frames: int, repeats: int, seek_gap: int) -> tuple[float, np.ndarray]:
    frames_module.SEEK_GAP_FRAMES = seek_gap
    best, frames = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        frames, _ = frames_module.read_frames(path, max_frames)
        best = min(best, time.perf_counter() - start)
    return best, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--max-frames", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="keep the fastest of this many reads of each kind")
    args = parser.parse_args()
    default_gap = frames_module.SEEK_GAP_FRAMES
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.mp4"
        start = time.perf_counter()
        n = write_video(path, args.minutes, args.fps, args.side)
        print(f"wrote {n:,} frames ({args.minutes:g} min at {args.fps} fps, {args.side}x{args.side}, "
              f"{path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")
        seek_s, seeked = timed(path, args.max_frames, args.repeats, default_gap)
        order_s, in_order = timed(path, args.max_frames, 1, 10**12)
    same = bool(np.array_equal(seeked, in_order))
    print(f"{args.max_frames} frames by seeking:        {seek_s:8.3f} s")
    print(f"{args.max_frames} frames decoding in order: {order_s:8.3f} s")
    print(f"ratio {order_s / seek_s:.0f}x; same frames: {same}")
    if not same:
        raise SystemExit("seeking gave other frames than decoding in order")


if __name__ == "__main__":
    main()
