"""The durable store's files (`model_adapters.durable`): every record carries a checksum and is checked before it is
reused; a record that fails is skipped with a warning naming its file and line, and scored again; two processes
writing one store at once neither interleave nor mix up records; a crash while writing leaves no torn record and no
half-written settings.json."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import subprocess
import sys

import pytest

from lmms_eval_tasks.loaders import load_benchmark
from model_adapters import compaction, durable
from model_adapters import store_records as record_io
from tests.helpers.adapters import (
    ENGINES,
    count_forwards,
    make_adapter,
    requests_for,
    set_store_root,
    store_files,
    store_records,
)
from tests.helpers.lmms_cli import REPO, lmms_eval_env


def vru_documents(stop: int | None = None) -> list[dict]:
    """The first `stop` questions of the synthetic VRU-Accident, as lmms-eval documents."""
    return [q.document() for q in load_benchmark("vru_accident")[:stop]]


def documented_checksum(record: dict) -> str:
    """docs/durability.md: SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of the record without its
    "sha256"."""
    body = {name: value for name, value in record.items() if name != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def assert_sound(record: dict) -> None:
    assert set(record) == {"key", "v", "model", "written", "scores", "sha256"}, record
    assert record["sha256"] == documented_checksum(record), record
    for loss, greedy, scored in record["scores"].values():
        assert math.isfinite(loss) and isinstance(greedy, bool) and isinstance(scored, str), record


@pytest.mark.parametrize("engine", ENGINES)  # the store wraps any engine (tests/helpers/engines.py)
def test_every_record_carries_its_checksum(tiny_models, benchmark_env, store_root, engine):
    adapter = make_adapter("qwen2", tiny_models["qwen2"], engine, batch_size=4)
    adapter.loglikelihood(requests_for(adapter, vru_documents(8), video=False))
    records = store_records(store_root)
    assert len(records) == 8
    for record in records:
        assert_sound(record)
        assert sorted(record["scores"]) == ["A", "B", "C", "D"]


def test_a_damaged_record_is_skipped_with_a_warning_and_scored_again(tiny_models, benchmark_env, store_root,
                                                                     warnings):
    """Line 3 edited by hand (a loss changed, its checksum not), line 4 a non-finite loss under a checksum that
    matches it, line 5 valid JSON that is no record: each is named with its file and line, and its question is
    scored again (letter scoring at batch 1: one forward per question); the values are those of the first run."""
    docs = vru_documents(6)
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=1)
    first = adapter.loglikelihood(requests_for(adapter, docs, video=False))
    [path] = store_files(store_root)
    lines = path.read_text().splitlines()
    edited = json.loads(lines[2])
    edited["scores"]["A"][0] += 1.0
    lines[2] = json.dumps(edited)
    not_finite = json.loads(lines[3])
    not_finite["scores"]["B"][0] = float("nan")
    not_finite["sha256"] = documented_checksum(not_finite)
    lines[3] = json.dumps(not_finite)
    lines[4] = "[1, 2]"
    path.write_text("\n".join(lines) + "\n")

    calls = count_forwards(adapter.model)
    again = adapter.loglikelihood(requests_for(adapter, docs, video=False))
    assert calls[0] == 3
    assert again == first
    assert len(warnings) == 3, warnings
    for line, reason in ((3, "checksum does not match"), (4, "not finite"), (5, "not a store record")):
        [message] = [m for m in warnings if f"{path}, line {line}:" in m]
        assert reason in message, message
    # the third run finds the questions scored again in the second run's file
    calls[0] = 0
    assert adapter.loglikelihood(requests_for(adapter, docs, video=False)) == first and calls[0] == 0


def test_a_write_cut_short_leaves_no_torn_record(tiny_models, benchmark_env, store_root, monkeypatch):
    """The disk fills up in the middle of the second batch: the error goes on, and the file ends with the first
    batch's last complete record."""
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
    real_write = os.write
    batches = [0]

    def disk_full_in_the_second_batch(fd, data):
        if not isinstance(data, memoryview):  # someone else's write
            return real_write(fd, data)
        batches[0] += 1
        if batches[0] == 2:
            real_write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", disk_full_in_the_second_batch)
    with pytest.raises(OSError, match="No space left"):
        adapter.loglikelihood(requests_for(adapter, vru_documents(8), video=False))
    [path] = store_files(store_root)
    data = path.read_bytes()
    assert data.endswith(b"\n") and len(data.splitlines()) == 4
    for record in store_records(store_root):
        assert_sound(record)


