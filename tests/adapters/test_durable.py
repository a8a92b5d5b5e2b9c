"""The durable store behind `--use_cache`: each batch is on disk before the next starts, a rerun scores only
what is missing and gives the same values, and nothing reuses a value that no longer holds: a changed setting,
chat template, prompt code, scoring code or video, a store whose last line a kill cut short (in process); through the
real `lmms-eval` command line, a checkpoint's chat template edited in place, and runs killed with SIGKILL that resume
where they stopped (one process, and two torchrun ranks). The files themselves: test_store.py."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks.evaluation import current
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters import identity, presentation
from model_adapters.engines.hf import TextEngine
from tests.helpers.adapters import (
    ENGINES,
    count_forwards,
    make_adapter,
    requests_for,
    set_scoring,
    set_store_root,
    store_files,
    store_records,
)
from tests.helpers.lmms_cli import free_port, lmms_eval_env, read_results, read_samples, run_lmms_eval

SYSTEM_LINE = "You are a helpful assistant."


def stored_lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in store_files(root))


def without_store(adapter, docs: list[dict], video: bool) -> list:
    """The adapter's values for `docs` with the durable store off."""
    root = current().store_root
    set_store_root(None)
    try:
        return adapter.loglikelihood(requests_for(adapter, docs, video=video))
    finally:
        set_store_root(root)


def rerun(adapter, docs: list[dict], video: bool) -> tuple[int, list]:
    """(forward passes, values) of scoring `docs` again."""
    calls = count_forwards(adapter.model)
    values = adapter.loglikelihood(requests_for(adapter, docs, video=video))
    return calls[0], values


@pytest.mark.parametrize("engine", ENGINES)  # the store wraps any engine (tests/helpers/engines.py)
def test_a_rerun_takes_every_question_from_the_store(tiny_models, benchmark_env, store_root, engine):
    set_scoring("option")
    docs = [q.document() for q in load_benchmark("vru_accident")[:10]]
    first = make_adapter("qwen2", tiny_models["qwen2"], engine, batch_size=3)
    values = first.loglikelihood(requests_for(first, docs, video=False))
    assert stored_lines(store_root) == 10
    again = make_adapter("qwen2", tiny_models["qwen2"], engine, batch_size=3)
    calls = count_forwards(again.model)
    assert again.loglikelihood(requests_for(again, docs, video=False)) == values  # exactly: stored at full precision
    assert calls[0] == 0 and stored_lines(store_root) == 10


def test_a_kill_mid_batch_loses_that_batch_only(tiny_models, benchmark_env, store_root, monkeypatch):
    """Letter scoring runs one forward per batch of 4 questions: stopping in the third forward leaves exactly
    the first two batches (8 questions) in the store; the rerun scores the other 12 and equals a run without
    the store."""
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    docs = [q.document() for q in load_benchmark("vru_accident")[:20]]
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


def test_a_checkpoint_changed_while_it_loads_stores_nothing(tiny_models, benchmark_env, store_root, monkeypatch,
                                                           tmp_path):
    """A trainer saves into the folder while the adapter loads it (here: the tokenizer's config edited as the model
    loads): the identity taken before loading differs from the one after, and the run neither writes nor reads the
    store; the same checkpoint loaded undisturbed uses it."""
    checkpoint = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "qwen2"))
    load = TextEngine.load_model

    def saved_into_meanwhile(self):
        model = load(self)
        config = checkpoint / "tokenizer_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 4096}))
        return model

    monkeypatch.setattr(TextEngine, "load_model", saved_into_meanwhile)
    docs = [q.document() for q in load_benchmark("vru_accident")[:4]]
    moving = make_adapter("qwen2", checkpoint)
    assert not moving.checkpoint_settled
    moving.loglikelihood(requests_for(moving, docs, video=False))
    assert store_files(store_root) == []
    monkeypatch.setattr(TextEngine, "load_model", load)
    settled = make_adapter("qwen2", checkpoint)
    assert settled.checkpoint_settled
    settled.loglikelihood(requests_for(settled, docs, video=False))
    assert len(store_files(store_root)) == 1


