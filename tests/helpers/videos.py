"""Generated videos for the frame and pipeline tests: H.264 with B-frames, as most downloaded videos are (the
synthetic benchmarks' own mp4s are MPEG-4 Part 2: `lmms_eval_tasks.layouts.write_mp4`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_h264(path: Path, n_frames: int, fps: int = 30, gop: int = 30, side: int = 32, container_format=None,
               seed: int | None = None) -> np.ndarray:
    """A constant-rate H.264 video (x264, two B-frames between references, a keyframe every `gop` frames), one random
    frame per index; returns the frames written."""
    import av

    rng = np.random.default_rng(n_frames if seed is None else seed)
    frames = rng.integers(0, 256, (n_frames, side, side, 3), dtype=np.uint8)
    with av.open(str(path), mode="w", format=container_format) as container:
        stream = container.add_stream("libx264", rate=fps, options={"g": str(gop), "bf": "2", "preset": "ultrafast"})
        stream.width = stream.height = side
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return frames
