"""The one rule for a path that comes from data (a question's video in an annotation file or a samples record, a
frame of a frame folder): it names a place under its declared root once every symlink is resolved.

Annotations and samples files are written by other people. A video given as an absolute path, one that climbs out
with '..', or a link inside the root that points out of it would otherwise be opened, decoded, and shown (the
explorer copies its frames into OUT/frames/). Every place a video is opened goes through `under_root`: the
benchmarks' `video_path` (the tasks, the video check, the explorer, the demo's checks), a spec's records, and the
frames of a frame folder. The root itself may be a link (scratch storage often is); a folder inside it that links
elsewhere is outside it: point the root variable at the folder that holds the files.
"""

from __future__ import annotations

import os
from pathlib import Path

from lmms_eval_tasks.records import RecordError

OUTSIDE_ROOT = "the video is not under the benchmark's root"


class OutsideRootError(RecordError):
    """A path from data that leads out of its root; `reason` is OUTSIDE_ROOT (or the caller's), `detail` names the
    path, where it leads and the root."""


def under_root(root: str | os.PathLike, path: str | os.PathLike, reason: str = OUTSIDE_ROOT) -> Path:
    """root/path, where it lies under `root` once both are resolved (symlinks followed, '..' applied; the parts
    that do not exist are taken as written). `path` may be relative to the root or a path found under it. Raises
    OutsideRootError otherwise: an absolute path elsewhere, a '..' out of the root, a link out of it, a link loop."""
    root = Path(root)
    joined = root / path
    try:
        real_root, real = root.resolve(), joined.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python 3.11)
        raise OutsideRootError(reason, f"{str(path)!r} cannot be resolved under {root} ({e})") from None
    if real != real_root and real_root not in real.parents:
        leads = "" if real == joined else f" (it leads to {real})"
        raise OutsideRootError(reason, f"{str(path)!r}{leads} is not under {root}")
    return joined
