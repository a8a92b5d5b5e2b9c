"""The explorer page keeps every string from data as text (Chromium, headless, through Playwright).

Runs whose question ids, categories, question texts, options and model names hold script, event handlers,
`</script>`, U+2028/U+2029, template syntax and Plotly's own markup are audited through the real command line, and
the page is opened: no script of theirs runs (window.PWNED stays unset, no console error: not even a refused inline
handler, which would mean one was written), each string shows literally where the page shows it, the search finds
each, and no request or navigation leaves file:. The expected strings are the ones written into the runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.explorer.conftest import BENCHMARK
from tests.helpers.runs import log_probabilities, sample_line, visdep_record, write_run

HOSTILE = [
    '<img src=x onerror="window.PWNED=1">',
    "<script>window.PWNED=2</script>",
    "</script><script>window.PWNED=3</script>",
    '"><svg onload=window.PWNED=4>',
    "<a href='http://127.0.0.1:9/leak'>click</a>",
    "<meta http-equiv=refresh content='0;url=http://127.0.0.1:9/'>",
    "line\u2028separator and paragraph\u2029separator",
    "{{ 7*7 }} ${7*7} %{x} &lt;b&gt; &amp;",
    "<b>bold</b> 'single' \"double\" \\ back",
]
# a text LLM and a VLM named after hostile strings (no "/" or ",": the last part of a name is its label)
HOSTILE_MODELS = {"<img src=x onerror=window.PWNED=5>": ("visdep_llm", 1.0, None),
                  "{{ 7*7 }} %{y} \u2029<svg onload=window.PWNED=6>": ("visdep_vlm", 0.4, 2.0),
                  "org/llm-plain": ("visdep_llm", 0.5, None), "org/vlm-plain": ("visdep_vlm", 0.6, 1.5)}


def _question(i: int, base) -> dict:
    """Question i of the run: the fixture's question `base` with hostile id, category, text and first option."""
    text = HOSTILE[i % len(HOSTILE)]
    options = [f"{HOSTILE[(i + 1) % len(HOSTILE)]} (option {i})", *base.options[1:]]
    return {"question_id": f"{text} #{i}", "category": f"{HOSTILE[(i + 2) % len(HOSTILE)]} (category)",
            "question": f"{text} (question {i})", "options": options, "answer_index": base.answer_index,
            "video": base.video}


@pytest.fixture(scope="module")
def hostile_audit(tmp_path_factory, fixture_env) -> dict:
    from lmms_eval_tasks.loaders import load_benchmark
    from lmms_eval_tasks.tasks import build_prompt
    from visdep_metrics.cli.main import main

    root = Path(fixture_env["VRU_ACCIDENT_ROOT"])
    base = load_benchmark(BENCHMARK, root)
    questions = [_question(i, q) for i, q in enumerate(base[:2 * len(HOSTILE)])]
    work = tmp_path_factory.mktemp("hostile")
    for m, (model, (adapter, blind, video)) in enumerate(HOSTILE_MODELS.items()):
        rng = np.random.default_rng(m)
        tasks = {}
        for mode, skill in (("blind", blind), ("video", video)):
            if skill is None:
                continue
            rows = []
            for q in questions:
                scores = rng.normal(0, 1, len(q["options"]))
                scores[q["answer_index"]] += skill
                rows.append(visdep_record(q["question_id"], BENCHMARK, mode, q["answer_index"],
                                          log_probabilities(scores), category=q["category"], video=q["video"],
                                          prompt_id=f"{len(rows):016d}"))
            tasks[f"{BENCHMARK}_{mode}"] = rows
        folder = write_run(work / "runs", None, tasks, model_type=adapter, subfolder=f"model{m}",
                           visdep={"model": {"pretrained": model, "adapter": adapter, "settings": {}}})
        for task, rows in tasks.items():
            path = next(folder.glob(f"*_samples_{task}.jsonl"))
            path.write_text("".join(json.dumps({**sample_line(d, r), "input": build_prompt(q["question"],
                                                                                               q["options"])}) + "\n"
                                    for d, (r, q) in enumerate(zip(rows, questions, strict=True))))
    models = list(HOSTILE_MODELS)
    panel = work / "panel.yaml"
    panel.write_text(yaml.safe_dump({"text_llms": [models[0], models[2]], "vlms": [models[1], models[3]]}))
    out = work / "audit"
    assert main(["audit", str(work / "runs"), "--panel", str(panel), "--out", str(out),
                 "--video-root", f"{BENCHMARK}={root}"]) == 0
    return {"out": out, "questions": questions}