def test_settings_json_appears_whole_and_the_folders_are_synced(tiny_models, benchmark_env, store_root,
                                                                monkeypatch):
    synced = []
    real = record_io.fsync_folder
    for module in (durable, record_io):  # the writer's file (durable), the folders and settings.json (record_io)
        monkeypatch.setattr(module, "fsync_folder", lambda folder: (synced.append(folder), real(folder)))
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
    adapter.loglikelihood(requests_for(adapter, vru_documents(4), video=False))
    [folder] = [p for p in (store_root / "visdep").iterdir()]
    meta = json.loads((folder / "settings.json").read_text())
    canonical = json.dumps(meta["model_key"], sort_keys=True, separators=(",", ":")).encode()
    assert folder.name == hashlib.sha256(canonical).hexdigest()[:24]
    assert meta["model_key"]["settings"] == {"dtype": "float32"}
    # every folder created, and the model's folder after settings.json and after the record file appeared
    assert synced == [store_root.parent, store_root, store_root / "visdep", folder, folder], synced
    assert sorted(p.name for p in folder.iterdir())[-1] == "settings.json" and len(list(folder.iterdir())) == 2

    # killed while writing settings.json: no settings.json rather than part of one, and no temporary file
    set_store_root(store_root.parent / "other")

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        adapter.loglikelihood(requests_for(adapter, vru_documents(4), video=False))
    [folder] = [p for p in (store_root.parent / "other" / "visdep").iterdir()]
    assert list(folder.iterdir()) == []


# Scores questions `first`..`last` of the synthetic VRU-Accident into the store at ROOT, starting when both
# processes have loaded their model (a file each in GATE).
WRITER = """
import os, sys, time
from pathlib import Path
from lmms_eval_tasks.evaluation import Evaluation, evaluating
from lmms_eval_tasks.loaders import load_benchmark
from tests.helpers.adapters import make_adapter, requests_for
root, checkpoint, first, last, gate = sys.argv[1:]
docs = [q.document() for q in load_benchmark("vru_accident")[int(first):int(last)]]
adapter = make_adapter("qwen2", Path(checkpoint), batch_size=1)
Path(gate, str(os.getpid())).touch()
while len(os.listdir(gate)) < 2:
    time.sleep(0.005)
with evaluating(Evaluation(store_root=Path(root))):
    adapter.loglikelihood(requests_for(adapter, docs, video=False))
"""


def test_two_processes_scoring_overlapping_questions_at_once(tiny_models, benchmark_env, store_root):
    """Questions 0-29 and 18-47 scored at batch 1 (a write per question) by two processes into one store at the
    same time: every line is a sound record, each process wrote a file of its own, and a third run takes all 48
    questions from the store with the very values a run without the store gives each of them."""
    gate = store_root.parent / "gate"
    gate.mkdir()
    env = lmms_eval_env(benchmark_env, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(store_root), str(tiny_models["qwen2"]), first,
                                 last, str(gate)], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
               for first, last in (("0", "30"), ("18", "48"))]
    for writer in writers:
        _, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err[-3000:]
    files = store_files(store_root)
    assert len(files) == 2
    for path in files:
        assert path.read_bytes().endswith(b"\n")
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records:
            assert_sound(record)
        assert len({r["key"] for r in records}) == len(records)

    docs = vru_documents()
    assert len(docs) == 48
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=1)
    set_store_root(None)
    want = adapter.loglikelihood(requests_for(adapter, docs, video=False))
    set_store_root(store_root)
    calls = count_forwards(adapter.model)
    assert adapter.loglikelihood(requests_for(adapter, docs, video=False)) == want
    assert calls[0] == 0


# --------------------------------------------------------------------------- the store's rules, without a model
MODEL = {"adapter": "test", "settings": {}}


