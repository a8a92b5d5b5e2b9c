"""In-process adapters and lmms-eval requests for them (the tiny checkpoints: `tests/conftest.py`)."""

from __future__ import annotations

import pytest


@pytest.fixture
def benchmark_env(fixture_env, monkeypatch) -> dict[str, str]:
    """The synthetic benchmarks' roots in this process's environment, for one test."""
    for name, root in fixture_env.items():
        monkeypatch.setenv(name, root)
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    return fixture_env


@pytest.fixture
def store_root(tmp_path):
    """The durable store on (`--use_cache tmp_path/cache`) for one test; off again after it."""
    from lmms_eval_tasks.evaluation_hooks import set_store_root

    set_store_root(tmp_path / "cache")
    yield tmp_path / "cache"
    set_store_root(None)
