"""Bench: `visdep audit` on 100,000 questions x 10 models (blind and video) -- target under 10 s and 2 GB.

Writes an lmms-eval output tree in the 0.7.3 format (one folder per model, `<date>_results.json` and
`<date>_samples_<task>.jsonl` lines with doc_id, target, filtered_resps, token_counts, doc_hash, acc,
the visdep record and the prompt as `input`), 100,000 questions spread over the four benchmarks
(categories, varying K, questions per video and blind prompts shared across videos as in the real ones: the
intervals resample videos and prompts), then runs the real `visdep audit` command on it with a panel (3 text
LLMs, 5 VLMs, 2 held out; `--no-explorer`: bench_explorer.py times the explorer page on this tree) and reports
its wall time, CPU time and peak memory, with their ratios to the targets, the command's own phases (read and
compute, write: wall and CPU), and its time over a reference workload timed in the same run (`reference_seconds`:
one process reading, hashing and decoding the tree), which says how fast the code is apart from how fast the machine
is (the same commit has measured 5 to 16 s on different 2-core machines). The benchmarks of trees of 64 MB or more
are read and computed by forked processes side by side, one per core (`--processes 1`: all in the audit's own
process), so memory is the peak of the RSS summed over all its processes (sampled every 50 ms; an upper bound, as
pages a child shares with its parent count twice).

    python bench/bench_audit.py [--questions 100000] [--models 10] [--processes N] [--no-prompt-ids] [--ladder]
                                [--workdir DIR] [--keep]

`--ladder` adds the temporal ladder's runs (docs/ladder.md): every VLM of the panel and every held-out one also run
with `frames=middle` and with `frame_order=shuffled`, video tasks only (the audit gives them their checkpoint's
blind answers), so the audit also finds the ladders, computes ladder.csv, V_frame, V_order and the temporal subset.

Generating the tree takes 15 s to a minute and is not timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Pool
from pathlib import Path

import msgspec
import numpy as np
import psutil

TIME_TARGET_S = 10.0
MEMORY_TARGET_MB = 2048.0
DATE = "20260101_120000"
# benchmark -> (categories, option counts K drawn per question, questions per video, share of questions whose blind
# prompt questions about other videos share: VRU-Accident's is 3,015 of 6,000)
BENCHMARKS = {
    "mmau": ([None], [5], 1, 0.0),
    "vru_accident": (["weather and light", "location", "road type", "accident type", "accident reason",
                      "prevention method"], [4], 6, 0.5),
    "trafficqa": (["basic understanding", "attribution", "event forecasting", "reverse reasoning",
                   "counterfactual inference", "introspection"], [2, 3, 4, 4, 4, 4], 6, 0.2),
    "accidentbench": (["temporal_causal_reasoning", "spatial_reasoning", "intent_goal_reasoning"],
                      [2, 3, 4, 4, 5, 6, 12], 9, 0.2),
}
OPTION = "the driver of the white car fails to yield while turning left at the intersection"


def questions(benchmark: str, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    categories, ks, _, shared_share = BENCHMARKS[benchmark]
    k = rng.choice(ks, n)
    prompt = n + np.arange(n)  # a prompt of its own, or one of n / 15 shared ones (Zipf-like copy counts)
    shared = rng.random(n) < shared_share
    pool = max(1, n // 15)
    weight = 1.0 / (np.arange(pool) + 5.0) ** 1.1
    prompt[shared] = rng.choice(pool, int(shared.sum()), p=weight / weight.sum())
    return {"k": k, "answer": rng.integers(0, k), "category": rng.integers(0, len(categories), n),
            "difficulty": rng.normal(0, 1, n), "prompt": prompt}


def write_samples(args) -> None:
    path, benchmark, mode, q, model_index, prompt_ids = args
    categories, _, per_video, _ = BENCHMARKS[benchmark]
    rng = np.random.default_rng([model_index, hash(mode) % 1000, len(path.name)])
    n = len(q["k"])
    skill = 0.4 + 0.1 * (model_index % 4) + (0.5 if mode == "video" else 0.0)
    logits = rng.normal(0, 1, (n, 12))
    logits[np.arange(n), q["answer"]] += skill - 0.5 * q["difficulty"]
    with open(path, "w") as f:
        for i in range(n):
            k, y = int(q["k"][i]), int(q["answer"][i])
            lp = logits[i, :k] - np.log(np.exp(logits[i, :k]).sum())
            # full float repr, as json.dumps writes the log-probabilities a model returns
            lps = ", ".join(repr(float(x)) for x in lp)
            category = categories[q["category"][i]]
            options = "\\n".join(f"{chr(65 + j)}. {OPTION} ({j})" for j in range(k))
            record = (f'{{"question_id": "{benchmark}-{i}", "benchmark": "{benchmark}", "mode": "{mode}", '
                      f'"category": {json.dumps(category)}, "source": "SRC", "video": "videos/{i // per_video}.mp4", '
                      + (f'"prompt_id": "{int(q["prompt"][i]):016x}", ' if prompt_ids else "")
                      + f'"n_options": {k}, '
                      f'"answer_index": {y}, "option_logprobs": [{lps}], "scoring": "letter"}}')
            resps = ", ".join(f'"({-float(x)!r}, False)"' for x in lp)
            f.write(f'{{"doc_id": {i}, "target": "{y}", "filtered_resps": [{resps}], '
                    f'"token_counts": [{", ".join(["null"] * k)}], "doc_hash": "{"0" * 64}", '
                    f'"acc": {float(np.argmax(lp) == y)}, "visdep": {record}, '
                    f'"input": "What is the cause of the accident in this video?\\n{options}\\nAnswer with the '
                    f'option\'s letter from the given choices directly."}}\n')


# the ladder's conditions (--ladder): model_args added to the full-video run's, the folder's suffix
CONDITIONS = {"single": "frames=middle", "shuffled": "max_frames=16,frame_order=shuffled"}


def write_tree(root: Path, n_questions: int, n_models: int, prompt_ids: bool, ladder: bool = False) -> list[str]:
    per_benchmark = n_questions // len(BENCHMARKS)
    qs = {b: questions(b, per_benchmark, seed) for seed, b in enumerate(BENCHMARKS)}
    models = [f"org/model-{m}" for m in range(n_models)]
    runs = [(m, model, "", "max_frames=16", ("blind", "video")) for m, model in enumerate(models)]
    if ladder:  # every VLM of the panel (models 3..) under each condition, video tasks only
        runs += [(n_models * (c + 1) + m, model, f"_{name}", args, ("video",))
                 for c, (name, args) in enumerate(CONDITIONS.items()) for m, model in enumerate(models) if m >= 3]
    jobs = []
    for seed, model, suffix, args, modes in runs:
        folder = root / (model.replace("/", "__") + suffix)
        folder.mkdir(parents=True)
        tasks = [f"{b}_{mode}" for b in BENCHMARKS for mode in modes]
        results = {"results": {t: {"alias": t} for t in tasks},
                   "configs": {t: {"task": t, "tag": f"visdep_{t.rsplit('_', 1)[1]}"} for t in tasks},
                   "config": {"model": "visdep_vlm", "model_args": f"pretrained={model},{args}"},
                   "n-samples": {t: {"original": per_benchmark, "effective": per_benchmark} for t in tasks},
                   "date": DATE}
        (folder / f"{DATE}_results.json").write_text(json.dumps(results))
        for b in BENCHMARKS:
            for mode in modes:
                jobs.append((folder / f"{DATE}_samples_{b}_{mode}.jsonl", b, mode, qs[b], seed, prompt_ids))
    with Pool(2) as pool:
        pool.map(write_samples, jobs)
    return models


class TreeMemory(threading.Thread):
    """Peak of the summed RSS of a process and its descendants, sampled every 50 ms. Pages a forked child still
    shares with its parent count in both, so this is an upper bound of the memory the tree used."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.stop, self.peak_mb = psutil.Process(pid), threading.Event(), 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for p in [self.process, *self._children()]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:  # exited between listing and reading
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self.stop.wait(0.05)

    def _children(self) -> list:
        try:
            return self.process.children(recursive=True)
        except psutil.Error:
            return []


