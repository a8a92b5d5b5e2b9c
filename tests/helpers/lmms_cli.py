"""Running the real lmms-eval command line from a test, and reading what it wrote."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers.lmms_inproc import needs_process, run_in_process

REPO = Path(__file__).resolve().parents[2]
SHARED_BENCHMARKS = (REPO.parent / "shared" / "benchmarks").resolve()  # ../shared may be a link
BENCHMARK_ENV_VARS = ("MMAU_ROOT", "VRU_ACCIDENT_ROOT", "TRAFFICQA_ROOT", "ACCIDENTBENCH_ROOT")


def lmms_eval_env(benchmark_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment for a CLI run: this machine's, without stray benchmark/visdep variables."""
    env = {k: v for k, v in os.environ.items() if k not in BENCHMARK_ENV_VARS and not k.startswith("VISDEP_")}
    env.update(benchmark_env)
    env.update(extra)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def concurrent_env(hf_home: Path, datasets_cache: Path) -> dict[str, str]:
    """The environment of an lmms-eval run of upstream tasks on one thread: the test's HF_HOME, where upstream
    tasks look for videos, and a datasets cache of the run's own, which no other run builds at the same time."""
    return lmms_eval_env({}, HF_HOME=str(hf_home), HF_DATASETS_CACHE=str(datasets_cache), OMP_NUM_THREADS="1")


def run_lmms_eval(args: list[str], env: dict[str, str], out: Path, timeout: int = 600,
                  python: str = sys.executable, process: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m lmms_eval ARGS --output_path OUT --log_samples` in folder OUT; stdout+stderr are kept in
    OUT/cli.log. In this process (`tests.helpers.lmms_inproc`) unless `process`, `python` is another
    environment's interpreter (such as vLLM's) or `env` sets what a library reads when imported: then a real
    subprocess (`timeout` applies to it only).
    With visdep installed a failed evaluation exits 1; the caller checks the exit status and the files."""
    out.mkdir(parents=True, exist_ok=True)
    args = [*args, "--log_samples", "--output_path", str(out)]
    if process or python != sys.executable or needs_process(env) is not None:
        proc = subprocess.run([python, "-m", "lmms_eval", *args], env=env, cwd=out, capture_output=True, text=True,
                              timeout=timeout)
    else:
        proc = run_in_process(args, env, out)
    (out / "cli.log").write_text(proc.stdout + "\n" + proc.stderr)
    return proc


def read_samples(out: Path, task: str) -> list[dict]:
    """All sample lines lmms-eval wrote for `task` anywhere under `out`."""
    files = sorted(glob.glob(str(out / "**" / f"*_samples_{task}.jsonl"), recursive=True))
    rows = []
    for f in files:
        with open(f) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def read_results(out: Path) -> dict:
    files = sorted(glob.glob(str(out / "**" / "*_results.json"), recursive=True))
    assert files, f"lmms-eval wrote no results file under {out}; log:\n{(out / 'cli.log').read_text()[-3000:]}"
    return json.loads(Path(files[-1]).read_text())


def free_port() -> int:
    """A free TCP port on the loopback, for torchrun's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
