"""End to end: folders written by the real lmms-eval CLI (+ a real `visdep tst` output) -> `visdep audit` ->
grounded tasks -> the real CLI runs `mmau_video_grounded` on exactly the kept questions.

lmms-eval's `dummy` model scores every option 0.0, so all its runs look alike. To get five distinct models,
the test runs the real CLI once with `dummy` and then REWRITES the written files per model: results.json's
`config.model_args` gets `pretrained=<model>` and every sample's `visdep.option_logprobs` (with its
`filtered_resps` and `acc`) gets log-probabilities designed below; text-only models lose their video files.
Everything else (layout, keys, stringified responses, rank order) is what lmms-eval wrote.
"""

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval

TASKS = ["mmau_blind", "mmau_video", "vru_accident_blind", "vru_accident_video"]
LLMS = ["org/text-llm-a", "org/text-llm-b"]
VLMS = ["org/vlm-a", "org/vlm-b"]
HELD_OUT = "org/vlm-held-out"


def probabilities(k: int, answer: int, p_answer: float, other: int | None = None) -> list[float]:
    """K probabilities with p_answer on the answer; if `other` is given, the rest of the mass mostly goes there."""
    rest = 1.0 - p_answer
    p = [rest / (k - 1)] * k
    if other is not None:
        p = [0.02 * rest] * k
        p[other] = rest - 0.02 * rest * (k - 2)
    p[answer] = p_answer
    return p


def designed_logprobs(model: str, mode: str, record: dict, doc_id: int) -> list[float]:
    """Even doc_ids are 'visual' questions (text LLMs wrong, video helps the VLMs); odd ones 'shortcut' questions
    (text LLMs right and confident, video changes nothing). Expected: grounded = even doc_ids."""
    k, y = record["n_options"], record["answer_index"]
    wrong = (y + 1) % k
    visual = doc_id % 2 == 0
    if model in LLMS:
        p = probabilities(k, y, 0.05, other=wrong) if visual else probabilities(k, y, 0.9)
    elif model == HELD_OUT:
        p = probabilities(k, y, 0.7 if mode == "video" else 0.1, other=None if mode == "video" else wrong)
    elif visual:
        p = probabilities(k, y, 0.85) if mode == "video" else probabilities(k, y, 0.15, other=wrong)
    else:
        p = probabilities(k, y, 0.6)
    return [math.log(x) - 1.5 for x in p]


def rewrite_as(model: str, dummy_out, root):
    """A copy of the dummy run that claims to be `model` and carries its designed log-probabilities."""
    folder = root / model.replace("/", "__")
    shutil.copytree(dummy_out, folder, ignore=shutil.ignore_patterns("cli.log"))
    (results_path,) = folder.glob("*_results.json")
    results = json.loads(results_path.read_text())
    results["config"]["model_args"] = f"pretrained={model}"
    if model in LLMS:  # text-only: blind runs only
        for path in folder.glob("*_samples_*_video.jsonl"):
            path.unlink()
        results["configs"] = {t: c for t, c in results["configs"].items() if not t.endswith("_video")}
    for path in folder.glob("*_samples_*.jsonl"):
        lines = []
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            record = sample["visdep"]
            record["option_logprobs"] = designed_logprobs(model, record["mode"], record, sample["doc_id"])
            sample["filtered_resps"] = [f"({-x}, False)" for x in record["option_logprobs"]]
            sample["acc"] = float(int(np.argmax(record["option_logprobs"])) == record["answer_index"])
            lines.append(json.dumps(sample))
        path.write_text("\n".join(lines) + "\n")
        # what lmms-eval would have measured on these samples (the audit checks the two agree)
        task = path.stem.split("_samples_", 1)[1]
        results["results"][task]["acc,none"] = float(np.mean([json.loads(line)["acc"] for line in lines]))
    results_path.write_text(json.dumps(results))


