"""The versioned `visdep` record (`lmms_eval_tasks.record`): what the tasks write is the current version, records of
the previous schema (no `schema_version`; the earliest without `video` and `prompt_id`) read through the one decoder
exactly as their current-version copies do, by both of the audit's readers, and an unknown version is refused."""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest

from lmms_eval_tasks import tasks
from lmms_eval_tasks.record import SCHEMA_VERSION, AuditedFields, VisdepRecord, decode_samples, new_record
from visdep_metrics.audit.samples import RunDataError, read_samples

# Sample lines as visdep wrote them before the record had a version (the shape of tests/helpers/runs.py's
# `visdep_record` and `sample_line` then): the second without video and prompt_id, as the earliest runs.
PREVIOUS = [
    {"doc_id": 0, "target": "1", "filtered_resps": ["(2.0, False, ' A')", "(0.5, True, ' B')", "(3.0, False, ' C')"],
     "acc": 1.0, "input": "Q0\nA. a\nB. b\nC. c",
     "visdep": {"question_id": "q0", "benchmark": "vru_accident", "mode": "blind", "category": "cause",
                "source": "CAP", "video": "v0.mp4", "prompt_id": "0123456789abcdef", "n_options": 3,
                "answer_index": 1, "option_logprobs": [-2.0, -0.5, -3.0], "scoring": "letter",
                "continuations": [" A", " B", " C"]}},
    {"doc_id": 1, "target": "0", "filtered_resps": ["(1.5, False)", "(0.5, True)"], "acc": 0.0,
     "input": "Q1\nA. a\nB. b",
     "visdep": {"question_id": "q1", "benchmark": "vru_accident", "mode": "blind", "category": None,
                "source": "DADA", "n_options": 2, "answer_index": 0, "option_logprobs": [-1.5, -0.5],
                "scoring": "letter"}},
]
COLUMNS = ("question_id", "category", "source", "video", "prompt_id", "n_options", "answer_index", "correct",
           "p_answer", "entropy")


def _write(path, samples, stringified: bool = False):
    with open(path, "w") as f:
        for sample in samples:
            line = {**sample, "visdep": json.dumps(sample["visdep"]) if stringified else sample["visdep"]}
            f.write(json.dumps(line) + "\n")
    return path


def _current(sample: dict) -> dict:
    """The same sample with its record written by the current version (fields it lacked: None)."""
    record = {"video": None, "prompt_id": None, "continuations": None, **sample["visdep"]}
    return {**sample, "visdep": new_record(**record)}


def _columns(samples) -> dict:
    return {name: (value.to_pylist() if hasattr(value, "to_pylist") else value.tolist())
            for name in COLUMNS for value in [getattr(samples, name)]}


def test_the_tasks_write_the_current_version(monkeypatch):
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    doc = {"question_id": "q1", "benchmark": "vru_accident", "category": "", "source": "DoTA", "video": "v.mp4",
           "question": "What?", "options": ["x", "y"], "answer_index": 0}
    written = tasks.process_results_blind(doc, ["(0.5, False, ' A')", "(2.0, False, ' B')"])["visdep"]
    record = msgspec.convert(written, VisdepRecord)
    assert record.schema_version == SCHEMA_VERSION == 2
    assert (record.video, record.continuations, record.option_logprobs) == ("v.mp4", [" A", " B"], [-0.5, -2.0])


@pytest.mark.parametrize("stringified", [False, True], ids=["fast", "careful"])
def test_records_of_the_previous_schema_read_as_their_current_copies(tmp_path, stringified):
    """The careful reader (a record lmms-eval stringified) and the fast one give the same columns for a file of the
    previous schema and for its copy written by the current version; the values are those the lines hold."""
    old = read_samples(_write(tmp_path / "old.jsonl", PREVIOUS, stringified), ["vru_accident"])
    new = read_samples(_write(tmp_path / "new.jsonl", [_current(s) for s in PREVIOUS], stringified),
                       ["vru_accident"])
    assert _columns(old) == _columns(new)
    assert _columns(old)["video"] == ["v0.mp4", None] and _columns(old)["prompt_id"] == ["0123456789abcdef", None]
    np.testing.assert_allclose(old.p_answer, [np.exp(-0.5) / np.exp([-2.0, -0.5, -3.0]).sum(),
                                              np.exp(-1.5) / np.exp([-1.5, -0.5]).sum()])
    assert old.correct.tolist() == [1.0, 0.0] and (old.benchmark, old.mode, old.scoring) == ("vru_accident", "blind",
                                                                                               "letter")


@pytest.mark.parametrize("stringified", [False, True], ids=["fast", "careful"])
def test_a_newer_version_is_refused_naming_the_file(tmp_path, stringified):
    newer = [{**s, "visdep": {**_current(s)["visdep"], "schema_version": SCHEMA_VERSION + 1}} for s in PREVIOUS]
    path = _write(tmp_path / "newer.jsonl", newer, stringified)
    with pytest.raises(RunDataError, match=rf"newer\.jsonl:1: visdep record schema_version {SCHEMA_VERSION + 1} "
                                           r"is not one this visdep reads"):
        read_samples(path, ["vru_accident"])


def test_the_audited_fields_are_the_records_own():
    """The audit's decoding type names the record's fields with the record's types and defaults, all but the
    scored strings."""
    record = {f.name: (f.type, f.default) for f in msgspec.structs.fields(VisdepRecord)}
    audited = {f.name: (f.type, f.default) for f in msgspec.structs.fields(AuditedFields)}
    assert audited == {name: spec for name, spec in record.items() if name != "continuations"}


def test_the_decoder_narrowed_to_one_files_values_refuses_others_and_leaves_out_what_it_is_told():
    lines = [_current(s) for s in PREVIOUS]
    data = "".join(json.dumps(s) + "\n" for s in lines).encode()
    same = {"benchmark": "vru_accident", "mode": "blind", "scoring": "letter"}
    records = [s.visdep for s in decode_samples(data, same, without=("category", "source"))]
    assert [(r.question_id, r.mode, r.video, r.option_logprobs) for r in records] == \
        [("q0", "blind", "v0.mp4", [-2.0, -0.5, -3.0]), ("q1", "blind", None, [-1.5, -0.5])]
    assert not hasattr(records[0], "category") and records[0].benchmark is records[1].benchmark
    for field, other in (("mode", "video"), ("benchmark", "mmau"), ("schema_version", SCHEMA_VERSION + 1)):
        changed = [lines[0], {**lines[1], "visdep": {**lines[1]["visdep"], field: other}}]
        with pytest.raises(msgspec.DecodeError, match=rf"\$\[1\]\.visdep\.{field}"):
            decode_samples("".join(json.dumps(s) + "\n" for s in changed).encode(), same)
