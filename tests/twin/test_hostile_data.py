"""#54, the twins' side: a `--data` copy that is a FIFO, empty, no JSON, nested 100,000 deep (pyarrow's JSON reader
crashed the process with SIGSEGV), or holds a lone surrogate; a `process_docs` that returns no documents; a link
planted in `--out`; a document whose video leads out of $HF_HOME; a category that reads as YAML. Each was a hang,
a crash, a traceback, a write through a link, an outside file opened, or code run on 2cae6e3."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from lmms_eval_tasks.records import RecordError
from lmms_eval_tasks.upstream import UpstreamDataError, resolve_video
from lmms_eval_tasks.upstream.config import load_task
from lmms_eval_tasks.upstream.documents import read_documents
from tests.helpers.hostile import deadline, deeply_nested, fifo, one_line, refused
from tests.helpers.lmms_cli import concurrent_env, read_samples, run_lmms_eval
from tests.twin.test_upstream_adapters import FIXTURES
from visdep_metrics.cli.main import main

GOOD = json.loads((FIXTURES / "mlvu_dev.jsonl").read_text().splitlines()[0])


def twin_refused(capsys, data, out, match: str) -> None:
    with deadline(120):
        assert main(["twin", "mlvu_dev", "--data", str(data), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == "visdep twin: error: 1 of 1 task(s) not twinned: mlvu_dev", lines
    first = one_line(lines[-2])
    assert first.startswith("visdep twin: error: ") and match in first, first
    assert not out.exists()


def _deep(path):
    path.write_text(json.dumps(GOOD)[:-1] + ', "nested": ' + deeply_nested() + "}\n")


def _surrogate(path):  # in the question's text, its option and its answer alike: a record that reads
    path.write_text(json.dumps(GOOD).replace("Yellow", "Yel\\ud800low") + "\n")


@pytest.mark.parametrize(("make", "match"), [
    (fifo, "a FIFO (named pipe), not a file"),
    (lambda p: p.write_text(""), "copy.jsonl: empty"),
    (lambda p: p.mkdir(), "a folder without data files"),
    (lambda p: p.write_text("hello\n"), "copy.jsonl line 1: not valid JSON (Expecting value: line 1 column 1)"),
    (_deep, "copy.jsonl line 1: nested too deeply to read"),
    (_surrogate, "copy.jsonl line 1: a string holds a lone surrogate ('\\ud800' in"),
], ids=["fifo", "empty file", "empty folder", "not json", "100k nesting (SIGSEGV)", "lone surrogate"])
def test_a_hostile_local_copy_is_one_line(make, match, tmp_path, capsys):
    data = tmp_path / "copy.jsonl"
    make(data)
    twin_refused(capsys, data, tmp_path / "twins", match)


@pytest.mark.parametrize("returned", [7, None, [7], "docs"])
def test_a_process_docs_that_returns_no_documents_is_one_line(returned, tmp_path):
    (tmp_path / "copy.jsonl").write_text(json.dumps(GOOD) + "\n")
    task = load_task("mlvu_dev")
    task = dataclasses.replace(task, config={**task.config, "process_docs": lambda dataset: returned})
    refused(read_documents, task, tmp_path / "copy.jsonl", error=UpstreamDataError,
            match=r"mlvu_dev: (its process_docs returns (int|NoneType|str), not documents|document 0 of .* is int, "
                  r"not a dict)")


def test_a_link_planted_in_out_is_replaced_and_its_target_kept(tmp_path, capsys):
    out = tmp_path / "twins"
    out.mkdir()
    target = tmp_path / "precious.json"
    target.write_text("keep me\n")
    (out / "mlvu_dev_twin.json").symlink_to(target)
    assert main(["twin", "mlvu_dev", "--data", str(FIXTURES / "mlvu_dev.jsonl"), "--out", str(out)]) == 0
    assert target.read_text() == "keep me\n"
    assert not (out / "mlvu_dev_twin.json").is_symlink()
    assert json.loads((out / "mlvu_dev_twin.json").read_text())["task"] == "mlvu_dev"


def test_a_video_out_of_hf_home_is_a_record_error_not_a_file_opened(tmp_path, offline_hf_home):
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"not yours")
    (offline_hf_home / "mlvu").mkdir(exist_ok=True)
    (offline_hf_home / "mlvu" / "planted.mp4").symlink_to(outside)
    for video in [str(outside), os.path.relpath(outside, offline_hf_home / "mlvu"), "planted.mp4"]:
        with pytest.raises(RecordError, match=r"the video the upstream doc_to_visual names is not under \$HF_HOME"):
            resolve_video("mlvu_dev", {**GOOD, "video_name": video})
    (offline_hf_home / "mlvu" / "inside.mp4").write_bytes(b"a video")
    assert resolve_video("mlvu_dev", {**GOOD, "video_name": "inside.mp4"}) == str(offline_hf_home / "mlvu" /
                                                                                   "inside.mp4")


HOSTILE = "k0\nx_inj: !function evil.run\nmetric_list: []"


def test_a_twin_category_that_reads_as_yaml_is_text_in_the_task_lmms_eval_loads(tmp_path, offline_hf_home):
    """A `task_type` holding a newline, `!function`, `{{ }}`, `#` and `: ` (MLVU's category field), with an
    evil.py beside the twin's tasks: lmms-eval loads the twin's blind task, nothing of evil.py runs, and each
    category reaches the samples as written."""
    categories = [HOSTILE, "{{ doc.question }} # not a comment: yes"]
    fixture = [json.loads(line) for line in (FIXTURES / "mlvu_dev.jsonl").read_text().splitlines()[:2]]
    docs = [{**doc, "task_type": category} for doc, category in zip(fixture, categories, strict=True)]
    (tmp_path / "copy.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    twins = tmp_path / "twins"
    twins.mkdir()
    marker = tmp_path / "ran"
    (twins / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
                                   "def run(*args, **kwargs):\n    return []\n")
    assert main(["twin", "mlvu_dev", "--data", str(tmp_path / "copy.jsonl"), "--out", str(twins)]) == 0
    assert "evil.run" not in (twins / "mlvu_dev_visdep_blind.yaml").read_text()
    out = tmp_path / "run"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(twins), "--tasks", "mlvu_dev_visdep_blind"],
                         concurrent_env(offline_hf_home, tmp_path / "datasets"), out)
    assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
    assert not marker.exists()
    samples = sorted(read_samples(out, "mlvu_dev_visdep_blind"), key=lambda s: s["doc_id"])
    assert [s["visdep"]["category"] for s in samples] == categories
