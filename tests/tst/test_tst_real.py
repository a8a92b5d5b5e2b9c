"""TsT-RF on the real MM-AU and VRU-Accident annotation files (../shared/benchmarks; skipped when absent).

Prints the cross-validated non-visual solvability, overall and per category (per source for MM-AU, which
has no categories), with the settings of `visdep tst`'s defaults, so `pytest tests/tst/test_tst_real.py -s`
shows the numbers `visdep tst --benchmark <name> --root <root> --out OUT` writes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from visdep_metrics.tst.stress_test import TstConfig, format_summary, run_tst

pytestmark = pytest.mark.slow
REAL = {"mmau": "mm_au", "vru_accident": "vru_accident"}


@pytest.fixture(scope="module")
def real_records(shared_benchmarks) -> dict[str, list]:
    return {name: load_benchmark(name, shared_benchmarks / folder) for name, folder in REAL.items()}


def test_mmau_solvability(real_records):
    records = real_records["mmau"]
    summary = run_tst(records, TstConfig(), "mmau", progress=False).summary
    print("\n" + format_summary(summary))
    assert summary["n_questions"] == 2453 and summary["chance"] == pytest.approx(0.2)
    assert set(summary["per_source"]) == {"CAP", "DADA"} and summary["per_category"] == {}
    # Measured 93.9% (seed 42): the option texts alone give the answer away (see the README).
    assert summary["accuracy"] > 0.8
    for row in summary["per_source"].values():
        assert row["accuracy"] > 0.8


def test_vru_accident_solvability(real_records):
    records = real_records["vru_accident"]
    result = run_tst(records, TstConfig(), "vru_accident", progress=False)
    summary = result.summary
    print("\n" + format_summary(summary))
    assert summary["n_questions"] == 6000 and summary["chance"] == pytest.approx(0.25)
    assert len(summary["per_category"]) == 6
    # Measured 95.9% overall, 92.7-98.9% per category (seed 42).
    assert summary["accuracy"] > 0.85
    for row in summary["per_category"].values():
        assert row["n"] == 1000 and row["accuracy"] > 0.8
    # Six questions per video, never split across training and held-out folds.
    videos = result.s_x.assign(video=[r.video for r in records]).groupby("video")["fold"]
    assert (videos.nunique() == 1).all() and (videos.size() == 6).all()


@pytest.mark.parametrize("name", list(REAL))
def test_permuted_answers_fall_to_chance(real_records, name):
    """The same texts with each answer index redrawn at random: the forest must find nothing. This ties
    the high solvability above to the real answers, not to leaked held-out labels."""
    rng = np.random.default_rng(0)
    records = [replace(r, answer_index=int(rng.integers(len(r.options)))) for r in real_records[name]]
    summary = run_tst(records, TstConfig(n_estimators=60), name, progress=False).summary
    n, chance = summary["n_questions"], summary["chance"]
    print(f"\n{name} with random answers: accuracy {100 * summary['accuracy']:.1f}% vs chance {100 * chance:.1f}%")
    assert abs(summary["accuracy"] - chance) < 4 * np.sqrt(chance * (1 - chance) / n)
