"""Questions that share a blind prompt are one blind answer, not many: on the real VRU-Accident question list, whose
6,000 questions hold 3,390 distinct prompts (3,015 questions share one of 405 with questions about other videos;
Σ n_p² / N = 12.35), the audit's Acc_blind interval must have the width the shared answers give it.

Constructed runs: one model, blind correctness drawn once per distinct prompt and shared by its copies, or drawn
independently per question. Expected widths come from the normal approximation 2 z sqrt(p (1 - p) deff / N), with
deff = Σ n_p² / N counted here from the prompt ids, not from the code under test; "today's" width is the audit's on
the same records without their prompt ids (videos resampled only)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.tasks import prompt_id
from tests.helpers.runs import records_from_correct, write_run
from visdep_metrics.audit.compute import run_audit

Z = 1.959964


def questions_of(shared_benchmarks, name: str, folder: str) -> dict[str, list]:
    questions = load_benchmark(name, shared_benchmarks / folder)
    return {"video": [q.video for q in questions], "prompt": [prompt_id(q.document()) for q in questions],
            "k": [len(q.options) for q in questions]}


def acc_blind_width(root, benchmark: str, design: dict, correct, with_prompts: bool) -> float:
    records = {f"{benchmark}_{mode}": records_from_correct(benchmark, mode, correct, design["k"],
                                                           videos=design["video"],
                                                           prompts=design["prompt"] if with_prompts else None)
               for mode in ("blind", "video")}
    write_run(root, "org/vlm", records)
    row = run_audit([root]).summary.iloc[0]
    assert row["category"] == "all" and row["acc_blind"] == pytest.approx(100 * np.mean(correct))
    return row["acc_blind_hi"] - row["acc_blind_lo"]


@pytest.fixture(scope="module")
def vru(shared_benchmarks, tmp_path_factory) -> dict:
    design = questions_of(shared_benchmarks, "vru_accident", "vru_accident")
    copies = Counter(design["prompt"])
    n = len(design["prompt"])
    rng = np.random.default_rng(0)
    per_prompt = dict(zip(copies, (rng.random(len(copies)) < 0.5).astype(int), strict=True))
    shared = np.array([per_prompt[p] for p in design["prompt"]])
    independent = (rng.random(n) < 0.5).astype(int)
    root = tmp_path_factory.mktemp("vru")
    widths = {(draw, prompts): acc_blind_width(root / f"{draw}-{prompts}", "vru_accident", design, correct, prompts)
              for draw, correct in (("per prompt", shared), ("per question", independent))
              for prompts in (True, False)}
    deff = sum(c * c for c in copies.values()) / n
    analytic = {draw: 100 * 2 * Z * math.sqrt(np.mean(c) * (1 - np.mean(c)) * d / n)
                for draw, c, d in (("per prompt", shared, deff), ("per question", independent, 1.0))}
    print(f"\nVRU-Accident: {n} questions, {len(copies)} prompts, deff {deff:.2f}; 95% Acc_blind widths (points): "
          + ", ".join(f"{draw}, {'videos and prompts' if p else 'videos only'} {w:.2f}" for (draw, p), w in
                      widths.items()) + "; analytic: " + ", ".join(f"{d} {w:.2f}" for d, w in analytic.items()))
    return {"widths": widths, "analytic": analytic, "deff": deff, "n": n, "prompts": len(copies)}


def test_the_question_list_shares_prompts_as_counted(vru):
    assert vru["n"] == 6000 and vru["prompts"] == 3390 and vru["deff"] == pytest.approx(12.35, abs=0.01)


def test_answers_shared_by_a_prompt_get_the_width_of_their_prompts(vru):
    widths, analytic = vru["widths"], vru["analytic"]
    assert analytic["per prompt"] == pytest.approx(8.9, abs=0.15)
    assert widths["per prompt", True] == pytest.approx(analytic["per prompt"], rel=0.2)
    assert widths["per prompt", True] > 3 * widths["per prompt", False]  # videos alone: about 3.5 times too narrow


def test_independent_answers_keep_the_video_bootstrap_width(vru):
    widths, analytic = vru["widths"], vru["analytic"]
    assert widths["per question", True] == pytest.approx(widths["per question", False], rel=0.1)
    assert widths["per question", False] == pytest.approx(analytic["per question"], rel=0.15)


def test_mmau_without_shared_prompts_keeps_its_widths(shared_benchmarks, tmp_path):
    design = questions_of(shared_benchmarks, "mmau", "mm_au")
    assert len(set(design["prompt"])) == len(design["prompt"])
    correct = (np.random.default_rng(1).random(len(design["prompt"])) < 0.6).astype(int)
    with_prompts = acc_blind_width(tmp_path / "with", "mmau", design, correct, True)
    assert with_prompts == acc_blind_width(tmp_path / "without", "mmau", design, correct, False)