@pytest.mark.slow
def test_cli_runs_audit_and_grounded_task(fixture_env, tmp_path):
    env = lmms_eval_env(fixture_env)
    dummy_out = tmp_path / "dummy"
    proc = run_lmms_eval(["--model", "dummy", "--tasks", ",".join(TASKS)], env, dummy_out)
    assert proc.returncode == 0, (dummy_out / "cli.log").read_text()[-3000:]
    assert read_results(dummy_out)["n-samples"]["mmau_video"]["effective"] == 10
    runs = tmp_path / "runs"
    for model in LLMS + VLMS + [HELD_OUT]:
        rewrite_as(model, dummy_out, runs)
    panel = tmp_path / "panel.yaml"
    panel.write_text(f"text_llms: {LLMS}\nvlms: {VLMS}\nheld_out: [{HELD_OUT}]\n")

    tst = tmp_path / "tst_mmau"  # the real `visdep tst` on the same benchmark files
    proc = subprocess.run(["visdep", "tst", "--benchmark", "mmau", "--out", str(tst)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    out = tmp_path / "audit"
    proc = subprocess.run(["visdep", "audit", str(runs), "--panel", str(panel), "--out", str(out), "--tst", str(tst)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    questions = pd.read_csv(out / "questions.csv", dtype={"question_id": str})
    mmau = questions[questions["benchmark"] == "mmau"]
    doc_order = [s["visdep"]["question_id"] for s in sorted(read_samples(dummy_out, "mmau_video"),
                                                            key=lambda s: s["doc_id"])]
    expected = [q for i, q in enumerate(doc_order) if i % 2 == 0]
    assert mmau["question_id"].tolist() == doc_order
    assert mmau.loc[mmau["grounded"], "question_id"].tolist() == expected
    assert (mmau.loc[~mmau["grounded"], "T"] > 0.1).all() and (mmau.loc[mmau["grounded"], "S"] < 0).all()
    summary = pd.read_csv(out / "summary.csv")
    row = summary[(summary["model"] == LLMS[0]) & (summary["benchmark"] == "mmau") & (summary["subset"] == "full")]
    assert row["acc_blind"].item() == 50.0 and row["blind_gap"].item() == 30.0 and np.isnan(row["acc_video"].item())
    grounded = summary[(summary["model"] == VLMS[0]) & (summary["benchmark"] == "mmau")
                       & (summary["subset"] == "grounded") & (summary["category"] == "all")]
    assert grounded["acc_blind"].item() == 0.0 and grounded["visual_gain"].item() == 100.0
    s_x = pd.read_csv(tst / "s_x.csv", dtype={"question_id": str}).set_index("question_id")
    assert mmau["s_tst"].tolist() == s_x.loc[mmau["question_id"], "s"].tolist()
    report = (out / "report.md").read_text()
    assert f"**MM-AU, {HELD_OUT.split('/')[-1]}** (held out)" in report and "VRU-Accident" in report  # its label
    # the samples name each question's video and prompt: 10 videos, 10 distinct prompts, so the videos are the units
    assert "| MM-AU | 10 | 10 | 10 | questions (blind), videos (with video); no prompt shared |" in report
    kept_solvability = 100 * s_x.loc[expected, "correct"].mean()
    assert f"| MM-AU | full | 10 | {100 * s_x['correct'].mean():.2f} |" in report
    assert f"| MM-AU | grounded | 5 | {kept_solvability:.2f} |" in report
    assert (out / "tasks" / "mmau_video_grounded.yaml").is_file()
    assert (out / "tasks" / "vru_accident_video_grounded.yaml").is_file()

    grounded_out = tmp_path / "grounded_run"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(out / "tasks"), "--tasks", "mmau_video_grounded"],
                         env, grounded_out)
    assert proc.returncode == 0, (grounded_out / "cli.log").read_text()[-3000:]
    samples = read_samples(grounded_out, "mmau_video_grounded")
    assert sorted(s["visdep"]["question_id"] for s in samples) == sorted(expected), \
        (grounded_out / "cli.log").read_text()[-3000:]
    assert len(samples) == len(expected) == 5
    assert all(s["visdep"]["mode"] == "video" for s in samples)


def test_visdep_cli_lists_audit():
    proc = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "audit", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--panel" in proc.stdout and "--tst" in proc.stdout
