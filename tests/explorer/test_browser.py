"""The explorer page in a real browser (Debian's Chromium, headless, through Playwright): it loads with no console
error and no request but its own file and its frames; the diagnostic space shows every benchmark and subset with its
interval bars; the τ control keeps what questions.csv keeps; the search finds a question; its view shows the
samples' option probabilities and its frames. Screenshots of the three views go to the test's folder.

Expected values come from the audit's CSV files and the samples files lmms-eval wrote, never from the page's data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.explorer.conftest import require_browser
from tests.explorer.test_page import samples_probabilities

TAU = 0.3


def prompts(runs: Path) -> dict[str, str]:
    """question_id -> the question's text, from the prompt (`input`) of the blind samples files."""
    found = {}
    for path in runs.glob("*/*_samples_*_blind.jsonl"):
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            found[sample["visdep"]["question_id"]] = sample["input"].split("\nA. ")[0]
    return found


def check_page(browser, out: Path, runs: Path, shots: Path) -> dict:
    """Every check of the module docstring on OUT/explorer.html; returns what was seen (for the caller's own)."""
    page_path = (out / "explorer.html").resolve()
    frames = (out / "frames").resolve()
    questions = pd.read_csv(out / "questions.csv")
    headline = pd.read_csv(out / "headline.csv")
    headline = headline[headline["category"] == "all"]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(page_path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)

    # the diagnostic space: one point per benchmark and subset, at the mean's BG and VG, with its interval bars
    traces = page.evaluate("document.getElementById('space').data.map(t => ({meta: t.meta || {}, x: t.x, y: t.y, "
                           "ex: t.error_x || null, ey: t.error_y || null}))")
    placed = [t for t in traces if "subset" in t["meta"]]
    assert sorted((t["meta"]["benchmark"], t["meta"]["subset"]) for t in placed) == sorted(
        zip(headline["benchmark"], headline["subset"], strict=True))
    for t in placed:
        row = headline[(headline["benchmark"] == t["meta"]["benchmark"])
                       & (headline["subset"] == t["meta"]["subset"])].iloc[0]
        assert len(t["x"]) == len(t["y"]) == 1
        assert t["x"][0] == pytest.approx(row["blind_gap"], abs=1e-3)
        assert t["y"][0] == pytest.approx(row["visual_gain"], abs=1e-3)
        assert t["x"][0] - t["ex"]["arrayminus"][0] == pytest.approx(row["blind_gap_lo"], abs=2e-3)
        assert t["x"][0] + t["ex"]["array"][0] == pytest.approx(row["blind_gap_hi"], abs=2e-3)
        assert t["y"][0] - t["ey"]["arrayminus"][0] == pytest.approx(row["visual_gain_lo"], abs=2e-3)
        assert t["y"][0] + t["ey"]["array"][0] == pytest.approx(row["visual_gain_hi"], abs=2e-3)
    page.screenshot(path=str(shots / "explorer_space.png"), full_page=True)

    # τ moved to 0.3: the kept counts follow questions.csv
    def kept() -> dict[str, int]:
        return {b: int(page.inner_text(f"#kept-{b}")) for b in questions["benchmark"].unique()}

    at_audit_tau = kept()
    page.evaluate("v => { const r = document.getElementById('tau-range'); r.value = v; "
                  "r.dispatchEvent(new Event('input')); }", str(TAU))
    assert page.input_value("#tau") == str(TAU)
    expected = {b: int((g["S"] <= TAU).sum()) for b, g in questions.groupby("benchmark")}
    assert kept() == expected
    assert at_audit_tau == {b: int(g["grounded"].astype(bool).sum()) for b, g in questions.groupby("benchmark")}

    # the questions: search a question's text, open it
    texts = prompts(runs)
    with_frames = [q for q in questions.itertuples() if q.video == q.video]
    target = with_frames[len(with_frames) // 2]
    page.click("#tab-questions")
    page.screenshot(path=str(shots / "explorer_questions.png"))
    page.fill("#view-questions input[type=search]", texts[target.question_id])
    page.wait_for_function("n => explorer.table.rows({search: 'applied'}).count() < n", arg=len(questions))
    found = page.evaluate("explorer.table.rows({search: 'applied'}).data().toArray().map(r => r[2])")
    assert target.question_id in found
    page.evaluate("explorer.table.page.len(-1).draw()")
    page.click(f"#questions-table tbody tr:has(td:text-is('{target.question_id}'))")
    page.wait_for_selector("#view-question.active")
    assert page.inner_text("#q-text") == texts[target.question_id]

    # its option probabilities: each model's, blind and with the video, as the samples give them (two decimals)
    cells = page.evaluate("[...document.querySelectorAll('#q-probs td.p')].map(td => [td.dataset.model, "
                          "td.dataset.mode, parseInt(td.dataset.option), td.textContent])")
    probabilities = samples_probabilities(runs)
    assert len(cells) == sum(len(rows[target.question_id]) for rows in probabilities.values())
    for model, mode, option, text in cells:
        assert float(text) == pytest.approx(probabilities[(model, mode)][target.question_id][option], abs=0.005 + 1e-9)
        assert text == f"{float(text):.2f}"

    # and its frames: the contact sheet beside the page, loaded
    page.wait_for_function("() => { const i = document.getElementById('q-sheet'); "
                           "return i && i.complete && i.naturalWidth > 0; }", timeout=20_000)
    sheet = Path(page.evaluate("new URL(document.getElementById('q-sheet').src).pathname"))
    assert sheet.parent == frames and sheet.is_file()
    page.screenshot(path=str(shots / "explorer_question.png"), full_page=True)
    page.close()

    assert errors == []
    assert requests and all(url.startswith("file://") for url in requests), requests
    loaded = {Path(url.removeprefix("file://")) for url in requests}
    assert page_path in loaded and all(p == page_path or p.parent == frames for p in loaded), loaded
    return {"kept_at_audit_tau": at_audit_tau, "kept": expected, "target": target.question_id}


def test_a_missing_chromium_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="need .*chromium"):
        require_browser(tmp_path / "no-chromium")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="not under CI"):
        require_browser(tmp_path / "no-chromium")


def test_the_page_in_chromium_on_a_small_audit(browser, small_audit, tmp_path):
    seen = check_page(browser, small_audit["out"], small_audit["runs"], tmp_path)
    for name in ("space", "questions", "question"):
        assert (tmp_path / f"explorer_{name}.png").stat().st_size > 10_000
    assert seen["kept"] != seen["kept_at_audit_tau"]  # τ = 0.3 keeps other questions: the check can tell


@pytest.mark.slow
def test_the_demos_explorer_in_chromium(browser, demo, tmp_path):
    out, _ = demo
    seen = check_page(browser, out / "audit", out / "runs", tmp_path)
    assert seen["kept"] != seen["kept_at_audit_tau"]
    assert np.all([(tmp_path / f"explorer_{n}.png").is_file() for n in ("space", "questions", "question")])
