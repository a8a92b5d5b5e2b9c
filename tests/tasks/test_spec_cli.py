"""A benchmark of one's own, from a CSV to a verdict, through the real command lines: `visdep spec init`, the blind
and video tasks in `lmms-eval` (`dummy`, and a tiny `visdep_llm` as the text-only model), `visdep tst`, `visdep audit`,
and the grounded task it exports run again in `lmms-eval`."""

from __future__ import annotations

import csv
import hashlib
import json

import pandas as pd
import pytest
import yaml

from lmms_eval_tasks.discovery import task_name_clashes
from lmms_eval_tasks.layouts import write_mp4
from lmms_eval_tasks.spec import read_spec
from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval
from tests.helpers.runs import dummy_as_log_probabilities
from visdep_metrics.cli.main import main
from visdep_metrics.demo.fixtures import _frames

pytestmark = pytest.mark.slow
COLOURS = ["red", "green", "blue", "yellow"]
SPEC = """name: street_colours
root_default: .
annotations: questions.csv
n_options: 3
fields:
  question_id: '{id}'
  question: '{question}'
  options: ['{A}', '{B}', '{C}']
  answer: '{answer}'
  video: 'clips/{clip}.mp4'
  category: '{kind}'
  source: street
answer_is: letter
"""


@pytest.fixture(scope="module")
def csv_benchmark(tmp_path_factory):
    """Six generated videos, two questions each, in a CSV; and the questions as they must come out (by hand)."""
    root = tmp_path_factory.mktemp("street_colours")
    rows, expected = [], []
    for v in range(6):
        write_mp4(root / "clips" / f"clip_{v}.mp4", _frames(v, n=4))
        for j, kind in enumerate(["colour", "motion"]):
            options = [COLOURS[(v + i) % 4] for i in range(3)]
            answer = (v + j) % 3
            rows.append({"id": f"{v}-{kind}", "clip": f"clip_{v}", "question": f"What {kind} is the bar?",
                         "A": options[0], "B": options[1], "C": options[2], "answer": "ABC"[answer], "kind": kind})
            expected.append({"question_id": f"{v}-{kind}", "video": f"clips/clip_{v}.mp4", "options": options,
                             "answer_index": answer, "category": kind, "source": "street"})
    with open(root / "questions.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (root / "street_colours.yaml").write_text(SPEC)
    return root, expected


def test_spec_from_csv_to_verdict(csv_benchmark, tiny_models, tmp_path):
    root, expected = csv_benchmark
    spec = root / "street_colours.yaml"
    assert main(["spec", "init", str(spec)]) == 0  # reads lmms-eval's whole task index: no clash
    assert {p.name for p in root.iterdir()} >= {"street_colours_blind.yaml", "street_colours_video.yaml",
                                                "street_colours_spec.jsonl"}

    env = lmms_eval_env({})
    runs = tmp_path / "runs"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(root), "--tasks",
                          "street_colours_blind,street_colours_video"], env, runs / "dummy")
    assert proc.returncode == 0, (runs / "dummy" / "cli.log").read_text()[-3000:]
    blind = sorted(read_samples(runs / "dummy", "street_colours_blind"), key=lambda s: s["doc_id"])
    video = sorted(read_samples(runs / "dummy", "street_colours_video"), key=lambda s: s["doc_id"])
    assert len(blind) == len(video) == len(expected)
    for mode, samples in (("blind", blind), ("video", video)):
        for sample, want in zip(samples, expected, strict=True):
            record = sample["visdep"]
            assert {k: record[k] for k in ("question_id", "video", "answer_index", "category", "source")} == {
                k: want[k] for k in ("question_id", "video", "answer_index", "category", "source")}
            assert (record["benchmark"], record["mode"], record["n_options"]) == ("street_colours", mode, 3)
            lines = sample["input"].splitlines()
            assert lines[1:4] == [f"{letter}. {o}" for letter, o in zip("ABC", want["options"], strict=True)]
    assert [s["input"] for s in blind] == [s["input"] for s in video]
    results = read_results(runs / "dummy")["results"]
    # dummy scores every option alike, so it answers A: accuracy = the share of answers at A, per category too
    at_a = [q["answer_index"] == 0 for q in expected]
    assert results["street_colours_video"]["acc,none"] == pytest.approx(sum(at_a) / len(at_a))
    colour_at_a = [q["answer_index"] == 0 for q in expected if q["category"] == "colour"]
    assert results["street_colours_blind"]["acc_colour,none"] == pytest.approx(sum(colour_at_a) / len(colour_at_a))
    dummy_as_log_probabilities(runs / "dummy")

    proc = run_lmms_eval(["--model", "visdep_llm", "--model_args", f"pretrained={tiny_models['qwen2']}",
                          "--include_path", str(root), "--tasks", "street_colours_blind"], env, runs / "llm")
    assert proc.returncode == 0, (runs / "llm" / "cli.log").read_text()[-3000:]
    assert len(read_samples(runs / "llm", "street_colours_blind")) == len(expected), \
        (runs / "llm" / "cli.log").read_text()[-3000:]

    tst = tmp_path / "tst"
    assert main(["tst", "--spec", str(spec), "--out", str(tst), "--n-estimators", "20"]) == 0
    summary = json.loads((tst / "summary.json").read_text())
    ids = [q["question_id"] for q in expected]
    assert summary["benchmark"] == "street_colours" and summary["n_questions"] == 12
    assert summary["question_order_sha256"] == hashlib.sha256("\n".join(ids).encode()).hexdigest()

    audit = tmp_path / "audit"
    assert main(["audit", str(runs), "--spec", str(spec), "--tst", str(tst), "--out", str(audit)]) == 0
    questions = pd.read_csv(audit / "questions.csv")
    assert questions["question_id"].tolist() == ids
    assert questions["answer_index"].tolist() == [q["answer_index"] for q in expected]
    assert questions["s_tst"].notna().all() and questions["T"].notna().all()
    assert "street_colours" in (audit / "report.md").read_text()
    grounded = questions.loc[questions["grounded"], "question_id"].tolist()
    assert grounded, "the grounded subset is empty: nothing exported to run"

    # the exported grounded task runs in lmms-eval on the same spec
    tasks = audit / "tasks"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(tasks), "--tasks",
                          "street_colours_video_grounded"], env, tmp_path / "grounded")
    assert proc.returncode == 0, (tmp_path / "grounded" / "cli.log").read_text()[-3000:]
    samples = sorted(read_samples(tmp_path / "grounded", "street_colours_video_grounded"), key=lambda s: s["doc_id"])
    assert [s["visdep"]["question_id"] for s in samples] == [q for q in ids if q in set(grounded)], \
        (tmp_path / "grounded" / "cli.log").read_text()[-3000:]


