"""Benchmark specs: the example specs give the built-in loaders' questions on the official files; one benchmark
written in every supported shape reads back as the same hand-written questions; bad specs fail naming the spec key,
the annotation file and the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmms_eval_tasks import discovery
from lmms_eval_tasks.discovery import task_name_clashes
from lmms_eval_tasks.evaluation import Evaluation, evaluating
from lmms_eval_tasks.layouts import write_mp4
from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.records import BenchmarkDataError
from lmms_eval_tasks.spec import SpecError, read_spec
from lmms_eval_tasks.spec_data import check_spec_videos, register_spec
from lmms_eval_tasks.unusable import UnusableRecordsError
from visdep_metrics.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SPECS = REPO / "configs" / "specs"


# --------------------------------------------------------------------------- the official files
def _fields(records: list) -> list[tuple]:
    return [(r.question_id, r.question, r.options, r.answer_index, r.category, r.source) for r in records]


def test_mmau_cap_spec_gives_the_built_in_questions(shared_benchmarks):
    root = shared_benchmarks / "mm_au"
    name = register_spec(EXAMPLE_SPECS / "mmau_cap.yaml").name
    from_spec = load_benchmark(name, root)
    built_in = [r for r in load_benchmark("mmau", root) if r.source == "CAP"]
    assert len(from_spec) == len(built_in) == 1953
    assert _fields(from_spec) == _fields(built_in)


def test_vru_accident_spec_gives_the_built_in_questions(shared_benchmarks):
    root = shared_benchmarks / "vru_accident"
    name = register_spec(EXAMPLE_SPECS / "vru_accident.yaml").name
    from_spec = load_benchmark(name, root)
    built_in = load_benchmark("vru_accident", root)
    assert len(from_spec) == len(built_in) == 6000
    assert _fields(from_spec) == _fields(built_in)
    assert [r.video for r in from_spec] == [r.video for r in built_in]


def test_mmau_cap_spec_finds_the_frame_folders_the_built_in_finds(tmp_path, monkeypatch):
    """'*' in the video template stands for the group folder (1-10, 11, ...) the record does not name."""
    from lmms_eval_tasks.loaders import resolve_video
    from visdep_metrics.demo.fixtures import write_mmau_fixture

    write_mmau_fixture(tmp_path, n_cap=4, n_dada=1)
    name = register_spec(EXAMPLE_SPECS / "mmau_cap.yaml").name
    from_spec = load_benchmark(name, tmp_path)
    built_in = [r for r in load_benchmark("mmau", tmp_path) if r.source == "CAP"]
    assert _fields(from_spec) == _fields(built_in)
    check_spec_videos(read_spec(EXAMPLE_SPECS / "mmau_cap.yaml"), tmp_path)  # raises if one is missing
    monkeypatch.setenv("MMAU_ROOT", str(tmp_path))
    for spec_record, record in zip(from_spec, built_in, strict=True):
        folder = resolve_video(name, spec_record.video)
        assert folder == resolve_video("mmau", record.video) and folder.is_dir()


# --------------------------------------------------------------------------- one benchmark in every shape
EXPECTED = [  # written by hand: what every shape below must read as
    {"question_id": "q-1", "benchmark": "shapes", "video": "clips/c1.mp4", "question": "Which way does the bar move?",
     "options": ["left", "right", "up"], "answer_index": 1, "category": "motion", "source": "lab"},
    {"question_id": "q-2", "benchmark": "shapes", "video": "clips/c1.mp4", "question": "What colour is the bar?",
     "options": ["red", "green, dark", "blue"], "answer_index": 2, "category": "colour", "source": "lab"},
    {"question_id": "q-3", "benchmark": "shapes", "video": "clips/c2.mp4", "question": "What colour is the bar?",
     "options": ["red", "green, dark", "blue"], "answer_index": 0, "category": "colour", "source": "lab"},
    {"question_id": "q-4", "benchmark": "shapes", "video": "clips/c2.mp4", "question": "How fast is the bar?",
     "options": ["fast", "slow", "still"], "answer_index": 1, "category": "speed", "source": "lab"},
]
ROWS = [  # the same questions as flat records
    {"id": 1, "clip": "c1", "kind": "motion", "q": "Which way does the bar move?", "o": ["left", "right", "up"],
     "a": 1},
    {"id": 2, "clip": "c1", "kind": "colour", "q": "What colour is the bar?", "o": ["red", "green, dark", "blue"],
     "a": 2},
    {"id": 3, "clip": "c2", "kind": "colour", "q": "What colour is the bar?", "o": ["red", "green, dark", "blue"],
     "a": 0},
    {"id": 4, "clip": "c2", "kind": "speed", "q": "How fast is the bar?", "o": ["fast", "slow", "still"], "a": 1},
]
COMMON = {"name": "shapes", "root_default": ".", "n_options": 3}


def _write_spec(folder: Path, **keys) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**COMMON, **keys}, sort_keys=False))
    return path


def _load(spec_path: Path) -> list[dict]:
    """The spec's questions as lmms-eval documents (comparable with EXPECTED)."""
    return [q.document() for q in load_benchmark(register_spec(spec_path).name)]


