"""The evaluation hook (`lmms_eval_tasks.evaluation_hooks`): one `Evaluation` per `simple_evaluate` call, current only
while it runs (also on lmms-eval's `process_results` threads), its scoring mode read once when it starts, the model's
identity asked of the model lmms-eval built after the evaluation, nothing left behind for the next one."""

from __future__ import annotations

import threading

import pytest

from lmms_eval_tasks import evaluation_hooks, tasks
from lmms_eval_tasks.evaluation_hooks import Evaluation, current, evaluating


class FakeModel:
    """What lmms-eval builds from --model: a visdep adapter answers `run_identity()`; building it records nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run_identity(self) -> dict:
        return {"adapter": self.name}


@pytest.fixture
def wrapped(monkeypatch):
    """lmms-eval's evaluator with stand-ins for `simple_evaluate` (which builds the model, calls `evaluate`, then the
    task functions on another thread, as 0.7.3's `process_results` pool does) and `evaluate`, wrapped by the hook."""
    from lmms_eval import evaluator

    seen = {}

    def evaluate(lm, **kwargs):
        seen["scoring at evaluate"] = tasks.scoring_mode()
        return {}

    def simple_evaluate(model=None, use_cache=None, evaluation_tracker=None, fail=False, **kwargs):
        results = evaluator.evaluate(lm=FakeModel(model))
        monkeypatch.setenv("VISDEP_SCORING", "letter")  # changed mid-run: the evaluation keeps what it read
        worker = threading.Thread(target=lambda: (current().record_dropped(f"{model}_task", [{"question_id": "q"}]),
                                                  seen.setdefault("scoring on a worker", tasks.scoring_mode()),
                                                  seen.setdefault("store", current().store_root)))
        worker.start()
        worker.join()
        if fail:
            raise RuntimeError("the run broke")
        return results

    monkeypatch.setattr(evaluator, "simple_evaluate", simple_evaluate)
    monkeypatch.setattr(evaluator, "evaluate", evaluate)
    evaluation_hooks.wrap_simple_evaluate()
    return evaluator, seen


def test_each_evaluation_has_its_own_state(wrapped, monkeypatch, tmp_path):
    evaluator, seen = wrapped
    monkeypatch.setenv("VISDEP_SCORING", "option")
    first = evaluator.simple_evaluate(model="m1", use_cache=str(tmp_path / "cache"))
    assert first["visdep"] == {"model": {"adapter": "m1"}, "dropped": {"m1_task": [{"question_id": "q"}]}}
    assert seen == {"scoring at evaluate": "option", "scoring on a worker": "option",
                    "store": (tmp_path / "cache").resolve()}
    seen.clear()
    second = evaluator.simple_evaluate(model="m2")
    assert second["visdep"] == {"model": {"adapter": "m2"}, "dropped": {"m2_task": [{"question_id": "q"}]}}
    assert seen["store"] is None and seen["scoring at evaluate"] == "letter"
    assert current().dropped == {} and current().model is None, "nothing outlives an evaluation"


def test_a_failed_evaluation_exits_with_status_1_and_leaves_nothing(wrapped):
    evaluator, _ = wrapped
    with pytest.raises(SystemExit) as stop:
        evaluator.simple_evaluate(model="m", fail=True)
    assert stop.value.code == 1
    assert current().dropped == {}


def test_a_bad_scoring_mode_fails_the_evaluation(wrapped, monkeypatch):
    evaluator, _ = wrapped
    monkeypatch.setenv("VISDEP_SCORING", "logits")
    with pytest.raises(SystemExit):
        evaluator.simple_evaluate(model="m")


def test_evaluating_nests_and_restores():
    outer, inner = Evaluation(scoring="option"), Evaluation(scoring="letter")
    with evaluating(outer):
        with evaluating(inner):
            assert current() is inner
        assert current() is outer and tasks.scoring_mode() == "option"
    assert current() is not outer
    with pytest.raises(ValueError, match="scoring 'logits'"):
        Evaluation(scoring="logits")
