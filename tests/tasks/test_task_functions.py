"""Prompt, choices and results of the shared task functions (what every YAML references)."""

from __future__ import annotations

import hashlib
import math

import pytest

from lmms_eval_tasks import tasks
from lmms_eval_tasks.records import Question, RecordError
from lmms_eval_tasks.task_yaml import category_metric

DOC = {"question_id": "q1", "benchmark": "vru_accident", "video": "v.mp4", "question": "Where?",
       "options": ["rural", "urban", "suburban"], "answer_index": 1, "category": "location", "source": "DoTA"}
PROMPT = "Where?\nA. rural\nB. urban\nC. suburban\nAnswer with the option's letter from the given choices directly."


def test_prompt_is_the_paper_template():
    assert tasks.doc_to_text(DOC) == PROMPT


def test_choices_follow_scoring_mode(monkeypatch):
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    assert tasks.doc_to_choice(DOC) == ["A", "B", "C"]
    monkeypatch.setenv("VISDEP_SCORING", "option")
    assert tasks.doc_to_choice(DOC) == ["rural", "urban", "suburban"]
    monkeypatch.setenv("VISDEP_SCORING", "logits")
    with pytest.raises(ValueError, match="VISDEP_SCORING='logits': expected one of letter, option"):
        tasks.doc_to_choice(DOC)


@pytest.mark.parametrize("results", [
    ["(2.0, False)", "(0.5, True)", "(3.0, False)"],          # what lmms-eval 0.7.3 hands over: strings
    [(2.0, False), (0.5, True), (3.0, False)],                # tuples
    [["(2.0, False)"], ["(0.5, True)"], ["(3.0, False)"]],    # one-element lists of either
])
def test_results_take_the_smallest_loss(results, monkeypatch):
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    out = tasks.process_results_video(DOC, results)
    assert out["acc"] == 1.0 and out["acc_location"] == 1.0  # option B has the smallest loss and is the answer
    rec = out["visdep"]
    assert rec == {"question_id": "q1", "benchmark": "vru_accident", "mode": "video", "category": "location",
                   "source": "DoTA", "video": "v.mp4", "n_options": 3, "answer_index": 1,
                   "prompt_id": hashlib.sha256(PROMPT.encode()).hexdigest()[:16],
                   "option_logprobs": [-2.0, -0.5, -3.0], "scoring": "letter", "continuations": ["A", "B", "C"],
                   "schema_version": 2}
    wrong = tasks.process_results_blind(DOC, ["(0.1, True)", "(0.5, False)", "(3.0, False)"])
    assert wrong["acc"] == 0.0 and wrong["visdep"]["mode"] == "blind"


@pytest.mark.parametrize("results", [
    ["(2.0, False, ' A')", "(0.5, True, ' B')", "(3.0, False, ' C')"],   # the visdep adapters, stringified
    [(2.0, False, " A"), (0.5, True, " B"), (3.0, False, " C")],
])
def test_results_keep_the_strings_the_model_scored(results, monkeypatch):
    monkeypatch.delenv("VISDEP_SCORING", raising=False)
    rec = tasks.process_results_video(DOC, results)["visdep"]
    assert rec["continuations"] == [" A", " B", " C"] and rec["option_logprobs"] == [-2.0, -0.5, -3.0]


def test_scored_strings_survive_quotes_and_commas(monkeypatch):
    monkeypatch.setenv("VISDEP_SCORING", "option")
    doc = {**DOC, "options": ["it's wet", 'a "dry", sunny road', "x, False, 'y'"]}
    results = [str((1.0, False, " " + o)) for o in doc["options"]]
    assert tasks.process_results_blind(doc, results)["visdep"]["continuations"] == [" " + o for o in doc["options"]]


def test_results_refuse_nan_and_wrong_count():
    with pytest.raises(ValueError, match=r"question 'q1' \(blind\): non-finite log-likelihoods"):
        tasks.process_results_blind(DOC, ["(nan, False)", "(0.5, False)", "(3.0, False)"])
    with pytest.raises(ValueError, match="2 responses for 3 options"):
        tasks.process_results_blind(DOC, ["(1.0, False)", "(0.5, False)"])
    with pytest.raises(ValueError, match="cannot read a log-likelihood"):
        tasks.process_results_blind(DOC, ["oops", "(0.5, False)", "(1.0, False)"])


def test_benchmark_without_category_has_only_acc():
    doc = {**DOC, "category": ""}
    out = tasks.process_results_blind(doc, ["(1.0, False)", "(0.5, False)", "(3.0, False)"])
    assert set(out) == {"acc", "visdep"} and out["visdep"]["category"] is None
    assert math.isclose(out["acc"], 1.0)


def test_category_metric_names():
    assert category_metric("weather and light") == "acc_weather_and_light"
    assert category_metric("temporal_causal_reasoning") == "acc_temporal_causal_reasoning"


def test_a_question_is_the_document_lmms_eval_gets():
    question = Question(question_id="q1", benchmark="vru_accident", video="v.mp4", question=" Where? ",
                        options=["rural ", "urban", "suburban"], answer_index=1, category="location", source="DoTA")
    assert question.document() == DOC and question.options == ("rural", "urban", "suburban")
    plain = Question(question_id=7, benchmark="b", video="v.mp4", question="Why?", options=["a", "b"], answer_index=0)
    assert plain.document()["category"] == "" and plain.question_id == "7" and "facets" not in plain.document()
    assert tasks.process_results_blind(plain.document(), ["(1.0, False)", "(2.0, False)"])["visdep"]["category"] is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"options": ["only one"]}, "fewer than 2 options"),
    ({"options": ["a", " "]}, "an option text is empty"),
    ({"answer_index": 3}, "the answer index is outside the options"),
    ({"answer_index": True}, "the answer index is outside the options"),
    ({"question": "  "}, "the question text is empty"),
])
def test_a_question_refuses_what_no_task_can_ask(change, reason):
    fields = {"question_id": "q", "benchmark": "b", "video": "v.mp4", "question": "Why?", "options": ["a", "b"],
              "answer_index": 0, **change}
    with pytest.raises(RecordError) as error:
        Question(**fields)
    assert error.value.reason == reason
