"""In-process adapters and lmms-eval requests for them (the tiny checkpoints: `tests/conftest.py`)."""

from __future__ import annotations

import pytest
from loguru import logger


@pytest.fixture
def benchmark_env(fixture_env, monkeypatch) -> dict[str, str]:
    """The synthetic benchmarks' roots in this process's environment, for one test."""
    for name, root in fixture_env.items():
        monkeypatch.setenv(name, root)
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    return fixture_env


@pytest.fixture
def evaluation(tmp_path):
    """One evaluation for the test (as the lmms-eval wrapper makes one): letter scoring, the durable store on
    (`--use_cache tmp_path/cache`)."""
    from lmms_eval_tasks.evaluation import Evaluation, evaluating

    with evaluating(Evaluation(store_root=tmp_path / "cache")) as current:
        yield current


@pytest.fixture
def store_root(evaluation):
    """The durable store's folder of the test's evaluation."""
    return evaluation.store_root


@pytest.fixture
def warnings():
    """The warnings logged during the test (loguru), one string each."""
    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING", format="{message}")
    yield messages
    logger.remove(sink)
