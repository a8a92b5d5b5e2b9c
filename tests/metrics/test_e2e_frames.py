"""End to end with real (tiny) models through the real lmms-eval CLI (issue 10): one checkpoint at two frame
budgets plus a second checkpoint, each run blind and video into one tree, then one `visdep audit --baseline`.

Expected values are computed here from the samples files lmms-eval wrote (argmax of the option log-probabilities
against the answer), not read from the audit's own tables."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from tests.helpers.lmms_cli import lmms_eval_env, read_samples, run_lmms_eval

pytestmark = pytest.mark.slow
LIMIT = 18  # the first three VRU-Accident videos, six questions each
TASKS = "vru_accident_blind,vru_accident_video"


def accuracy_by_question(out, task) -> dict[str, float]:
    return {s["visdep"]["question_id"]: float(np.argmax(s["visdep"]["option_logprobs"]) == s["visdep"]["answer_index"])
            for s in read_samples(out, task)}


@pytest.fixture(scope="module")
def tree(fixture_env, tmp_path_factory):
    from visdep_metrics.demo.tiny import build_tiny

    root = tmp_path_factory.mktemp("frame_budgets")
    qwen = build_tiny("qwen2_5_vl", root / "models" / "tiny_qwen")
    llava = build_tiny("llava_onevision", root / "models" / "tiny_llava")
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1")
    runs = {"q2": (qwen, 2), "q4": (qwen, 4), "llava": (llava, 2)}
    outs = {name: root / "runs" / name for name in runs}

    def run(name):
        path, frames = runs[name]
        return run_lmms_eval(["--model", "visdep_vlm", "--model_args",
                              f"pretrained={path},device=cpu,dtype=float32,max_frames={frames}", "--tasks", TASKS,
                              "--limit", str(LIMIT), "--batch_size", "6"], env, outs[name])

    with ThreadPoolExecutor(max_workers=2) as pool:  # a run is mostly lmms-eval's start-up on one core
        list(pool.map(run, runs))
    for out in outs.values():  # the CLI exits 0 when evaluation failed: check what it wrote
        for task in TASKS.split(","):
            assert len(read_samples(out, task)) == LIMIT, (out / "cli.log").read_text()[-3000:]
    audit = root / "audit"
    proc = subprocess.run(["visdep", "audit", str(root / "runs"), "--out", str(audit), "--baseline",
                           "tiny_qwen [max_frames=2]", "--label", f"{llava}=llava"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = {(name, task.rsplit("_", 1)[1]): accuracy_by_question(out, task)
                for name, out in outs.items() for task in TASKS.split(",")}
    return {"audit": audit, "qwen": str(qwen), "llava": str(llava), "accuracy": accuracy,
            "videos": {s["visdep"]["video"] for s in read_samples(outs["q2"], "vru_accident_video")}}


def test_three_models_in_one_audit_resampling_videos(tree):
    summary = pd.read_csv(tree["audit"] / "summary.csv")
    overall = summary[(summary["subset"] == "full") & (summary["category"] == "all")].set_index("model")
    q2, q4 = f"{tree['qwen']} [max_frames=2]", f"{tree['qwen']} [max_frames=4]"
    assert set(overall.index) == {q2, q4, tree["llava"]}
    for model, name in ((q2, "q2"), (q4, "q4"), (tree["llava"], "llava")):
        assert overall.loc[model, "acc_video"] == pytest.approx(100 * np.mean(list(tree["accuracy"][name, "video"]
                                                                                  .values())))
    assert len(tree["videos"]) == 3
    assert (overall["resampled"] == "videos").all() and (overall["n_resampled"] == 3).all()
    manifest = json.loads((tree["audit"] / "audit.json").read_text())
    assert manifest["models"][q4]["label"] == "tiny_qwen [max_frames=4]"
    assert manifest["models"][tree["llava"]]["label"] == "llava"


def test_frame_budget_table_and_plot(tree):
    frames = pd.read_csv(tree["audit"] / "frames.csv")
    assert frames["checkpoint"].tolist() == ["tiny_qwen", "tiny_qwen"] and frames["max_frames"].tolist() == [2, 4]
    four = frames.iloc[1]
    gained = np.mean([tree["accuracy"]["q4", "video"][q] - tree["accuracy"]["q2", "video"][q]
                      for q in tree["accuracy"]["q2", "video"]])
    assert four["delta_acc_video"] == pytest.approx(100 * gained)
    assert four["delta_acc_video_lo"] <= four["delta_acc_video"] <= four["delta_acc_video_hi"]
    assert 0 < four["delta_acc_video_p"] <= 1 and 0 < four["delta_visual_gain_p"] <= 1
    assert (tree["audit"] / "frames.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Frame budgets" in (tree["audit"] / "report.md").read_text()


def test_baseline_differences_with_intervals_and_p_values(tree):
    compare = pd.read_csv(tree["audit"] / "compare.csv")
    full = compare[compare["subset"] == "full"].set_index("model")
    assert set(full.index) == {f"{tree['qwen']} [max_frames=4]", tree["llava"]}
    for model, name in ((f"{tree['qwen']} [max_frames=4]", "q4"), (tree["llava"], "llava")):
        row = full.loc[model]
        for mode, metric in (("blind", "acc_blind"), ("video", "acc_video")):
            ours, base = tree["accuracy"][name, mode], tree["accuracy"]["q2", mode]
            assert row[f"delta_{metric}"] == pytest.approx(100 * np.mean([ours[q] - base[q] for q in base]))
            assert row[f"delta_{metric}_lo"] <= row[f"delta_{metric}"] <= row[f"delta_{metric}_hi"]
            assert 0 < row[f"delta_{metric}_p"] <= 1
    # the frame budget does not reach blind runs: the two budgets answer alike without the video
    assert full.loc[f"{tree['qwen']} [max_frames=4]", "delta_acc_blind"] == 0
    report = (tree["audit"] / "report.md").read_text()
    assert "## Against the baseline tiny_qwen [max_frames=2]" in report and "- **llava** on VRU-Accident" in report
