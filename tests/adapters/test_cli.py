"""Every family through the real `lmms-eval` command line on the synthetic benchmarks, and data
parallel with two CPU processes (torchrun, gloo) against one.

The CLI exits 0 even when evaluation failed: every test reads the sample files it wrote, and
compares each sample's option log-probabilities with the naive reference computed here."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks import tasks
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.frames import read_frames
from model_adapters.reference import naive_option_scores
from model_adapters.tiny import VLM_KINDS
from tests.adapters.conftest import make_adapter, requests_for
from tests.conftest import lmms_eval_env, read_results, read_samples, run_lmms_eval

pytestmark = pytest.mark.slow
MAX_FRAMES = 8
# kind: (tasks, scoring, --limit). An odd limit leaves the two data-parallel ranks unequal (lmms-eval
# pads the shorter one).
RUNS = {
    "qwen2_5_vl": ("vru_accident_video,vru_accident_blind,mmau_video", "letter", 3),
    "qwen2_vl": ("trafficqa_video,mmau_blind", "letter", 3),
    "llava_onevision": ("vru_accident_video,mmau_video", "option", 3),
    "internvl": ("accidentbench_video,vru_accident_blind", "letter", 3),
    "llama": ("vru_accident_blind,trafficqa_blind", "option", 3),
}
DECODES = re.compile(r"visdep_vlm rank (\d+): (\d+) questions scored; (\d+) videos, (\d+) decodes")


def cli_args(kind: str, path: Path) -> list[str]:
    task_list, _, limit = RUNS[kind]
    model = "visdep_vlm" if kind in VLM_KINDS else "visdep_llm"
    model_args = f"pretrained={path},device=cpu,dtype=float32" + (f",max_frames={MAX_FRAMES}" if kind in VLM_KINDS
                                                                   else "")
    return ["--model", model, "--model_args", model_args, "--tasks", task_list, "--limit", str(limit),
            "--batch_size", "2"]


@pytest.fixture(scope="module")
def cli_run(tiny_models, fixture_env, tmp_path_factory):
    """One lmms-eval run per family, two at a time (a run is mostly lmms-eval's start-up, one core)."""
    pool = ThreadPoolExecutor(max_workers=2)
    runs = {}
    for kind, (_, scoring, _) in RUNS.items():
        out = tmp_path_factory.mktemp(f"cli_{kind}")
        env = lmms_eval_env(fixture_env, VISDEP_SCORING=scoring, OMP_NUM_THREADS="1")
        runs[kind] = (out, pool.submit(run_lmms_eval, cli_args(kind, tiny_models[kind]), env, out))

    def get(kind: str) -> Path:
        out, done = runs[kind]
        done.result()
        return out

    yield get
    pool.shutdown(wait=True)


def samples_by_task(out: Path, kind: str) -> dict[str, list[dict]]:
    task_list, _, limit = RUNS[kind]
    found = {task: read_samples(out, task) for task in task_list.split(",")}
    for task, rows in found.items():
        assert len(rows) == limit, f"{task}: {len(rows)} samples\n{(out / 'cli.log').read_text()[-3000:]}"
    return found


@pytest.mark.parametrize("kind", list(RUNS))
def test_cli_samples_match_in_process_scores(kind, cli_run, tiny_models, benchmark_env, monkeypatch):
    """Every sample equals the adapter run in this process (itself checked against the naive
    reference in test_exactness); the first sample of each task equals the naive reference too."""
    _, scoring, _ = RUNS[kind]
    out = cli_run(kind)
    found = samples_by_task(out, kind)
    results = read_results(out)["results"]
    monkeypatch.setenv("VISDEP_SCORING", scoring)
    adapter = make_adapter(kind, tiny_models[kind], **({"max_frames": MAX_FRAMES} if kind in VLM_KINDS else {}))
    processor = getattr(adapter, "processor", adapter.tokenizer)
    for task, rows in found.items():
        bench, mode = task.rsplit("_", 1)
        by_id = {d["question_id"]: d for d in load_benchmark(bench)}
        docs = [by_id[row["visdep"]["question_id"]] for row in rows]
        assert 0.0 <= results[task]["acc,none"] <= 1.0
        for row, doc in zip(rows, docs, strict=True):
            record = row["visdep"]
            assert (record["mode"], record["scoring"], record["benchmark"]) == (mode, scoring, bench)
            assert record["n_options"] == len(doc["options"]) == len(record["option_logprobs"])
        in_process = adapter.loglikelihood(requests_for(adapter, docs, mode == "video"))
        np.testing.assert_allclose([lp for row in rows for lp in row["visdep"]["option_logprobs"]],
                                   [-loss for loss, _ in in_process], rtol=0, atol=1e-5, err_msg=task)
        video_input = read_frames(Path(tasks.doc_to_visual_video(docs[0])[0]), MAX_FRAMES) if mode == "video" else None
        naive = naive_option_scores(adapter.model, processor, tasks.doc_to_text(docs[0]),
                                    tasks.doc_to_choice(docs[0]), video_input)
        np.testing.assert_allclose(rows[0]["visdep"]["option_logprobs"], [-loss for loss, _ in naive], rtol=0,
                                   atol=1e-4, err_msg=task)


def test_cli_decodes_each_video_once(cli_run):
    log = (cli_run("qwen2_5_vl") / "cli.log").read_text()
    [(rank, questions, videos, decodes)] = DECODES.findall(log)
    # vru_accident_video --limit 3: one video; mmau_video --limit 3: three frame folders
    assert (rank, questions, videos, decodes) == ("0", "9", "4", "4")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_cpu_processes_give_the_same_samples_as_one(cli_run, tiny_models, fixture_env, tmp_path):
    """torchrun --nproc_per_node 2 (gloo on the CPU): both ranks score, rank 0 writes every sample,
    values equal the one-process run; padding copies of the shorter rank are not scored twice."""
    single = cli_run("qwen2_5_vl")
    out = tmp_path / "ranks2"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "lmms_eval", *cli_args("qwen2_5_vl", tiny_models["qwen2_5_vl"]), "--log_samples",
           "--output_path", str(out)]
    env = lmms_eval_env(fixture_env, VISDEP_SCORING="letter")
    proc = subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    (out / "cli.log").write_text(log)
    ranks = {int(r): (int(q), int(v), int(d)) for r, q, v, d in DECODES.findall(log)}
    assert set(ranks) == {0, 1}, log[-3000:]
    assert all(videos == decodes for _, videos, decodes in ranks.values())
    # 3 documents per task split 2 / 1 over the ranks
    assert {r: q for r, (q, _, _) in ranks.items()} == {0: 6, 1: 3}
    for task in RUNS["qwen2_5_vl"][0].split(","):
        one = {s["visdep"]["question_id"]: s["visdep"]["option_logprobs"] for s in read_samples(single, task)}
        two = {s["visdep"]["question_id"]: s["visdep"]["option_logprobs"] for s in read_samples(out, task)}
        assert one.keys() == two.keys() and len(two) == 3, task
        for qid in one:
            np.testing.assert_allclose(two[qid], one[qid], rtol=0, atol=1e-5, err_msg=f"{task} {qid}")