def _csv(folder: Path, rows: list[dict], name: str = "questions.csv") -> None:
    import csv

    with open(folder / name, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _csv_rows(answer_as) -> list[dict]:
    return [{"id": r["id"], "question": r["q"], "A": r["o"][0], "B": r["o"][1], "C": r["o"][2],
             "answer": answer_as(r), "type": r["kind"], "clip": r["clip"]} for r in ROWS]


CSV_FIELDS = {"question_id": "q-{id}", "question": "{question}", "options": ["{A}", "{B}", "{C}"],
              "answer": "{answer}", "video": "clips/{clip}.mp4", "category": "{type}", "source": "lab"}


def test_csv_with_option_columns_and_letter_answers(tmp_path):
    _csv(tmp_path, _csv_rows(lambda r: "ABC"[r["a"]].lower() + "."))  # 'b.': case and a trailing dot are accepted
    assert _load(_write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="letter")) == EXPECTED


def test_csv_with_one_based_answers_and_answer_texts(tmp_path):
    _csv(tmp_path, _csv_rows(lambda r: r["a"] + 1))
    assert _load(_write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="index1")) == EXPECTED
    _csv(tmp_path, _csv_rows(lambda r: r["o"][r["a"]]))
    assert _load(_write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="text")) == EXPECTED


LIST_FIELDS = {"question_id": "q-{id}", "question": "{q}", "options": "{o}", "answer": "{a}",
               "video": "clips/{clip}.mp4", "category": "{kind}", "source": "lab"}


def test_jsonl_with_a_list_of_options(tmp_path):
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in ROWS))  # blank lines are skipped
    assert _load(_write_spec(tmp_path, annotations="q.jsonl", fields=LIST_FIELDS, answer_is="index")) == EXPECTED


def test_json_list_split_over_two_files_by_glob(tmp_path):
    (tmp_path / "part1.json").write_text(json.dumps(ROWS[:2]))
    (tmp_path / "part2.json").write_text(json.dumps(ROWS[2:]))
    assert _load(_write_spec(tmp_path, annotations="part*.json", fields=LIST_FIELDS, answer_is="index")) == EXPECTED


def test_parquet_with_answers_as_strings(tmp_path):
    import pandas as pd

    pd.DataFrame([{**r, "a": str(r["a"])} for r in ROWS]).to_parquet(tmp_path / "q.parquet")
    assert _load(_write_spec(tmp_path, annotations="q.parquet", fields=LIST_FIELDS, answer_is="index")) == EXPECTED


def test_saved_hugging_face_dataset_with_a_split(tmp_path):
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "saved"))
    spec = _write_spec(tmp_path, annotations="saved", split="test", fields=LIST_FIELDS, answer_is="index")
    assert _load(spec) == EXPECTED
    with pytest.raises(SpecError, match=r"key 'split'.*\['test'\]"):
        _load(_write_spec(tmp_path, annotations="saved", split="validation", fields=LIST_FIELDS, answer_is="index"))


