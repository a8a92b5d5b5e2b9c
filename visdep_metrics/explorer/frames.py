"""Contact sheets: the frames a VLM saw of each video, sampled as the adapters sample them
(`model_adapters.frames.read_frames`, imported only when a video is reachable: the audit loads without torch), one
JPEG per video beside the page, decoded once (a sheet of an earlier audit of the same, unchanged video is copied)."""

from __future__ import annotations

import functools
import hashlib
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from loguru import logger

from model_adapters.settings import MIDDLE_FRAME
from visdep_metrics.audit.compute import Audit
from visdep_metrics.parallel import forked_map

FRAMES_DIR = "frames"
THUMB_HEIGHT = 120
COLUMNS = 4  # thumbnails per row of a sheet
DEFAULT_MAX_FRAMES = 16  # visdep_vlm's default (model_adapters.settings), for VLMs whose runs do not say


def audit_max_frames(audit: Audit) -> int | None:
    """The frames per video the audit's VLMs saw: the most any of them saw (None without a video run); a
    single-frame condition of the temporal ladder (`frames=middle`) has no budget and does not count."""
    vlms = {f.model for f in audit.runs.used if f.mode == "video"}
    info = audit.runs.model_info
    seen = [info[m].max_frames or DEFAULT_MAX_FRAMES for m in vlms
            if m in info and dict(info[m].settings).get("frames") != MIDDLE_FRAME]
    return max(seen) if seen else None


def _video_path(benchmark: str, video: str, roots: Mapping[str, Path]) -> Path | None:
    """The video of a samples record, found as its benchmark finds it (`Benchmark.video_path`): None where the root
    is not set or not there, the video is not found, or it is not under the root (named in the log: a record that
    points out of its root is refused, nothing of it reaches OUT)."""
    from lmms_eval_tasks.loaders import get_benchmark
    from lmms_eval_tasks.records import RecordError

    try:
        path = get_benchmark(benchmark).video_path(video, root=Path(roots[benchmark]) if benchmark in roots else None)
    except RecordError as e:  # out of its root (OutsideRootError), or a twin's upstream found none: said, not shown
        logger.warning(f"explorer: no frames of benchmark {benchmark}'s video: {e}")
        return None
    except (ValueError, OSError):  # the benchmark's root is not set or not there: no frames to show
        return None
    return path if path.exists() else None


def _sheet_name(path: Path, max_frames: int) -> str:
    """Named by what it shows: the video (path, size, modification time) and the frame budget."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{max_frames}|{THUMB_HEIGHT}|{COLUMNS}"
    return f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.jpg"


def contact_sheet(frames: np.ndarray, target: Path) -> None:
    """(T, H, W, 3) uint8 frames as thumbnails THUMB_HEIGHT high, COLUMNS to a row, in one JPEG."""
    from PIL import Image

    thumbs = [Image.fromarray(f).resize((max(1, round(f.shape[1] * THUMB_HEIGHT / f.shape[0])), THUMB_HEIGHT))
              for f in frames]
    width = thumbs[0].width
    rows = -(-len(thumbs) // COLUMNS)
    sheet = Image.new("RGB", (width * min(COLUMNS, len(thumbs)), THUMB_HEIGHT * rows), "white")
    for i, thumb in enumerate(thumbs):
        sheet.paste(thumb, ((i % COLUMNS) * width, (i // COLUMNS) * THUMB_HEIGHT))
    sheet.save(target, quality=80)


def write_sheets(audit: Audit, folder: Path, previous: Path | None,
                 roots: Mapping[str, Path] | None = None) -> tuple[dict[tuple[str, str], str], int | None, str]:
    """Write FRAMES_DIR/<name>.jpg into `folder` for every reachable video; returns (benchmark, video) -> file name
    relative to the page, the frame budget, and a sentence for the page. `roots`: benchmark -> its root folder
    (default: the benchmark's environment variable, as lmms-eval's runs found it)."""
    max_frames = audit_max_frames(audit)
    if max_frames is None:
        return {}, None, "no model of this audit saw the videos"
    videos = audit.questions[["benchmark", "video"]].dropna().drop_duplicates()
    found = {(b, v): p for b, v in videos.itertuples(index=False)
             if (p := _video_path(b, v, roots or {})) is not None}
    if not found:
        return {}, max_frames, ("videos not available: the benchmarks' videos were not reachable when the audit was "
                                "written (set the benchmark's root variable, e.g. VRU_ACCIDENT_ROOT, as for lmms-eval)")
    out = folder / FRAMES_DIR
    out.mkdir()
    sheets, jobs = {}, []
    for (benchmark, video), path in found.items():
        name = _sheet_name(path, max_frames)
        kept = previous / FRAMES_DIR / name if previous is not None else None
        if kept is not None and kept.is_file():
            shutil.copy2(kept, out / name)
            sheets[(benchmark, video)] = f"{FRAMES_DIR}/{name}"
        else:
            jobs.append(((benchmark, video), path, out / name))
    import model_adapters.frames  # noqa: F401  (before the processes fork: each would import it again)

    made = forked_map(functools.partial(_decode, max_frames=max_frames), [(p, t) for _, p, t in jobs],
                      [p.stat().st_size if p.is_file() else 0 for _, p, _ in jobs], "explorer: contact sheets")
    for (key, path, target), error in zip(jobs, made, strict=True):
        if error is None:
            sheets[key] = f"{FRAMES_DIR}/{target.name}"
        else:
            logger.warning(f"explorer: no frames of {path}: {error}")
    note = f"{max_frames} frames per video, sampled as the VLMs sampled them"
    if len(sheets) < len(videos):
        note += f"; {len(videos) - len(sheets)} of {len(videos)} videos not available"
    return sheets, max_frames, note


def _decode(job: tuple[Path, Path], max_frames: int) -> str | None:
    """Decode one video's frames into its contact sheet; the reason where it cannot be read."""
    from lmms_eval_tasks.videos import VideoReadError
    from model_adapters.frames import read_frames

    path, target = job
    try:
        frames, _ = read_frames(path, max_frames)
    except (VideoReadError, OSError, ValueError) as e:
        return str(e)
    contact_sheet(frames, target)
    return None
