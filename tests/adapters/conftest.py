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
