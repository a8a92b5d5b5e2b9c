"""The README's first command: `visdep demo` runs the whole audit offline."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import lmms_eval_env

pytestmark = pytest.mark.slow


def test_demo_runs_every_stage(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "demo", "--out", str(out), "--no-smollm2",
                           "--max-frames", "4"], env=lmms_eval_env({}), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    audit = out / "audit"
    summary = pd.read_csv(audit / "summary.csv")
    full = summary[(summary["subset"] == "full") & (summary["category"] == "all")]
    # 2 text-only LLMs (blind only) + 3 VLMs, on 4 benchmarks
    assert full.groupby("benchmark")["model"].nunique().to_dict() == {
        "accidentbench": 5, "mmau": 5, "trafficqa": 5, "vru_accident": 5}
    vlm_rows = full[full["acc_video"].notna()]
    assert vlm_rows["model"].nunique() == 3 and full["acc_blind"].notna().all()
    questions = pd.read_csv(audit / "questions.csv")
    assert questions.groupby("benchmark").size().to_dict() == {"accidentbench": 16, "mmau": 10, "trafficqa": 8,
                                                               "vru_accident": 48}
    assert questions[["T", "V", "S"]].notna().all().all()
    for name in ("report.md", "filters.csv", "sweep.csv", "diagnostic_space.png"):
        assert (audit / name).stat().st_size > 0, name
    grounded = questions.groupby("benchmark")["grounded"].sum()
    for bench, n in grounded.items():
        if n:
            assert (audit / "tasks" / f"{bench}_video_grounded.yaml").is_file()
