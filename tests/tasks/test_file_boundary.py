"""#54: other people's files meet one boundary (`lmms_eval_tasks.reading`, `lmms_eval_tasks.writing`). Each case
below was a hang, a traceback, a read outside the root or a write through a link on 2cae6e3; each is now a result
or one short line naming the file."""

from __future__ import annotations

import csv
import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmms_eval_tasks.errors import VisdepError, excerpt
from lmms_eval_tasks.reading import MAX_NESTING, FileReadError, read_json, read_yaml
from lmms_eval_tasks.rows import read_rows
from lmms_eval_tasks.spec import SpecError, read_spec
from lmms_eval_tasks.spec_data import read_spec_records
from lmms_eval_tasks.traffic import TRAFFICQA_HEADER, read_trafficqa_file
from lmms_eval_tasks.videos import VideoReadError, probe_video
from lmms_eval_tasks.writing import WriteError, write_file
from model_adapters.frames import read_frame_folder, read_video_file
from tests.helpers.hostile import BILLION_LAUGHS, deadline, deeply_nested, fifo, laughs_value, one_line, refused
from visdep_metrics.cli.main import main

SPEC = """name: hostile_bench
root_default: .
annotations: {annotations}
fields:
  question_id: '{{id}}'
  question: {question}
  options: ['{{A}}', '{{B}}']
  answer: '{{answer}}'
  video: 'clips/{{id}}.mp4'
  category: '{{kind}}'
answer_is: letter
"""


def write_spec(folder, annotations="questions.csv", question="'{question}'", extra="") -> os.PathLike:
    path = folder / "hostile_bench.yaml"
    path.write_text(SPEC.format(annotations=annotations, question=question) + extra)
    return path


def write_csv(path, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "question", "A", "B", "answer", "kind"])
        writer.writeheader()
        writer.writerows(rows)


ROW = {"id": "q1", "question": "Which way?", "A": "left", "B": "right", "answer": "A", "kind": "motion"}


# --------------------------------------------------------------------------- reads: file kinds and sizes
def test_a_fifo_is_refused_by_every_reader_without_waiting_for_a_writer(tmp_path):
    """A FIFO named as an annotation file, a spec, a video or a frame: refused before a byte is read (each read
    opened it and waited for a writer that never comes)."""
    refused(lambda: list(read_rows(fifo(tmp_path / "b.csv"))), match=r"b\.csv: a FIFO \(named pipe\), not a file")
    refused(read_spec, fifo(tmp_path / "spec.yaml"), match=r"spec\.yaml: a FIFO")
    refused(read_video_file, fifo(tmp_path / "v.mp4"), 4, match=r"v\.mp4: a FIFO", error=VideoReadError)
    refused(probe_video, fifo(tmp_path / "w.mp4"), match=r"w\.mp4: a FIFO", error=VideoReadError)
    frames = tmp_path / "frames"
    fifo(frames / "000001.jpg")
    refused(read_frame_folder, frames, 4, match=r"cannot read frame .*000001\.jpg: a FIFO", error=VideoReadError)
    refused(read_json, fifo(tmp_path / "a.json"), "annotations", match=r"a\.json: a FIFO")


def test_a_link_to_a_device_and_a_file_over_its_limit_are_refused_naming_the_limit(tmp_path, monkeypatch):
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    refused(lambda: list(read_rows(tmp_path / "zero.jsonl")), match=r"zero\.jsonl: a device, not a file")
    (tmp_path / "big.json").write_text(json.dumps([{"x": "y" * 3000}]))
    monkeypatch.setenv("VISDEP_MAX_ANNOTATIONS_MB", "0.001")
    refused(read_json, tmp_path / "big.json", "annotations",
            match=r"big\.json: 0\.0 MB, over the 0 MB limit for a annotations file \(VISDEP_MAX_ANNOTATIONS_MB "
                  r"raises it\)")
    monkeypatch.setenv("VISDEP_MAX_ANNOTATIONS_MB", "1")
    assert read_json(tmp_path / "big.json", "annotations")[0]["x"] == "y" * 3000


