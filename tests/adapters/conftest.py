"""In-process adapters and lmms-eval requests for them (the tiny checkpoints: `tests/conftest.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_adapters.tiny import LLM_KINDS


@pytest.fixture
def benchmark_env(fixture_env, monkeypatch) -> dict[str, str]:
    """The synthetic benchmarks' roots in this process's environment, for one test."""
    for name, root in fixture_env.items():
        monkeypatch.setenv(name, root)
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    return fixture_env


def make_adapter(kind: str, path: Path, **kwargs):
    """A visdep adapter on the CPU (in float32 unless `dtype` says otherwise), as lmms-eval would build it from
    --model_args."""
    from model_adapters.llm import VisdepLLM
    from model_adapters.vlm import VisdepVLM

    cls = VisdepLLM if kind in LLM_KINDS else VisdepVLM
    return cls(pretrained=str(path), device="cpu", **{"dtype": "float32", **kwargs})


def requests_for(adapter, docs: list[dict], video: bool, task: str = "t", choices=None) -> list:
    """lmms-eval's `multiple_choice` requests for `docs` (K per document, contiguous), wired to the
    adapter's task_dict the way the evaluator wires them. `choices(doc)` overrides the task's."""
    from lmms_eval.api.instance import Instance

    from lmms_eval_tasks import tasks

    to_visual = tasks.doc_to_visual_video if video else tasks.doc_to_visual_blind
    adapter.task_dict = {task: {"test": docs}}
    out = []
    for doc_id, doc in enumerate(docs):
        context = tasks.doc_to_text(doc)
        for k, choice in enumerate((choices or tasks.doc_to_choice)(doc)):
            out.append(Instance("loglikelihood", (context, choice, to_visual, doc_id, task, "test"), k,
                                metadata={"task": task, "doc_id": doc_id, "repeats": 1}))
    return out
