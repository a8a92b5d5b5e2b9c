"""What a score depends on besides the question's text, by content: a checkpoint, visdep's scoring code, a video.

Light (no torch, no transformers): the durable store keys on these (`model_adapters.durable`), every run records its
checkpoint's identity in `results["visdep"]["model"]`, and the audit may compare them.

- A checkpoint on the Hugging Face hub is its commit (`config._commit_hash`, which transformers sets from the
  snapshot it loaded): `hub <repo>@<commit>`.
- A checkpoint folder is every file in it that can change a value: weights, config, tokenizer and chat-template
  files, processor and preprocessor settings, remote code. Files up to `CONTENT_HASH_MAX_BYTES` count by the SHA-256
  of their content, larger ones (weight shards) by size and modification time in nanoseconds: hashing 15 GB of
  weights would take a minute per run, and a fine-tune saved again into the folder rewrites its shards (a new
  mtime). Left out, because they never change a log-likelihood: hidden files and folders (`.cache/` of
  `hf download --local-dir`, `.gitattributes`), `__pycache__`, documentation (`*.md`, `README*`, `LICENSE*`,
  `NOTICE*`) and `generation_config.json` (sampling settings; scoring never generates).
- visdep's scoring code is the SHA-256 of the source files that compute values: every module of `model_adapters`
  but the store, this module and the entry point, and `lmms_eval_tasks/videos.py` (which orders a folder's frames).
  Any edit counts, a comment too: no version constant has to be remembered.
- A video is its content's identity: a file by size, mtime and the SHA-256 of its first and last 64 KiB; a frame
  folder by its frames' names, sizes and mtimes (replacing a frame in place leaves the folder's own mtime as it was).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from loguru import logger

from lmms_eval_tasks import videos as videos_module
from lmms_eval_tasks.videos import FRAME_SUFFIXES

CONTENT_HASH_MAX_BYTES = 64 * 2**20
VIDEO_SAMPLE_BYTES = 64 * 2**10
_DOCUMENTATION_PREFIXES = ("readme", "license", "licence", "notice")
_NOT_VALUE_FILES = frozenset({"generation_config.json"})
# modules of model_adapters that compute no value: a change to them keeps every stored value valid
_NOT_VALUE_CODE = frozenset({"__init__.py", "durable.py", "identity.py", "registry.py"})


def digest(value: object) -> str:
    """SHA-256 (hex) of `value`'s canonical JSON: sorted keys, no spaces, ASCII, no NaN."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(2**20):
            h.update(block)
    return h.hexdigest()


def _changes_values(name: str) -> bool:
    lower = name.lower()
    return not (name.startswith(".") or lower.endswith((".md", ".pyc")) or lower.startswith(_DOCUMENTATION_PREFIXES)
                or name in _NOT_VALUE_FILES)


def checkpoint_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder (recursively, sorted) that can change a value."""
    files = []
    for directory, subfolders, names in os.walk(folder):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d != "__pycache__")
        files += [Path(directory, name) for name in names if _changes_values(name)]
    return sorted(files)


def _file_entry(path: Path, folder: Path) -> list:
    stat = path.stat()
    name = path.relative_to(folder).as_posix()
    if stat.st_size <= CONTENT_HASH_MAX_BYTES:
        return [name, "sha256", file_sha256(path)]
    return [name, "size,mtime_ns", stat.st_size, stat.st_mtime_ns]


def folder_identity(folder: str | os.PathLike) -> dict[str, str]:
    """{"identity": SHA-256 hex over the folder's value-changing files, "source": "folder <absolute path>"}.
    The identity does not include the path: a copy that keeps modification times (`cp -p`, `rsync -a`) is the same
    checkpoint."""
    folder = Path(folder).expanduser().resolve()
    files = checkpoint_files(folder)
    if not files:
        raise ValueError(f"checkpoint folder {folder} holds no file a model could be loaded from")
    return {"identity": digest([_file_entry(p, folder) for p in files]), "source": f"folder {folder}"}


def hub_identity(repo: str, commit: str) -> dict[str, str]:
    return {"identity": digest({"hub": repo, "commit": commit}), "source": f"hub {repo}@{commit}"}


def cached_commit(repo: str, filename: str, revision: str | None = None, cache_dir: str | None = None) -> str | None:
    """The commit of the hub cache's snapshot that holds `filename` of `repo` at `revision`, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision)
    except ValueError:  # not a repository id (huggingface_hub's HFValidationError)
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def checkpoint_identity(pretrained: str, commit: str | None = None, revision: str | None = None,
                        filename: str = "config.json", cache_dir: str | None = None) -> dict[str, str]:
    """A checkpoint's identity: {"identity": SHA-256 hex, "source": "folder <absolute path>" or
    "hub <repo>@<commit>"}.

    `pretrained` as given to `from_pretrained`: an existing folder is identified by its files (`folder_identity`),
    anything else is a hub repository, identified by `commit` (the loaded config's `_commit_hash`) or, when the
    loader did not say, by the commit of the cached snapshot holding `filename` at `revision`."""
    if Path(pretrained).expanduser().is_dir():
        return folder_identity(pretrained)
    commit = commit or cached_commit(pretrained, filename, revision, cache_dir)
    if commit is None:
        logger.warning(f"cannot tell which commit of {pretrained} was loaded; its identity is its name and "
                       f"revision {revision or 'main'} only, which a new upload under that revision does not change")
        return {"identity": digest({"hub": pretrained, "revision": revision or "main"}),
                "source": f"hub {pretrained}@{revision or 'main'} (commit unknown)"}
    return hub_identity(pretrained, commit)


def value_code_files() -> list[Path]:
    """The source files whose code computes scored values (see the module's docstring)."""
    package = Path(__file__).resolve().parent
    own = sorted(p for p in package.glob("*.py") if p.name not in _NOT_VALUE_CODE)
    return own + [Path(videos_module.__file__).resolve()]


@cache
def code_identity() -> str:
    """SHA-256 (hex) over the names and contents of `value_code_files()`, read once per process, when this module
    is imported (with the adapters' modules): a file edited while a run goes on does not change its identity."""
    return digest([[p.parent.name + "/" + p.name, file_sha256(p)] for p in value_code_files()])


code_identity()


def video_identity(path: str | os.PathLike) -> list:
    """A video by content (see the module's docstring); a path that does not exist is `["missing"]` (scoring it
    fails and names it)."""
    path = Path(path)
    try:
        if path.is_dir():
            frames = sorted((entry for entry in os.scandir(path)
                             if entry.is_file() and entry.name.lower().endswith(FRAME_SUFFIXES)), key=lambda e: e.name)
            return ["frames", [[e.name, e.stat().st_size, e.stat().st_mtime_ns] for e in frames]]
        stat = path.stat()
    except FileNotFoundError:
        return ["missing"]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(VIDEO_SAMPLE_BYTES))
        if stat.st_size > 2 * VIDEO_SAMPLE_BYTES:
            f.seek(-VIDEO_SAMPLE_BYTES, os.SEEK_END)
        h.update(f.read(VIDEO_SAMPLE_BYTES))
    return ["file", stat.st_size, stat.st_mtime_ns, h.hexdigest()]
