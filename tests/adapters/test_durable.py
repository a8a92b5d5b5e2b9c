"""The durable store behind `--use_cache`: each batch is on disk before the next starts, a rerun scores only
what is missing and gives the same values, a changed setting reuses nothing (in process); and a real
`lmms-eval` run killed with SIGKILL resumes where it stopped (one process, and two torchrun ranks)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks.evaluation_hooks import set_store_root
from lmms_eval_tasks.loaders import load_benchmark
from tests.helpers.adapters import count_forwards, make_adapter, requests_for
from tests.helpers.lmms_cli import free_port, lmms_eval_env, read_samples, run_lmms_eval


@pytest.fixture
def store_root(tmp_path):
    set_store_root(tmp_path / "cache")
    yield tmp_path / "cache"
    set_store_root(None)


def stored_lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.glob("visdep/*/rank*.jsonl"))


def stored_keys(root: Path) -> list[str]:
    """The question key of every line in the store (a line cut short by a kill is skipped, as the store does)."""
    keys = []
    for path in root.glob("visdep/*/rank*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                keys.append(json.loads(line)["key"])
            except json.JSONDecodeError:
                continue
    return keys



def test_a_rerun_takes_every_question_from_the_store(tiny_models, benchmark_env, store_root, monkeypatch):
    monkeypatch.setenv("VISDEP_SCORING", "option")
    docs = load_benchmark("vru_accident")[:10]
    first = make_adapter("qwen2", tiny_models["qwen2"], batch_size=3)
    values = first.loglikelihood(requests_for(first, docs, video=False))
    assert stored_lines(store_root) == 10
    again = make_adapter("qwen2", tiny_models["qwen2"], batch_size=3)
    calls = count_forwards(again.model)
    assert again.loglikelihood(requests_for(again, docs, video=False)) == values  # exactly: stored at full precision
    assert calls[0] == 0 and stored_lines(store_root) == 10


def test_a_kill_mid_batch_loses_that_batch_only(tiny_models, benchmark_env, store_root, monkeypatch):
    """Letter scoring runs one forward per batch of 4 questions: stopping in the third forward leaves exactly
    the first two batches (8 questions) in the store; the rerun scores the other 12 and equals a run without
    the store."""
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    docs = load_benchmark("vru_accident")[:20]
    adapter = make_adapter("llama", tiny_models["llama"], batch_size=4)
    forward = adapter.model.forward
    calls = [0]

    def dies_in_the_third(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt("killed")
        return forward(*args, **kwargs)

    monkeypatch.setattr(adapter.model, "forward", dies_in_the_third)
    with pytest.raises(KeyboardInterrupt):
        adapter.loglikelihood(requests_for(adapter, docs, video=False))
    assert stored_lines(store_root) == 8
    monkeypatch.setattr(adapter.model, "forward", forward)
    calls = count_forwards(adapter.model)
    resumed = adapter.loglikelihood(requests_for(adapter, docs, video=False))
    assert calls[0] == 3  # 12 questions at batch 4
    set_store_root(None)
    plain = adapter.loglikelihood(requests_for(adapter, docs, video=False))
    np.testing.assert_allclose([v[0] for v in resumed], [v[0] for v in plain], rtol=0, atol=1e-6)


def test_a_changed_setting_reuses_nothing(tiny_models, benchmark_env, store_root, monkeypatch):
    docs = load_benchmark("vru_accident")[:6]
    monkeypatch.setenv("VISDEP_SCORING", "letter")

    def run(**kwargs) -> int:
        adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], **kwargs)
        calls = count_forwards(adapter.model)
        adapter.loglikelihood(requests_for(adapter, docs, video=True))
        return calls[0]

    assert run(max_frames=4) > 0 and run(max_frames=4) == 0
    assert run(max_frames=8) > 0, "another frame budget is another model key"
    assert run(max_frames=4, dtype="bfloat16") > 0
    monkeypatch.setenv("VISDEP_SCORING", "option")
    assert run(max_frames=4) > 0, "other continuations are other questions"
    assert len(list(store_root.glob("visdep/*/settings.json"))) == 3


def test_the_same_question_in_another_task_is_found(tiny_models, benchmark_env, store_root, monkeypatch):
    """The key is what the model is shown, not the task's name: a grounded subset task reuses the full task's."""
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    docs = load_benchmark("vru_accident")[:4]
    adapter = make_adapter("qwen2", tiny_models["qwen2"])
    adapter.loglikelihood(requests_for(adapter, docs, video=False, task="vru_accident_blind"))
    calls = count_forwards(adapter.model)
    adapter.loglikelihood(requests_for(adapter, docs, video=False, task="vru_accident_blind_grounded"))
    assert calls[0] == 0


# --------------------------------------------------------------------------- the real command line, killed
REUSE = re.compile(r"visdep_llm rank (\d+): (\d+) of (\d+) questions taken from the durable store")


def _cli(tiny_models, cache: Path | None, limit: int) -> list[str]:
    args = ["--model", "visdep_llm", "--model_args", f"pretrained={tiny_models['qwen2']},device=cpu,dtype=float32",
            "--tasks", "vru_accident_blind", "--batch_size", "4", "--limit", str(limit)]
    return args + (["--use_cache", str(cache)] if cache is not None else [])


def _kill_when_stored(cmd: list[str], env: dict, cwd: Path, cache: Path, at_least: int) -> int:
    """Start `cmd`; once `at_least` questions are in the store, SIGKILL it and every process under it (torchrun's
    ranks run in sessions of their own: killing the launcher's group would leave them scoring); the lines
    stored then."""
    import psutil

    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while stored_lines(cache) < at_least:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, "nothing was stored in time"
        time.sleep(0.05)
    launcher = psutil.Process(proc.pid)
    processes = [launcher, *launcher.children(recursive=True)]
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(processes, timeout=30)
    return stored_lines(cache)


@pytest.fixture(scope="module")
def real_env(shared_benchmarks):
    return {"VRU_ACCIDENT_ROOT": str(shared_benchmarks / "vru_accident")}


def _values(out: Path) -> dict[str, list[float]]:
    return {s["visdep"]["question_id"]: s["visdep"]["option_logprobs"] for s in read_samples(out, "vru_accident_blind")}


def assert_resumed_as_uninterrupted(cache: Path, stored: int, whole: Path, out: Path, limit: int) -> None:
    """Nothing stored before the kill was scored again (every key is in the store once, and the rerun added
    some), and the resumed run's samples equal the uninterrupted run's within 1e-6."""
    keys = stored_keys(cache)
    assert len(keys) == len(set(keys)) > stored, "a stored question was scored again"
    want, got = _values(whole), _values(out)
    assert want.keys() == got.keys() and len(got) == limit
    for qid, logprobs in want.items():
        np.testing.assert_allclose(got[qid], logprobs, rtol=0, atol=1e-6, err_msg=qid)


@pytest.mark.slow
def test_a_killed_cli_run_resumes_where_it_stopped(tiny_models, real_env, tmp_path):
    """Real VRU-Accident annotations, option scoring, 1,200 questions: killed after 400 are stored, rerun. The
    rerun takes what was stored (blind questions with the same text share one entry: at least as many questions
    as lines), scores the rest, and scores nothing that was stored: every key is in the store once, so at most
    the batch in flight at the kill was scored twice. Its samples equal an uninterrupted run's."""
    limit = 1200
    env = lmms_eval_env(real_env, VISDEP_SCORING="option")
    whole = tmp_path / "whole"
    run_lmms_eval(_cli(tiny_models, None, limit), env, whole)
    cache, out = tmp_path / "cache", tmp_path / "resumed"
    out.mkdir()
    cmd = [sys.executable, "-m", "lmms_eval", *_cli(tiny_models, cache, limit), "--log_samples", "--output_path",
           str(out)]
    stored = _kill_when_stored(cmd, env, out, cache, at_least=400)
    assert 400 <= stored < limit and not read_samples(out, "vru_accident_blind")
    proc = run_lmms_eval(_cli(tiny_models, cache, limit), env, out)
    log = (out / "cli.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    [(rank, taken, total)] = REUSE.findall(log)
    assert stored <= int(taken) < int(total) == limit
    assert_resumed_as_uninterrupted(cache, stored, whole, out, limit)



@pytest.mark.slow
def test_two_ranks_killed_resume_each_from_their_part(tiny_models, real_env, tmp_path):
    limit = 800
    env = lmms_eval_env(real_env, VISDEP_SCORING="option", OMP_NUM_THREADS="1")

    def torchrun(cache: Path | None, out: Path) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port()), "-m", "lmms_eval", *_cli(tiny_models, cache, limit), "--log_samples",
                "--output_path", str(out)]

    # the reference is an uninterrupted two-rank run: each rank's questions share forwards as in the resumed one
    whole = tmp_path / "whole"
    whole.mkdir()
    subprocess.run(torchrun(None, whole), env=env, cwd=whole, capture_output=True, text=True, timeout=600)
    cache, out = tmp_path / "cache", tmp_path / "resumed"
    out.mkdir()
    stored = _kill_when_stored(torchrun(cache, out), env, out, cache, at_least=200)
    per_rank = {p.name: len(p.read_text().splitlines()) for p in cache.glob("visdep/*/rank*.jsonl")}
    assert set(per_rank) == {"rank0.jsonl", "rank1.jsonl"}, per_rank
    proc = subprocess.run(torchrun(cache, out), env=env, cwd=out, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    reused = {int(rank): (int(taken), int(total)) for rank, taken, total in REUSE.findall(log)}
    assert set(reused) == {0, 1} and sum(total for _, total in reused.values()) == limit, log[-3000:]
    assert sum(taken for taken, _ in reused.values()) >= stored
    assert_resumed_as_uninterrupted(cache, stored, whole, out, limit)
