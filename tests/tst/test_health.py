"""Health figures of a benchmark's text (`visdep spec report`): hand-counted on small constructed sets, and the
report on a CSV benchmark with planted shortcuts."""

from __future__ import annotations

import csv
import json
import math

import pandas as pd
import pytest

from lmms_eval_tasks.records import Question
from visdep_metrics.cli.main import main
from visdep_metrics.tst.health import (
    answer_balance,
    answer_frequency_heuristic,
    health_summary,
    option_pairs,
    recurring_answers,
    text_words,
)


def _q(qid: str, options: list[str], answer: int) -> Question:
    return Question(question_id=qid, benchmark="b", video=f"{qid}.mp4", question="Why?", options=options,
                    answer_index=answer)


RECORDS = [
    _q("q1", ["the car stops", "the car doesn't stop", "a truck turns"], 0),  # negated pair with the answer
    _q("q2", ["red", "red", "blue"], 2),  # duplicate pair, not the answer
    _q("q3", ["the cars stop", "car stop", "green"], 1),  # near-duplicate (article, plural -s) with the answer
    _q("q4", ["red", "green", "blue"], 0),
    _q("q5", ["blue", "red", "green"], 1),
]


def test_negations_are_spelled_out():
    assert text_words("The car doesn't stop; it cannot.") == ["the", "car", "does", "not", "stop", "it", "can", "not"]


def test_answer_balance_against_uniform_positions():
    table, (test,) = answer_balance(RECORDS)
    # answers at A, C, B, A, B: A 2, B 2, C 1 of 5
    assert table["n_answers"].tolist() == [2, 2, 1] and table["letter"].tolist() == ["A", "B", "C"]
    assert table["share"].tolist() == [0.4, 0.4, 0.2] and table["expected_share"].tolist() == [1 / 3] * 3
    # chi-square by hand: expected 5/3 each; ((1/3)^2 + (1/3)^2 + (2/3)^2) / (5/3) = 0.4; 2 degrees of freedom:
    # p = exp(-x / 2)
    assert test["chi_square"] == pytest.approx(0.4) and test["p_value"] == pytest.approx(math.exp(-0.2))
    assert (test["most_frequent_letter"], test["most_frequent_share"], test["n"]) == ("A", 0.4, 5)


def test_recurring_answers_and_the_answer_frequency_heuristic():
    recurring = recurring_answers(RECORDS)
    # 'red' is the answer of q4 and q5 and a distractor twice in q2; every other answer text is correct once
    assert recurring.to_dict("records") == [{"text": "red", "n_correct": 2, "n_distractor": 2, "answer_rate": 0.5}]
    # leave-one-out counts of being the answer elsewhere, option by option:
    # q1 (0, 0, 0): 3-way tie -> 1/3; q2 red 2, red 2, blue 0 -> the answer (blue) is not picked -> 0;
    # q3 (0, 0, 0) -> 1/3; q4 red 1, green 0, blue 1 -> tie with the answer -> 1/2; q5 blue 1, red 1 -> 1/2
    assert answer_frequency_heuristic(RECORDS).tolist() == pytest.approx([1 / 3, 0, 1 / 3, 1 / 2, 1 / 2])


def test_duplicate_near_duplicate_and_negated_pairs():
    pairs = option_pairs(RECORDS)
    assert pairs[["question_id", "kind", "option_a", "option_b", "involves_answer"]].values.tolist() == [
        ["q1", "negated", "A", "B", True], ["q2", "duplicate", "A", "B", False],
        ["q3", "near_duplicate", "A", "B", True]]
    # "the car notices ..." / "the car does not notice ..." (MM-AU's pattern) is a negated pair too; a changed
    # word is not
    assert option_pairs([_q("m", ["the car notices it", "the car does not notice it", "it"], 1)])["kind"].tolist() == [
        "negated"]
    assert option_pairs([_q("m", ["a cyclist crosses", "a pedestrian crosses"], 1)]).empty


