"""`visdep audit --baseline`: checkpoints compared question by question, with paired intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/base"]) == 0
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
    # 8 questions on 8 videos are too few independent answers for an interval: withheld, with the reason
    assert np.isnan(tuned["delta_acc_video_lo"]) and np.isnan(tuned["delta_acc_video_p"])
    assert tuned["delta_acc_video_note"] == "≈ 8 independent answers: too few for an interval"
    copy = full.loc["org/base-copy"]
    # a paired difference of identical answers is 0 on every question: no interval of zero width, and p = 1
    assert (copy[[f"delta_{m}" for m in ("acc_blind", "acc_video", "visual_gain")]] == 0).all()
    assert (copy[[f"delta_{m}_p" for m in ("acc_blind", "acc_video", "visual_gain")]] == 1).all()
    assert np.isnan(copy["delta_acc_blind_lo"]) and np.isnan(copy["delta_acc_blind_hi"])
    llm = full.loc["org/llm"]
    assert llm["delta_acc_blind"] == pytest.approx(12.5) and np.isnan(llm["delta_acc_video"])


def test_report_section(compared):
    report = (compared / "report.md").read_text()
    assert "## Against the baseline base" in report  # labels: the last part of pretrained
    assert "| tuned | MM-AU | full | 8 | 12.50 (no interval: ≈ 8 independent answers: too few for an interval) |" \
        in report


def test_unknown_baseline_is_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    _write(runs, "org/base", BASE)
    out = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(out), "--baseline", "org/other"]) == 2
    assert "--baseline 'org/other' has no run here; models found: org/base" in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------- shortcut gains
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


def test_p_values_agree_with_the_intervals_and_are_adjusted_over_the_table(checkpoints):
    _, out = checkpoints
    table = pd.read_csv(out / "compare.csv").set_index("model")
    assert set(table["p_test"]) == {"t on the design effect over videos"}  # these records name no prompt
    for metric in ("acc_blind", "acc_video", "visual_gain"):
        p, lo, hi = (table[f"delta_{metric}{suffix}"] for suffix in ("_p", "_lo", "_hi"))
        has = lo.notna()
        assert ((p[has] < 0.05) == ((lo[has] > 0) | (hi[has] < 0))).all()
    # grounded answers blind exactly as the base does and sft's VG is unchanged on every question: p is 1 there
    assert table.loc["org/grounded", "delta_acc_blind_p"] == 1.0 and table.loc["org/sft", "delta_visual_gain_p"] == 1.0
    assert table.loc["org/sft", "delta_acc_video_p"] < 1e-4 and table.loc["org/grounded", "delta_visual_gain_p"] < 0.01
    # Holm by hand over every p-value of the table: the k-th smallest times (m - k + 1), made non-decreasing
    columns = [f"delta_{m}_p" for m in ("acc_blind", "acc_video", "visual_gain")]
    raw = table[columns].to_numpy().ravel()
    finite = sorted((p, i) for i, p in enumerate(raw) if not np.isnan(p))
    expected, running = np.full(raw.shape, np.nan), 0.0
    for k, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - k) * p))
        expected[i] = running
    adjusted = table[[f"{c}_adj" for c in columns]].to_numpy().ravel()
    np.testing.assert_allclose(adjusted, expected, rtol=1e-12, equal_nan=True)
    assert table["p_family"].str.startswith("Holm over every p-value of this table").all()


def test_the_sentence_names_everything_that_was_flagged(tmp_path):
    # 600 questions on 200 videos: the tuned model gains 180 questions blind (BG +30) but only 60 with the video
    # (Acc_V +10), so its Visual Gain falls by 20 points: both flags hold
    n = 600
    first = np.arange(n)
    correct = {"org/base": (first < 180, first < 360), "org/tuned": (first < 360, first < 420)}
    videos = [f"videos/{q // 3}.mp4" for q in range(n)]
    runs = tmp_path / "runs"
    for model, (blind, video) in correct.items():
        write_run(runs, model, {f"vru_accident_{mode}": records_from_correct("vru_accident", mode, c.astype(int),
                                                                             [4] * n, videos=videos)
                                for mode, c in (("blind", blind), ("video", video))})
    assert main(["audit", str(runs), "--out", str(tmp_path / "audit"), "--baseline", "org/base"]) == 0
    row = pd.read_csv(tmp_path / "audit" / "compare.csv").set_index("model").loc["org/tuned"]
    assert row["delta_acc_blind"] == pytest.approx(30) and row["delta_visual_gain"] == pytest.approx(-20)
    assert row["flagged"] == "Blind Gap rose; Visual Gain fell" and bool(row["text_shortcut_gain"])
    report = (tmp_path / "audit" / "report.md").read_text()
    assert "its accuracy rose while the Blind Gap rose and the Visual Gain fell" in report


def test_a_comparison_on_a_subset_its_models_selected_says_so(compared):
    table = pd.read_csv(compared / "compare.csv")
    grounded = table[table["subset"] == "grounded"]
    assert not grounded.empty  # org/llm forms T, the three VLMs V: org/base is among them
    assert grounded["selection_note"].str.contains("selected with the runs of").all()
    assert grounded["selection_note"].str.contains("org/base").all()
    assert table.loc[table["subset"] == "full", "selection_note"].isna().all()
    assert "Note: the subset was selected with the runs of" in (compared / "report.md").read_text()