def test_a_changed_setting_reuses_nothing(tiny_models, benchmark_env, store_root, monkeypatch):
    docs = [q.document() for q in load_benchmark("vru_accident")[:6]]
    monkeypatch.setenv("VISDEP_SCORING", "letter")

    def run(**kwargs) -> int:
        adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], **kwargs)
        calls = count_forwards(adapter.model)
        adapter.loglikelihood(requests_for(adapter, docs, video=True))
        return calls[0]

    assert run(max_frames=4) > 0 and run(max_frames=4) == 0
    assert run(max_frames=8) > 0, "another frame budget is another model key"
    assert run(max_frames=4, dtype="bfloat16") > 0
    for condition in ({"frame_order": "shuffled"}, {"frame_order": "reversed"}, {"frames": "middle"}):
        assert run(max_frames=4, **condition) > 0, f"{condition}: the temporal ladder's rung is another model key"
    assert run(max_frames=8, frames="middle") == 0, "one middle frame whatever the budget: the same model"
    set_scoring("option")
    assert run(max_frames=4) > 0, "other continuations are other questions"
    assert len(list(store_root.glob("visdep/*/settings.json"))) == 6


@pytest.mark.parametrize(("kind", "engine"), [("qwen2", "hf"), ("qwen2", "naive"), ("qwen2_5_vl", "naive")])
def test_the_same_question_in_another_task_is_found(tiny_models, benchmark_env, store_root, kind, engine):
    """The key is what the model is shown, not the task's name: a grounded subset task reuses the full task's."""
    docs = [q.document() for q in load_benchmark("vru_accident")[:4]]
    adapter = make_adapter(kind, tiny_models[kind], engine, **({"max_frames": 4} if kind != "qwen2" else {}))
    video = kind != "qwen2"
    adapter.loglikelihood(requests_for(adapter, docs, video=video, task="vru_accident_blind"))
    calls = count_forwards(adapter.model)
    adapter.loglikelihood(requests_for(adapter, docs, video=video, task="vru_accident_blind_grounded"))
    assert calls[0] == 0


@pytest.mark.parametrize(("kind", "video"), [("qwen2", False), ("qwen2_5_vl", True)])
def test_an_edited_chat_template_is_another_question(tiny_models, benchmark_env, store_root, monkeypatch, kind,
                                                     video):
    """The system line of the chat template changed in memory: the model key (files, settings, code) is the same,
    the questions are not, so every one is scored again and gets the value a run without the store gives it."""
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    docs = [q.document() for q in load_benchmark("vru_accident")[:6]]
    adapter = make_adapter(kind, tiny_models[kind], batch_size=3)
    first = adapter.loglikelihood(requests_for(adapter, docs, video=video))
    holder = adapter.engine.tokenizer if kind == "qwen2" else adapter.engine.processor
    assert SYSTEM_LINE in holder.chat_template
    holder.chat_template = holder.chat_template.replace(SYSTEM_LINE, "You are a careful assistant.")
    calls, edited = rerun(adapter, docs, video)
    assert calls > 0 and edited == without_store(adapter, docs, video)
    assert max(abs(a[0] - b[0]) for a, b in zip(first, edited, strict=True)) > 1e-3
    assert len(list(store_root.glob("visdep/*"))) == 1, "one model: the question keys told the prompts apart"


def test_changed_prompt_code_is_another_question(tiny_models, benchmark_env, store_root, monkeypatch):
    """A base model's answer cue changed in the adapter's code, nothing bumped: every question is scored again."""
    docs = [q.document() for q in load_benchmark("vru_accident")[:4]]
    adapter = make_adapter("qwen2_base", tiny_models["qwen2_base"], batch_size=2)
    adapter.loglikelihood(requests_for(adapter, docs, video=False))
    monkeypatch.setattr(presentation, "ANSWER_CUE", "\nThe answer is:")
    calls, values = rerun(adapter, docs, video=False)
    assert calls == 2 and values == without_store(adapter, docs, video=False)


