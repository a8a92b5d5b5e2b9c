"""The loaders on synthetic downloads in each official layout: quirks, and clear errors on bad data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.records import BenchmarkDataError
from lmms_eval_tasks.unusable import UnusableRecordsError
from visdep_metrics.demo.fixtures import write_fixtures


@pytest.fixture()
def roots(tmp_path):
    env = write_fixtures(tmp_path, videos=False)
    names = {"MMAU_ROOT": "mmau", "VRU_ACCIDENT_ROOT": "vru_accident", "TRAFFICQA_ROOT": "trafficqa",
             "ACCIDENTBENCH_ROOT": "accidentbench"}
    return {names[var]: Path(root) for var, root in env.items()}


def test_every_benchmark_loads_from_annotations_alone(roots):
    counts = {name: len(load_benchmark(name, root)) for name, root in roots.items()}
    assert counts == {"mmau": 10, "vru_accident": 48, "trafficqa": 8, "accidentbench": 16}


def test_mmau_dada_float_cells_and_repeated_video_numbers(roots):
    dada = [r for r in load_benchmark("mmau", roots["mmau"]) if r.source == "DADA"]
    assert [r.question_id for r in dada] == ["dada-11-093", "dada-43-093", "dada-11-094", "dada-43-094"]
    assert [r.answer_index for r in dada] == [3, 4, 0, 1]  # written as 3.0, 4.0, ...
    assert dada[1].video == "DADA-DATA/43/093/images"


def test_vru_broken_spacings_split(roots):
    vru = {r.question_id: r for r in load_benchmark("vru_accident", roots["vru_accident"])}
    annotation = json.loads((roots["vru_accident"] / "MetaData/CAP_DATA/CAP_DATA_VQA_annotation.json").read_text())
    raw = annotation["./VRU_videos/CAP_DATA/VRU_1.mp4"]
    styles = {c: q["options"] for c, q in raw.items()}
    assert any("B.C" in s or "B.T" in s or "B.p" in s for s in styles.values())  # 'B.Cyclist' style present
    assert any(".,  B." in s for s in styles.values())  # '.,  B.' style present
    for category, text in styles.items():
        options = vru[f"CAP_DATA/VRU_1/{category}"].options
        assert len(options) == 4 and all(o and not o.endswith(",") for o in options), (text, options)
        assert "".join(f"{L}. {o}" for L, o in zip("ABCD", options, strict=True)).replace(" ", "") \
            .replace(",", "").replace(".", "") == text.replace(" ", "").replace(",", "").replace(".", "")


def test_trafficqa_drops_empty_options_and_remaps_answer(roots):
    recs = {r.question_id: r for r in load_benchmark("trafficqa", roots["trafficqa"])}
    # record 9001: answer 1 ("No accident happened."), option 2 padded with "" -> 3 options, answer still 1
    assert recs["trafficqa-9001"].options == ("Head-on collision", "No accident happened.", "Others")
    assert recs["trafficqa-9001"].answer_index == 1
    # record 9002: answer 2, options 3 and 0 padded -> ["No accident happened.", "The vehicle collided ..."], answer 1
    assert recs["trafficqa-9002"].options == ("No accident happened.",
                                                 "The vehicle collided with road infrastructure.")
    assert recs["trafficqa-9002"].answer_index == 1
    assert recs["trafficqa-9000"].category == "basic understanding"
    assert recs["trafficqa-9003"].video == "raw_videos/b_clip_001.mp4"


def test_accidentbench_reorders_by_embedded_letter(roots, tmp_path):
    recs = load_benchmark("accidentbench", roots["accidentbench"])
    for r in recs:
        k = len(r.options)
        idx = [int(o.split("[")[1].split(",")[0]) // 2 for o in r.options]
        assert idx == list(range(k)), r.options  # option j carried letter j before shuffling
    lower = [r for r in recs if r.source == "long/hard"]
    assert lower and {len(r.options) for r in recs} == {2, 6, 12}
    assert recs[0].video == "videos/000000.mp4"


# --------------------------------------------------------------------------- errors
def test_unset_variable_names_variable_and_layout(monkeypatch):
    monkeypatch.delenv("MMAU_ROOT", raising=False)
    with pytest.raises(BenchmarkDataError, match=r"MMAU_ROOT is not set.*ArA label/test.json"):
        load_benchmark("mmau")


def test_bad_root_names_path(tmp_path, monkeypatch):
    monkeypatch.setenv("VRU_ACCIDENT_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(BenchmarkDataError, match=r"VRU_ACCIDENT_ROOT=.*nowhere: not a directory.*MetaData"):
        load_benchmark("vru_accident")
    monkeypatch.setenv("VRU_ACCIDENT_ROOT", str(tmp_path))
    with pytest.raises(BenchmarkDataError, match=r"CAP_DATA_VQA_annotation.json: missing"):
        load_benchmark("vru_accident")


@pytest.mark.parametrize("name, file, edit, message", [
    ("mmau", "ArA label/test.json", lambda rows: rows[2].update(answer="seven"),
     r"test.json record 2 \(cap-7802\): field 'answer' is not a whole number: 'seven'"),
    ("mmau", "ArA label/test.json", lambda rows: rows[1].pop("a3"),
     r"test.json record 1 \(cap-7801\): a field is missing: no field 'a3'"),
    ("vru_accident", "MetaData/DoTA/DoTA_VQA_annotation.json",
     lambda d: d["./VRU_videos/DoTA/VRU_2.mp4"]["location"].update(options="A. urban; B. rural"),
     r"DoTA_VQA_annotation.json video './VRU_videos/DoTA/VRU_2.mp4' category 'location' \(DoTA/VRU_2/location\): "
     r"the option markers are not found in order"),
    ("vru_accident", "MetaData/DoTA/DoTA_VQA_annotation.json",
     lambda d: d["./VRU_videos/DoTA/VRU_1.mp4"]["road type"].update(GT="E"), r"GT is not one of A-D: 'E'"),
    ("accidentbench", "land_space/short/easy/spatial_reasoning.json", lambda rows: rows[0].update(ground_truth="K"),
     r"spatial_reasoning.json record 0 \(short/easy/spatial_reasoning/\d+\): ground_truth names no option: 'K'"),
])
def test_malformed_record_names_file_and_record(roots, name, file, edit, message):
    path = roots[name] / file
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(UnusableRecordsError, match=message) as error:
        load_benchmark(name, roots[name])
    assert len(error.value.unusable) == 1
    assert "VISDEP_SKIP_UNUSABLE=1" in str(error.value)


def test_trafficqa_bad_lines(roots):
    path = roots["trafficqa"] / "annotations" / "R2_test.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + [lines[3][:20]] + lines[4:]) + "\n")
    with pytest.raises(UnusableRecordsError, match=r"R2_test.jsonl line 4: the line is not JSON"):
        load_benchmark("trafficqa", roots["trafficqa"])
    row = json.loads(lines[1])
    row[6 + row[-1]] = ""  # the answer points at a padded option
    path.write_text("\n".join([lines[0], json.dumps(row), lines[2]]) + "\n")
    with pytest.raises(UnusableRecordsError, match=r"line 2 \(trafficqa-9000\): the answer points at an empty"):
        load_benchmark("trafficqa", roots["trafficqa"])
    path.write_text(json.dumps(["record_id"]) + "\n" + lines[1] + "\n")  # the file's own error: at once
    with pytest.raises(BenchmarkDataError, match=r"R2_test.jsonl: unexpected header"):
        load_benchmark("trafficqa", roots["trafficqa"])


# --------------------------------------------------------------------------- every unusable record at once
def _break_three_mmau_records(root: Path) -> None:
    path = root / "ArA label" / "test.json"
    rows = json.loads(path.read_text())
    rows[0]["answer"] = "seven"
    rows[2]["answer"] = "9"  # an index past the five options
    rows[4]["answer"] = "2.5"
    rows[5]["video_id"] = rows[3]["video_id"]  # a repeated id
    path.write_text(json.dumps(rows))


def test_every_unusable_record_in_one_error_counted_by_reason(roots, monkeypatch):
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    monkeypatch.delenv("VISDEP_SKIP_MISSING_VIDEOS", raising=False)
    _break_three_mmau_records(roots["mmau"])
    with pytest.raises(UnusableRecordsError) as error:
        load_benchmark("mmau", roots["mmau"])
    message = str(error.value)
    assert message.startswith(f"4 of the 10 records of mmau (MMAU_ROOT={roots['mmau']}) cannot be used: "
                              f"2 field 'answer' is not a whole number; 1 the answer index is outside the options; "
                              f"1 the question id repeats an earlier record's")
    test_json = roots["mmau"] / "ArA label" / "test.json"
    for line in (f"{test_json} record 0 (cap-7800): field 'answer' is not a whole number: 'seven'",
                 f"{test_json} record 4 (cap-7804): field 'answer' is not a whole number: '2.5'",
                 f"{test_json} record 2 (cap-7802): the answer index is outside the options: 9 of 5 options",
                 f"{test_json} record 5 (cap-7803): the question id repeats an earlier record's: first at "
                 f"{test_json} record 3"):
        assert f"\n  {line}" in message
    assert "to run on the other 6 questions" in message
    assert [(u.question_id, u.reason) for u in error.value.unusable][:1] == [
        ("cap-7800", "field 'answer' is not a whole number")]


@pytest.mark.parametrize("variable", ["VISDEP_SKIP_UNUSABLE", "VISDEP_SKIP_MISSING_VIDEOS"])
def test_the_switch_runs_on_the_rest(roots, monkeypatch, variable):
    _break_three_mmau_records(roots["mmau"])
    monkeypatch.setenv(variable, "1")
    questions = load_benchmark("mmau", roots["mmau"])
    assert [q.question_id for q in questions] == ["cap-7801", "cap-7803", "dada-11-093", "dada-43-093",
                                                  "dada-11-094", "dada-43-094"]
    monkeypatch.delenv(variable)
    assert len(load_benchmark("mmau", roots["mmau"], skip=True)) == 6
