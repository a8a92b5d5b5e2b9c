"""`visdep audit --baseline`: checkpoints compared question by question, with paired intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from tests.helpers.runs import records_from_correct, write_run
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
    assert (copy[[c for c in copy.index if c.startswith("delta_") and not c.endswith("_p")]] == 0).all()
    assert (copy[[c for c in copy.index if c.startswith("delta_") and c.endswith("_p")]] == 1).all()
    llm = full.loc["org/llm"]
    assert llm["delta_acc_blind"] == pytest.approx(12.5) and np.isnan(llm["delta_acc_video"])


def test_report_section(compared):
    report = (compared / "report.md").read_text()
    assert "## Against the baseline base" in report  # labels: the last part of pretrained
    assert "| tuned | MM-AU | full | 8 | 12.50 [" in report


def test_unknown_baseline_is_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    _write(runs, "org/base", BASE)
    out = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/other"]) == 2
    assert "--baseline 'org/other' has no run here; models found: org/base" in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------- shortcut gains (issue 10)
N, PER_VIDEO = 300, 3


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A base and two fine-tunes on 300 questions (100 videos x 3). Questions 0-149 are text-solvable (answered
    the same with or without the video), 150-299 visual. `org/sft` gains 40 text-solvable questions (right blind
    and with video) and loses 5; `org/grounded` gains 40 visual questions with the video only and loses 5."""
    rng = np.random.default_rng(3)
    text, visual = np.arange(N) < 150, np.arange(N) >= 150
    base_blind = (rng.random(N) < 0.3).astype(int)
    base_video = np.where(text, base_blind, np.maximum(base_blind, (rng.random(N) < 0.5).astype(int)))
    sft_blind, sft_video = base_blind.copy(), base_video.copy()
    gained = rng.choice(np.flatnonzero(text & (base_blind == 0)), 40, replace=False)
    lost = rng.choice(np.flatnonzero(text & (base_blind == 1)), 5, replace=False)
    for c in (sft_blind, sft_video):
        c[gained], c[lost] = 1, 0
    grounded_blind, grounded_video = base_blind.copy(), base_video.copy()
    grounded_video[rng.choice(np.flatnonzero(visual & (base_video == 0)), 40, replace=False)] = 1
    grounded_video[rng.choice(np.flatnonzero(visual & (base_video == 1) & (base_blind == 0)), 5, replace=False)] = 0
    correct = {"org/base": (base_blind, base_video), "org/sft": (sft_blind, sft_video),
               "org/grounded": (grounded_blind, grounded_video)}
    videos = [f"videos/{q // PER_VIDEO}.mp4" for q in range(N)]
    runs = tmp_path_factory.mktemp("checkpoints") / "runs"
    for model, (blind, video) in correct.items():
        write_run(runs, model, {f"vru_accident_{mode}": records_from_correct("vru_accident", mode, c, [4] * N,
                                                                             videos=videos)
                                for mode, c in (("blind", blind), ("video", video))})
    out = runs.parent / "audit"
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/base"]) == 0
    return correct, out


def test_gain_from_text_shortcuts_is_flagged_and_a_visual_gain_is_not(checkpoints):
    _, out = checkpoints
    table = pd.read_csv(out / "compare.csv").set_index("model")
    sft, grounded = table.loc["org/sft"], table.loc["org/grounded"]
    assert sft["delta_acc_video"] == pytest.approx(100 * 35 / N)
    assert sft["delta_acc_blind"] == pytest.approx(100 * 35 / N)
    assert sft["delta_visual_gain"] == pytest.approx(0.0)
    assert grounded["delta_acc_blind"] == 0 and grounded["delta_visual_gain"] == pytest.approx(100 * 35 / N)
    assert bool(sft["text_shortcut_gain"]) and not bool(grounded["text_shortcut_gain"])
    report = (out / "report.md").read_text()
    assert "- **sft** on VRU-Accident (full, 300 questions): Acc_V +11.7 points [" in report
    assert "**gain from text shortcuts**: its accuracy rose while the Blind Gap rose" in report
    assert "- **grounded** on VRU-Accident" in report and "the gain came with more use of the video." in report


def test_mcnemar_p_values_equal_scipy_binomial_test_on_the_discordant_counts(checkpoints):
    correct, out = checkpoints
    table = pd.read_csv(out / "compare.csv").set_index("model")
    base = correct["org/base"]
    for model in ("org/sft", "org/grounded"):
        for mode, column in ((0, "delta_acc_blind_p"), (1, "delta_acc_video_p")):
            ours, theirs = correct[model][mode], base[mode]
            gained = sum(int(a == 1 and b == 0) for a, b in zip(ours, theirs, strict=True))
            lost = sum(int(a == 0 and b == 1) for a, b in zip(ours, theirs, strict=True))
            expected = scipy.stats.binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
            assert table.loc[model, column] == pytest.approx(expected, rel=1e-12)
    assert table.loc["org/sft", "delta_acc_video_p"] < 1e-6 and table.loc["org/grounded", "delta_acc_blind_p"] == 1.0
    # ΔVG's p is a permutation test over videos: the visual gain is far from chance, sft's zero change is not
    assert table.loc["org/grounded", "delta_visual_gain_p"] < 0.01 and table.loc["org/sft", "delta_visual_gain_p"] > 0.5
