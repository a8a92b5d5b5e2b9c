"""The explorer on an audit with a temporal ladder (the constructed runs of tests/helpers/ladder_runs.py), in Chromium:
a question's view shows each VLM's rungs in order (blind, one frame, shuffled, reversed, video) with the probabilities
the samples files hold, and its V_frame, V_order and temporal decision as questions.csv has them.

Expected values come from the samples files and questions.csv, never from the page's data."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.helpers.ladder_runs import HELD_OUT, write_ladder_runs
from visdep_metrics.audit.compute import run_audit
from visdep_metrics.audit.report import write_audit


def test_a_questions_view_shows_each_models_ladder(browser, tmp_path):
    write_ladder_runs(tmp_path / "runs")
    out = write_audit(run_audit([tmp_path / "runs"]), tmp_path / "audit")
    questions = pd.read_csv(out / "questions.csv")
    target = questions[questions["category"] == "order"].iloc[3]
    samples = {}
    for path in (tmp_path / "runs").glob("*/*_samples_*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)["visdep"]
            if record["question_id"] == target["question_id"]:
                samples[(path.parent.name, record["mode"])] = record["option_logprobs"]

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((out / "explorer.html").resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    subsets = page.evaluate("document.getElementById('space').data.filter(t => t.meta && t.meta.subset)"
                            ".map(t => t.meta.subset)")
    assert sorted(subsets) == ["full", "grounded", "temporal"]  # the mean's points, the temporal subset's among them
    page.evaluate("q => explorer.openQuestion(q)", int(target.name))
    rows = page.evaluate("[...document.querySelectorAll('#q-probs tr')].slice(1).map(tr => "
                         "[...tr.querySelectorAll('td')].map(td => [td.textContent, td.dataset.model || null]))")
    held = [row for row in rows if row[0][0] == HELD_OUT.split("/")[-1]]
    assert [row[2][0] for row in held] == ["blind", "one frame", "shuffled", "reversed", "video"]
    folders = {"blind": ("video", "blind"), "one frame": ("single", "video"), "shuffled": ("shuffled", "video"),
               "reversed": ("reversed", "video"), "video": ("video", "video")}
    for row in held:
        condition, mode = folders[row[2][0]]
        logprobs = samples[(f"{HELD_OUT.replace('/', '__')}_{condition}", mode)]
        total = sum(pow(2.718281828459045, x) for x in logprobs)
        shown = [float(text) for text, _ in row[3:]]
        assert shown == pytest.approx([pow(2.718281828459045, x) / total for x in logprobs], abs=0.005 + 1e-9)
    assert {row[3][1] for row in held} == {HELD_OUT, f"{HELD_OUT} [frames=middle]",
                                           f"{HELD_OUT} [frame_order=shuffled]", f"{HELD_OUT} [frame_order=reversed]"}
    scores = page.inner_text("#q-scores")
    assert f"V_order = {target['V_order']:.3f}" in scores and f"V_frame = {target['V_frame']:.3f}" in scores
    assert "temporal: kept (V_order ≥ 0.1)" in scores
    page.close()
    assert errors == []