class _DocId(msgspec.Struct):
    doc_id: int


def reference_seconds(runs: Path) -> float:
    """The machine's pace on this tree, timed in the same run as the audit: one process reading every samples file,
    its sha256 and msgspec's decoding of its lines into their doc_id alone (every other field skipped), the work no
    audit of these files can leave out. The audit's time over this one judges the code rather than the machine."""
    decoder = msgspec.json.Decoder(_DocId)
    start = time.perf_counter()
    for path in sorted(runs.rglob("*.jsonl")):
        data = path.read_bytes()
        hashlib.sha256(data)
        decoder.decode_lines(data)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--processes", type=int, default=None,
                        help="processes reading and computing the benchmarks (VISDEP_AUDIT_PROCESSES; default one "
                             "per core; 1: all in the audit's own process)")
    parser.add_argument("--no-prompt-ids", action="store_true",
                        help="records without prompt_id, as written before visdep recorded it: the audit then "
                             "resamples videos only")
    parser.add_argument("--ladder", action="store_true",
                        help="add the temporal ladder's runs: each VLM also with frames=middle and "
                             "frame_order=shuffled "
                             "(video tasks only)")
    parser.add_argument("--workdir", type=Path, help="where to write the tree (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the tree and the audit output")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_audit_"))
    runs, out, panel, marker = work / "runs", work / "audit", work / "panel.yaml", work / "tree.json"
    shape = {"questions": args.questions, "models": args.models, "prompt_ids": not args.no_prompt_ids, "format": 4,
             "ladder": args.ladder}
    if out.exists():
        shutil.rmtree(out)
    if marker.is_file() and json.loads(marker.read_text()) == shape:
        print(f"tree: reusing {runs}")
    else:
        if runs.exists():
            shutil.rmtree(runs)
        start = time.perf_counter()
        models = write_tree(runs, args.questions, args.models, not args.no_prompt_ids, args.ladder)
        panel.write_text(json.dumps({"text_llms": models[:3], "vlms": models[3:8], "held_out": models[8:]}))
        marker.write_text(json.dumps(shape))
        print(f"tree written in {time.perf_counter() - start:.1f} s (not timed)")
    size_mb = sum(p.stat().st_size for p in runs.rglob("*.jsonl")) / 2**20
    lines = sum(1 for _ in runs.rglob("*.jsonl")) * (args.questions // len(BENCHMARKS))
    print(f"tree: {args.questions} questions x {args.models} models x blind/video"
          f"{' + the ladder (frames=middle, frame_order=shuffled) of each VLM' if args.ladder else ''} = "
          f"{lines} sample lines, {size_mb:.0f} MB")
    for path in runs.rglob("*.jsonl"):  # read once so the timed run does not measure a cold disk
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    reference = reference_seconds(runs)
    log = work / "audit.log"
    # every run hashes every input, as a first audit of new runs does: no hash kept from an earlier bench run
    env = (dict(os.environ) | {"VISDEP_HASH_CACHE": "off"}
           | ({"VISDEP_AUDIT_PROCESSES": str(args.processes)} if args.processes else {}))
    start = time.perf_counter()
    with open(log, "w") as stderr:
        # the explorer page is timed apart (bench/bench_explorer.py: its build time and size on this tree)
        child = subprocess.Popen([sys.executable, "-m", "visdep_metrics.cli.main", "audit", str(runs), "--panel",
                                  str(panel), "--out", str(out), "--no-explorer"], stdout=subprocess.DEVNULL,
                                 stderr=stderr, env=env)
        sampler = TreeMemory(child.pid)
        sampler.start()
        # the audit's rusage (with the processes it forked), not the tree writers'
        _, status, usage = os.wait4(child.pid, 0)
        sampler.stop.set()
        sampler.join()
    wall = time.perf_counter() - start
    # the audit may fork: the memory that counts is that of all its processes together
    peak_mb, single_mb, cpu = sampler.peak_mb, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
    messages = log.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        print(messages[-3000:])
        return 1
    n_rows = sum(1 for _ in (out / "questions.csv").open()) - 1
    print(f"visdep audit: wall {wall:.2f} s, CPU {cpu:.2f} s (all threads and processes), peak RSS {peak_mb:.0f} MB "
          f"summed over its processes (largest single process {single_mb:.0f} MB) ({n_rows} question rows, "
          f"outputs in {out})")
    print("phases (the command's own timings, wall and CPU of its process and those it forked):")
    for line in messages.splitlines():
        if any(f" - {stage} " in line for stage in ("read", "computed", "wrote")):
            print("  " + line.split(" - ", 1)[1])
    print(f"load average during the run (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"reference (one process reading, hashing and decoding every samples file's doc_id, timed just before): "
          f"{reference:.2f} s; the audit took {wall / reference:.2f} x that")
    print(f"time ratio   {wall / TIME_TARGET_S:.2f} of the {TIME_TARGET_S:.0f} s target")
    print(f"memory ratio {peak_mb / MEMORY_TARGET_MB:.2f} of the {MEMORY_TARGET_MB:.0f} MB target")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work)
    return 0 if wall <= TIME_TARGET_S and peak_mb <= MEMORY_TARGET_MB else 3


if __name__ == "__main__":
    sys.exit(main())
