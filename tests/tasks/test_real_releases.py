"""The general benchmarks' and SUTD-TrafficQA's real annotation files in ../shared/benchmarks (skipped when absent),
each read here from its documented format (../shared/design/BENCHMARK_FORMATS.md) with json alone, and compared
with what the loaders and a spec make of it: every question, K, answer and category; the records that cannot be
used, all of them, by reason."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest
import yaml

from lmms_eval_tasks.loaders import load_benchmark, read_benchmark
from lmms_eval_tasks.spec_data import register_spec
from lmms_eval_tasks.traffic import read_trafficqa_file
from lmms_eval_tasks.unusable import UnusableRecordsError
from visdep_metrics.cli.main import main

REPO = Path(__file__).resolve().parents[2]
VIDEOMME = Path("videomme/datasets/videomme/videomme.json")
LONGVIDEOBENCH = Path("longvideobench/datasets/longvideobench/include_frame_idx.json")
MLVU_DATA = Path("mlvu/data")
TRAFFICQA_SAMPLE = Path("sutd_trafficqa/examples/annotation_sample.jsonl")
NOT_AMONG, TWO = "the answer is not among the candidates", "the answer is the text of two or more candidates"


def _as_tuple(question) -> tuple:
    return (question.question, question.options, question.answer_index, question.category, question.video)


# --------------------------------------------------------------------------- Video-MME
def test_videomme_every_question_as_the_file_gives_it(shared_benchmarks):
    rows = json.loads((shared_benchmarks / VIDEOMME).read_text())
    expected = {}
    for row in rows:  # options "A. Apples."; answer a letter; video data/<videoID>.mp4
        options = tuple(o.split(". ", 1)[1] if o.startswith(f"{'ABCD'[k]}. ") else None
                        for k, o in enumerate(row["options"]))
        expected[row["question_id"]] = (row["question"], options, "ABCD".index(row["answer"]), row["task_type"],
                                        f"data/{row['videoID']}.mp4")
    questions = load_benchmark("videomme", shared_benchmarks / VIDEOMME)
    assert len(questions) == len(expected) == 2700
    assert {q.question_id: _as_tuple(q) for q in questions} == expected
    assert collections.Counter(q.source for q in questions) == {"short": 900, "medium": 900, "long": 900}
    repeated = [q.question_id for q in questions if len(set(q.options)) < 4]
    assert len(repeated) == 10 and {"119-1", "214-3"} <= set(repeated)


# --------------------------------------------------------------------------- LongVideoBench
def test_longvideobench_every_question_as_the_file_gives_it(shared_benchmarks):
    rows = json.loads((shared_benchmarks / LONGVIDEOBENCH).read_text())
    expected = {row["id"]: (row["question"], tuple(c.strip() for c in row["candidates"]), row["correct_choice"],
                            row["question_category"], f"videos/{row['video_path']}") for row in rows}
    questions = load_benchmark("longvideobench", shared_benchmarks / LONGVIDEOBENCH)
    assert len(questions) == len(expected) == 1337
    assert {q.question_id: _as_tuple(q) for q in questions} == expected
    assert collections.Counter(len(q.options) for q in questions) == {5: 984, 4: 352, 3: 1}


# --------------------------------------------------------------------------- MLVU release
def _mlvu_release(root: Path) -> tuple[dict, dict]:
    """({id: question as expected}, {id: (where, reason)}) from the release's files: multiple choice are the records
    with candidates; empty candidates are not options; the answer is the one candidate whose text it is (visdep
    strips the texts' surrounding spaces)."""
    questions, unusable = {}, {}
    for path in sorted(root.glob("*.json")):
        for i, row in enumerate(json.loads(path.read_text())):
            if not row.get("candidates"):
                continue
            qid = f"{path.stem}/{i}"
            candidates = [c for c in row["candidates"] if c.strip()]
            hits = [k for k, c in enumerate(candidates) if c == row["answer"]]
            if len(hits) == 1:
                task_type = "needle" if row["question_type"] == "findNeedle" else row["question_type"]
                questions[qid] = (row["question"].strip(), tuple(c.strip() for c in candidates), hits[0], task_type,
                                  f"{path.stem}/{row['video']}")
            else:
                unusable[qid] = (f"{path} record {i}", TWO if hits else NOT_AMONG)
    return questions, unusable


@pytest.fixture(scope="module")
def mlvu_release(shared_benchmarks):
    return _mlvu_release(shared_benchmarks / MLVU_DATA)


def test_mlvu_release_without_the_switch_is_one_error_naming_all_ten(shared_benchmarks, mlvu_release, monkeypatch):
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    monkeypatch.delenv("VISDEP_SKIP_MISSING_VIDEOS", raising=False)
    _, unusable = mlvu_release
    assert collections.Counter(reason for _, reason in unusable.values()) == {NOT_AMONG: 5, TWO: 5}
    with pytest.raises(UnusableRecordsError) as error:
        load_benchmark("mlvu", shared_benchmarks / MLVU_DATA)
    message = str(error.value)
    assert message.startswith(f"10 of the 2,175 records of mlvu (MLVU_ANNOTATIONS={shared_benchmarks / MLVU_DATA}) "
                              f"cannot be used: 5 {TWO}; 5 {NOT_AMONG}\n")
    for qid, (where, reason) in unusable.items():
        assert f"\n  {where} ({qid}): {reason}: " in message
    assert "1_plotQA.json record 335 (1_plotQA/335): the answer is the text of two or more candidates: answer " \
           "'Three', candidates ['Six', 'Three', 'Three', 'Eight']" in message
    assert "to run on the other 2,165 questions" in message


def test_mlvu_release_with_the_switch_every_answer_as_the_release_gives_it(shared_benchmarks, mlvu_release,
                                                                            monkeypatch):
    monkeypatch.setenv("VISDEP_SKIP_UNUSABLE", "1")
    expected, unusable = mlvu_release
    questions = load_benchmark("mlvu", shared_benchmarks / MLVU_DATA)
    assert len(questions) == len(expected) == 2165
    assert {q.question_id: _as_tuple(q) for q in questions} == expected
    data = read_benchmark("mlvu", shared_benchmarks / MLVU_DATA)
    assert {u.question_id: (u.where, u.reason) for u in data.unusable} == unusable
    assert len(data.notes["open-ended records (no candidates) left out"]) == 201 + 217  # files 8 and 9
    assert data.notes["padding options dropped (answer remapped)"] == ["1_plotQA/23"]


def test_a_spec_over_the_mlvu_release(shared_benchmarks, mlvu_release, tmp_path, monkeypatch):
    """configs/specs/mlvu_release.yaml: one error with all ten; the spec key runs on the rest, the same questions
    as the built-in loader (the task type as the release names it)."""
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    monkeypatch.delenv("VISDEP_SKIP_MISSING_VIDEOS", raising=False)
    expected, unusable = mlvu_release
    raw = yaml.safe_load((REPO / "configs/specs/mlvu_release.yaml").read_text())
    spec = tmp_path / "mlvu_release.yaml"
    spec.write_text(yaml.safe_dump({**raw, "root_default": str(shared_benchmarks / "mlvu")}))
    name = register_spec(spec).name
    with pytest.raises(UnusableRecordsError) as error:
        load_benchmark(name)
    message = str(error.value)
    assert f"10 of the 2,175 records of mlvu_release (spec {spec}" in message
    assert ("5 key 'fields.answer': the answer is the text of two or more options; 5 key 'fields.answer': the "
            "answer is not among the options") in message
    assert all(f"\n  {where} ({qid}): key 'fields.answer'" in message for qid, (where, _) in unusable.items())

    spec.write_text(yaml.safe_dump({**raw, "root_default": str(shared_benchmarks / "mlvu"), "skip_unusable": True}))
    questions = load_benchmark(register_spec(spec).name)
    assert {q.question_id: (q.question, q.options, q.answer_index, q.video) for q in questions} == {
        qid: (e[0], e[1], e[2], f"video/{e[4]}") for qid, e in expected.items()}
    assert {q.category for q in questions} >= {"findNeedle", "plotQA"}


# --------------------------------------------------------------------------- SUTD-TrafficQA's sample
def test_trafficqa_sample_as_the_file_gives_it(shared_benchmarks):
    path = shared_benchmarks / TRAFFICQA_SAMPLE
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    types = {"U": "basic understanding", "A": "attribution", "F": "event forecasting", "C": "counterfactual inference"}
    expected = {}
    for values in rows:  # "" pads options at any position; answer indexes the padded list
        row = dict(zip(header, values, strict=True))
        padded = [row[f"option{k}"] for k in range(4)]
        options = tuple(o for o in padded if o != "")
        expected[f"trafficqa-{row['record_id']}"] = (row["q_body"], options, options.index(padded[row["answer"]]),
                                                     types[row["q_type"]], f"raw_videos/{row['vid_filename']}")
    data = read_trafficqa_file(path)
    assert not data.unusable and len(data.questions) == 7
    assert {q.question_id: _as_tuple(q) for q in data.questions} == expected
    assert sorted(data.notes["padding options dropped (answer remapped)"]) == sorted(
        q for q, e in expected.items() if len(e[1]) < 4)
    assert len(data.notes["padding options dropped (answer remapped)"]) == 3


# --------------------------------------------------------------------------- visdep check-data
def test_check_data_reports_the_general_benchmarks(shared_benchmarks, monkeypatch, capsys):
    for variable in ("VISDEP_SKIP_UNUSABLE", "VISDEP_SKIP_MISSING_VIDEOS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("VIDEOMME_ANNOTATIONS", str(shared_benchmarks / VIDEOMME))
    monkeypatch.setenv("LONGVIDEOBENCH_ANNOTATIONS", str(shared_benchmarks / LONGVIDEOBENCH))
    monkeypatch.setenv("MLVU_ANNOTATIONS", str(shared_benchmarks / MLVU_DATA))
    assert main(["check-data", "videomme", "longvideobench", "mlvu"]) == 1  # MLVU's ten stop its tasks
    out = capsys.readouterr().out
    assert "videomme: 2,700 questions, options per question {4: 2700}" in out
    assert re.search(r"  10 question\(s\) with two identical option texts .*'119-1'", out)
    assert "longvideobench: 1,337 questions, options per question {3: 1, 4: 352, 5: 984}" in out
    assert "8 question(s) with two identical option texts" in out
    assert "mlvu: 2,165 questions" in out and "WARNING" not in out  # 2,175 records read: the official count
    assert "  padding options dropped (answer remapped): 1, e.g. ['1_plotQA/23']" in out
    assert "  open-ended records (no candidates) left out: 418, e.g. ['8_sub_scene/0'" in out
    assert "  ERROR 10 record(s) cannot be used: the tasks stop" in out
    assert f"5 x {NOT_AMONG}:" in out and f"5 x {TWO}:" in out
    assert "1_plotQA.json record 335 (1_plotQA/335): answer 'Three'" in out
    monkeypatch.setenv("VISDEP_SKIP_UNUSABLE", "1")
    assert main(["check-data", "mlvu"]) == 0
    assert "10 record(s) cannot be used and are left out (VISDEP_SKIP_UNUSABLE)" in capsys.readouterr().out