def test_task_names_of_lmms_eval_are_refused(csv_benchmark, tmp_path):
    """lmms-eval 0.7.3 ships `mmsi_video`: a spec named mmsi would be silently replaced by it."""
    root, _ = csv_benchmark
    spec = tmp_path / "mmsi.yaml"
    spec.write_text(SPEC.replace("name: street_colours", "name: mmsi").replace("root_default: .",
                                                                                f"root_default: {root}"))
    assert task_name_clashes(read_spec(spec)) == ["mmsi_video"]
    assert main(["spec", "init", str(spec)]) == 2
    assert not (tmp_path / "mmsi_video.yaml").exists()


HOSTILE_CATEGORIES = ["k0\nx_inj: !function evil.run\nmetric_list: []", "{{ doc.question }} # not a comment: yes",
                      "plain"]


def test_a_category_that_reads_as_yaml_is_text_in_the_task_lmms_eval_loads(tmp_path, monkeypatch):
    """`visdep spec init` on categories holding newlines, `!function`, `{{ }}`, `#` and `: `, with an `evil.py`
    beside the tasks: lmms-eval loads tasks whose keys are visdep's alone (a metric per category), nothing of
    evil.py runs, and every category reaches the samples as written. Before, the category was written raw into a
    comment line of the YAML, and its second line became a key that ran `evil.run`."""
    root = tmp_path / "bench"
    (root / "clips").mkdir(parents=True)
    marker = tmp_path / "ran"
    (root / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
                                  "def run(*args, **kwargs):\n    return []\n")
    rows = [{"id": f"q{i}", "clip": "c", "question": f"Which {i}?", "A": "x", "B": "y", "C": "z", "answer": "A",
             "kind": kind} for i, kind in enumerate(HOSTILE_CATEGORIES)]
    with open(root / "questions.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (root / "street_colours.yaml").write_text(SPEC)
    monkeypatch.setattr("lmms_eval_tasks.discovery.lmms_eval_task_names", lambda: frozenset())
    assert main(["spec", "init", str(root / "street_colours.yaml"), "--no-videos"]) == 0
    text = (root / "street_colours_blind.yaml").read_text()
    assert "evil.run" not in text and "x_inj:" not in text
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda load, node: ("!function", load.construct_scalar(node)))
    functions = {k: v[1] for k, v in yaml.load(text, Loader=loader).items() if isinstance(v, tuple)}
    assert text.count("!function") == len(functions) == 6
    assert functions == {"doc_to_text": "lmms_eval_tasks.tasks.doc_to_text", "doc_to_choice":
                         "lmms_eval_tasks.tasks.doc_to_choice", "doc_to_target": "lmms_eval_tasks.tasks.doc_to_target",
                         "process_docs": "lmms_eval_tasks.tasks.docs_blind", "doc_to_visual":
                         "lmms_eval_tasks.tasks.doc_to_visual_blind", "process_results":
                         "lmms_eval_tasks.tasks.process_results_blind"}
    out = tmp_path / "run"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(root), "--tasks", "street_colours_blind"],
                         lmms_eval_env({}), out)
    assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
    assert not marker.exists()
    samples = sorted(read_samples(out, "street_colours_blind"), key=lambda s: s["doc_id"])
    assert [s["visdep"]["category"] for s in samples] == HOSTILE_CATEGORIES
    config = read_results(out)["configs"]["street_colours_blind"]
    assert "x_inj" not in config
    assert [m["metric"] for m in config["metric_list"]] == ["acc", "acc_k0_x_inj_function_evil_run_metric_list",
                                                             "acc_doc_question_not_a_comment_yes", "acc_plain"]