# --------------------------------------------------------------------------- reads: YAML and JSON structure
def test_a_billion_laughs_spec_or_panel_is_refused_unexpanded(tmp_path):
    """Nine aliases nine levels deep are 387 million strings once expanded: refused from the node graph in well
    under a second, never expanded (the old error messages, 'expected a path or a list of paths, got {value!r}',
    expanded them)."""
    from visdep_metrics.audit.panels import PanelError, load_panel

    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("annotations: questions.csv", "annotations: " + laughs_value()))
    panel = tmp_path / "panel.yaml"
    panel.write_text(f"text_llms: {laughs_value()}\nvlms: [v]\n")
    (tmp_path / "laughs.yaml").write_text(BILLION_LAUGHS)
    started = time.perf_counter()
    expanded = r"not valid YAML \(more than 1,000,000 values once its aliases are expanded\)"
    refused(read_spec, spec, match=r"hostile_bench\.yaml: " + expanded, error=SpecError)
    refused(load_panel, panel, match=r"panel\.yaml: " + expanded, error=PanelError)
    refused(read_yaml, tmp_path / "laughs.yaml", match=r"laughs\.yaml: " + expanded)
    assert time.perf_counter() - started < 5
    # an alias used a few times, as people write YAML, is read
    panel.write_text("base: &b [x, y]\ntext_llms: *b\nvlms: *b\n")
    assert read_yaml(panel) == {"base": ["x", "y"], "text_llms": ["x", "y"], "vlms": ["x", "y"]}


def test_nesting_beyond_the_limit_is_one_line_in_json_and_yaml(tmp_path):
    (tmp_path / "deep.json").write_text(deeply_nested())
    refused(read_json, tmp_path / "deep.json", "annotations", match=r"deep\.json: nested too deeply to read")
    (tmp_path / "levels.json").write_text(deeply_nested(MAX_NESTING + 1))
    refused(read_json, tmp_path / "levels.json", "annotations", match=rf"nested more than {MAX_NESTING} levels")
    (tmp_path / "ok.json").write_text(deeply_nested(MAX_NESTING))
    assert read_json(tmp_path / "ok.json", "annotations") is not None
    (tmp_path / "deep.yaml").write_text(deeply_nested(20_000))
    refused(read_yaml, tmp_path / "deep.yaml", match=r"deep\.yaml: nested too deeply to read|nested more than")


# --------------------------------------------------------------------------- a spec's annotations
def test_spec_annotations_deep_surrogate_corrupt_parquet_and_a_huge_csv_field(tmp_path):
    """Each was a traceback; now three lines naming the file and one read: a CSV cell above csv's 131,072-character
    field limit is a cell."""
    (tmp_path / "deep.json").write_text(deeply_nested())
    spec = read_spec(write_spec(tmp_path, "deep.json"))
    refused(read_spec_records, spec, tmp_path, match=r"deep\.json: nested too deeply to read")
    (tmp_path / "sur.json").write_text('[{"id": "q\\ud800", "question": "x", "A": "a", "B": "b", "answer": "A"}]')
    spec = read_spec(write_spec(tmp_path, "sur.json"))
    refused(read_spec_records, spec, tmp_path, match=r"sur\.json: a string holds a lone surrogate")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    spec = read_spec(write_spec(tmp_path, "bad.parquet"))
    refused(read_spec_records, spec, tmp_path, match=r"bad\.parquet: not a readable parquet file")
    long_question = "Which way " * 20_000 + "?"  # 200,001 characters
    write_csv(tmp_path / "questions.csv", [{**ROW, "question": long_question}])
    spec = read_spec(write_spec(tmp_path))
    data = read_spec_records(spec, tmp_path)
    assert [q.question for q in data.questions] == [long_question] and not data.unusable


