"""The temporal ladder on constructed runs with a planted truth (`tests/helpers/ladder_runs.py`): questions answerable
from the text, from one frame, from several frames in any order, or from the frames in order only.

The expected values come from the construction (`ladder_runs.truth`, the planted kinds), never from the audit's
tables: Frame and Order Gain recover the planted gains within their intervals, V_frame and V_order single out the
planted questions (precision and recall printed and tested), the temporal subset is exported as lmms-eval tasks with
the runs that chose it, and the conditions stay out of the panel and the models' means.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.helpers import ladder_runs
from tests.helpers.ladder_runs import HELD_OUT, TEXT_LLMS, VLMS, planted_questions, truth, write_ladder_runs
from visdep_metrics.audit import intervals
from visdep_metrics.audit.compute import run_audit
from visdep_metrics.audit.panels import PanelError
from visdep_metrics.audit.report import write_audit
from visdep_metrics.paired import PAIRED
from visdep_metrics.stats import crossed_intervals


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("ladder")
    q = write_ladder_runs(root / "runs")
    audit = run_audit([root / "runs"])
    out = write_audit(audit, root / "audit", explorer=False)
    return q, audit, out


def precision_recall(chosen: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    hits = int((chosen & relevant).sum())
    return hits / max(int(chosen.sum()), 1), hits / max(int(relevant.sum()), 1)


def test_frame_and_order_gains_recover_the_planted_truth(planted):
    q, audit, _ = planted
    expected = truth(q)
    rows = audit.ladder[(audit.ladder["subset"] == "full") & (audit.ladder["category"] == "all")]
    assert sorted(rows["model"]) == sorted([*VLMS, HELD_OUT])
    for _, r in rows.iterrows():
        for gain in ("frame_gain", "order_gain"):
            print(f"{r['model']}: {gain} {r[gain]:+.1f} [{r[f'{gain}_lo']:+.1f}, {r[f'{gain}_hi']:+.1f}], "
                  f"planted {expected[gain]:+.1f}")
            assert r[f"{gain}_lo"] <= expected[gain] <= r[f"{gain}_hi"]
            assert r[f"{gain}_lo"] > 0 and r[f"{gain}_p_adj"] < 0.05
        assert r["acc_video"] == pytest.approx(expected["acc_video"])
    by_category = audit.ladder[(audit.ladder["subset"] == "full") & (audit.ladder["model"] == HELD_OUT)]
    gains = by_category.set_index("category")[["frame_gain", "order_gain"]]
    # one frame answers the text and one-frame questions, shuffled frames all but the order questions: exactly no gain
    assert (gains.loc[["text", "one_frame"]] == 0).all().all()
    assert gains.loc["multi_frame", "order_gain"] == 0 and gains.loc["multi_frame", "frame_gain"] > 50
    assert gains.loc["order", "order_gain"] > 50


def test_v_order_and_v_frame_single_out_the_planted_questions(planted):
    q, audit, _ = planted
    scores = audit.questions.set_index("question_id").loc[q["id"]]
    needs_order = q["kind"] == "order"
    needs_frames = np.isin(q["kind"], ["multi_frame", "order"])
    temporal = scores["temporal"].to_numpy(dtype=bool)
    several = (scores["V_frame"] >= audit.settings.tau_order).to_numpy() & scores["grounded"].to_numpy(dtype=bool)
    for what, chosen, relevant in (("temporal subset vs order questions", temporal, needs_order),
                                   ("V_frame >= tau_order vs several-frame questions", several, needs_frames)):
        precision, recall = precision_recall(chosen, relevant)
        print(f"{what}: precision {precision:.3f}, recall {recall:.3f} ({int(chosen.sum())} chosen, "
              f"{int(relevant.sum())} planted)")
        assert precision == 1.0 and recall == 1.0
    assert not scores["grounded"].to_numpy(dtype=bool)[q["kind"] == "text"].any()


def test_conditions_are_no_models_of_the_panel_or_the_mean(planted):
    _, audit, _ = planted
    conditions = {m for m, role in audit.roles.items() if role == "frame_condition"}
    assert conditions == {f"{m} [{c}]" for m in (*VLMS, HELD_OUT)
                          for c in ("frames=middle", "frame_order=shuffled", "frame_order=reversed")}
    assert set(audit.panel.vlms) == {*VLMS, HELD_OUT} and set(audit.panel.text_llms) == set(TEXT_LLMS)
    assert set(audit.headline["models"].iloc[0].split("; ")) == {*VLMS, HELD_OUT}
    used = audit.panel_used.set_index("panel")["models"]
    assert not set(used["V"]) & conditions and set(used["V_order"]) >= {f"{m} [frame_order=shuffled]" for m in VLMS}


def test_a_condition_without_blind_runs_takes_its_checkpoints(planted, tmp_path):
    """The conditions above have no blind runs of their own; with their own (the same answers), the same tables."""
    _, audit, _ = planted
    write_ladder_runs(tmp_path / "runs", own_blind=True)
    again = run_audit([tmp_path / "runs"])
    condition = f"{HELD_OUT} [frame_order=shuffled]"
    blind = audit.summary[(audit.summary["model"] == condition) & (audit.summary["subset"] == "full")
                          & (audit.summary["category"] == "all")]["acc_blind"].item()
    own = again.summary[(again.summary["model"] == condition) & (again.summary["subset"] == "full")
                        & (again.summary["category"] == "all")]["acc_blind"].item()
    held = audit.summary[(audit.summary["model"] == HELD_OUT) & (audit.summary["subset"] == "full")
                         & (audit.summary["category"] == "all")]["acc_blind"].item()
    assert blind == held  # borrowed: the full-video model's blind answers
    assert 0 < own < 100
    pd.testing.assert_series_equal(audit.questions["temporal"], again.questions["temporal"])


def test_the_temporal_subset_is_exported_with_the_runs_that_chose_it(planted):
    q, audit, out = planted
    ids = [json.loads(line)["question_id"] for line in (out / "tasks" / "vru_accident_temporal_ids.jsonl").open()]
    assert sorted(ids) == sorted(q["id"][q["kind"] == "order"].tolist())
    task = (out / "tasks" / "vru_accident_video_temporal.yaml").read_text()
    assert "task: vru_accident_video_temporal" in task and "vru_accident_temporal_ids.jsonl" in task
    manifest = json.loads((out / "audit.json").read_text())
    assert manifest["temporal_questions"] == {"vru_accident": len(ids)} and manifest["tau_order"] == 0.1
    chosen = {run["model"] for run in manifest["chosen_by"]["vru_accident"]["V_order"]}
    assert chosen == {*VLMS, HELD_OUT, *(f"{m} [frame_order=shuffled]" for m in (*VLMS, HELD_OUT))}
    report = (out / "report.md").read_text()
    assert "needs the order: 40 of 160 questions" in report and "vru_accident_video_temporal" in report
    columns = pd.read_csv(out / "questions.csv").columns
    assert {"V_frame", "V_order", "temporal"} <= set(columns)
    assert (out / "ladder.csv").is_file()


def test_a_panel_naming_a_condition_is_refused(planted, tmp_path):
    write_ladder_runs(tmp_path / "runs", conditions=("shuffled",))
    panel = tmp_path / "panel.yaml"
    panel.write_text(yaml.safe_dump({"text_llms": list(TEXT_LLMS), "vlms": [f"{VLMS[0]} [frame_order=shuffled]"]}))
    with pytest.raises(PanelError, match="frame conditions of the temporal ladder"):
        run_audit([tmp_path / "runs"], panel_path=panel)


def test_over_a_few_dominant_prompts_gains_are_paired_and_comparisons_flagged(tmp_path, monkeypatch):
    """#44's measured limit is the prompts' wild bootstrap between unalike models (questions about videos of their own
    sharing a few prompts): compare.csv and the report say so, with the effective prompts it rests on. FG and OG there
    are one model under two conditions and get Tango's paired score interval (#55), not the wild bootstrap: no flag."""
    monkeypatch.setattr(ladder_runs, "planted_questions", lambda: planted_questions(n_videos=160, per_video=1))
    monkeypatch.setattr(ladder_runs, "visdep_record", _with_prompt(ladder_runs.visdep_record))
    calls = []

    def recorded(*args, **kwargs):
        calls.append(crossed_intervals(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(intervals, "crossed_intervals", recorded)
    write_ladder_runs(tmp_path / "runs")
    audit = run_audit([tmp_path / "runs"], baseline=VLMS[0])
    compared = audit.comparison[audit.comparison["limit_note"] != ""]
    assert not compared.empty and (compared["delta_acc_video_method"] == "wild bootstrap over prompts").any()
    assert "a few dominant prompts (≈ 12 effective prompts)" in compared["limit_note"].iloc[0]
    assert "5.2%" in compared["limit_note"].iloc[0]
    assert "limit_note" not in audit.ladder and audit.ladder["frame_gain_lo"].notna().any()
    methods = {str(m) for found in calls for m in found.method.ravel()}
    assert PAIRED in methods and "wild bootstrap over prompts" in methods  # the gains paired, the models' Δ wild
    out = write_audit(audit, tmp_path / "audit", explorer=False)
    assert "≈ 12 effective prompts" in (out / "report.md").read_text()


def _with_prompt(record):
    """visdep_record with each question's prompt one of twelve (q{i} -> p{i % 12})."""
    def shared(question_id, *args, prompt_id=None, **kwargs):
        return record(question_id, *args, prompt_id=f"p{int(question_id[1:]) % 12}", **kwargs)
    return shared