def test_nested_json_lettered_options_text_answers_and_extracted_fields(tmp_path):
    """VRU-Accident's shape: an object keyed by video, then by category; options one lettered string."""
    nested: dict = {}
    for r in ROWS:
        lettered = ", ".join(f"{letter}. {o}" for letter, o in zip("ABC", r["o"], strict=True))
        nested.setdefault(f"./clips/{r['clip']}.mp4", {})[r["kind"]] = {
            "id": f"q-{r['id']}", "question": r["q"], "options": lettered, "answer": r["o"][r["a"]]}
    (tmp_path / "lab_annotations.json").write_text(json.dumps(nested))
    fields = {"question_id": "{id}", "question": "{question}", "options": {"lettered": "{options}"},
              "answer": "{answer}", "video": "{video_key}", "category": "{category}", "source": "{group}"}
    spec = _write_spec(tmp_path, annotations="lab_annotations.json", nesting=["video_key", "category"],
                       extract={"_file": "^(?P<group>[a-z]+)_"}, fields=fields, answer_is="text")
    assert _load(spec) == EXPECTED


def test_padding_options_are_dropped_and_the_answer_remapped(tmp_path):
    rows = [{"id": 1, "o": ["N/A", "left", "right", "up"], "a": "C"}, {"id": 2, "o": ["a", "b", "", "c"], "a": "D"}]
    _csv(tmp_path, [{"id": r["id"], **{f"o{k}": o for k, o in enumerate(r["o"])}, "a": r["a"]} for r in rows])
    fields = {"question_id": "{id}", "question": "Which?", "options": ["{o0}", "{o1}", "{o2}", "{o3}"], "answer": "{a}",
              "video": "v/{id}.mp4"}
    spec = _write_spec(tmp_path, annotations="questions.csv", fields=fields, answer_is="letter",
                       drop_options=["", "N/A"])
    records = load_benchmark(register_spec(spec).name)
    assert [(r.options, r.answer_index) for r in records] == [(("left", "right", "up"), 1), (("a", "b", "c"), 2)]
    assert records[0].category is None and records[0].source is None


def test_ids_formatted_from_numbers_stored_as_text(tmp_path):
    _csv(tmp_path, [{"n": "7", "q": "Which?", "A": "x", "B": "y", "ans": "0"}])
    fields = {"question_id": "dada-{n:03d}", "question": "{q}", "options": ["{A}", "{B}"], "answer": "{ans}",
              "video": "DADA/{n:03d}/images"}
    (record,) = load_benchmark(register_spec(_write_spec(tmp_path, annotations="questions.csv", fields=fields,
                                                         answer_is="index", n_options=2)).name)
    assert (record.question_id, record.video) == ("dada-007", "DADA/007/images")


# --------------------------------------------------------------------------- bad specs
def _bad(tmp_path: Path, rows: list[dict] | None = None, **keys) -> str:
    """The error of loading a CSV benchmark (the four questions unless `rows`) through a spec with `keys`."""
    _csv(tmp_path, rows or _csv_rows(lambda r: "ABC"[r["a"]]))
    spec = _write_spec(tmp_path, **{"annotations": "questions.csv", "fields": CSV_FIELDS, "answer_is": "letter",
                                    **keys})
    with pytest.raises(BenchmarkDataError) as error:  # a SpecError, or UnusableRecordsError listing the records
        _load(spec)
    message = str(error.value)
    assert str(spec) in message
    return message


def test_a_missing_spec_field_names_the_key(tmp_path):
    fields = {k: v for k, v in CSV_FIELDS.items() if k != "question"}
    assert "key 'fields.question': missing (required)" in _bad(tmp_path, fields=fields)


def test_a_field_the_records_do_not_have_names_key_file_and_record(tmp_path):
    message = _bad(tmp_path, fields={**CSV_FIELDS, "question": "{qestion}"})
    assert "key 'fields.question'" in message and f"{tmp_path / 'questions.csv'} row 2" in message
    assert "names field 'qestion', which the record does not have" in message and "question" in message


def test_an_answer_not_among_the_options(tmp_path):
    rows = _csv_rows(lambda r: "ABC"[r["a"]])
    rows[2]["answer"] = "D"
    message = _bad(tmp_path, rows=rows)
    assert (f"{tmp_path / 'questions.csv'} row 4 (q-3): key 'fields.answer': the answer is not one of the options' "
            f"letters: 'D', letters A, B, C") in message
    rows = _csv_rows(lambda r: r["o"][r["a"]])
    rows[2]["answer"] = "purple"
    message = _bad(tmp_path, rows=rows, answer_is="text")
    assert "row 4 (q-3): key 'fields.answer': the answer is not among the options: answer 'purple'" in message
    rows = _csv_rows(lambda r: r["a"])
    rows[2]["answer"] = "3"
    message = _bad(tmp_path, rows=rows, answer_is="index")
    assert ("row 4 (q-3): key 'fields.answer': the answer is not among the options: answer '3' of 3 options "
            "(answer_is index: 0..2)") in message


