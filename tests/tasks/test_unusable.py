"""Records that cannot be used, on a synthetic MLVU release: one error names them all; the switch runs the tasks on
the rest, with the same documents in blind and video mode and what was left out recorded for the results file;
the one reader of integers and of annotation rows."""

from __future__ import annotations

import json
import math

import datasets
import pytest

from lmms_eval_tasks import evaluation, tasks
from lmms_eval_tasks.layouts import write_mlvu_release, write_mp4
from lmms_eval_tasks.loaders import load_benchmark, read_benchmark
from lmms_eval_tasks.records import RecordError, as_int
from lmms_eval_tasks.rows import RowsError, read_rows
from lmms_eval_tasks.unusable import UnusableRecordsError
from visdep_metrics.demo.fixtures import _frames


def _record(video: str, candidates: list[str] | None, answer: str, kind: str = "plotQA") -> dict:
    row = {"video": video, "duration": 60, "question": f"What happens in {video}?", "answer": answer,
           "question_type": kind}
    return row if candidates is None else {**row, "candidates": candidates}


RELEASE = {
    "1_plotQA": [_record("a.mp4", ["red", "green", "blue"], "green"),
                 _record("a.mp4", ["", "left", "right"], "right"),  # an empty candidate: dropped, answer remapped
                 _record("b.mp4", ["one", "two", "two"], "two"),  # the text of two candidates
                 _record("b.mp4", ["up", "down"], "sideways")],  # not among the candidates
    "2_needle": [_record("c.mp4", ["x", "y"], "y", "findNeedle")],
    "8_sub_scene": [_record("d.mp4", None, "A long answer.", "subPlot")],  # open-ended: left out, not unusable
}


@pytest.fixture()
def release(tmp_path, monkeypatch):
    """The release's data/ folder and its videos (b.mp4 missing), the variables pointing at them, no switch."""
    data = write_mlvu_release(tmp_path / "data", RELEASE)
    for rel in ("1_plotQA/a.mp4", "2_needle/c.mp4"):
        write_mp4(tmp_path / "video" / rel, _frames(len(rel), n=2))
    monkeypatch.setenv("MLVU_ANNOTATIONS", str(data))
    monkeypatch.setenv("MLVU_VIDEOS", str(tmp_path / "video"))
    for variable in ("VISDEP_SKIP_UNUSABLE", "VISDEP_SKIP_MISSING_VIDEOS"):
        monkeypatch.delenv(variable, raising=False)
    with evaluation.evaluating(evaluation.Evaluation()):  # what the tasks record goes there
        yield data


def test_the_release_read_as_published(release):
    data = read_benchmark("mlvu")
    assert [(q.question_id, q.options, q.answer_index, q.category, q.video) for q in data.questions] == [
        ("1_plotQA/0", ("red", "green", "blue"), 1, "plotQA", "1_plotQA/a.mp4"),
        ("1_plotQA/1", ("left", "right"), 1, "plotQA", "1_plotQA/a.mp4"),
        ("2_needle/0", ("x", "y"), 1, "needle", "2_needle/c.mp4")]
    assert [(u.question_id, u.where, u.reason) for u in data.unusable] == [
        ("1_plotQA/2", f"{release / '1_plotQA.json'} record 2", "the answer is the text of two or more candidates"),
        ("1_plotQA/3", f"{release / '1_plotQA.json'} record 3", "the answer is not among the candidates")]
    assert data.notes == {"padding options dropped (answer remapped)": ["1_plotQA/1"],
                          "open-ended records (no candidates) left out": ["8_sub_scene/0"]}
    expected = (r"^2 of the 5 records of mlvu \(MLVU_ANNOTATIONS=.*\) cannot be used: 1 the answer is the text of two "
                r"or more candidates; 1 the answer is not among the candidates\n")
    with pytest.raises(UnusableRecordsError, match=expected):
        load_benchmark("mlvu")
    assert load_benchmark("mlvu", release / "2_needle.json")[0].question_id == "2_needle/0"  # one of its files


def _placeholder() -> datasets.Dataset:
    """What lmms-eval hands process_docs for the full mlvu task: its data file (naming the benchmark) as split
    'test'."""
    return datasets.Dataset.from_list([{"benchmark": "mlvu"}], split="test")


def test_without_the_switch_the_task_stops_naming_every_record(release):
    with pytest.raises(UnusableRecordsError) as error:
        tasks.docs_blind(_placeholder())
    assert "1_plotQA.json record 2 (1_plotQA/2)" in str(error.value)
    assert "1_plotQA.json record 3 (1_plotQA/3)" in str(error.value)
    assert evaluation.current().dropped == {}


