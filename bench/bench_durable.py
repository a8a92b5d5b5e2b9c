"""The cost of durability: scoring with `--use_cache` against without.

    python bench/bench_durable.py [--questions 96] [--batch-size 8] [--repeats 3] [--threads 1] [--vlm-size bench]

With the store on, a run also keys every question on what the model is shown (its templated prompt, tokens and
video identity: each video file's stat and sampled content) and writes each batch as checksummed records,
fsync'd, into a file of its own (`model_adapters.durable`).

In one run, alternating, keeping the fastest of `--repeats`: the same questions scored by the same adapter
(1) with the durable store off and (2) into a fresh store, for two cases that bracket the ratio:
- a bench-size tiny Qwen2.5-VL on VRU-Accident video questions (about 1,000 visual tokens per video, six
  questions per video): a real model's cost per question is larger still, so the ratio is smaller;
- a test-size tiny Qwen2 LLM on blind questions: almost free scoring, so the store's own cost shows.
Prints seconds, the overhead per question in milliseconds and the ratio. The store's folder is on the
machine's temporary disk (fsync costs what that disk costs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from lmms_eval_tasks.evaluation_hooks import set_store_root
from lmms_eval_tasks.loaders import load_benchmark
from visdep_metrics.demo.fixtures import write_fixtures
from visdep_metrics.demo.tiny import build_tiny
from visdep_metrics.demo.validate import loglikelihood_requests


def timed(adapter, docs: list[dict], video: bool, store_root: Path | None) -> float:
    set_store_root(store_root)
    try:
        start = time.perf_counter()
        adapter.loglikelihood(loglikelihood_requests(adapter, docs, video))
        return time.perf_counter() - start
    finally:
        set_store_root(None)


def bench(name: str, adapter, docs: list[dict], video: bool, repeats: int, work: Path) -> None:
    timed(adapter, docs, video, None)  # warm: frame cache, allocator
    off, on = [], []
    for r in range(repeats):
        off.append(timed(adapter, docs, video, None))
        on.append(timed(adapter, docs, video, work / f"{name}-{r}"))  # a fresh store: every question is written
    n = len(docs)
    print(f"{name:42} {min(off):8.3f} {min(on):8.3f} {1000 * (min(on) - min(off)) / n:9.2f} "
          f"{min(on) / min(off):6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vlm-size", choices=("bench", "test"), default="bench",
                        help="tiny Qwen2.5-VL size: bench (the claim) or test (a quick check that the bench runs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from model_adapters.llm import VisdepLLM
    from model_adapters.vlm import VisdepVLM

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ.update(write_fixtures(work / "data", scale=max(1, args.questions // 48 + 1)))
        os.environ["VISDEP_SCORING"] = "letter"
        # numbered: the synthetic benchmark repeats question texts, and identical questions are scored once
        docs = [{**d.document(), "question": f"{d.question} (#{i})"}
                for i, d in enumerate(load_benchmark("vru_accident")[: args.questions])]
        vlm = VisdepVLM(pretrained=str(build_tiny("qwen2_5_vl", work / "qwen_vl", size=args.vlm_size)), device="cpu",
                        dtype="float32", batch_size=args.batch_size, max_frames=16)
        llm = VisdepLLM(pretrained=str(build_tiny("qwen2", work / "qwen2")), device="cpu", dtype="float32",
                        batch_size=args.batch_size)
        print(f"{len(docs)} questions, batch {args.batch_size}, {args.threads} thread(s), fastest of {args.repeats}")
        print(f"{'case':42} {'off s':>8} {'on s':>8} {'ms/quest':>9} {'ratio':>6}")
        bench(f"Qwen2.5-VL ({args.vlm_size} size), video, letter", vlm, docs, True, args.repeats, work)
        bench("Qwen2 LLM (test size), blind, letter", llm, docs, False, args.repeats, work)


if __name__ == "__main__":
    main()
