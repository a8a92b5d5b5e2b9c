"""`visdep audit --baseline`: checkpoints compared question by question, with paired intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.metrics.conftest import records_from_correct, write_run
from visdep_metrics.cli.main import main

K = [5] * 8
BASE = {"blind": [1, 1, 0, 0, 1, 0, 0, 0], "video": [1, 1, 1, 0, 1, 0, 0, 0]}
TUNED = {"blind": [1, 1, 1, 0, 1, 0, 0, 0], "video": [1, 1, 1, 1, 1, 1, 0, 0]}


def _write(root, model, correct, video=True):
    tasks = {"mmau_blind": records_from_correct("mmau", "blind", correct["blind"], K)}
    if video:
        tasks["mmau_video"] = records_from_correct("mmau", "video", correct["video"], K)
    write_run(root, model, tasks, model_type="visdep_vlm" if video else "visdep_llm")


@pytest.fixture
def compared(tmp_path):
    runs = tmp_path / "runs"
    _write(runs, "org/base", BASE)
    _write(runs, "org/base-copy", BASE)
    _write(runs, "org/tuned", TUNED)
    _write(runs, "org/llm", {"blind": [0, 1, 1, 1, 1, 0, 0, 0]}, video=False)
    out = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/base", "--n-resamples", "400"]) == 0
    return out


def test_deltas_by_hand(compared):
    table = pd.read_csv(compared / "compare.csv").set_index("model")
    full = table[table["subset"] == "full"]
    assert set(full.index) == {"org/base-copy", "org/tuned", "org/llm"}
    tuned = full.loc["org/tuned"]
    assert tuned["n"] == 8 and tuned["baseline"] == "org/base"
    assert tuned["delta_acc_blind"] == pytest.approx(12.5)   # 4/8 - 3/8
    assert tuned["delta_acc_video"] == pytest.approx(25.0)   # 6/8 - 4/8
    assert tuned["delta_visual_gain"] == pytest.approx(12.5)  # (6-4)/8 - (4-3)/8
    assert tuned["delta_acc_video_lo"] <= 25.0 <= tuned["delta_acc_video_hi"]
    assert tuned["delta_acc_video_lo"] >= 0.0  # the tuned model never loses a question the base had
    copy = full.loc["org/base-copy"]
    # a paired difference of identical answers is 0 in every resample; unpaired intervals would not be
    assert (copy[[c for c in copy.index if c.startswith("delta_")]] == 0).all()
    llm = full.loc["org/llm"]
    assert llm["delta_acc_blind"] == pytest.approx(12.5) and np.isnan(llm["delta_acc_video"])


def test_report_section(compared):
    report = (compared / "report.md").read_text()
    assert "## Against the baseline org/base" in report
    assert "| org/tuned | MM-AU | full | 8 | 12.50 [" in report


def test_unknown_baseline_is_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    _write(runs, "org/base", BASE)
    out = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/other"]) == 2
    assert "--baseline 'org/other' has no run here; models found: org/base" in capsys.readouterr().err
    assert not out.exists()
