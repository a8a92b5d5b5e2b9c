"""Iterative Bias Pruning: it removes the shortcut questions, the stress test it re-runs on the kept set
measures lower solvability, and it writes the id lists, the trace and debiased task YAMLs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from visdep_metrics.cli.main import main
from visdep_metrics.tst.ibp import TRACE_COLUMNS, iterative_bias_pruning, resolve_budget
from visdep_metrics.tst.stress_test import TstConfig, run_tst

FAST = TstConfig(folds=5, seed=11, n_estimators=60, n_jobs=1)


def test_ibp_lowers_measured_solvability(shortcut_records, shortcut_root):
    shortcut = set(json.loads((shortcut_root / "shortcut_ids.json").read_text()))
    budget = len(shortcut)
    result = iterative_bias_pruning(shortcut_records, budget=budget, batch_size=60, config=FAST, progress=False)
    trace = result.trace
    assert list(trace.columns) == TRACE_COLUMNS
    before, after = trace.iloc[0], trace.iloc[-1]
    print(f"\nIBP on {len(shortcut_records)} synthetic questions ({len(shortcut)} with a text shortcut):\n"
          + trace.to_string(index=False))
    assert result.stop_reason == "budget spent"
    assert len(result.removed) == budget and after["n_removed_total"] == budget
    assert after["n_questions"] == len(shortcut_records) - budget == len(result.kept_ids)
    assert before["accuracy"] > before["chance"] + 0.3
    assert after["accuracy"] < before["accuracy"] - 0.25
    assert after["accuracy"] < after["chance"] + 0.1
    # the last trace row is the stress test of the kept set: run it afresh on those questions
    kept = set(result.kept_ids)
    rerun = run_tst([r for r in shortcut_records if r.question_id in kept], FAST, progress=False)
    assert after["accuracy"] == pytest.approx(rerun.summary["accuracy"])
    # What was pruned is mostly the shortcut questions, highest s first within each iteration.
    assert result.removed["question_id"].isin(shortcut).mean() > 0.85
    for _, batch in result.removed.groupby("iteration"):
        assert batch["s"].is_monotonic_decreasing
    ids = [r.question_id for r in shortcut_records]
    assert set(result.kept_ids).isdisjoint(result.removed["question_id"])
    assert set(result.kept_ids) | set(result.removed["question_id"]) == set(ids)
    assert result.kept_ids == [q for q in ids if q in set(result.kept_ids)]  # benchmark order


def test_ibp_threshold_stops_and_spares_low_scores(shortcut_records):
    # Shortcut questions score s near 1; others near 1/4. With t = 0.6 only the former may go, and pruning
    # stops as soon as none is left above t, well before the generous budget is spent.
    result = iterative_bias_pruning(shortcut_records, budget=400, batch_size=100, threshold=0.6, config=FAST,
                                    progress=False)
    assert result.stop_reason == "max s <= threshold 0.6"
    assert result.trace.iloc[-1]["max_s"] <= 0.6
    assert (result.removed["s"] > 0.6).all()
    assert len(result.removed) < 400
    nothing = iterative_bias_pruning(shortcut_records, budget=100, batch_size=10, threshold=1.0, config=FAST,
                                     progress=False)
    assert nothing.removed.empty and len(nothing.trace) == 1 and nothing.stop_reason.startswith("max s")


def test_resolve_budget():
    assert resolve_budget(0.25, 480) == 120
    assert resolve_budget(37, 480) == 37
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="budget"):
            resolve_budget(bad, 480)


def test_cli_writes_lists_trace_and_debiased_tasks(shortcut_root, shortcut_records, tmp_path):
    out = tmp_path / "ibp"
    assert main(["ibp", "--benchmark", "vru_accident", "--root", str(shortcut_root), "--out", str(out),
                 "--budget", "0.25", "--batch-size", "60", "--n-estimators", "40"]) == 0
    kept = (out / "kept_ids.txt").read_text().split("\n")[:-1]
    removed = (out / "removed_ids.txt").read_text().split("\n")[:-1]
    assert len(removed) == 120 and len(kept) == len(shortcut_records) - 120
    assert pd.read_csv(out / "removed.csv")["question_id"].tolist() == removed
    trace = pd.read_csv(out / "trace.csv")
    assert trace["n_removed_total"].tolist() == [0, 60, 120]
    summary = json.loads((out / "ibp.json").read_text())
    assert summary["n_kept"] == len(shortcut_records) - 120
    # accuracy after pruning = the stress test (the CLI's defaults but 40 trees) of the kept ids it wrote
    kept_records = [r for r in shortcut_records if r.question_id in set(kept)]
    rerun = run_tst(kept_records, TstConfig(n_estimators=40), progress=False)
    assert summary["accuracy_after"] == pytest.approx(rerun.summary["accuracy"])
    assert trace["accuracy"].iloc[-1] == pytest.approx(rerun.summary["accuracy"])
    final = pd.read_csv(out / "final" / "s_x.csv")
    assert final["question_id"].tolist() == kept
    ids_file = out / "tasks" / "vru_accident_debiased_ids.jsonl"
    assert [json.loads(line)["question_id"] for line in ids_file.read_text().splitlines()] == kept
    for mode in ("blind", "video"):
        task = yaml.safe_load((out / "tasks" / f"vru_accident_{mode}_debiased.yaml").read_text()
                              .replace("!function", "function"))
        assert task["task"] == f"vru_accident_{mode}_debiased"
        # the ids file is the split named by the suffix: the task functions read the subset task's name from it
        assert task["dataset_kwargs"]["data_files"] == {"debiased": ids_file.name}
        assert task["test_split"] == "debiased"
