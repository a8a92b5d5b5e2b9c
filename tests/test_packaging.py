"""The wheel ships the panels and example specs (configs/), and an installed visdep finds them by name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _source_copy(into: Path) -> Path:
    """The checkout's files that git would commit (tracked, or new and not ignored), copied: setuptools builds in the
    source folder, and a build of the checkout itself would leave build/ and egg-info there."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def test_the_wheel_holds_configs_and_finds_the_paper_panel_by_name(tmp_path):
    source = _source_copy(tmp_path / "source")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("visdep-*.whl")
    shipped = {p.name for p in (ROOT / "configs").glob("*/*.yaml") if not p.stem.endswith(("_blind", "_video"))}
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert {Path(n).name for n in names if n.startswith("lmms_eval_tasks/configs/")} >= shipped
        assert "lmms_eval_tasks/configs/panels/paper.yaml" in names
        assert "visdep_metrics/explorer/template.html.j2" in names  # the explorer page's template
        assert "visdep_metrics/explorer/explorer.js" in names  # and its code
        assert {"model_adapters/engines/__init__.py", "model_adapters/engines/hf.py"} <= set(names)  # the engines
        # each built-in task's data file, which names its question source
        assert {f"lmms_eval_tasks/{b}/source.jsonl" for b in ("mmau", "videomme", "mlvu")} <= set(names)
        archive.extractall(tmp_path / "site")
    # the unpacked wheel first on the path, run from outside the checkout: it, not the checkout, answers
    found = subprocess.run(
        [sys.executable, "-c", "from lmms_eval_tasks.shipped import config_file, shipped; "
                               "print(config_file('paper', 'panels')); print(sorted(shipped('specs')))"],
        check=True, capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}).stdout.splitlines()
    assert Path(found[0]) == tmp_path / "site" / "lmms_eval_tasks" / "configs" / "panels" / "paper.yaml"
    assert yaml.safe_load(Path(found[0]).read_text()) == yaml.safe_load((ROOT / "configs/panels/paper.yaml")
                                                                       .read_text())
    assert found[1] == str(sorted(Path(n).stem for n in shipped if n != "paper.yaml"))
