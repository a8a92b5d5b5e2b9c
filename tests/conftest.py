"""Fixtures shared by every test folder: the real annotation files, synthetic benchmark downloads, tiny
checkpoints, and a runner for the real lmms-eval command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_eval_tasks.evaluation import SESSION, Evaluation, evaluating
from tests.helpers.lmms_cli import SHARED_BENCHMARKS, lmms_eval_env

# Set before any library reads them (nothing imported above loads one), as every lmms-eval run of the tests sets
# them (lmms_cli.lmms_eval_env): runs whose environment agrees with this process's are made in it
# (tests/helpers/lmms_inproc.py).
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)
if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, and so their subprocesses
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"


@pytest.fixture(autouse=True)
def session_of_its_own():
    """Each test runs as a command of its own would: what it opens (specs, twins) or records outside an evaluation
    goes to an evaluation of its own (the environment's scoring mode), which no other test sees. It starts with the
    sources its module's fixtures opened before it (in the process's session)."""
    with evaluating(Evaluation(scoring=None, sources=dict(SESSION.sources), specs=dict(SESSION.specs))) as evaluation:
        yield evaluation


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


# Tests that read the same costly session fixture run on one worker, which builds it once.
SHARED_SESSION_FIXTURES = ("demo",)
# The longest groups (the demo's 3-5 minutes, vLLM's 3), handed out first so that neither is what the suite waits
# for at its end.
LONGEST_FIRST = ("demo", "tests/adapters/test_vllm.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`: every module's tests in one group (module fixtures built once, as with loadfile),
    and every module with a test that reads one of SHARED_SESSION_FIXTURES in that fixture's group; the groups of
    LONGEST_FIRST first."""
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0]

    group = {}
    for item in items:
        for name in SHARED_SESSION_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                group.setdefault(module(item), name)
    rank = {}
    for item in items:
        name = group.get(module(item), module(item))
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(name))
        rank[item.nodeid] = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=lambda item: rank[item.nodeid])  # stable: within a rank, the collection's order