def test_changed_scoring_code_is_another_model(tiny_models, benchmark_env, store_root, monkeypatch):
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=2)
    docs = [q.document() for q in load_benchmark("vru_accident")[:4]]
    adapter.loglikelihood(requests_for(adapter, docs, video=False))
    monkeypatch.setattr(identity, "code_identity", lambda engine=None: "0" * 64)
    assert rerun(adapter, docs, video=False)[0] == 2
    assert len(list(store_root.glob("visdep/*/settings.json"))) == 2


def test_a_frame_replaced_in_place_is_another_question(tiny_models, fixture_env, store_root, monkeypatch, tmp_path):
    """MM-AU frame folders: one frame of the first question's folder rewritten in place (the folder's own stat
    does not change): that question is scored again (one forward: one question per video), the other is not."""
    root = Path(shutil.copytree(fixture_env["MMAU_ROOT"], tmp_path / "mm_au"))
    monkeypatch.setenv("MMAU_ROOT", str(root))
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    docs = [q.document() for q in load_benchmark("mmau")[:2]]
    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], max_frames=4)
    first = adapter.loglikelihood(requests_for(adapter, docs, video=True))
    frames = sorted((root / docs[0]["video"]).glob("*.jpg"))
    other = sorted((root / docs[1]["video"]).glob("*.jpg"))
    frames[0].write_bytes(other[0].read_bytes())
    fresh = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], max_frames=4)  # no decoded frames in memory
    calls, values = rerun(fresh, docs, video=True)
    assert calls == 1
    k = len(docs[0]["options"])
    assert values[k:] == first[k:] and values[:k] != first[:k]
    assert values == without_store(make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], max_frames=4), docs, True)


# --------------------------------------------------------------------------- the real command line, killed
REUSE = re.compile(r"visdep_llm rank (\d+): (\d+) of (\d+) questions taken from the durable store")


