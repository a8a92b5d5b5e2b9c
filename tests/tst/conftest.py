"""The TsT tests' benchmarks (tests/helpers/shortcut_vru.py), read back through the loaders."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmms_eval_tasks.loaders import load_benchmark
from tests.helpers.shortcut_vru import write_shortcut_vru


@pytest.fixture(scope="session")
def shortcut_root(tmp_path_factory) -> Path:
    """480 questions (80 videos), about half of them answerable from the option texts alone."""
    return write_shortcut_vru(tmp_path_factory.mktemp("shortcut_vru"), 20, 0.5, seed=1)


@pytest.fixture(scope="session")
def shortcut_records(shortcut_root) -> list:
    return load_benchmark("vru_accident", shortcut_root)


@pytest.fixture(scope="session")
def neutral_records(tmp_path_factory) -> list:
    """600 questions (100 videos) whose answers are independent of every non-visual input: half with options
    from a shared pool, half with options seen nowhere else (a text whose own answer leaked into its
    statistics would give these away)."""
    root = write_shortcut_vru(tmp_path_factory.mktemp("neutral_vru"), 25, 0.0, seed=2, unique_fraction=0.5)
    return load_benchmark("vru_accident", root)