def test_annotations_are_read_under_the_root_only(tmp_path):
    """An absolute pattern walked the whole disk; a path or a link out of the root was read (and its first line
    echoed in the error)."""
    root = tmp_path / "root"
    root.mkdir()
    write_csv(tmp_path / "outside.csv", [ROW])
    (root / "inside.csv").symlink_to(tmp_path / "outside.csv")
    for entry, match in [("'/**/*.csv'", r"a pattern is matched inside the root"),
                               ("'../*.csv'", r"a pattern is matched inside the root"),
                               ("../outside.csv", r"'\.\./outside\.csv' .*is not under"),
                               (str(tmp_path / "outside.csv"), r"outside\.csv' is not under"),
                               ("inside.csv", r"'inside\.csv' \(it leads to .*outside\.csv\) is not under"),
                               ("'*.csv'", r"'\*\.csv': 'inside\.csv' \(it leads to")]:
        spec = read_spec(write_spec(root, entry))
        refused(read_spec_records, spec, root, match=r"key 'annotations': .*" + match, error=SpecError, seconds=10)
    write_csv(root / "own.csv", [ROW])
    (root / "inside.csv").unlink()
    spec = read_spec(write_spec(root, "'*.csv'"))
    assert [q.question_id for q in read_spec_records(spec, root).questions] == ["q1"]


def test_a_template_width_and_a_backtracking_extract_pattern_are_refused(tmp_path):
    """'{question:>2000000000}' asked for a 2 GB string per record; '(a|aa)+$' on 40 a's and a '!' ran for hours
    (Python's re backtracks through every split; so does `regex`, stopped by its timeout)."""
    refused(read_spec, write_spec(tmp_path, question="'{question:>2000000000}'"),
            match=r"key 'fields.question': template .* is not valid \(a width or precision above 1000 in "
                  r"':>2000000000'\)")
    write_csv(tmp_path / "questions.csv", [{**ROW, "kind": "a" * 40 + "!"}])
    spec = read_spec(write_spec(tmp_path, extra="extract:\n  kind: '(?P<x>(a|aa)+$)'\n"))
    refused(read_spec_records, spec, tmp_path, seconds=10, error=SpecError,
            match=r"key 'extract.kind': '\(\?P<x>\(a\|aa\)\+\$\)' takes more than 1 s on one record")


def test_error_messages_hold_a_short_excerpt_of_a_huge_value(tmp_path):
    """A 1 MB spec name was echoed whole by {name!r} (a spec file is at most 4 MB)."""
    (tmp_path / "huge.yaml").write_text(SPEC.format(annotations="q.csv", question="'{question}'")
                                        .replace("name: hostile_bench", "name: " + "N" * 1_000_000))
    message = refused(read_spec, tmp_path / "huge.yaml", match=r"key 'name': 'N{80}'\.\.\. \(999,920 more "
                                                               r"characters\): use lowercase")
    assert len(message) < 400
    nested = ["lol"] * 9
    for _ in range(9):
        nested = [nested] * 9
    assert len(excerpt(nested)) <= 83  # reprlib stops at three levels: never 387 million strings


def test_a_trafficqa_line_nested_100k_deep_is_an_unusable_line(tmp_path):
    path = tmp_path / "R2_test.jsonl"
    good = [0, 1, "b_1.mp4", "ego", "Did it stop?", "U", "yes", "no", "", "", 0]
    path.write_text("\n".join([json.dumps(TRAFFICQA_HEADER), json.dumps(good), deeply_nested()]) + "\n")
    with deadline():
        data = read_trafficqa_file(path)
    assert [q.question_id for q in data.questions] == ["trafficqa-0"]
    assert [(u.where, u.reason) for u in data.unusable] == [(f"{path} line 3", "the line is not JSON")]
    one_line(data.unusable[0].detail)