def test_health_summary_figures():
    figures, tables = health_summary(RECORDS)
    assert figures["questions_whose_answer_recurs"] == 2  # q4 and q5 (red)
    assert figures["answer_frequency_heuristic_accuracy"] == pytest.approx((1 / 3 + 0 + 1 / 3 + 1 / 2 + 1 / 2) / 5)
    assert figures["questions_with_duplicate_options"] == 1 and figures["questions_with_near_duplicate_options"] == 1
    assert figures["questions_with_negated_pair"] == figures["questions_whose_answer_has_negated_copy"] == 1
    assert figures["negated_pair_expected_with_answer"] == pytest.approx(2 / 3)
    assert set(tables) == {"answer_balance", "recurring_answers", "option_pairs"}
    figures, tables = health_summary(RECORDS[3:])  # no pair at all
    assert figures["questions_with_negated_pair"] == figures["questions_whose_answer_has_negated_copy"] == 0
    assert tables["option_pairs"].empty


@pytest.fixture
def planted_benchmark(tmp_path):
    """60 questions about 30 videos, K = 4. Every answer is one of three recurring labels, the distractors are made
    up per question (VRU-Accident's pattern), and a third of the questions carry a negated copy of the answer
    (MM-AU's pattern)."""
    labels = ["urban road", "sunny day", "car hits pedestrian"]
    rows = []
    for v in range(30):
        for k in range(2):
            n = 2 * v + k
            answer = labels[n % 3]
            distractors = [f"made up {n} {j}" for j in range(3)]
            if n % 3 == 0:
                distractors[0] = f"not {answer}"
            options = distractors[:]
            position = (n * 7) % 4
            options.insert(position, answer)
            rows.append({"id": f"v{v}-{k}", "clip": f"v{v}", "question": f"What happens in clip {v}, part {k}?",
                         **{f"o{j}": o for j, o in enumerate(options)}, "answer": position})
    with open(tmp_path / "planted.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    spec = tmp_path / "planted.yaml"
    spec.write_text("name: planted\nroot_default: .\nannotations: planted.csv\nn_options: 4\nanswer_is: index\n"
                    "fields:\n  question_id: '{id}'\n  question: '{question}'\n"
                    "  options: ['{o0}', '{o1}', '{o2}', '{o3}']\n  answer: '{answer}'\n  video: 'v/{clip}.mp4'\n")
    return spec, rows


def test_spec_report_on_planted_shortcuts(planted_benchmark, tmp_path):
    spec, rows = planted_benchmark
    out = tmp_path / "report"
    assert main(["spec", "report", str(spec), "--out", str(out), "--n-estimators", "30"]) == 0
    health = json.loads((out / "health.json").read_text())
    assert health["n_questions"] == 60 and health["chance"] == 0.25
    assert health["questions_whose_answer_recurs"] == 60  # each label is the answer of 20 questions
    assert health["questions_with_negated_pair"] == health["questions_whose_answer_has_negated_copy"] == 20
    # a label that was the answer elsewhere against made-up distractors never seen: always picked
    assert health["answer_frequency_heuristic_accuracy"] == 1.0
    summary = json.loads((out / "tst" / "summary.json").read_text())
    assert summary["benchmark"] == "planted" and summary["accuracy_ci95"][0] > 0.25
    report = (out / "report.md").read_text()
    assert "**The text gives answers away.**" in report
    top = pd.read_csv(out / "most_text_solvable.csv")
    s_x = pd.read_csv(out / "tst" / "s_x.csv")
    assert len(top) == 10 and top["s"].tolist() == sorted(s_x["s"], reverse=True)[:10]
    by_id = {r["id"]: r for r in rows}
    for row in top.itertuples():  # each shown with its question and its options, the answer marked
        source = by_id[row.question_id]
        answer_text = source[f"o{source['answer']}"]
        assert f"`{row.question_id}`" in report and source["question"] in report
        assert f"{'ABCD'[source['answer']]}. {answer_text}  ← answer" in report
    balance = pd.read_csv(out / "answer_balance.csv")
    positions = [r["answer"] for r in rows]
    assert balance["n_answers"].tolist() == [positions.count(i) for i in range(4)]
    # its own earlier output is replaced; a folder of other files is refused
    assert main(["spec", "report", str(spec), "--out", str(out), "--n-estimators", "5"]) == 0
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.txt").write_text("keep")
    assert main(["spec", "report", str(spec), "--out", str(tmp_path / "foreign")]) == 2
