"""Fixtures shared by every test folder: the real annotation files, synthetic benchmark downloads, tiny
checkpoints, and a runner for the real lmms-eval command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lmms_cli import SHARED_BENCHMARKS


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


@pytest.fixture(scope="session", autouse=True)
def hash_cache(tmp_path_factory) -> Path:
    """The audit's cache of file hashes for every test that audits, not the user's."""
    path = tmp_path_factory.mktemp("hash_cache") / "sha256.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VISDEP_HASH_CACHE", str(path))
        yield path