def key_of(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def scores_of(loss: float) -> dict[str, list]:
    return {"A": [loss, True, " A"], "B": [loss + 1.0, False, " B"]}


def write_file(folder, name: str, records: list[tuple[str, float, int]]) -> None:
    """A record file `name` of (key name, loss of A, written ns) records, as a writer writes them."""
    (folder / name).write_text("".join(record_io.record_line(folder.name, key_of(k), scores_of(loss), written)
                                       for k, loss, written in records))


@pytest.fixture
def folder(tmp_path):
    """An empty store's model folder (settings.json written), its root at tmp_path/cache."""
    store = durable.ScoreStore.open(MODEL, 0, root=tmp_path / "cache")
    store.close()
    return store.folder


def opened(folder, keys=None) -> durable.ScoreStore:
    return durable.ScoreStore.open(MODEL, 0, keys=keys, root=folder.parent.parent)


def test_the_newest_write_wins_whatever_the_file_names(folder, warnings):
    """Two sound records of one question, in files whose name order is the reverse of their write order (rank10
    before rank2; random hex alike): the newest write is used, and a difference beyond batch-composition rounding
    is warned about once for the pair of files, naming both. Under the old rule (first file in name order wins) the
    older value would be served."""
    write_file(folder, "rank10-h-1-aaaa.jsonl", [("q1", 4.0, 1_000), ("q2", 2.0, 1_000), ("q3", 7.0 + 1e-6, 1_000)])
    write_file(folder, "rank2-h-1-bbbb.jsonl", [("q1", 5.0, 2_000), ("q2", 1.0, 2_000), ("q3", 7.0, 2_000)])
    assert [p.name for p in record_io.record_files(folder)] == ["rank10-h-1-aaaa.jsonl", "rank2-h-1-bbbb.jsonl"]
    store = opened(folder)
    assert store.get(key_of("q1"))["A"][0] == 5.0 and store.get(key_of("q2"))["A"][0] == 1.0
    assert store.get(key_of("q3"))["A"][0] == 7.0
    [message] = [m for m in warnings if "differ" in m]
    assert "2 question(s)" in message and "rank10-h-1-aaaa.jsonl" in message and "rank2-h-1-bbbb.jsonl" in message
    # within one file, and between equal times, the later line wins: the order is total, not chance
    write_file(folder, "rank3-h-1-cccc.jsonl", [("q4", 1.0, 3_000), ("q4", 3.0, 3_000)])
    assert opened(folder).get(key_of("q4"))["A"][0] == 3.0


def test_a_question_already_stored_is_never_written_again(folder):
    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 5.0, 1_000)])
    store = opened(folder)
    store.add({key_of("q1"): {"A": (9.0, True, " A")}, key_of("q2"): {"A": (2.0, True, " A")}})
    store.add({key_of("q2"): {"A": (3.0, True, " A")}})  # written a moment ago by this process
    store.close()
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [line["key"] for line in lines] == [key_of("q2")] and lines[0]["scores"]["A"][0] == 2.0
    assert opened(folder).get(key_of("q1"))["A"][0] == 5.0


def test_a_record_carries_its_version_model_and_time_under_its_checksum(folder):
    store = opened(folder)
    store.add({key_of("q1"): {"A": (1.5, True, " A")}})
    store.close()
    line = store.path.read_text()
    record = json.loads(line)
    assert line.startswith('{"key":"' + key_of("q1") + '"')
    assert set(record) == {"key", "v", "model", "written", "scores", "sha256"}
    assert record["v"] == 2 and record["model"] == folder.name and isinstance(record["written"], int)
    body = {name: value for name, value in record.items() if name != "sha256"}
    assert record["sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
                                              ).hexdigest()


def test_a_bad_line_of_any_kind_is_skipped_with_a_warning(folder, warnings):
    """Deep nesting (RecursionError), a huge integer loss (OverflowError), bytes that are not UTF-8, a record of
    another model, and a broken line after a key's prefix: each is named with its file and line and skipped; two
    records of another format version (and one of none, the first format) give one warning; every sound record is
    read."""
    path = folder / "rank0-h-1-aaaa.jsonl"
    good = [record_io.record_line(folder.name, key_of(f"q{i}"), scores_of(float(i)), 1) for i in range(3)]
    huge = json.loads(good[1])
    huge["scores"]["A"][0] = 10**400
    other = record_io.record_line("0" * 24, key_of("q9"), scores_of(1.0), 1)
    versions = [json.dumps({**json.loads(good[0]), "v": 3}), json.dumps({**json.loads(good[0]), "v": 3}),
                json.dumps({"key": key_of("q8"), "scores": scores_of(1.0), "sha256": "x"})]
    lines = [good[0].encode(), b"[" * 200_000 + b"]" * 200_000 + b"\n", (json.dumps(huge) + "\n").encode(),
             b'{"key":"\xff\xfe' + b"0" * 62 + b'"}\n', other.encode(), b'{"key":"' + key_of("q7").encode() + b'",}\n',
             *[(v + "\n").encode() for v in versions], good[2].encode()]
    path.write_bytes(b"".join(lines))
    store = opened(folder)
    assert sorted(store.entries) == sorted([key_of("q0"), key_of("q2")])
    for number, reason in ((2, "RecursionError"), (3, "OverflowError"), (4, "unreadable"), (5, "another model"),
                           (6, "unreadable")):
        [message] = [m for m in warnings if f"{path}, line {number}:" in m]
        assert reason in message, message
    [version] = [m for m in warnings if "format version" in m]
    assert "3 record(s)" in version and f"{path}, line 7 (version 3)" in version
    assert len(warnings) == 6, warnings


