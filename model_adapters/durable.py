"""Scored questions made durable as soon as they are scored, so that a killed run resumes where it stopped.

lmms-eval 0.7.3's `--use_cache PATH` (a SQLite response cache with an fsync'd JSONL log) stores a model's
responses only when its whole `loglikelihood` call returns, which for the visdep adapters is the end of the
run, and keeps loglikelihood responses only as (float, bool) pairs. So with `--use_cache PATH` the adapters
keep their own store beside lmms-eval's, under a key of their own:

    PATH/visdep/<model key>/rank<r>.jsonl      one line per scored question, appended and fsync'd per batch

- The model key (the folder) covers the settings that change a value: the adapter, the checkpoint (`pretrained`,
  `revision`, `subfolder`, `variant`, `gguf_file`; a local folder's weight files by size and modification time, a
  hub checkpoint by its commit), `dtype`, `attn_implementation`, `max_frames`, `frame_folder_fps`, the device type,
  and the versions of visdep's scoring, transformers and torch.
- A question's key covers the rest: the task's prompt, the continuations asked for (the scoring mode), and the
  video (its path, size and modification time).

A rerun of the same command reads every rank's file (so a different number of ranks still finds everything),
scores only what is missing, and writes the same samples as an uninterrupted run: values are stored at full
precision. A line cut short by the kill is ignored. A changed setting lands in another folder and reuses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.evaluation_hooks import store_root

# Bump when a change to the scoring changes values: stores written before are then not reused.
SCORING_VERSION = 1
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _file_identity(path: Path) -> list:
    try:
        stat = path.stat()
    except OSError:
        return [str(path), None]
    return [str(path), stat.st_size, stat.st_mtime_ns]


def checkpoint_identity(pretrained: str, config) -> list:
    """A local checkpoint's weight files by size and modification time (a fine-tune saved again into the same
    folder is a new checkpoint), or a hub checkpoint's commit."""
    folder = Path(pretrained).expanduser()
    if folder.is_dir():
        return sorted(_file_identity(p)[1:] + [p.name] for p in folder.rglob("*") if p.suffix in _WEIGHT_SUFFIXES)
    return [getattr(config, "_commit_hash", None)]


def question_key(context: str, continuations: Iterable[str], visuals: Iterable) -> str:
    return _digest([context, sorted(continuations), [_file_identity(Path(v)) if isinstance(v, str) else repr(v)
                                                     for v in visuals]])


class ScoreStore:
    """{question key: {continuation: [loss, is_greedy, string scored]}} on disk, one append-only file per rank."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"rank{rank}.jsonl"
        self.entries: dict[str, dict[str, list]] = {}
        for part in sorted(folder.glob("rank*.jsonl")):
            with open(part, encoding="utf-8") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:  # the last line of a killed run, cut short
                        continue
                    self.entries[record["key"]] = record["scores"]
        self._file = open(self.path, "a", encoding="utf-8")

    @classmethod
    def open(cls, settings: Mapping, rank: int) -> ScoreStore | None:
        """The store of a model's settings under the current root, or None when `--use_cache` is off."""
        root = store_root()
        if root is None:
            return None
        folder = root / "visdep" / _digest({**settings, "scoring_version": SCORING_VERSION})[:24]
        store = cls(folder, rank)
        meta = folder / "settings.json"
        if not meta.exists():
            meta.write_text(json.dumps(dict(settings), indent=1, sort_keys=True, default=str))
        return store

    def get(self, key: str) -> dict[str, list] | None:
        return self.entries.get(key)

    def add(self, scored: Mapping[str, Mapping[str, list]]) -> None:
        """Append these questions' scores and make them durable (flush + fsync) before returning."""
        for key, scores in scored.items():
            self.entries[key] = dict(scores)
            self._file.write(json.dumps({"key": key, "scores": scores}) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return len(self.entries)


def log_reuse(adapter_name: str, rank: int, reused: int, total: int, store: ScoreStore) -> None:
    logger.info(f"{adapter_name} rank {rank}: {reused} of {total} questions taken from the durable store "
                f"{store.folder}, {total - reused} scored")
