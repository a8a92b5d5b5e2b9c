"""#54's property: every entry point that reads someone else's file answers any file with a result or one line (a
VisdepError, or VideoReadError for the video readers), never a traceback, never a hang, never unbounded memory.

The files are drawn by hypothesis: bytes and text, JSON values, nesting up to 200,000 levels, YAML alias bombs, lone
surrogates, values up to 5 MB; as a regular file, a FIFO, a link to /dev/zero, a folder, nothing, or a link loop.
The readers run in a child process started for the test, whose address space is capped (RLIMIT_AS: what it holds
after its imports plus MEMORY_LIMIT) and whose every example is stopped after EXAMPLE_SECONDS; the parent fails the
test on a crash (a signal), an overrun of the whole, or any other exception. The examples are derandomized (the same
on every run) and hold the known attacks explicitly."""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import tempfile
import traceback
from pathlib import Path

from tests.helpers.hostile import BILLION_LAUGHS, MAX_MESSAGE

MEMORY_LIMIT = 3 << 30
EXAMPLE_SECONDS = 15
EXAMPLES_PER_ENTRY = 30
KINDS = ("regular", "fifo", "device", "folder", "missing", "loop")
VALID_SPEC = """name: drawn_bench
root_default: .
annotations: {name}
fields:
  question_id: '{{id}}'
  question: '{{question}}'
  options: ['{{A}}', '{{B}}']
  answer: '{{answer}}'
  video: 'clips/{{id}}.mp4'
answer_is: letter
"""


def _entry_points() -> dict:
    """name -> (the file name the drawn content is written to, the call that reads it from the folder)."""
    from lmms_eval_tasks.reading import read_json, read_text, read_yaml
    from lmms_eval_tasks.rows import read_rows
    from lmms_eval_tasks.spec import read_spec
    from lmms_eval_tasks.spec_data import read_spec_records
    from lmms_eval_tasks.traffic import read_trafficqa_file
    from lmms_eval_tasks.twin import TWIN_FORMAT, open_twin
    from lmms_eval_tasks.videos import probe_video
    from model_adapters.frames import read_frames
    from visdep_metrics.audit.nonvisual import read_stress_test
    from visdep_metrics.audit.panels import load_panel
    from visdep_metrics.audit.runs import find_run_files
    from visdep_metrics.audit.samples import read_samples

    def spec_records(folder: Path, name: str):
        (folder / "drawn_bench.yaml").write_text(VALID_SPEC.format(name=name))
        return read_spec_records(read_spec(folder / "drawn_bench.yaml"), folder)

    def runs(folder: Path, name: str):
        if name.endswith("_results.json"):
            (folder / "20260101_120000_samples_mmau_blind.jsonl").write_text("")
        else:
            (folder / "20260101_120000_results.json").write_text(json.dumps(
                {"config": {"model": "visdep_llm", "model_args": "pretrained=m"},
                 "configs": {"mmau_blind": {"task": "mmau_blind", "tag": "visdep_blind"}},
                 "results": {"mmau_blind": {"acc,none": 0.5}}, "n-samples": {"mmau_blind": {"effective": 1}}}))
        return find_run_files([folder])

    def stress_test(folder: Path, name: str):
        other = "summary.json" if name == "s_x.csv" else "s_x.csv"
        (folder / other).write_text('{"benchmark": "mmau"}' if other == "summary.json" else
                                    "question_id,n_options,s,correct\nq,2,0.1,1\n")
        return read_stress_test(folder)

    def twin(folder: Path, name: str):
        if name.endswith(".json"):
            (folder / "t_twin.jsonl").write_text("")
        else:
            (folder / "t_twin.json").write_text(json.dumps({"visdep_twin": TWIN_FORMAT, "task": "t"}))
        return open_twin(folder / "t_twin.jsonl").read()

    return {
        "read_json": ("a.json", lambda f, n: read_json(f / n, "annotations")),
        "read_text": ("a.txt", lambda f, n: read_text(f / n, "annotations")),
        "read_yaml": ("a.yaml", lambda f, n: read_yaml(f / n)),
        "rows json": ("q.json", lambda f, n: list(read_rows(f / n))),
        "rows jsonl": ("q.jsonl", lambda f, n: list(read_rows(f / n))),
        "rows csv": ("q.csv", lambda f, n: list(read_rows(f / n))),
        "rows parquet": ("q.parquet", lambda f, n: list(read_rows(f / n))),
        "spec": ("s.yaml", lambda f, n: read_spec(f / n)),
        "spec records": ("questions.csv", spec_records),
        "spec records json": ("questions.json", spec_records),
        "panel": ("panel.yaml", lambda f, n: load_panel(f / n)),
        "samples": ("x_samples_mmau_blind.jsonl", lambda f, n: read_samples(f / n, ["mmau"])),
        "runs results": ("20260101_120000_results.json", runs),
        "runs samples": ("20260101_120000_samples_mmau_blind.jsonl", runs),
        "tst summary": ("summary.json", stress_test),
        "tst s_x": ("s_x.csv", stress_test),
        "twin manifest": ("t_twin.json", twin),
        "twin questions": ("t_twin.jsonl", twin),
        "trafficqa": ("R2_test.jsonl", lambda f, n: read_trafficqa_file(f / n)),
        "video probe": ("v.mp4", lambda f, n: probe_video(f / n)),
        "video frames": ("w.mp4", lambda f, n: read_frames(f / n, 4)),
    }


