"""What a score depends on besides the question's text, by content: a checkpoint, visdep's scoring code, a video.

Light (no torch, no transformers): the durable store keys on these (`model_adapters.durable`), every run records its
checkpoint's identity in `results["visdep"]["model"]`, and the audit may compare them.

- A checkpoint on the Hugging Face hub is its commit and the files of its snapshot in the hub cache, by the rules
  for a folder (an edited `config.json` there counts): `hub <repo>@<commit>`.
- A checkpoint folder is every file in it that can change a value: weights, config, tokenizer and chat-template
  files, processor and preprocessor settings, remote code. Files up to `CONTENT_HASH_MAX_BYTES` count by the SHA-256
  of their content, larger ones (weight shards) by size, modification time in nanoseconds and the SHA-256 of
  SAMPLE_BLOCKS blocks spread over them (`sampled_sha256`): hashing 15 GB of weights would take a minute per run.
  Left out, because they never change a log-likelihood: hidden files and folders (`.cache/` of
  `hf download --local-dir`, `.gitattributes`), `__pycache__`, documentation (`*.md`, `README*`, `LICENSE*`,
  `NOTICE*`) and `generation_config.json` (sampling settings; scoring never generates).
- A PEFT adapter (transformers loads one whenever peft is installed) is its own identity and its base's.
- The class a checkpoint was loaded as and its source file's SHA-256 (`loaded_code`), and the versions of the
  libraries that compute values (`library_versions`), go into the model key beside the checkpoint.
- visdep's scoring code is the SHA-256 of the source files that compute values: every module of `model_adapters`
  and of its engines but the store, this module and the registry, and `lmms_eval_tasks/videos.py` (which orders a
  folder's frames). Any edit counts, a comment too: no version constant has to be remembered.
- A video is its content's identity: a file by size, mtime and `sampled_sha256` (the whole content up to 4 MiB); a
  frame folder by each frame's name, size, mtime and `sampled_sha256` (replacing a frame in place leaves the
  folder's own mtime as it was).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import sys
from functools import cache
from pathlib import Path

from loguru import logger

from lmms_eval_tasks import videos as videos_module
from lmms_eval_tasks.videos import FRAME_SUFFIXES

CONTENT_HASH_MAX_BYTES = 64 * 2**20
# A file larger than SAMPLE_BLOCKS blocks of SAMPLE_BLOCK_BYTES is known by that many blocks spread evenly over it
# (the first and the last included), a smaller one by its whole content: 4 MiB read per large file.
SAMPLE_BLOCKS = 64
SAMPLE_BLOCK_BYTES = 64 * 2**10
_DOCUMENTATION_PREFIXES = ("readme", "license", "licence", "notice")
_NOT_VALUE_FILES = frozenset({"generation_config.json"})
# modules of model_adapters that compute no value: a change to them keeps every stored value valid
_NOT_VALUE_CODE = frozenset({"__init__.py", "compaction.py", "durable.py", "identity.py", "registry.py",
                             "store_records.py"})


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


def sampled_sha256(path: str | os.PathLike, size: int | None = None) -> str:
    """The sha256 (hex) of a file's whole content when it is at most SAMPLE_BLOCKS * SAMPLE_BLOCK_BYTES long, else
    of SAMPLE_BLOCKS blocks of SAMPLE_BLOCK_BYTES at evenly spread offsets (the first at 0, the last at the end)."""
    size = os.stat(path).st_size if size is None else size
    if size <= SAMPLE_BLOCKS * SAMPLE_BLOCK_BYTES:
        return file_sha256(path)
    h = hashlib.sha256()
    step = (size - SAMPLE_BLOCK_BYTES) / (SAMPLE_BLOCKS - 1)
    with open(path, "rb") as f:
        for i in range(SAMPLE_BLOCKS):
            f.seek(round(i * step))
            h.update(f.read(SAMPLE_BLOCK_BYTES))
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
    return [name, "size,mtime_ns,sampled_sha256", stat.st_size, stat.st_mtime_ns, sampled_sha256(path, stat.st_size)]


def folder_identity(folder: str | os.PathLike) -> dict[str, str]:
    """{"identity": SHA-256 hex over the folder's value-changing files, "source": "folder <absolute path>"}.
    The identity does not include the path: a copy that keeps modification times (`cp -p`, `rsync -a`) is the same
    checkpoint."""
    folder = Path(folder).expanduser().resolve()
    return {"identity": digest(_folder_entries(folder)), "source": f"folder {folder}"}


def _folder_entries(folder: Path) -> list[list]:
    files = checkpoint_files(folder)
    if not files:
        raise ValueError(f"checkpoint folder {folder} holds no file a model could be loaded from")
    return [_file_entry(p, folder) for p in files]


def hub_identity(repo: str, commit: str, snapshot: Path | None = None) -> dict[str, str]:
    """A hub checkpoint: its commit, and the files of its snapshot in the hub cache as they are now (an edited
    `config.json` there is another checkpoint), when the snapshot is at hand."""
    key: dict[str, object] = {"hub": repo, "commit": commit}
    if snapshot is not None:
        key["files"] = _folder_entries(snapshot)
    return {"identity": digest(key), "source": f"hub {repo}@{commit}"}


def _cached(repo: str, filename: str, revision: str | None, cache_dir: str | None) -> Path | None:
    """The hub cache's copy of `filename` of `repo` at `revision` (a branch, tag or commit), or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision)
    except ValueError:  # not a repository id (huggingface_hub's HFValidationError)
        return None
    return Path(found) if isinstance(found, str) else None


def _snapshot_of(path: Path) -> Path:
    """The snapshot folder (`.../snapshots/<commit>`) holding a cached file, subfolders included."""
    while path.parent.name != "snapshots" and path.parent != path:
        path = path.parent
    return path


def cached_commit(repo: str, filename: str, revision: str | None = None, cache_dir: str | None = None) -> str | None:
    """The commit of the hub cache's snapshot that holds `filename` of `repo` at `revision`, or None."""
    found = _cached(repo, filename, revision, cache_dir)
    return _snapshot_of(found).name if found is not None else None


def _base_of(adapter_config: Path) -> tuple[str, str | None]:
    config = json.loads(adapter_config.read_text(encoding="utf-8"))
    return str(config["base_model_name_or_path"]), config.get("revision")


def checkpoint_identity(pretrained: str, commit: str | None = None, revision: str | None = None,
                        filename: str = "config.json", cache_dir: str | None = None) -> dict[str, str]:
    """A checkpoint's identity: {"identity": SHA-256 hex, "source": "folder <absolute path>" or
    "hub <repo>@<commit>", followed by " (adapter) on <the base's source>" for a PEFT adapter}.

    `pretrained` as given to `from_pretrained`: an existing folder is identified by its files (`folder_identity`),
    anything else is a hub repository, identified by its commit (the cached snapshot holding `filename` at
    `revision`; failing that, `commit`, the loaded config's `_commit_hash`) and its snapshot's files. A PEFT adapter
    without a config.json of its own (transformers then loads the base its adapter_config.json names, and the
    adapter on it) is the adapter's identity and its base's, each by these rules; the loaded config's commit is
    then the base's."""
    subfolder = str(Path(filename).parent) if "/" in filename else ""
    folder = Path(pretrained).expanduser()
    if folder.is_dir():
        adapter_config = folder / subfolder / "adapter_config.json"
        own = folder_identity(folder)
        base_commit = commit
    else:
        config = (commit and _cached(pretrained, filename, commit, cache_dir)) or _cached(pretrained, filename,
                                                                                          revision, cache_dir)
        adapter_config = _cached(pretrained, f"{subfolder}/adapter_config.json" if subfolder
                                 else "adapter_config.json", revision, cache_dir)
        if adapter_config is not None and config is None:
            # an adapter repository: the loaded config (and its commit) is the base's
            own, base_commit = hub_identity(pretrained, _snapshot_of(adapter_config).name,
                                            _snapshot_of(adapter_config)), commit
        elif config is not None:
            own, base_commit = hub_identity(pretrained, _snapshot_of(config).name, _snapshot_of(config)), None
        elif commit is not None:
            own, base_commit = hub_identity(pretrained, commit), None
        else:
            logger.warning(f"cannot tell which commit of {pretrained} was loaded; its identity is its name and "
                           f"revision {revision or 'main'} only, which a new upload under that revision does not "
                           "change")
            return {"identity": digest({"hub": pretrained, "revision": revision or "main"}),
                    "source": f"hub {pretrained}@{revision or 'main'} (commit unknown)"}
    has_config = (folder / subfolder / "config.json").is_file() if folder.is_dir() else config is not None
    if adapter_config is None or not adapter_config.is_file() or has_config:
        return own
    base, base_revision = _base_of(adapter_config)
    base_identity = checkpoint_identity(base, commit=base_commit, revision=base_revision, cache_dir=cache_dir)
    return {"identity": digest({"adapter": own["identity"], "base": base_identity["identity"]}),
            "source": f"{own['source']} (adapter) on {base_identity['source']}"}


def loaded_code(model: object) -> dict[str, str]:
    """The class a checkpoint was loaded as (module and qualified name) and the SHA-256 of the file defining it:
    transformers' own modeling file, a checkpoint's remote code (`trust_remote_code`), a development build."""
    cls = type(model)
    source = inspect.getsourcefile(cls)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "source_sha256": file_sha256(source) if source else None}


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries that compute values: the model (transformers, torch with its build, which the
    package metadata leaves out), the tokenizers, the frames (av, pillow, torchvision: Qwen-VL's video resizing)."""
    torch = sys.modules.get("torch")
    versions: dict[str, str | None] = {"torch": torch.__version__ if torch is not None else _package("torch")}
    for name in ("transformers", "tokenizers", "av", "pillow", "torchvision"):
        versions[name] = _package(name)
    return versions


def _package(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def value_code_files(engine: str | os.PathLike | None = None) -> list[Path]:
    """The source files whose code computes scored values (see the module's docstring): with `engine` (an engine's
    source file), that engine's own module; without, every engine module of the package."""
    package = Path(__file__).resolve().parent
    own = sorted(p for p in package.glob("*.py") if p.name not in _NOT_VALUE_CODE)
    engines = {package / "engines" / "__init__.py",
               *(package.glob("engines/*.py") if engine is None else [Path(engine).resolve()])}
    return own + sorted(engines) + [Path(videos_module.__file__).resolve()]


@cache
def code_identity(engine: str | None = None) -> str:
    """SHA-256 (hex) over the names and contents of `value_code_files(engine)`, read once per process and engine
    (the package's own files when this module is imported, with the adapters' modules; an engine's when its adapter is
    first built): a file edited while a run goes on does not change its identity. Editing one engine's module leaves
    the other engines' stored values valid."""
    return digest([[p.parent.name + "/" + p.name, file_sha256(p)] for p in value_code_files(engine)])


code_identity()


def video_identity(path: str | os.PathLike) -> list:
    """A video by content (see the module's docstring); a path that does not exist is `["missing"]` (scoring it
    fails and names it)."""
    path = Path(path)
    try:
        if path.is_dir():
            frames = sorted((entry for entry in os.scandir(path)
                             if entry.is_file() and entry.name.lower().endswith(FRAME_SUFFIXES)), key=lambda e: e.name)
            return ["frames", [[e.name, (st := e.stat()).st_size, st.st_mtime_ns, sampled_sha256(e.path, st.st_size)]
                               for e in frames]]
        stat = path.stat()
        return ["file", stat.st_size, stat.st_mtime_ns, sampled_sha256(path, stat.st_size)]
    except FileNotFoundError:
        return ["missing"]
