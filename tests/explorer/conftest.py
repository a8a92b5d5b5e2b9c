"""The explorer's fixtures: a small audit with reachable videos (the synthetic VRU-Accident download), and a
headless Debian Chromium driven by Playwright's Python package."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.runs import log_probabilities, sample_line, visdep_record, write_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-gpu", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
BENCHMARK = "vru_accident"
# model -> (adapter, skill blind, skill with the video); the VLMs see the answer better with the video
MODELS = {"org/llm-a": ("visdep_llm", 1.0, None), "org/llm-b": ("visdep_llm", 0.5, None),
          "org/vlm-a": ("visdep_vlm", 0.3, 2.0), "org/vlm-b": ("visdep_vlm", 0.6, 1.5),
          "org/vlm-held": ("visdep_vlm", 0.4, 1.8)}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing_browser(chromium: Path = CHROMIUM) -> str | None:
    """What the browser tests lack, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package (pip install -e '.[test]')"
    return None if chromium.is_file() else f"{chromium} (apt-get install chromium)"


def require_browser(chromium: Path = CHROMIUM) -> None:
    """Under CI (CI=true, as .ci/run sets it) a missing Chromium or Playwright fails the test: .ci/run installs both;
    elsewhere the test is skipped with the reason."""
    missing = missing_browser(chromium)
    if missing is not None:
        if in_ci():
            pytest.fail(f"the explorer's browser tests need {missing}; .ci/run installs it")
        pytest.skip(f"not under CI and {missing} is missing")


@pytest.fixture(scope="session")
def browser():
    """Chromium, headless, with no network of its own (see `require_browser`)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _records(questions, mode: str, skill: float, seed: int) -> list[dict]:
    from lmms_eval_tasks.tasks import build_prompt

    rng = np.random.default_rng(seed)
    records = []
    for q in questions:
        scores = rng.normal(0, 1, len(q.options))
        scores[q.answer_index] += skill
        record = visdep_record(q.question_id, BENCHMARK, mode, q.answer_index, log_probabilities(scores),
                               category=q.category, source=q.source, video=q.video,
                               prompt_id=f"{abs(hash((q.question, q.options))) % 10**12:016d}")
        records.append((record, build_prompt(q.question, list(q.options))))
    return records


def write_small_runs(root: Path, questions) -> None:
    """One lmms-eval run per model of MODELS over `questions`, with the prompts the tasks write as `input`."""
    for i, (model, (adapter, blind, video)) in enumerate(MODELS.items()):
        tasks = {f"{BENCHMARK}_blind": _records(questions, "blind", blind, 10 * i)}
        if video is not None:
            tasks[f"{BENCHMARK}_video"] = _records(questions, "video", video, 10 * i + 1)
        folder = write_run(root, model, {t: [r for r, _ in rs] for t, rs in tasks.items()}, model_type=adapter,
                           extra_args="max_frames=4" if adapter == "visdep_vlm" else "")
        for task, rows in tasks.items():  # the prompt the tasks write, not the helper's placeholder
            path = next(folder.glob(f"*_samples_{task}.jsonl"))
            path.write_text("".join(json.dumps({**sample_line(d, r), "input": prompt}) + "\n"
                                    for d, (r, prompt) in enumerate(rows)))


@pytest.fixture(scope="session")
def small_audit(tmp_path_factory, fixture_env) -> dict:
    """`visdep audit` of five models on the synthetic VRU-Accident download, its videos given by --video-root:
    {out, runs, root, questions}."""
    from lmms_eval_tasks.loaders import load_benchmark
    from visdep_metrics.cli.main import main

    root = Path(fixture_env["VRU_ACCIDENT_ROOT"])
    questions = load_benchmark(BENCHMARK, root)
    work = tmp_path_factory.mktemp("explorer")
    write_small_runs(work / "runs", questions)
    panel = work / "panel.yaml"
    panel.write_text("text_llms: [org/llm-a, org/llm-b]\nvlms: [org/vlm-a, org/vlm-b]\nheld_out: [org/vlm-held]\n")
    out = work / "audit"
    assert main(["audit", str(work / "runs"), "--panel", str(panel), "--out", str(out),
                 "--video-root", f"{BENCHMARK}={root}"]) == 0
    return {"out": out, "runs": work / "runs", "root": root, "questions": questions, "panel": panel}