def _tiny_cli(checkpoint: Path, cache: Path | None, limit: int) -> list[str]:
    args = ["--model", "visdep_llm", "--model_args", f"pretrained={checkpoint},device=cpu,dtype=float32",
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
    keys = [record["key"] for record in store_records(cache)]
    assert len(keys) == len(set(keys)) > stored, "a stored question was scored again"
    got = _values(out)
    assert len(got) == limit
    assert_same_values(got, _values(whole))


@pytest.mark.slow
def test_a_killed_cli_run_resumes_where_it_stopped(tiny_models, real_env, tmp_path):
    """Real VRU-Accident annotations, option scoring, 1,200 questions: killed after 400 are stored, rerun. The
    rerun takes what was stored (blind questions with the same text share one entry: at least as many questions
    as lines), scores the rest, and scores nothing that was stored: every key is in the store once, so at most
    the batch in flight at the kill was scored twice. Its samples equal an uninterrupted run's."""
    limit, checkpoint = 1200, tiny_models["qwen2"]
    env = lmms_eval_env(real_env, VISDEP_SCORING="option")
    whole = tmp_path / "whole"
    _run(_tiny_cli(checkpoint, None, limit), env, whole)
    cache, out = tmp_path / "cache", tmp_path / "resumed"
    out.mkdir()
    cmd = [sys.executable, "-m", "lmms_eval", *_tiny_cli(checkpoint, cache, limit), "--log_samples", "--output_path",
           str(out)]
    stored = _kill_when_stored(cmd, env, out, cache, at_least=400)
    assert 400 <= stored < limit and not read_samples(out, "vru_accident_blind")
    proc = run_lmms_eval(_tiny_cli(checkpoint, cache, limit), env, out)
    log = (out / "cli.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    [(rank, taken, total)] = REUSE.findall(log)
    assert stored <= int(taken) < int(total) == limit
    assert_resumed_as_uninterrupted(cache, stored, whole, out, limit)



@pytest.mark.slow
def test_two_ranks_killed_resume_each_from_their_part(tiny_models, real_env, tmp_path):
    limit, checkpoint = 800, tiny_models["qwen2"]
    env = lmms_eval_env(real_env, VISDEP_SCORING="option", OMP_NUM_THREADS="1")

    def torchrun(cache: Path | None, out: Path) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port()), "-m", "lmms_eval", *_tiny_cli(checkpoint, cache, limit), "--log_samples",
                "--output_path", str(out)]

    # the reference is an uninterrupted two-rank run: each rank's questions share forwards as in the resumed one
    whole = tmp_path / "whole"
    whole.mkdir()
    reference = subprocess.run(torchrun(None, whole), env=env, cwd=whole, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, (reference.stdout + reference.stderr)[-3000:]
    cache, out = tmp_path / "cache", tmp_path / "resumed"
    out.mkdir()
    stored = _kill_when_stored(torchrun(cache, out), env, out, cache, at_least=200)
    writers = sorted(p.name.split("-")[0] for p in store_files(cache))
    assert writers == ["rank0", "rank1"], writers  # a file per rank's process
    proc = subprocess.run(torchrun(cache, out), env=env, cwd=out, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    reused = {int(rank): (int(taken), int(total)) for rank, taken, total in REUSE.findall(log)}
    assert set(reused) == {0, 1} and sum(total for _, total in reused.values()) == limit, log[-3000:]
    assert sum(taken for taken, _ in reused.values()) >= stored
    assert_resumed_as_uninterrupted(cache, stored, whole, out, limit)


# --------------------------------------------------------------------------- the real command line, files changed
def _run(args: list[str], env: dict, out: Path) -> tuple[str, dict]:
    """Run the CLI; (its log, the question-id -> option log-probabilities of its samples)."""
    proc = run_lmms_eval(args, env, out)
    log = (out / "cli.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    return log, _values(out)


def assert_same_values(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for qid, logprobs in want.items():
        np.testing.assert_allclose(got[qid], logprobs, rtol=0, atol=1e-6, err_msg=qid)


@pytest.mark.slow
def test_a_chat_template_edited_in_place_is_not_served_from_the_store(tiny_models, fixture_env, tmp_path):
    """A run with --use_cache; the checkpoint's chat template edited in place (its system line only); a rerun with
    the same cache takes nothing from the store and writes the samples of a run without the cache, not the first
    run's; the results file records the checkpoint's new identity."""
    checkpoint = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "qwen2"))
    env, cache, limit = lmms_eval_env(fixture_env), tmp_path / "cache", 12
    _, first = _run(_tiny_cli(checkpoint, cache, limit), env, tmp_path / "first")
    before = read_results(tmp_path / "first")["visdep"]["model"]
    template = checkpoint / "chat_template.jinja"
    assert template.read_text().count(SYSTEM_LINE) == 1
    template.write_text(template.read_text().replace(SYSTEM_LINE, "You are a careful assistant."))

    log, edited = _run(_tiny_cli(checkpoint, cache, limit), env, tmp_path / "edited")
    [(_, taken, total)] = REUSE.findall(log)
    assert (int(taken), int(total)) == (0, limit)
    _, plain = _run(_tiny_cli(checkpoint, None, limit), env, tmp_path / "plain")
    assert_same_values(edited, plain)
    assert max(abs(a - b) for q in first for a, b in zip(first[q], edited[q], strict=True)) > 1e-3
    after = read_results(tmp_path / "edited")["visdep"]["model"]
    assert after["checkpoint"]["source"] == before["checkpoint"]["source"] == f"folder {checkpoint.resolve()}"
    assert after["checkpoint"]["identity"] != before["checkpoint"]["identity"]


@pytest.mark.slow
def test_a_torn_last_line_swallows_nothing(tiny_models, benchmark_env, store_root):
    """A store whose last line a kill cut short; a longer run appends after it; a third run takes every question
    of the longer run from the store, with the longer run's values. The torn file itself is left as it was."""
    docs = [q.document() for q in load_benchmark("vru_accident")[:16]]
    short = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
    short.loglikelihood(requests_for(short, docs[:8], video=False))
    [torn] = store_files(store_root)
    torn.write_bytes(torn.read_bytes()[:-25])
    damaged = torn.read_bytes()
    assert not damaged.endswith(b"\n")

    longer = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
    values = longer.loglikelihood(requests_for(longer, docs, video=False))
    assert torn.read_bytes() == damaged and len(store_files(store_root)) == 2
    third = make_adapter("qwen2", tiny_models["qwen2"], batch_size=4)
    calls, again = rerun(third, docs, video=False)
    assert calls == 0 and again == values  # every question from the store, the longer run's values exactly
