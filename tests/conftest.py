"""Fixtures shared by every test folder: the real annotation files, synthetic benchmark downloads, tiny
checkpoints, and a runner for the real lmms-eval command line."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = REPO.parent / "shared" / "benchmarks"
BENCHMARK_ENV_VARS = ("MMAU_ROOT", "VRU_ACCIDENT_ROOT", "TRAFFICQA_ROOT", "ACCIDENTBENCH_ROOT")


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """../shared/benchmarks (real MM-AU and VRU-Accident annotations); skip when absent."""
    if not SHARED_BENCHMARKS.is_dir():
        pytest.skip(f"real annotation files not found at {SHARED_BENCHMARKS}")
    return SHARED_BENCHMARKS


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """{kind: checkpoint folder} for every tiny family (about 0.3 s each)."""
    from model_adapters.tiny import KINDS, build_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {kind: build_tiny(kind, root / kind) for kind in KINDS}


@pytest.fixture(scope="session")
def fixture_env(tmp_path_factory) -> dict[str, str]:
    """Synthetic copies of the four benchmarks, with videos; {ENV_VAR: root}."""
    from lmms_eval_tasks.fixtures import write_fixtures

    return write_fixtures(tmp_path_factory.mktemp("benchmarks"))


def lmms_eval_env(benchmark_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment for a CLI run: this machine's, without stray benchmark/visdep variables."""
    env = {k: v for k, v in os.environ.items() if k not in BENCHMARK_ENV_VARS and not k.startswith("VISDEP_")}
    env.update(benchmark_env)
    env.update(extra)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_lmms_eval(args: list[str], env: dict[str, str], out: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `python -m lmms_eval ARGS --output_path OUT --log_samples`; the caller checks the files
    (the CLI exits 0 even when evaluation failed). stdout+stderr are kept in OUT/cli.log."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "lmms_eval", *args, "--log_samples", "--output_path", str(out)]
    proc = subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=timeout)
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