def _place(folder: Path, name: str, kind: str, content: bytes) -> None:
    path = folder / name
    if kind == "regular":
        path.write_bytes(content)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
        (path / "inner.json").write_bytes(content)
    elif kind == "loop":
        path.symlink_to(path.name)


def _check_all(examples: int) -> None:
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import strategies as st

    from lmms_eval_tasks.errors import VisdepError
    from lmms_eval_tasks.videos import VideoReadError
    from tests.helpers.hostile import deadline

    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=50))
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                          | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=30)
    contents = st.one_of(
        st.binary(max_size=2000),
        st.text(max_size=2000).map(lambda t: t.encode("utf-8")),
        values.map(lambda v: json.dumps(v).encode()),
        st.lists(values.map(json.dumps), max_size=5).map(lambda lines: "\n".join(lines).encode()),
        st.integers(1, 200_000).map(lambda n: b"[" * n + b"]" * n),
        st.integers(1, 200_000).map(lambda n: b"- " * n + b"x"),
        st.integers(0, 5_000_000).map(lambda n: b'[{"id": "' + b"a" * n + b'"}]'),
        st.sampled_from([BILLION_LAUGHS.encode(), b'[{"id": "\\ud800"}]', b"\xed\xa0\x80", b"", b"\xff\xfe",
                         b"PAR1" + b"\x00" * 64 + b"PAR1", b"id,question\n1," + b"x" * 300_000 + b"\n"]),
    )
    allowed = (VisdepError, VideoReadError)

    def property_of(entry: str, name: str, read):
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), phases=[p for p in Phase if p != Phase.explain])
        @given(kind=st.sampled_from(KINDS), content=contents)
        @example(kind="regular", content=b"[" * 100_000 + b"]" * 100_000)
        @example(kind="regular", content=BILLION_LAUGHS.encode())
        @example(kind="fifo", content=b"")
        @example(kind="device", content=b"")
        def answers_in_one_line(kind: str, content: bytes) -> None:
            with tempfile.TemporaryDirectory() as folder:
                _place(Path(folder), name, kind, content)
                try:
                    with deadline(EXAMPLE_SECONDS):
                        read(Path(folder), name)
                except allowed as e:
                    message = str(e)
                    assert "\n" not in message and len(message) < MAX_MESSAGE, (entry, kind, message[:2000])

        return answers_in_one_line

    for entry, (name, read) in _entry_points().items():
        property_of(entry, name, read)()


def _child(connection, examples: int) -> None:
    try:
        from loguru import logger

        logger.remove()  # the readers' debug lines, thousands of them
        _entry_points()  # the imports, before the cap
        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + MEMORY_LIMIT, size + MEMORY_LIMIT))
        _check_all(examples)
        connection.send(None)
    except BaseException as e:  # noqa: BLE001 - reported to the parent: each failure's last frames and example
        failures = getattr(e, "exceptions", None) or [e]  # hypothesis groups several distinct failures
        connection.send("\n".join("".join(traceback.format_exception(f, limit=-4))[-3000:] for f in failures))


def test_every_reader_answers_any_file_with_a_result_or_one_line():
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, EXAMPLES_PER_ENTRY))
    child.start()
    send.close()
    try:
        report = receive.recv() if receive.poll(900) else "no answer within 900 s: a hang"
    except EOFError:  # the child closed the pipe without a word
        child.join(30)
        report = f"the readers' process died (exit {child.exitcode}): a crash"
    child.join(30)
    if child.is_alive():
        child.kill()
    assert report is None, report
