"""The evaluation hook (`lmms_eval_tasks.evaluation_hooks`): one `Evaluation` per `simple_evaluate` call, current only
while it runs (also on lmms-eval's `process_results` threads), its scoring mode read once when it starts, the model's
identity asked of the model lmms-eval built after the evaluation, nothing left behind for the next one."""

from __future__ import annotations

import threading

import pytest

from lmms_eval_tasks import evaluation_hooks, tasks
from lmms_eval_tasks.evaluation import Evaluation, current, evaluating


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


@pytest.mark.slow
def test_one_process_runs_a_letter_and_an_option_evaluation(fixture_env, tiny_models, tmp_path, monkeypatch):
    """The scoring mode is the model's argument, read by each evaluation from its own model_args: one process runs
    a letter and then an option evaluation (no VISDEP_SCORING), and each gets its own mode's choices and values,
    which equal the adapter's own scoring of the same questions in that mode."""
    from lmms_eval_tasks.loaders import load_benchmark
    from tests.helpers.adapters import make_adapter, requests_for
    from tests.helpers.lmms_cli import lmms_eval_env, read_samples, run_lmms_eval

    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    model = tiny_models["qwen2"]
    env = {k: v for k, v in lmms_eval_env(fixture_env).items() if k != "VISDEP_SCORING"}
    samples = {}
    for mode in ("letter", "option", "letter"):  # and back: nothing of the option run stays behind
        out = tmp_path / f"{mode}_{len(samples)}"
        proc = run_lmms_eval(["--model", "visdep_llm", "--model_args", f"pretrained={model},device=cpu,dtype=float32,"
                              f"scoring={mode}", "--tasks", "mmau_blind", "--batch_size", "4"], env, out)
        assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
        samples[out.name] = sorted(read_samples(out, "mmau_blind"), key=lambda s: s["doc_id"])
    letter, option, again = samples.values()
    assert {s["visdep"]["scoring"] for s in letter} == {"letter"} and {s["visdep"]["scoring"] for s in option} == {
        "option"}
    questions = load_benchmark("mmau", fixture_env["MMAU_ROOT"])
    docs = [q.document() for q in questions]
    for mode, run in (("letter", letter), ("option", option)):
        with evaluating(Evaluation(scoring=mode)):
            adapter = make_adapter("qwen2", model)
            requests = requests_for(adapter, docs, video=False)
            expected = [-loss for loss, *_ in adapter.loglikelihood(requests)]
        # what each mode scores, written out: the option letters, or the option texts of the annotation file
        strings = [s for d in docs for s in ("ABCDEFGHIJ"[:len(d["options"])] if mode == "letter" else d["options"])]
        got = [lp for s in run for lp in s["visdep"]["option_logprobs"]]
        assert [s["visdep"]["question_id"] for s in run] == [d["question_id"] for d in docs]
        assert got == pytest.approx(expected, abs=1e-4), mode  # batches of 4 against 1: float32 rounding
        assert [c.strip() for s in run for c in s["visdep"]["continuations"]] == strings, mode
    assert [s["visdep"]["option_logprobs"] for s in again] == [s["visdep"]["option_logprobs"] for s in letter]
    # a mode the evaluation does not know fails the run, naming the argument
    out = tmp_path / "bad"
    proc = run_lmms_eval(["--model", "visdep_llm", "--model_args", f"pretrained={model},scoring=logits", "--tasks",
                          "mmau_blind"], env, out)
    assert proc.returncode == 1 and "model_args scoring='logits': expected one of letter, option" in proc.stdout
