"""TsT-LLM end to end on a tiny random-weight Qwen2 checkpoint built offline: LoRA fine-tuning per fold
learns a planted answer-position bias that the base model does not have, and the command line writes
the same s_x.csv / summary.json contract as TsT-RF."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.records import Question
from tests.helpers.shortcut_vru import write_shortcut_vru
from visdep_metrics.cli.main import main
from visdep_metrics.tst.stress_test import S_X_COLUMNS, question_order_sha256

pytest.importorskip("peft")
pytestmark = pytest.mark.slow
TRAIN = {"folds": 2, "batch_size": 12, "learning_rate": 3e-3, "lora_r": 8, "lora_alpha": 16, "device": "cpu"}


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    from visdep_metrics.demo.tiny import build_tiny

    return build_tiny("qwen2", tmp_path_factory.mktemp("tiny_qwen2") / "qwen2")


def _answer_at(records: list[Question], k: int) -> list[Question]:
    """The same questions with the answer moved to position k (the other options keep their order)."""
    moved = []
    for r in records:
        options = list(r.options)
        options.insert(k, options.pop(r.answer_index))
        moved.append(replace(r, options=options, answer_index=k))
    return moved


def test_lora_learns_a_position_bias(tiny_qwen2, tmp_path):
    from visdep_metrics.tst.llm import LlmTstConfig, run_tst_llm

    records = load_benchmark("vru_accident", write_shortcut_vru(tmp_path, 3, 0.0, seed=4))  # 72 questions
    config = dict(TRAIN, model=str(tiny_qwen2))
    # The letter the untrained model (zero-initialised adapters) likes least.
    base_s = [run_tst_llm(_answer_at(records, k), LlmTstConfig(epochs=0, **config), progress=False).s_x["s"].mean()
              for k in range(4)]
    k = int(np.argmin(base_s))
    tuned = run_tst_llm(_answer_at(records, k), LlmTstConfig(epochs=2, **config), progress=False)
    print(f"\nTsT-LLM tiny Qwen2, answers always {'ABCD'[k]}: mean s {base_s[k]:.2f} untrained -> "
          f"{tuned.s_x['s'].mean():.2f} fine-tuned, accuracy {tuned.summary['accuracy']:.2f}")
    assert base_s[k] < 0.3
    assert tuned.summary["accuracy"] > 0.9
    assert tuned.s_x["s"].mean() > base_s[k] + 0.15
    for first, last in tuned.summary["model"]["train_loss_first_last"]:
        assert last < first


def test_cli_llm_writes_the_contract(tiny_qwen2, fixture_env, tmp_path):
    out = tmp_path / "llm"
    root = fixture_env["VRU_ACCIDENT_ROOT"]
    assert main(["tst", "--method", "llm", "--model", str(tiny_qwen2), "--benchmark", "vru_accident", "--root", root,
                 "--out", str(out), "--folds", "2", "--epochs", "1", "--batch-size", "16", "--lora-r", "4",
                 "--lora-alpha", "8", "--device", "cpu"]) == 0
    s_x = pd.read_csv(out / "s_x.csv")
    summary = json.loads((out / "summary.json").read_text())
    ids = [r.question_id for r in load_benchmark("vru_accident", root)]
    assert list(s_x.columns) == S_X_COLUMNS and s_x["question_id"].tolist() == ids
    assert summary["question_order_sha256"] == question_order_sha256(ids)
    assert summary["model"]["method"] == "TsT-LLM" and summary["folds"] == 2
    assert s_x["s"].between(0, 1).all() and summary["accuracy"] == pytest.approx(s_x["correct"].mean())