def test_a_record_with_more_options_than_letters_is_unusable():
    """27 options reached the prompt, whose letters end at Z (an IndexError at the 27th)."""
    from lmms_eval_tasks.records import Question, RecordError

    with pytest.raises(RecordError, match="more options than the 26 letters"):
        Question(question_id="q", benchmark="b", video="v.mp4", question="Which?",
                 options=tuple(f"o{i}" for i in range(27)), answer_index=0)
    assert len(Question(question_id="q", benchmark="b", video="v.mp4", question="Which?",
                        options=tuple(f"o{i}" for i in range(26)), answer_index=25).options) == 26


# --------------------------------------------------------------------------- writes
def test_write_file_replaces_a_link_and_never_writes_outside_its_folder(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.yaml").symlink_to(target)
    write_file(tmp_path / "out", "a.yaml", "task: x\n")
    assert target.read_text() == "keep me"
    assert not (tmp_path / "out" / "a.yaml").is_symlink()
    assert (tmp_path / "out" / "a.yaml").read_text() == "task: x\n"
    for name in ["../escape.yaml", "/abs.yaml", "sub/a.yaml", "..", ".", "", "a\0b"]:
        with pytest.raises(WriteError, match="is not a file name"):
            write_file(tmp_path / "out", name, "x")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.yaml"]  # no temporary file left either


def test_spec_init_replaces_links_beside_the_spec_and_leaves_their_targets(tmp_path, monkeypatch, capsys):
    """`<name>_spec.jsonl`, `<name>_unusable_records.jsonl` and `<name>_blind.yaml` planted as links: spec init
    wrote through the first two into their targets."""
    rows = [ROW, {**ROW, "id": "q2", "answer": "Z"}]  # q2's answer is no option: unusable, listed
    write_csv(tmp_path / "questions.csv", rows)
    spec = write_spec(tmp_path)
    targets = {}
    for name in ["hostile_bench_spec.jsonl", "hostile_bench_unusable_records.jsonl"]:
        targets[name] = tmp_path / f"target_{name}"
        targets[name].write_text("keep me\n")
        (tmp_path / name).symlink_to(targets[name])
    (tmp_path / "hostile_bench_blind.yaml").symlink_to(tmp_path / "target_blind")
    (tmp_path / "target_blind").write_text("# visdep spec init wrote this? no\n")
    monkeypatch.setenv("VISDEP_SKIP_UNUSABLE", "1")
    assert main(["spec", "init", str(spec), "--no-videos"]) == 2  # a link where a task YAML goes is not ours
    assert "hostile_bench_blind.yaml exists and was not written by visdep spec init" in capsys.readouterr().err
    assert main(["spec", "init", str(spec), "--no-videos", "--force"]) == 0
    for name, target in targets.items():
        assert target.read_text() == "keep me\n", name
        assert not (tmp_path / name).is_symlink(), name
    assert (tmp_path / "target_blind").read_text() == "# visdep spec init wrote this? no\n"
    assert not (tmp_path / "hostile_bench_blind.yaml").is_symlink()
    listed = [json.loads(line) for line in (tmp_path / "hostile_bench_unusable_records.jsonl").read_text().splitlines()]
    assert [entry["question_id"] for entry in listed] == ["q2"]


def test_a_relative_video_root_that_is_not_a_folder_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["audit", str(tmp_path), "--out", str(tmp_path / "out"), "--video-root", "mmau=no/such"]) == 2
    err = capsys.readouterr().err
    assert f"--video-root mmau=no/such: not a folder (from {tmp_path})" in err


def test_file_read_error_is_a_visdep_error():
    assert issubclass(FileReadError, VisdepError) and issubclass(WriteError, VisdepError)


def test_a_parquet_of_nested_rows_within_the_limit_reads(tmp_path):
    """The check on parquet rows leaves real nested columns alone (LongVideoBench's candidates are a list)."""
    pq.write_table(pa.table({"id": ["q1"], "question": ["x"], "A": ["a"], "B": ["b"], "answer": ["A"],
                             "kind": ["k"], "extra": [[{"a": [1, 2]}]]}), tmp_path / "q.parquet")
    rows = list(read_rows(tmp_path / "q.parquet"))
    assert rows[0][0]["extra"] == [{"a": [1, 2]}]
