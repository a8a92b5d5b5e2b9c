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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from lmms_eval_tasks.evaluation import Evaluation, evaluating
from lmms_eval_tasks.loaders import load_benchmark
from visdep_metrics.demo.fixtures import write_fixtures
from visdep_metrics.demo.tiny import build_tiny
from visdep_metrics.demo.validate import loglikelihood_requests


def timed(adapter, docs: list[dict], video: bool, store_root: Path | None) -> float:
    with evaluating(Evaluation(store_root=store_root, scoring="letter")):
        start = time.perf_counter()
        adapter.loglikelihood(loglikelihood_requests(adapter, docs, video))
        return time.perf_counter() - start


def bench(name: str, adapter, docs: list[dict], video: bool, repeats: int, work: Path) -> None:
    timed(adapter, docs, video, None)  # warm: frame cache, allocator
    off, on = [], []
    for r in range(repeats):
        off.append(timed(adapter, docs, video, None))
        on.append(timed(adapter, docs, video, work / f"{name}-{r}"))  # a fresh store: every question is written
    n = len(docs)
    print(f"{name:42} {min(off):8.3f} {min(on):8.3f} {1000 * (min(on) - min(off)) / n:9.2f} "
          f"{min(on) / min(off):6.3f}")


# Run in a child process (its memory is the store's alone): fills a model folder with RECORDS records in 8 files,
# the format of the checkout on sys.path, then opens it needing NEEDED of them; prints seconds and MiB.
OPEN_STORE = """
import hashlib, inspect, os, resource, sys, time
from pathlib import Path
from model_adapters import durable
records, needed, folder = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
folder.mkdir(parents=True)
keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(records)]
line = getattr(durable, "record_line", None) or __import__("model_adapters.store_records").store_records.record_line
new = "keys" in inspect.signature(durable.ScoreStore.__init__).parameters
for f in range(8):
    with open(folder / f"rank{f}-host-1-0000.jsonl", "w") as out:
        for i in range(f, records, 8):
            scores = {c: [1.0 + i / records, c == "A", " " + c] for c in "ABCD"}
            out.write(line(folder.name, keys[i], scores, i) if new else line(keys[i], scores))
wanted = keys[:: records // needed][:needed]
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
before, start = rss(), time.perf_counter()
store = durable.ScoreStore(folder, 0, wanted) if new else durable.ScoreStore(folder, 0)
seconds = time.perf_counter() - start
assert all(store.get(k) is not None for k in wanted)
print(f"{seconds:.3f} {rss() - before:.1f}")
"""


def bench_open(records: int, needed: int, checkout: Path, work: Path) -> tuple[float, float]:
    """(seconds, MiB held) to open a store of `records` records needing `needed`, with the store of `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", OPEN_STORE, str(records), str(needed), str(work)], env=env,
                         cwd=checkout, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vlm-size", choices=("bench", "test"), default="bench",
                        help="tiny Qwen2.5-VL size: bench (the claim) or test (a quick check that the bench runs)")
    parser.add_argument("--store-records", type=int, default=1_000_000, help="records in the store opened")
    parser.add_argument("--store-needed", type=int, default=10_000, help="of them, the ones the run asks for")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier visdep (git worktree add DIR HEAD): "
                                                    "its store opened the same way, for comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from model_adapters.adapter import VisdepLLM, VisdepVLM

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
        print(f"opening a store of {args.store_records:,} records in 8 files, needing {args.store_needed:,}:")
        for name, checkout in (("before", args.before), ("this checkout", Path(__file__).resolve().parents[1])):
            if checkout is not None:
                seconds, mib = bench_open(args.store_records, args.store_needed, checkout, work / f"open-{name}")
                print(f"  {name:40} {seconds:8.2f} s {mib:8.0f} MiB held")


if __name__ == "__main__":
    main()