def test_only_the_lines_of_the_keys_asked_for_are_parsed(folder, warnings, monkeypatch):
    write_file(folder, "rank0-h-1-aaaa.jsonl", [(f"q{i}", float(i), 1) for i in range(50)])
    with open(folder / "rank0-h-1-aaaa.jsonl", "a") as f:  # damaged, but nobody asks for it
        f.write('{"key":"' + key_of("q99") + '","v":2,"scores":{}}\n')
    parsed = []
    real = json.loads
    monkeypatch.setattr(json, "loads", lambda text, *a, **k: (parsed.append(text), real(text, *a, **k))[1])
    store = opened(folder, keys=[key_of("q3"), key_of("q7"), key_of("absent")])
    assert sorted(store.entries) == sorted([key_of("q3"), key_of("q7")]) and len(parsed) == 2
    assert store.get(key_of("q7"))["A"][0] == 7.0 and not warnings


def test_a_file_deleted_while_the_store_is_read_is_not_fatal(folder, monkeypatch):
    """A compaction merges a file and deletes it between the reader's listing and its opening of the file: the
    reader goes back to the folder and reads the merged file."""
    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 1.0, 1)])
    write_file(folder, "rank1-h-1-bbbb.jsonl", [("q2", 2.0, 1)])
    real = record_io.record_files
    calls = [0]

    def compacted_meanwhile(where):
        calls[0] += 1
        listed = real(where)
        if calls[0] == 1:
            compaction.compact(where)
        return listed

    monkeypatch.setattr(record_io, "record_files", compacted_meanwhile)
    store = opened(folder)
    assert sorted(store.entries) == sorted([key_of("q1"), key_of("q2")]) and calls[0] == 2


# Adds BATCHES batches of 5 questions to the store at ROOT, a batch every few milliseconds, then prints their keys.
STORE_WRITER = """
import hashlib, json, sys, time
from pathlib import Path
from model_adapters.durable import ScoreStore
root, batches, gate = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
store = ScoreStore.open({"adapter": "test", "settings": {}}, 1, root=root)
keys = []
for b in range(batches):
    batch = {hashlib.sha256(f"w{b}-{j}".encode()).hexdigest(): {"A": (b + j / 10, True, " A")} for j in range(5)}
    store.add(batch)
    keys += list(batch)
    if b == 0:
        gate.touch()
    time.sleep(0.005)
Path(str(gate) + ".closing").touch()
store.close()
print(json.dumps(keys))
"""


def test_compaction_under_a_concurrent_writer_loses_nothing(folder, tmp_path):
    """Three finished writers' files, and a writer process adding a batch every few milliseconds while the folder
    is compacted again and again: the finished files are merged at once, the file being written is left alone
    until its writer closes it, every record of every writer is read afterwards with its value, and a last
    compaction leaves one file holding each question once."""
    for w in range(3):
        write_file(folder, f"rank0-h-{w}-aaaa.jsonl", [(f"old{w}-{i}", float(i), 1) for i in range(10)])
    gate = tmp_path / "gate"
    env = lmms_eval_env({}, PYTHONPATH=str(REPO))
    writer = subprocess.Popen([sys.executable, "-c", STORE_WRITER, str(folder.parent.parent), "150", str(gate)],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not gate.exists():
        assert writer.poll() is None, writer.communicate()[1][-3000:]
    merged = []
    while writer.poll() is None:
        done = compaction.compact(folder)
        merged.append(done.merged)
        # the writer's file is never merged while it is open
        assert done.left >= 1 or (tmp_path / "gate.closing").exists()
    out, err = writer.communicate()
    assert writer.returncode == 0, err[-3000:]
    written = json.loads(out)
    assert merged[0] == 3 and len(written) == 750
    compaction.compact(folder)
    [only] = record_io.record_files(folder)
    keys = [json.loads(line)["key"] for line in only.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 780
    store = opened(folder)
    assert all(store.get(key_of(f"old{w}-{i}"))["A"][0] == float(i) for w in range(3) for i in range(10))
    assert all(store.get(k)["A"][0] == b + j / 10 for n, k in enumerate(written) for b, j in [divmod(n, 5)])


def test_a_store_of_many_files_is_compacted_when_opened(folder):
    for w in range(durable.COMPACT_AFTER_FILES + 1):
        write_file(folder, f"rank{w}-h-1-aaaa.jsonl", [(f"q{w}", float(w), w)])
    store = opened(folder)
    assert len(record_io.record_files(folder)) == 1 and len(store) == durable.COMPACT_AFTER_FILES + 1
    assert store.get(key_of("q5"))["A"][0] == 5.0


def test_visdep_store_compact(folder, capsys):
    from visdep_metrics.cli.main import main

    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 1.0, 1)])
    write_file(folder, "rank1-h-1-bbbb.jsonl", [("q2", 2.0, 1)])
    assert main(["store", "compact", str(folder.parent.parent)]) == 0
    assert "2 files merged into compacted-" in capsys.readouterr().out
    assert [p.name.split("-")[0] for p in record_io.record_files(folder)] == ["compacted"]
    assert main(["store", "compact", str(folder.parent.parent.parent)]) == 2
    assert "no durable store here" in capsys.readouterr().err
