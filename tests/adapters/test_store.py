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
from loguru import logger

from lmms_eval_tasks.evaluation_hooks import set_store_root
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters import durable
from tests.helpers.adapters import count_forwards, make_adapter, requests_for, store_files, store_records
from tests.helpers.lmms_cli import REPO, lmms_eval_env


@pytest.fixture
def warnings():
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING", format="{message}")
    yield messages
    logger.remove(sink)


def vru_documents(stop: int | None = None) -> list[dict]:
    """The first `stop` questions of the synthetic VRU-Accident, as lmms-eval documents."""
    return [q.document() for q in load_benchmark("vru_accident")[:stop]]


def documented_checksum(key: str, scores: dict) -> str:
    """docs/durability.md: SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of [key, scores]."""
    return hashlib.sha256(json.dumps([key, scores], sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def assert_sound(record: dict) -> None:
    assert set(record) == {"key", "scores", "sha256"}, record
    assert record["sha256"] == documented_checksum(record["key"], record["scores"]), record
    for loss, greedy, scored in record["scores"].values():
        assert math.isfinite(loss) and isinstance(greedy, bool) and isinstance(scored, str), record


def test_every_record_carries_its_checksum(tiny_models, benchmark_env, store_root):
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
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
    not_finite["sha256"] = hashlib.sha256(json.dumps([not_finite["key"], not_finite["scores"]], sort_keys=True,
                                                     separators=(",", ":")).encode()).hexdigest()
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
    real = durable.fsync_folder
    monkeypatch.setattr(durable, "fsync_folder", lambda folder: (synced.append(folder), real(folder)))
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
from lmms_eval_tasks.evaluation_hooks import set_store_root
from lmms_eval_tasks.loaders import load_benchmark
from tests.helpers.adapters import make_adapter, requests_for
root, checkpoint, first, last, gate = sys.argv[1:]
set_store_root(root)
docs = [q.document() for q in load_benchmark("vru_accident")[int(first):int(last)]]
adapter = make_adapter("qwen2", Path(checkpoint), batch_size=1)
Path(gate, str(os.getpid())).touch()
while len(os.listdir(gate)) < 2:
    time.sleep(0.005)
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
