"""The explorer page without a browser: what it holds, what it loads, its frames, `visdep explore`."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from lmms_eval_tasks.tasks import build_prompt
from tests.explorer.conftest import BENCHMARK, MODELS, write_small_runs
from visdep_metrics.explorer.data import split_prompt
from visdep_metrics.explorer.frames import COLUMNS, THUMB_HEIGHT


def blob(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1))


def decoded(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))


def samples_probabilities(runs: Path) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """(model, mode) -> {question_id: softmax of the option log-probabilities}, from the samples files; a frame
    condition of the temporal ladder (docs/ladder.md) named as the audit names it, "<pretrained> [frames=middle]"."""
    found = {}
    for results in runs.rglob("*_results.json"):
        model_args = json.loads(results.read_text())["config"]["model_args"]
        model = re.search(r"pretrained=([^,]+)", model_args).group(1)
        condition = re.search(r"(frames=middle|frame_order=(?:shuffled|reversed))", model_args)
        model = f"{model} [{condition.group(1)}]" if condition else model
        for path in results.parent.glob("*_samples_*.jsonl"):
            mode = path.stem.rsplit("_", 1)[1]
            rows = {}
            for line in path.read_text().splitlines():
                record = json.loads(line)["visdep"]
                lp = np.array(record["option_logprobs"])
                rows[record["question_id"]] = np.exp(lp - lp.max()) / np.exp(lp - lp.max()).sum()
            found[(model, mode)] = rows
    return found


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.loading = []  # (tag, attribute, value) of anything that would load a resource

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data") or (tag == "meta" and name == "http-equiv"
                                                              and value.lower() == "refresh"):
                self.loading.append((tag, name, value))


def test_split_prompt_reads_the_tasks_prompt():
    question, options = "What happened?\nSecond line of the question.", ["a car. B. not a letter", "a bus", "a bike"]
    assert split_prompt(build_prompt(question, options), 3) == (question, options)
    assert split_prompt("free text without options", 3) == ("free text without options", [])
    assert split_prompt(None, 2) == ("", [])


def test_the_page_is_one_file_that_loads_nothing(small_audit):
    page = small_audit["out"] / "explorer.html"
    text = page.read_text(encoding="utf-8")
    tags = _Tags()
    tags.feed(text)
    assert tags.loading == []  # every script and style is inline; images are added by the page's script
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    assert "default-src 'none'" in policy and "connect-src" not in policy  # no fetch, XHR or socket anywhere
    assert "visdep_files.json" in {p.name for p in small_audit["out"].iterdir()}
    listed = json.loads((small_audit["out"] / "visdep_files.json").read_text())
    assert "explorer.html" in json.dumps(listed) and "frames/" in json.dumps(listed)


def test_the_blob_holds_the_samples_probabilities_and_the_audits_scores(small_audit):
    data = blob(small_audit["out"] / "explorer.html")
    questions = pd.read_csv(small_audit["out"] / "questions.csv")
    q = data["questions"]
    assert q["question_id"] == questions["question_id"].tolist()
    np.testing.assert_array_equal(decoded(q["S"], "f8"), questions["S"].to_numpy())  # exactly: the τ slider
    expected = samples_probabilities(small_audit["runs"])
    offsets = decoded(q["offsets"], "i4")
    names = [m["name"] for m in data["models"]]
    assert sorted(names) == sorted(MODELS)
    for (model, mode), rows in expected.items():
        shown = decoded(data["answers"][str(names.index(model))][mode]["p"], "u1")
        for i, qid in enumerate(q["question_id"]):
            np.testing.assert_allclose(shown[offsets[i]:offsets[i + 1]] / 100, rows[qid], atol=0.005 + 1e-12)
    by_id = {x.question_id: x for x in small_audit["questions"]}
    texts, codes = q["question"]
    assert [texts[c] for c in decoded(codes, "i4")] == [by_id[i].question for i in q["question_id"]]
    options, codes = q["options"]
    flat = [options[c] for c in decoded(codes, "i4")]
    assert flat == [o for i in q["question_id"] for o in by_id[i].options]
    assert len(texts) < len(q["question_id"])  # a text asked of several videos is stored once
    # T and V are the means of the panel's terms the page shows
    t_models = [names.index(m) for m in ("org/llm-a", "org/llm-b")]
    t = np.mean([decoded(data["terms"]["T"][str(m)], "i2") / 1e4 for m in t_models], axis=0)
    np.testing.assert_allclose(t, questions["T"], atol=1e-4)
    v = np.mean([decoded(data["terms"]["V"][str(names.index(m))], "i2") / 1e4 for m in ("org/vlm-a", "org/vlm-b")],
                axis=0)
    np.testing.assert_allclose(v, questions["V"], atol=1e-4)


def test_one_contact_sheet_per_video_with_the_frames_the_vlms_saw(small_audit):
    data = blob(small_audit["out"] / "explorer.html")
    videos = {x.video for x in small_audit["questions"]}
    names, codes = data["questions"]["sheet"]
    sheets = {names[c] for c in decoded(codes, "i4") if c >= 0}
    assert (decoded(codes, "i4") >= 0).all()
    assert len(sheets) == len(videos) and data["frames"]["max_frames"] == 4
    for sheet in sheets:
        with Image.open(small_audit["out"] / sheet) as image:
            assert image.height == THUMB_HEIGHT * -(-4 // COLUMNS)
            assert image.width % 4 == 0 and image.width >= 4 * THUMB_HEIGHT // 2


def test_a_second_audit_decodes_no_video_again(small_audit, tmp_path, monkeypatch):
    import model_adapters.frames
    from visdep_metrics.cli.main import main

    out = tmp_path / "audit"
    args = ["audit", str(small_audit["runs"]), "--panel", str(small_audit["panel"]), "--out", str(out),
            "--video-root", f"{BENCHMARK}={small_audit['root']}"]
    calls = []
    real = model_adapters.frames.read_frames
    monkeypatch.setattr(model_adapters.frames, "read_frames", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert main(args) == 0
    first = len(calls)
    assert first == len({x.video for x in small_audit["questions"]})
    assert main(args) == 0  # into the same OUT: its sheets are kept
    assert len(calls) == first
    assert len(list((out / "frames").glob("*.jpg"))) == first


def test_without_the_videos_the_page_says_so(small_audit, tmp_path, monkeypatch):
    from visdep_metrics.cli.main import main

    monkeypatch.delenv("VRU_ACCIDENT_ROOT", raising=False)
    out = tmp_path / "audit"
    assert main(["audit", str(small_audit["runs"]), "--panel", str(small_audit["panel"]), "--out", str(out)]) == 0
    data = blob(out / "explorer.html")
    names, codes = data["questions"]["sheet"]
    assert names == [] and (decoded(codes, "i4") == -1).all() and not (out / "frames").exists()
    assert data["frames"]["note"].startswith("videos not available")


def test_explore_prints_the_page_and_refuses_a_folder_without_one(small_audit, tmp_path, capsys, monkeypatch):
    import webbrowser

    from visdep_metrics.cli.main import main

    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    assert main(["explore", str(small_audit["out"]), "--no-open"]) == 0
    assert capsys.readouterr().out.strip() == str((small_audit["out"] / "explorer.html").resolve())
    assert opened == []
    assert main(["explore", str(small_audit["out"])]) == 0
    assert opened == [(small_audit["out"] / "explorer.html").resolve().as_uri()]
    assert main(["explore", str(tmp_path)]) == 2
    assert "explorer.html: no explorer page" in capsys.readouterr().err


def test_runs_writer_gives_every_model_its_runs(tmp_path, fixture_env):
    """The fixture's writer: every model has its blind run, the VLMs a video run, with the tasks' prompt."""
    from lmms_eval_tasks.loaders import load_benchmark

    questions = load_benchmark(BENCHMARK, fixture_env["VRU_ACCIDENT_ROOT"])
    write_small_runs(tmp_path, questions)
    files = sorted(p.name.split("_samples_")[1] for p in tmp_path.glob("*/*_samples_*.jsonl"))
    assert files.count(f"{BENCHMARK}_blind.jsonl") == len(MODELS)
    assert files.count(f"{BENCHMARK}_video.jsonl") == sum(v is not None for _, _, v in MODELS.values())
    line = json.loads(next(tmp_path.glob("org__llm-a/*_samples_*.jsonl")).read_text().splitlines()[0])
    assert line["input"] == build_prompt(questions[0].question, list(questions[0].options))


def test_no_explorer_writes_no_page(small_audit, tmp_path, capsys):
    from visdep_metrics.cli.main import main

    out = tmp_path / "audit"
    assert main(["audit", str(small_audit["runs"]), "--panel", str(small_audit["panel"]), "--out", str(out),
                 "--no-explorer", "--video-root", f"{BENCHMARK}={small_audit['root']}"]) == 0
    assert (out / "report.md").is_file() and not (out / "explorer.html").exists() and not (out / "frames").exists()
    assert main(["explore", str(out), "--no-open"]) == 2
    assert "no explorer page" in capsys.readouterr().err