def test_the_policy_allows_the_pages_own_scripts_only(hostile_audit):
    text = (hostile_audit["out"] / "explorer.html").read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives["default-src"] == ["'none'"]
    assert directives["img-src"] == ["file:", "data:"]
    assert directives["form-action"] == ["'none'"] and directives["base-uri"] == ["'none'"]
    assert "connect-src" not in directives
    scripts = directives["script-src"]
    assert len(scripts) == 3 and all(re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", s) for s in scripts)
    # the three scripts the page runs are the ones hashed, and no other script element holds code
    import base64
    import hashlib

    bodies = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert sorted(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'"
                  for b in bodies) == sorted(scripts)
    assert len(re.findall(r"<script\b", text)) == 4  # the three and the JSON blob


def test_hostile_strings_stay_text_in_chromium(browser, hostile_audit, tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    out, questions = hostile_audit["out"], hostile_audit["questions"]
    page_path = (out / "explorer.html").resolve()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, requests, navigations = [], [], []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.on("framenavigated", lambda f: navigations.append(f.url))
    page.goto(page_path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert page.evaluate("window.PWNED") is None

    # the model menu and the plot's title show each VLM's name as written
    labels = page.evaluate("[...document.querySelectorAll('#model option')].map(o => o.textContent)")
    vlms = [m for m, (_, _, video) in HOSTILE_MODELS.items() if video is not None]
    for model in vlms:
        label = model.rsplit("/", 1)[-1]
        assert any(x.startswith(f"{label} (") for x in labels), labels
        value = page.evaluate("l => [...document.querySelectorAll('#model option')].find(o => "
                              "o.textContent.startsWith(l + ' (')).value", label)
        page.select_option("#model", value)
        assert page.evaluate("document.querySelector('#space .gtitle').textContent") == label
        assert page.evaluate("window.PWNED") is None
    # a hover of the diagnostic space names the benchmark literally
    page.evaluate("() => { const gd = document.getElementById('space'); Plotly.Fx.hover(gd, [{curveNumber: 0, "
                  "pointNumber: 0}]); }")
    assert page.evaluate("document.querySelector('#space .hovertext').textContent").startswith("VRU-Accident, full")

    # the questions table: each id and category as written, found by the search
    page.click("#tab-questions")
    page.evaluate("explorer.table.page.len(-1).draw()")
    cells = page.evaluate("[...document.querySelectorAll('#questions-table tbody tr')].map(tr => "
                          "[...tr.querySelectorAll('td')].map(td => td.textContent))")
    shown = {row[1]: row for row in cells}
    for q in questions:
        assert shown[q["question_id"]][2] == q["category"]
        assert shown[q["question_id"]][3] == q["question"]
    for i, q in enumerate(questions):
        for field, value in (("question_id", q["question_id"]), ("category", q["category"]),
                             ("question", q["question"]), ("option", q["options"][0])):
            page.fill("#view-questions input[type=search]", value)
            try:
                page.wait_for_function("([typed, id]) => explorer.table.search() === typed && explorer.table.rows("
                                       "{search: 'applied'}).data().toArray().some(r => r[2] === id)",
                                       arg=[page.input_value("#view-questions input[type=search]"), q["question_id"]],
                                       timeout=5_000)
            except PlaywrightTimeout:
                found = page.evaluate("explorer.table.rows({search: 'applied'}).data().toArray().map(r => r[2])")
                pytest.fail(f"searching the {field} {value!r} does not find its question: {found}")
        if i == len(HOSTILE):  # each string has been each field once
            break
    page.fill("#view-questions input[type=search]", "")
    assert page.evaluate("window.PWNED") is None

    # each question's own view: title, text and options as written, each model's name in the table
    for q in questions[:len(HOSTILE)]:
        index = page.evaluate("id => explorer.table.rows().data().toArray().find(r => r[2] === id)[0]",
                              q["question_id"])
        page.evaluate("q => explorer.openQuestion(q)", index)
        title = page.inner_text("#q-title")
        assert title.startswith(f"VRU-Accident · {q['question_id']} · {q['category']}"), title
        assert page.evaluate("document.getElementById('q-text').textContent") == q["question"]
        options = page.evaluate("[...document.querySelectorAll('#q-options li')].map(li => li.textContent)")
        assert options[0].removesuffix(" ✓") == q["options"][0]
        models = page.evaluate("[...document.querySelectorAll('#q-probs td:first-child')].map(td => td.textContent)")
        assert {m.rsplit("/", 1)[-1] for m in HOSTILE_MODELS} <= set(models)
    page.screenshot(path=str(tmp_path / "hostile_question.png"), full_page=True)
    assert page.evaluate("window.PWNED") is None
    page.close()

    assert errors == []
    assert requests and all(url.startswith("file://") for url in requests), requests
    assert navigations and all(url.startswith("file://") for url in navigations), navigations
