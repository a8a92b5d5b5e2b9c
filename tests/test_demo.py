"""The README's first command, `visdep demo`: a panel trained on a planted-truth benchmark, through the real
lmms-eval command line and the audit, every filter scored against the truth; and `visdep validate`.

The demo's numbers are recomputed here from the sample files lmms-eval wrote and the planted side file, with
the paper's formulas written out in numpy: nothing is read back from the audit to check the audit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.helpers.lmms_cli import lmms_eval_env

pytestmark = pytest.mark.slow
TAU = 0.1


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("demo")
    out, cache = root / "demo", root / "cache"
    proc = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "demo", "--out", str(out), "--cache-dir",
                           str(cache)], env=lmms_eval_env({}), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, cache


def samples(out: Path) -> dict[str, dict[str, pd.DataFrame]]:
    """{pretrained: {mode: rows (question_id, logprobs, answer)}} from every run lmms-eval wrote."""
    found: dict[str, dict[str, pd.DataFrame]] = {}
    for results in out.glob("runs/*/*_results.json"):
        args = json.loads(results.read_text())["config"]["model_args"]
        pretrained = re.search(r"pretrained=([^,]+)", args).group(1)
        for path in results.parent.glob(results.name.replace("_results.json", "_samples_*.jsonl")):
            mode = path.stem.rsplit("_", 1)[1]
            rows = [json.loads(line)["visdep"] for line in path.read_text().splitlines()]
            found.setdefault(pretrained, {})[mode] = pd.DataFrame(
                {"question_id": [r["question_id"] for r in rows], "logprobs": [r["option_logprobs"] for r in rows],
                 "answer": [r["answer_index"] for r in rows]}).set_index("question_id")
    return found


def probabilities(rows: pd.DataFrame, order) -> np.ndarray:
    lp = np.array(rows.loc[order, "logprobs"].tolist())
    p = np.exp(lp - lp.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def test_the_demo_against_its_planted_truth(demo):
    out, _ = demo
    planted = pd.read_csv(out / "data" / "planted.csv")
    order = planted["question_id"]
    panel = yaml.safe_load((out / "panel.yaml").read_text())
    runs = samples(out)
    assert set(runs) == set(panel["text_llms"] + panel["vlms"] + panel["held_out"])
    answer = runs[panel["vlms"][0]]["blind"].loc[order, "answer"].to_numpy()
    k = 4
    # T, V, S by the paper's equations 3-6
    t = []
    for model in panel["text_llms"]:
        p = probabilities(runs[model]["blind"], order)
        entropy = -(p * np.log(p)).sum(axis=1) / np.log(k)
        t.append((p.argmax(axis=1) == answer) * (1 - entropy))
    v = [(probabilities(runs[m]["video"], order)[np.arange(len(order)), answer]
          - probabilities(runs[m]["blind"], order)[np.arange(len(order)), answer]) / (1 - 1 / k) for m in panel["vlms"]]
    s = np.mean(t, axis=0) - np.mean(v, axis=0)
    audit = pd.read_csv(out / "audit" / "questions.csv").set_index("question_id").loc[order]
    np.testing.assert_allclose(audit["S"], s, rtol=0, atol=1e-9)
    grounded = s <= TAU
    assert (audit["grounded"].astype(bool).to_numpy() == grounded).all()
    assert 0 < grounded.sum() < len(order), "the grounded subset must differ from the full set"

    # the S filter against the truth: the report's numbers, recomputed
    text_solvable = planted["planted_type"].isin(["text_only", "both"]).to_numpy()
    removed = ~grounded
    precision = (removed & text_solvable).sum() / removed.sum()
    recall = (removed & text_solvable).sum() / text_solvable.sum()
    kept = (grounded & (planted["planted_type"] == "video_only").to_numpy()).sum() / \
        (planted["planted_type"] == "video_only").sum()
    filters = pd.read_csv(out / "planted" / "filters.csv").set_index("filter")
    row = filters.loc[f"S <= {TAU:g}"]
    assert (row["precision"], row["recall"], row["video_only_kept"]) == pytest.approx((precision, recall, kept))
    assert row["precision_lo"] <= precision <= row["precision_hi"] and row["recall_lo"] <= recall <= row["recall_hi"]
    report = (out / "report.md").read_text()
    assert (f"| S <= {TAU:g} | {removed.sum()} | {precision:.2f} [{row['precision_lo']:.2f}, "
            f"{row['precision_hi']:.2f}] | {recall:.2f} [{row['recall_lo']:.2f}, {row['recall_hi']:.2f}] |") in report
    print(f"\nS <= {TAU}: precision {precision:.3f} [{row['precision_lo']:.3f}, {row['precision_hi']:.3f}], "
          f"recall {recall:.3f} [{row['recall_lo']:.3f}, {row['recall_hi']:.3f}], video-only kept {kept:.3f}")

    # every VLM (the V panel and the held-out one): VG on the grounded subset above VG on the full set
    for model in panel["vlms"] + panel["held_out"]:
        correct = {mode: probabilities(runs[model][mode], order).argmax(axis=1) == answer
                   for mode in ("blind", "video")}
        vg = {}
        for subset, keep in (("full", np.ones(len(order), bool)), ("grounded", grounded)):
            acc_b, acc_v = 100 * correct["blind"][keep].mean(), 100 * correct["video"][keep].mean()
            vg[subset] = acc_v - acc_b
            line = (f"| {Path(model).name} | {subset} | {keep.sum()} | {acc_b:.1f} | {acc_v:.1f} | "
                    f"{acc_b - 100 / k:.1f} | {vg[subset]:.1f} |")
            assert line in report, line
        assert vg["grounded"] > vg["full"], model
    timing = json.loads((out / "timing.json").read_text())
    print(f"demo wall time {timing['total_s']:.0f} s (training {timing['train_s']:.0f} s)")


def test_validate_prints_which_settings_recover_the_shortcuts(demo, tmp_path):
    _, cache = demo  # the panel the demo trained
    proc = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "validate", "--cache-dir", str(cache),
                           "--videos", "30", "--shares", "0.7", "--strengths", "1.0", "0.6", "--taus", "0.1", "0.3",
                           "--no-smollm2", "--out", str(tmp_path)], env=lmms_eval_env({}), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pd.read_csv(tmp_path / "validate.csv")
    assert len(table) == 2 * 2 * 2  # strengths x panel sizes (the two trained LLMs) x taus
    assert set(table["strength"]) == {1.0, 0.6} and set(table["panel_size"]) == {1, 2}
    assert table[["precision", "recall", "video_only_kept"]].apply(lambda c: c.between(0, 1)).all().all()
    assert (table["recovers"] == ((table["precision"] >= 0.8) & (table["recall"] >= 0.8)
                                  & (table["video_only_kept"] >= 0.9))).all()
    assert "settings recover the planted shortcuts" in proc.stdout