def test_with_the_switch_blind_and_video_share_documents_and_record_what_they_leave_out(release, monkeypatch):
    monkeypatch.setenv("VISDEP_SKIP_UNUSABLE", "1")
    blind = tasks.docs_blind(_placeholder())
    video = tasks.docs_video(_placeholder())
    assert blind["question_id"] == video["question_id"] == ["1_plotQA/0", "1_plotQA/1", "2_needle/0"]
    records = [{"question_id": "1_plotQA/2", "where": f"{release / '1_plotQA.json'} record 2",
                "reason": "the answer is the text of two or more candidates"},
               {"question_id": "1_plotQA/3", "where": f"{release / '1_plotQA.json'} record 3",
                "reason": "the answer is not among the candidates"}]
    assert evaluation.current().dropped == {"mlvu_blind": records, "mlvu_video": records}

    # a missing video leaves its questions out of the video task only, recorded the same way
    (release.parent / "video" / "2_needle" / "c.mp4").unlink()
    video = tasks.docs_video(_placeholder())
    assert video["question_id"] == ["1_plotQA/0", "1_plotQA/1"]
    assert evaluation.current().dropped["mlvu_video"] == [*records, {
        "question_id": "2_needle/0", "where": str(release.parent / "video" / "2_needle" / "c.mp4"),
        "reason": "the video is not found"}]

    # an exported subset: its data file is the split named by its suffix, so its own name is known
    subset = datasets.Dataset.from_list([{"question_id": "2_needle/0", "benchmark": "mlvu"},
                                         {"question_id": "1_plotQA/3", "benchmark": "mlvu"}], split="grounded")
    assert tasks.docs_blind(subset)["question_id"] == ["2_needle/0"]
    assert evaluation.current().dropped["mlvu_blind_grounded"] == [records[1]]


def test_many_unusable_records_are_listed_in_full_beside_the_output(tmp_path, monkeypatch):
    bad = [_record(f"v{i}.mp4", ["a", "b"], "c") for i in range(12)]
    data = write_mlvu_release(tmp_path / "data", {"1_plotQA": [_record("v.mp4", ["a", "b"], "a"), *bad]})
    monkeypatch.setenv("MLVU_ANNOTATIONS", str(data))
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    monkeypatch.delenv("VISDEP_SKIP_MISSING_VIDEOS", raising=False)
    with evaluation.evaluating(evaluation.Evaluation(output_path=tmp_path / "out")), \
            pytest.raises(UnusableRecordsError) as error:
        tasks.docs_blind(_placeholder())
    listed = tmp_path / "out" / "visdep_unusable_mlvu.jsonl"
    assert f"All 12 are listed in {listed}" in str(error.value) and "... and 2 more" in str(error.value)
    lines = [json.loads(line) for line in listed.read_text().splitlines()]
    assert [line["question_id"] for line in lines] == [f"1_plotQA/{i}" for i in range(1, 13)]
    assert lines[0]["detail"] == "answer 'c', candidates ['a', 'b']"


# --------------------------------------------------------------------------- the one reader of integers
@pytest.mark.parametrize(("value", "expected"), [(3, 3), ("3", 3), (3.0, 3), ("3.0", 3), (" 4 ", 4),
                                                (2**63 - 1, 2**63 - 1), ("9007199254740993", 2**53 + 1),
                                                (-2**63, -2**63)])
def test_as_int_reads_how_files_store_whole_numbers(value, expected):
    assert as_int(value, "answer") == expected


@pytest.mark.parametrize("value", ["seven", 2.5, "2.5", math.nan, "inf", True, None, [1]])
def test_as_int_refuses_everything_else(value):
    with pytest.raises(RecordError) as error:
        as_int(value, "answer")
    assert error.value.reason == "field 'answer' is not a whole number" and isinstance(error.value, ValueError)


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 2**70, 9.223372036854776e18, "9223372036854775808", "1e30"])
def test_as_int_refuses_whole_numbers_past_64_bits(value):
    """Every reader stores the number in a 64-bit array (the audit's doc ids: an OverflowError traceback before)."""
    with pytest.raises(RecordError) as error:
        as_int(value, "doc_id")
    assert error.value.reason == "field 'doc_id' is outside the 64-bit range"


# --------------------------------------------------------------------------- the one reader of rows
def test_rows_of_a_json_object_per_split_or_keyed_records(tmp_path):
    path = tmp_path / "records.json"
    path.write_text(json.dumps({"test": [{"q": 1}, {"q": 2}]}))
    assert list(read_rows(path, split="test")) == [({"q": 1}, f"{path} record 0"), ({"q": 2}, f"{path} record 1")]
    path.write_text(json.dumps({"a": {"q": 1}, "b": {"q": 2}}))
    assert [row for row, _ in read_rows(path, keyed_records=True)] == [{"q": 1}, {"q": 2}]
    with pytest.raises(RowsError, match="declare `nesting`") as error:
        list(read_rows(path))
    assert error.value.option == "nesting"
    bad = tmp_path / "records.jsonl"
    bad.write_text('{"q": 1}\n[1, 2]\n')
    with pytest.raises(RowsError, match=r"records.jsonl line 2: expected a JSON object per line"):
        list(read_rows(bad))
