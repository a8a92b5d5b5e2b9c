"""End to end with real (tiny) models through the real lmms-eval CLI: one checkpoint run with default arguments and
with `max_frames=8`, plus a second checkpoint, each blind and video into one tree, then one `visdep audit
--baseline`; and a checkpoint folder whose weights change between its blind and its video run.

Expected values are computed here from the samples files lmms-eval wrote (argmax of the option log-probabilities
against the answer), not read from the audit's own tables."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from model_adapters.settings import DEFAULT_MAX_FRAMES
from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval

pytestmark = pytest.mark.slow
LIMIT = 18  # the first three VRU-Accident videos, six questions each
TASKS = "vru_accident_blind,vru_accident_video"


def accuracy_by_question(out, task) -> dict[str, float]:
    return {s["visdep"]["question_id"]: float(np.argmax(s["visdep"]["option_logprobs"]) == s["visdep"]["answer_index"])
            for s in read_samples(out, task)}


def run_tiny(path, out, env, tasks: str = TASKS, extra: str = ""):
    proc = run_lmms_eval(["--model", "visdep_vlm", "--model_args", f"pretrained={path},device=cpu,dtype=float32{extra}",
                          "--tasks", tasks, "--limit", str(LIMIT), "--batch_size", "6"], env, out)
    assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
    for task in tasks.split(","):  # check what it wrote
        assert len(read_samples(out, task)) == LIMIT, (out / "cli.log").read_text()[-3000:]
    return proc


@pytest.fixture(scope="module")
def tree(fixture_env, tmp_path_factory):
    from visdep_metrics.demo.tiny import build_tiny

    root = tmp_path_factory.mktemp("frame_budgets")
    qwen = build_tiny("qwen2_5_vl", root / "models" / "tiny_qwen")
    llava = build_tiny("llava_onevision", root / "models" / "tiny_llava")
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1")
    runs = {"q_default": (qwen, ""), "q8": (qwen, ",max_frames=8"), "llava": (llava, "")}
    outs = {name: root / "runs" / name for name in runs}
    for name, (path, extra) in runs.items():
        run_tiny(path, outs[name], env, extra=extra)
    audit = root / "audit"
    proc = subprocess.run(["visdep", "audit", str(root / "runs"), "--out", str(audit), "--baseline",
                           "tiny_qwen [max_frames=8]", "--label", f"{llava}=llava"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = {(name, task.rsplit("_", 1)[1]): accuracy_by_question(out, task)
                for name, out in outs.items() for task in TASKS.split(",")}
    return {"audit": audit, "qwen": str(qwen), "llava": str(llava), "accuracy": accuracy, "outs": outs,
            "videos": {s["visdep"]["video"] for s in read_samples(outs["q8"], "vru_accident_video")}}


def within_or_withheld(row, metric: str) -> None:
    """The interval holds the value and p lies in (0, 1], or (3 videos are few answers) the interval is withheld with
    its reason, and p with it unless every question gives the same difference (then p = 1)."""
    if isinstance(row[f"{metric}_note"], str) and row[f"{metric}_note"]:
        assert np.isnan(row[f"{metric}_lo"]) and np.isnan(row[f"{metric}_hi"])
        assert np.isnan(row[f"{metric}_p"]) or row[f"{metric}_p"] == 1
    else:
        assert row[f"{metric}_lo"] <= row[metric] <= row[f"{metric}_hi"]
        assert 0 < row[f"{metric}_p"] <= 1


def test_three_models_in_one_audit_resampling_videos_and_prompts(tree):
    summary = pd.read_csv(tree["audit"] / "summary.csv")
    overall = summary[(summary["subset"] == "full") & (summary["category"] == "all")].set_index("model")
    q16, q8 = f"{tree['qwen']} [max_frames={DEFAULT_MAX_FRAMES}]", f"{tree['qwen']} [max_frames=8]"
    assert set(overall.index) == {q16, q8, tree["llava"]}
    for model, name in ((q16, "q_default"), (q8, "q8"), (tree["llava"], "llava")):
        assert overall.loc[model, "acc_video"] == pytest.approx(100 * np.mean(list(tree["accuracy"][name, "video"]
                                                                                  .values())))
    assert len(tree["videos"]) == 3
    # the label follows the design of these questions: whether any two of them share their blind prompt
    prompts = [s["visdep"]["prompt_id"] for s in read_samples(tree["outs"]["q8"], "vru_accident_blind")]
    shared = len(set(prompts)) < len(prompts)
    assert (overall["resampled"] == ("prompts (blind), videos and prompts (with video)" if shared
                                    else "questions (blind), videos (with video); no prompt shared")).all()
    assert (overall["n_videos"] == 3).all()
    manifest = json.loads((tree["audit"] / "audit.json").read_text())
    assert manifest["models"][q8]["label"] == "tiny_qwen [max_frames=8]"
    assert manifest["models"][tree["llava"]]["label"] == "llava"
    # each run recorded its model: the checkpoint's identity, the same for both budgets of one folder
    identities = {read_results(tree["outs"][name])["visdep"]["model"]["checkpoint"]["identity"]
                  for name in ("q_default", "q8")}
    assert len(identities) == 1 and not any("checkpoint identity" in note for note in manifest["notes"])


def test_default_arguments_and_a_frame_ablation_give_the_frame_budget_table(tree):
    frames = pd.read_csv(tree["audit"] / "frames.csv")
    assert frames["checkpoint"].tolist() == ["tiny_qwen", "tiny_qwen"]
    assert frames["max_frames"].tolist() == [8, DEFAULT_MAX_FRAMES]
    default = frames.iloc[1]
    gained = np.mean([tree["accuracy"]["q_default", "video"][q] - tree["accuracy"]["q8", "video"][q]
                      for q in tree["accuracy"]["q8", "video"]])
    assert default["delta_acc_video"] == pytest.approx(100 * gained)
    within_or_withheld(default, "delta_acc_video")
    assert (tree["audit"] / "frames.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Frame budgets" in (tree["audit"] / "report.md").read_text()


def test_baseline_differences_with_intervals_and_p_values(tree):
    compare = pd.read_csv(tree["audit"] / "compare.csv")
    full = compare[compare["subset"] == "full"].set_index("model")
    q16 = f"{tree['qwen']} [max_frames={DEFAULT_MAX_FRAMES}]"
    assert set(full.index) == {q16, tree["llava"]}
    for model, name in ((q16, "q_default"), (tree["llava"], "llava")):
        row = full.loc[model]
        for mode, metric in (("blind", "acc_blind"), ("video", "acc_video")):
            ours, base = tree["accuracy"][name, mode], tree["accuracy"]["q8", mode]
            assert row[f"delta_{metric}"] == pytest.approx(100 * np.mean([ours[q] - base[q] for q in base]))
            within_or_withheld(row, f"delta_{metric}")
    # the frame budget does not reach blind runs: the two budgets answer alike without the video
    assert full.loc[q16, "delta_acc_blind"] == 0
    report = (tree["audit"] / "report.md").read_text()
    assert "## Against the baseline tiny_qwen [max_frames=8]" in report and "- **llava** on VRU-Accident" in report


def test_weights_changed_between_the_blind_and_the_video_run_are_refused(fixture_env, tmp_path):
    from visdep_metrics.demo.tiny import build_tiny

    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1")
    folder = build_tiny("qwen2_5_vl", tmp_path / "models" / "tiny_qwen")
    run_tiny(folder, tmp_path / "runs" / "blind", env, tasks="vru_accident_blind")
    build_tiny("qwen2_5_vl", folder, seed=1)  # fine-tuned in place: new weights in the same folder
    run_tiny(folder, tmp_path / "runs" / "video", env, tasks="vru_accident_video")
    identities = [read_results(tmp_path / "runs" / mode)["visdep"]["model"]["checkpoint"]["identity"]
                  for mode in ("blind", "video")]
    assert identities[0] != identities[1]
    proc = subprocess.run(["visdep", "audit", str(tmp_path / "runs"), "--out", str(tmp_path / "audit")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and not (tmp_path / "audit").exists()
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("visdep audit: error: ") and "ran different checkpoints" in error
    for mode in ("blind", "video"):
        (results,) = (tmp_path / "runs" / mode).rglob("*_results.json")
        assert str(results) in error
