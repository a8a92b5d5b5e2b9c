"""Fixtures shared by every test folder: the real annotation files, synthetic benchmark downloads, tiny
checkpoints, and a runner for the real lmms-eval command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.lmms_cli import SHARED_BENCHMARKS, lmms_eval_env


@pytest.fixture(scope="session")
def shared_benchmarks() -> Path:
    """../shared/benchmarks (real MM-AU and VRU-Accident annotations); skip when absent."""
    if not SHARED_BENCHMARKS.is_dir():
        pytest.skip(f"real annotation files not found at {SHARED_BENCHMARKS}")
    return SHARED_BENCHMARKS


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """{kind: checkpoint folder} for every tiny family (about 0.3 s each)."""
    from visdep_metrics.demo.tiny import KINDS, build_tiny

    root = tmp_path_factory.mktemp("tiny")
    return {kind: build_tiny(kind, root / kind) for kind in KINDS}


@pytest.fixture(scope="session")
def fixture_env(tmp_path_factory) -> dict[str, str]:
    """Synthetic copies of the four benchmarks, with videos; {ENV_VAR: root}."""
    from visdep_metrics.demo.fixtures import write_fixtures

    return write_fixtures(tmp_path_factory.mktemp("benchmarks"))


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> tuple[Path, Path]:
    """`visdep demo`, run once for every test that reads it (tests/test_demo.py, the explorer's browser tests):
    (its OUT, the cache of the checkpoints it trained)."""
    root = tmp_path_factory.mktemp("demo")
    out, cache = root / "demo", root / "cache"
    proc = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "demo", "--out", str(out), "--cache-dir",
                           str(cache)], env=lmms_eval_env({}), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, cache


@pytest.fixture(scope="session", autouse=True)
def hash_cache(tmp_path_factory) -> Path:
    """The audit's cache of file hashes for every test that audits, not the user's."""
    path = tmp_path_factory.mktemp("hash_cache") / "sha256.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VISDEP_HASH_CACHE", str(path))
        yield path
