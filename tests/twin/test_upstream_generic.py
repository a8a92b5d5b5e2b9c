"""The generic path of an upstream twin, piece by piece (parse, stem, cross-check, gold), and through
`read_upstream` on Video-MME-shaped documents (the fields `tasks/videomme/utils.py` reads)."""

from __future__ import annotations

import json

import pytest

from lmms_eval_tasks.records import RecordError
from lmms_eval_tasks.upstream.generic import (
    constant_lines,
    cross_check,
    gold_index,
    parse,
    stem,
    without_letters,
)

VIDEOMME_PROMPT = ("Select the best answer to the following multiple-choice question based on the video and the "
                   "subtitles. Respond with only the letter (A, B, C, or D) of the correct option.\n"
                   "Which food did the team that chose bananas also select from the following options?\n"
                   "A. Bread.\nB. Doughnut.\nC. Hamburg.\nD. Marshmallow.\n")


def test_parse_takes_the_last_run_of_lettered_lines():
    above, options = parse("Is it (A) or (B)?\nA. one\nB. two\nThink.\n(A) red\n(B) green\n(C) blue\nAnswer:")
    assert options == ["red", "green", "blue"]
    assert above == ["Is it (A) or (B)?", "A. one", "B. two", "Think."]


def test_parse_refuses_a_prompt_without_option_lines():
    with pytest.raises(RecordError, match="no lettered option lines"):
        parse("What happens? Options: red, green, blue")


def test_stem_is_the_question_field_and_keeps_words_an_instruction_also_uses():
    doc = {"question": "Which food did the team that chose bananas also select from the following options?",
           "options": ["A. Bread.", "B. Doughnut.", "C. Hamburg.", "D. Marshmallow."]}
    above, options = parse(VIDEOMME_PROMPT)
    assert stem(above, doc, options) == doc["question"]


def test_stem_refuses_a_prompt_that_carries_more_than_the_question():
    doc = {"question": "Who speaks first?", "subtitles": "MARY: hello there. JOHN: hi.",
           "options": ["Mary", "John"]}
    prompt = "Subtitles of the video: MARY: hello there. JOHN: hi.\nWho speaks first?\nA. Mary\nB. John\n"
    above, options = parse(prompt)
    with pytest.raises(RecordError, match="carries text beyond the question"):
        stem(above, doc, options)


def test_stem_without_a_field_drops_the_tasks_constant_lines():
    blocks = [["Watch the clip carefully.", "Question: what moves?"], ["Watch the clip carefully.", "Question: who?"],
              ["Watch the clip carefully.", "Question: where?"]]
    constant = constant_lines(blocks)
    assert constant == {"Watch the clip carefully."}
    assert stem(blocks[0], {"q": 3}, ["a", "b"], constant) == "what moves?"


@pytest.mark.parametrize("doc", [
    {"options": ["A. Bread.", "B. Doughnut."]},
    {"candidates": ["Bread.", "Doughnut.", "N/A"]},
    {"option0": "Bread.", "option1": "Doughnut.", "option2": "N/A"},
    {"a0": "Bread.", "a1": "Doughnut."},
    {"A": "Bread.", "B": "Doughnut."},
    {"choices": {"A": "Bread.", "B": "Doughnut."}},
    {"options": "['Bread.', 'Doughnut.']"},
    {"options": "A. Bread.\nB. Doughnut."},
    {"options": [{"label": "A", "text": "Bread."}, {"label": "B", "text": "Doughnut."}]},
    {"options": {"A": {"modality": "text", "input": "Bread."}, "B": {"modality": "text", "input": "Doughnut."}}},
    {"options": {"option_0": "Bread.", "option_1": "Doughnut."}},
])
def test_cross_check_finds_the_options_in_each_form_a_document_holds_them(doc):
    assert cross_check(["Bread.", "Doughnut."], doc)


@pytest.mark.parametrize("doc", [
    {"candidates": ["A.C. Milan", "Juventus", "Inter"]},
    {"a0": "A.C. Milan", "a1": "Juventus", "a2": "Inter"},
    {"options": ["A. A.C. Milan", "B. Juventus", "C. Inter"]},
    {"choices": {"A": "A.C. Milan", "B": "Juventus", "C": "Inter"}},
])
def test_cross_check_keeps_an_option_that_starts_with_its_own_letter(doc):
    assert cross_check(["A.C. Milan", "Juventus", "Inter"], doc)