def test_a_question_with_another_number_of_options_than_declared(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[1]["o"] = ["red", "green", "blue", "black"]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = _write_spec(tmp_path, annotations="q.jsonl", fields=LIST_FIELDS, answer_is="index")
    with pytest.raises(UnusableRecordsError) as error:
        _load(spec)
    assert (f"{tmp_path / 'q.jsonl'} line 2 (q-2): key 'n_options': another number of options than declared: "
            f"3 declared, the record has 4" in str(error.value))


def test_lettered_options_with_another_number_of_markers(tmp_path):
    (tmp_path / "q.json").write_text(json.dumps({"v1.mp4": {"where": {"q": "Where?", "o": "A. x, B. y", "a": "A"}}}))
    fields = {"question_id": "{video}/{cat}", "question": "{q}", "options": {"lettered": "{o}"}, "answer": "{a}",
              "video": "{video}"}
    message = _bad(tmp_path, annotations="q.json", nesting=["video", "cat"], fields=fields)
    assert (f"{tmp_path / 'q.json'} record 'v1.mp4' / 'where' (v1.mp4/where): key 'fields.options.lettered': the "
            f"option markers are not found in order: A, B, C in 'A. x, B. y'") in message


def test_a_video_template_that_points_nowhere(tmp_path):
    from visdep_metrics.demo.fixtures import _frames

    for clip in ("c1", "c2"):
        write_mp4(tmp_path / "clips" / f"{clip}.mp4", _frames(1, n=2))
    _csv(tmp_path, _csv_rows(lambda r: "ABC"[r["a"]]))
    good = _write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="letter")
    check_spec_videos(read_spec(good), tmp_path)  # every video is there
    bad = _write_spec(tmp_path, annotations="questions.csv", fields={**CSV_FIELDS, "video": "videos/{clip}.mp4"},
                      answer_is="letter")
    with pytest.raises(SpecError) as error:
        check_spec_videos(read_spec(bad), tmp_path)
    assert str(error.value) == (f"{bad}: key 'fields.video': 2 of 2 videos are not found under {tmp_path} with the "
                                f"template 'videos/{{clip}}.mp4'; the first: {tmp_path / 'questions.csv'} row 2 -> "
                                f"'videos/c1.mp4' matches no path")
    # `visdep spec init` checks the videos before writing anything
    assert main(["spec", "init", str(bad)]) == 2
    assert not (tmp_path / "shapes_blind.yaml").exists()


@pytest.mark.parametrize(("keys", "expected"), [
    ({"colour": 1}, "key 'colour': unknown key"),
    ({"name": "My Bench"}, "key 'name': 'My Bench': use lowercase letters"),
    ({"name": "mmau"}, "key 'name': 'mmau' is already a built-in visdep benchmark"),
    ({"answer_is": "number"}, "key 'answer_is': 'number': expected one of index, index1, letter, text"),
    ({"format": "xls"}, "key 'format': 'xls': expected one of json, jsonl, csv, parquet, hf_disk"),
    ({"annotations": "nothing.csv"}, "key 'annotations':"),
    ({"fields": {**CSV_FIELDS, "question": "{question"}}, "key 'fields.question': template '{question' is not valid"),
    ({"fields": {**CSV_FIELDS, "options": {"lettered": "{A}"}}, "n_options": None},
     "key 'n_options': required with fields.options.lettered"),
    ({"extract": {"clip": "c[0-9]"}}, "key 'extract.clip': 'c[0-9]' has no named group"),
])
def test_spec_errors_name_the_key(tmp_path, keys, expected):
    assert expected in _bad(tmp_path, **keys)


def test_a_json_object_without_nesting(tmp_path):
    (tmp_path / "q.json").write_text(json.dumps({"v1.mp4": {"where": {}}}))
    message = _bad(tmp_path, annotations="q.json")
    assert "key 'nesting'" in message and "declare `nesting`" in message


def test_duplicate_question_ids_name_both_records(tmp_path):
    message = _bad(tmp_path, fields={**CSV_FIELDS, "question_id": "{clip}"})
    assert (f"row 3 (c1): key 'fields.question_id': the question id repeats an earlier record's: first at "
            f"{tmp_path / 'questions.csv'} row 2") in message


