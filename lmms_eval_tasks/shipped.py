"""The panels and example specs that ship with visdep (the repository's `configs/`, installed as the package
`lmms_eval_tasks.configs`), found by name: `--panel paper`, `--spec mmau_cap`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from lmms_eval_tasks.errors import OptionError

KINDS = {"panels": "--panel", "specs": "--spec"}


def shipped(kind: str) -> dict[str, Path]:
    """name -> file of each shipped `kind` ("panels" or "specs"): configs/<kind>/<name>.yaml."""
    folder = resources.files("lmms_eval_tasks.configs") / kind
    return {Path(entry.name).stem: Path(str(entry)) for entry in sorted(folder.iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".yaml") and entry.is_file() and not _task_yaml(entry.name)}


def _task_yaml(name: str) -> bool:
    """The task YAMLs `visdep spec init` writes beside a spec (a checkout's configs/specs) are not specs."""
    return name.endswith(("_blind.yaml", "_video.yaml"))


def config_file(reference: str | Path, kind: str) -> Path:
    """The file `reference` names: a path (an existing file, or anything with a folder or a .yaml suffix: its reader
    says what is wrong with it), else the shipped `kind` of that name. Raises OptionError naming the option and the
    shipped names when a bare name is neither."""
    path = Path(reference).expanduser()
    if path.is_file() or len(path.parts) > 1 or path.suffix in (".yaml", ".yml"):
        return path
    known = shipped(kind)
    if str(reference) in known:
        return known[str(reference)]
    raise OptionError(f"{KINDS[kind]} {reference}: no such file, and visdep ships no {kind[:-1]} of that name "
                      f"(shipped: {', '.join(known)})")