@pytest.mark.parametrize(("values", "texts"), [
    (["A.C. Milan", "Juventus"], ["A.C. Milan", "Juventus"]),
    (["A. A.C. Milan", "B. Juventus"], ["A.C. Milan", "Juventus"]),
    (["Elvis", "B.B. King"], ["Elvis", "B.B. King"]),
    (["(A) red", "(B) green", "N/A"], ["red", "green", "N/A"]),
])
def test_without_letters_strips_letters_only_where_every_option_carries_its_own(values, texts):
    assert without_letters(values) == texts


def test_an_adapter_template_reads_an_option_that_starts_with_its_own_letter():
    """The spec-language path (mmworld's `options: '{options}'`) strips letters the same way."""
    from lmms_eval_tasks.upstream.adapters import adapter_for

    doc = {"question": "Which club's badge is shown?", "options": ["A.C. Milan", "Juventus", "Inter"],
           "correct_answer_label": "a"}
    assert adapter_for("mmworld").convert(None, doc) == (
        "Which club's badge is shown?", ["A.C. Milan", "Juventus", "Inter"], 0)


def test_cross_check_refuses_options_a_newline_cut():
    doc = {"candidates": ["Bread and\nbutter", "Doughnut."]}
    with pytest.raises(RecordError, match="not those of any field"):
        cross_check(["Bread and", "Doughnut."], doc)


@pytest.mark.parametrize(("value", "index"), [("C", 2), ("(c)", 2), ("C.", 2), (2, 2), ("Hamburg.", 2),
                                              ("C. Hamburg.", 2), (["C"], 2)])
def test_gold_index_of_each_form_a_target_takes(value, index):
    assert gold_index(value, ["Bread.", "Doughnut.", "Hamburg.", "Marshmallow."]) == index


@pytest.mark.parametrize(("value", "reason"), [(["A", "C"], "several correct answers"), ("E", "not among"),
                                               (7, "outside the options"), (None, "no letter")])
def test_gold_index_refuses_what_names_no_one_option(value, reason):
    with pytest.raises(RecordError, match=reason):
        gold_index(value, ["Bread.", "Doughnut.", "Hamburg.", "Marshmallow."])


VIDEOMME_DOCS = [
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
     "url": "u", "videoID": "fFjv93ACGo8", "question_id": "001-1", "task_type": "Counting Problem",
     "question": "Which decoration has the largest number?",
     "options": ["A. Apples.", "B. Candles.", "C. Berries.", "D. The same."], "answer": "C"},
    {"video_id": "002", "duration": "long", "domain": "Knowledge", "sub_category": "Law", "url": "u",
     "videoID": "y9Fne3oUwX4", "question_id": "002-1", "task_type": "Temporal Reasoning",
     "question": "In which order do they appear?\n(1) The money problem.\n(2) Intermission.",
     "options": ["A. (2)(1).", "B. (1)(2).", "C. Neither.", "D. Both."], "answer": "B"},
    {"video_id": "003", "duration": "medium", "domain": "Sports", "sub_category": "Football", "url": "u",
     "videoID": "abc", "question_id": "003-1", "task_type": "OCR Problems", "question": "What is the score?",
     "options": ["A. 1-0", "B. 2-0", "C. 2-1\nafter extra time", "D. 0-0"], "answer": "A"},
]


@pytest.mark.slow
def test_read_upstream_videomme_from_a_local_copy(tmp_path):
    from lmms_eval_tasks.upstream import read_upstream

    path = tmp_path / "videomme.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in VIDEOMME_DOCS), encoding="utf-8")
    twin = read_upstream("videomme", path)
    assert twin.adapter == "generic" and twin.benchmark == "videomme" and len(twin.yaml_sha256) == 64
    first, second = twin.questions
    assert (first.question, first.options, first.answer_index, first.video, first.category) == (
        "Which decoration has the largest number?", ("Apples.", "Candles.", "Berries.", "The same."), 2,
        "data/fFjv93ACGo8.mp4", "Counting Problem")
    assert second.question == VIDEOMME_DOCS[1]["question"] and second.answer_index == 1
    assert twin.documents == VIDEOMME_DOCS[:2]
    # the option with a newline renders over two lines: the cross-check catches the cut option
    [dropped] = twin.unusable
    assert dropped.question_id == "003-1" and "not those of any field" in dropped.reason