def test_task_names_lmms_eval_already_has_are_refused(tmp_path):
    _csv(tmp_path, _csv_rows(lambda r: "ABC"[r["a"]]))
    spec = read_spec(_write_spec(tmp_path, name="mmsi", annotations="questions.csv", fields=CSV_FIELDS,
                                 answer_is="letter"))
    assert task_name_clashes(spec, known=frozenset({"mmsi_video", "mmsi_bench"})) == ["mmsi_video"]
    assert task_name_clashes(spec, known=frozenset()) == []


# --------------------------------------------------------------------------- tasks, export, command line
def test_init_writes_tasks_that_name_the_spec_and_export_follows(tmp_path, monkeypatch):
    from lmms_eval_tasks.export import write_subset_tasks
    from lmms_eval_tasks.tasks import docs_blind

    monkeypatch.setattr(discovery, "lmms_eval_task_names", lambda: frozenset())  # lmms-eval's index: slow test
    _csv(tmp_path, _csv_rows(lambda r: "ABC"[r["a"]]))
    spec = _write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="letter")
    assert main(["spec", "init", str(spec), "--no-videos"]) == 0
    blind = yaml.safe_load((tmp_path / "shapes_blind.yaml").read_text().replace("!function", ""))
    assert blind["task"] == "shapes_blind" and blind["dataset_kwargs"]["data_files"]["test"] == "shapes_spec.jsonl"
    assert blind["process_docs"] == "lmms_eval_tasks.tasks.docs_blind"
    assert [m["metric"] for m in blind["metric_list"]] == ["acc", "acc_motion", "acc_colour", "acc_speed"]
    assert json.loads((tmp_path / "shapes_spec.jsonl").read_text()) == {"spec": str(spec.resolve())}

    import datasets

    # lmms-eval hands process_docs the data file: in an evaluation of its own, the spec it names is read (and
    # registered) from there
    with evaluating(Evaluation()):
        documents = docs_blind(datasets.Dataset.from_list([{"spec": str(spec.resolve())}]))
    assert documents["question_id"] == [r["question_id"] for r in EXPECTED]
    paths = write_subset_tasks(tmp_path / "tasks", "shapes", ["q-3", "q-1"], "grounded")
    assert [json.loads(line) for line in paths[0].read_text().splitlines()] == [
        {"question_id": "q-3", "spec": str(spec.resolve())}, {"question_id": "q-1", "spec": str(spec.resolve())}]
    grounded = yaml.safe_load(paths[2].read_text().replace("!function", ""))
    assert grounded["process_docs"] == "lmms_eval_tasks.tasks.docs_video"
    assert [m["metric"] for m in grounded["metric_list"]] == ["acc", "acc_motion", "acc_colour", "acc_speed"]
    subset = docs_blind(datasets.Dataset.from_list([json.loads(x) for x in paths[0].read_text().splitlines()]))
    assert subset["question_id"] == ["q-1", "q-3"]  # the benchmark's order


def test_check_data_and_tst_take_a_spec(tmp_path, capsys):
    from visdep_metrics.demo.fixtures import _frames

    rows = [{"id": f"{v}-{k}", "question": f"Question {k}?", "A": f"a{v}", "B": f"b{k}", "C": "c",
             "answer": "ABC"[(v + k) % 3], "type": "t", "clip": f"v{v}"} for v in range(5) for k in range(2)]
    _csv(tmp_path, rows)
    for v in range(5):
        write_mp4(tmp_path / "clips" / f"v{v}.mp4", _frames(v, n=2))
    spec = _write_spec(tmp_path, annotations="questions.csv", fields=CSV_FIELDS, answer_is="letter")
    assert main(["check-data", "--spec", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "shapes: 10 questions, options per question {3: 10}" in out and "videos: all 5 found" in out
    assert main(["tst", "--spec", str(spec), "--out", str(tmp_path / "tst"), "--n-estimators", "5"]) == 0
    summary = json.loads((tmp_path / "tst" / "summary.json").read_text())
    assert summary["benchmark"] == "shapes" and summary["n_questions"] == 10
    assert main(["tst", "--out", str(tmp_path / "none")]) == 2  # neither --benchmark nor --spec
