"""`visdep validate` and `visdep demo` leave the process environment as they found it: what lmms-eval's command line
would read from it (the scoring mode, a benchmark's folder) they pass explicitly. Both run their own code end to end
on small settings; only the training of the panel is replaced by untrained tiny checkpoints of the same families.
Libraries that set variables of their own when imported are imported before the environment is compared."""

from __future__ import annotations

import os

import pytest
import sklearn  # noqa: F401  # sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK when first imported: not ours

from model_adapters.adapter import EngineAdapter
from visdep_metrics.demo import training
from visdep_metrics.demo.planted import PlantedConfig

WATCHED = ("VISDEP_SCORING", "VRU_ACCIDENT_ROOT")  # what `visdep validate` used to set for itself


@pytest.fixture
def untrained_panel(tiny_models, monkeypatch):
    """`train_panel` answering with the tiny checkpoints, untrained; the variables it would have set unset."""
    monkeypatch.setattr(training, "train_panel", lambda roles, *args: {kind: tiny_models[kind] for kind in roles})
    for name in WATCHED:
        monkeypatch.delenv(name, raising=False)


def test_validate_leaves_the_environment_as_it_was(untrained_panel, monkeypatch, tmp_path):
    from visdep_metrics.demo.validate import validate

    asked = []
    real = EngineAdapter.loglikelihood
    monkeypatch.setattr(EngineAdapter, "loglikelihood",
                        lambda self, requests: asked.extend(r.args[1] for r in requests) or real(self, requests))
    before = dict(os.environ)
    table = validate(tmp_path / "out", cache_dir=tmp_path / "cache", videos=4, max_frames=2, shares=(0.7,),
                     strengths=(1.0,), taus=(0.0,), with_smollm2=False)
    assert dict(os.environ) == before
    assert len(table) and (tmp_path / "out" / "validate.csv").is_file()
    # option scoring reached the adapters without the variable: the continuations are option texts, not letters
    assert asked and all(len(c) > 1 for c in asked), sorted(set(asked))[:5]


@pytest.mark.slow
def test_demo_leaves_the_environment_as_it_was(untrained_panel, tmp_path):
    """The whole demo in this process (lmms-eval's command line in its subprocesses, then tst, ibp, the audit and
    the truth), on an eight-video benchmark."""
    from visdep_metrics.demo.pipeline import run_demo

    before = dict(os.environ)
    status = run_demo(tmp_path / "demo", max_frames=2, with_smollm2=False, cache_dir=tmp_path / "cache",
                      config=PlantedConfig(videos=8))
    assert dict(os.environ) == before
    assert status == 0 and (tmp_path / "demo" / "report.md").is_file()
