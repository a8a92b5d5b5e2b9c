"""Each pattern of the generic path and each adapter, on a 2-3-record fixture shaped from the fields the task's
utils.py reads (tests/twin/fixtures/<name>.jsonl), read through `read_upstream` with the real upstream task; and the
negative cases: LongVideoBench in its `candidates` form, MLVU's release form, leaking prompts and media options
refused. The expected questions are written out by hand from the fixtures."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from lmms_eval_tasks.upstream import TwinRefused, read_upstream

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.slow  # lmms-eval's task index and upstream utils.py (about 15 s the first time)

# task, fixture, adapter, (stem, options, gold) of the first question, questions, unusable, left out by a row filter
CASES = [
    ("videomme", "videomme", "generic",
     ("Which decoration has the largest number?", ("Apples.", "Candles.", "Berries.", "The same."), 2), 2, 1, 0),
    ("mvbench_action_antonym", "mvbench_action_antonym", "generic",
     ("What is the action performed by the person in the video?",
      ("Pushing something from right to left", "Pushing something from left to right", "Not sure"), 1), 2, 0, 0),
    ("nextqa_mc_test", "nextqa_mc_test", "generic",
     ("why did the boy pick up one present", ("to share with the girl", "approach the camera", "unwrap it",
                                               "playing with toy", "gesture something"), 2), 2, 0, 0),
    ("longvideobench_val_v", "longvideobench_val_v", "generic",
     ("What colour is the jacket of the man at the desk?", ("Red", "Blue", "Green"), 1), 2, 1, 0),
    ("cover", "cover", "generic", ("Why does the dog jump?", ("to catch a ball", "to sleep", "to eat"), 0), 2, 0, 0),
    ("videomme_v2", "videomme_v2", "generic",
     ("How many cars pass the gate?", ("1", "2", "3", "4", "5", "6", "7", "8"), 6), 2, 0, 0),
    ("egoschema_subset_mcppl", "egoschema_subset_mcppl", "generic",
     ("What is the overarching theme of C's actions?", ("cooking a meal", "cleaning the kitchen", "repairing a sink",
                                                        "painting a wall", "reading"), 1), 2, 0, 0),
    ("mlvu_dev", "mlvu_dev", "generic",
     ("What color is the main male character in the video?", ("Yellow", "Red", "Green", "Blue"), 0), 2, 0, 0),
    ("mmvu_val", "mmvu_val", "mc_rows",
     ("Which technique is shown?", ("Fresco", "Etching", "Mosaic", "Collage", "Batik"), 1), 2, 0, 1),
    ("vsibench", "vsibench", "rows_with_options",
     ("Which object is closest to the sofa?", ("table", "lamp", "door", "tv"), 0), 2, 0, 1),
    ("tempcompass_multi_choice", "tempcompass_multi_choice", "options_in_question",
     ("Which direction is the car moving?", ("left", "right", "towards the camera"), 1), 2, 0, 0),
    ("timescope", "timescope", "options_in_input",
     ("What is written on the sign at the end?", ("OPEN", "CLOSED", "EXIT", "SALE"), 2), 2, 0, 0),
    ("tomato", "tomato", "tomato",
     ("Which direction does the hand rotate?", ("clockwise", "counter-clockwise", "no rotation"), 1), 2, 0, 0),
    ("mmworld", "mmworld", "mmworld",
     ("What makes the liquid change colour?", ("a reaction with oxygen", "heat", "light"), 0), 2, 0, 0),
    ("ovo_backward", "ovo_backward", "ovobench",
     ("What did I pick up before opening the fridge?", ("a cup", "a knife", "an apple", "a towel"), 2), 2, 0, 0),
    ("worldsense", "worldsense", "worldsense",
     ("Which instrument plays first?", ("piano", "violin", "drums", "flute"), 1), 2, 0, 0),
    ("mmou_test_mini", "mmou_test_mini", "generic",
     ("What sound comes after the door closes?", ("a bell", "a dog", "footsteps"), 2), 2, 0, 0),
    ("camerabench_vqa", "camerabench_vqa", "yes_no", ("Does the camera pan to the left?", ("Yes", "No"), 0), 2, 0, 0),
    ("intphys2", "intphys2", "possible_impossible",
     ("Is the event in this video physically possible or impossible? Condition: object permanence. Camera: static. "
      "Difficulty: easy.", ("Possible", "Impossible"), 0), 2, 0, 0),
    ("wm_abench_motiondirection_tdw_subset", "wm_abench_motiondirection_tdw_subset", "text_choice_rows",
     ("Which direction does the ball move?", ("left", "right", "up"), 1), 2, 0, 1),
    ("mmsi_video", "mmsi_video", "options_in_user_prompt",
     ("Where does the person walk after the sofa?", ("to the door", "to the window", "to the kitchen", "nowhere"), 2),
     2, 0, 0),
    ("fgqa_test", "fgqa_test", "numbered_options",
     ("How does the person hold the knife?", ("with the left hand", "with the right hand"), 1), 2, 0, 0),
    ("spatialtreebench", "spatialtreebench", "spatialtree_choice_rows",
     ("Which object is larger?", ("the chair", "the table"), 1), 2, 0, 1),
    # real records: the TempCompass repository's questions/caption_matching.json (video 1034419625), as the rows of
    # the hub dataset lmms-lab/TempCompass (video_id, dim, question, answer) hold them
    ("tempcompass_caption_matching", "tempcompass_caption_matching", "caption_matching",
     ("Which description is a more suitable match for the video?",
      ("The man is dribbling a basketball.", "A man is dunking a basketball."), 1), 3, 0, 0),
    # LVBench's fields (its video_info.meta.jsonl: uid, type = the video's genre, question_type = a list of question
    # types, time_reference; lmms-eval's lvbench/utils.py reads video_path, question, options, answer)
    ("lvbench", "lvbench", "generic",
     ("What year appears in the opening caption of the video?", ("1636", "1366", "1363", "1633"), 0), 2, 0, 0),
    # Video-MMMU's fields as lmms-eval's videommmu/utils.py reads them (id '<split>_<Subject>_<n>')
    ("video_mmmu_perception", "video_mmmu_perception", "mc_rows",
     ("Which pigment does the lecturer mix first?", ("Ultramarine", "Ochre", "Vermilion", "Lead white"), 1), 2, 0, 0),
]


@pytest.mark.parametrize(("task", "fixture", "adapter", "first", "n_questions", "n_unusable", "n_left_out"), CASES,
                         ids=[c[0] for c in CASES])
def test_fixture_reads_as_written(task, fixture, adapter, first, n_questions, n_unusable, n_left_out):
    twin = read_upstream(task, FIXTURES / f"{fixture}.jsonl")
    assert twin.adapter == adapter
    assert len(twin.questions) == n_questions, [u.line() for u in twin.unusable]
    assert len(twin.unusable) == n_unusable, [u.line() for u in twin.unusable]
    assert sum(len(ids) for ids in twin.notes.values()) == n_left_out
    q = twin.questions[0]
    assert (q.question, q.options, q.answer_index) == first
    assert len(twin.documents) == n_questions and all(isinstance(d, dict) for d in twin.documents)


def test_tempcompass_caption_matching_reads_each_label_kind():
    """Its options are labelled lines inside the question (`Option 1:`, `Sentence A:`, `Caption A:`), the answer one
    of those lines: the old adapter looked for `A. x` lines and read none of the 1503 questions."""
    twin = read_upstream("tempcompass_caption_matching", FIXTURES / "tempcompass_caption_matching.jsonl")
    assert not twin.unusable
    assert [(q.question, q.options, q.answer_index, q.category) for q in twin.questions] == [
        ("Which description is a more suitable match for the video?",
         ("The man is dribbling a basketball.", "A man is dunking a basketball."), 1, "action"),
        ("Which sentence better captures the essence of the video?",
         ("A man is dunking a basketball.", "A video showing a person passing a basketball."), 0, "action"),
        ("Which caption matches the video better?",
         ("The man is moving from right to left.", "The man is moving from left to right."), 0, "direction"),
    ]


def test_doc_to_choice_options_are_cross_checked_against_the_document():
    """worldqa_mc_ppl's doc_to_choice keeps the text between the first two dots ('A. $3.50' -> '$3', 'A. Dr. Smith's
    formula' -> 'Dr'): those records are unusable with the reason, the one it reads whole is read."""
    twin = read_upstream("worldqa_mc_ppl", FIXTURES / "worldqa_mc_ppl.jsonl")
    [read] = twin.questions
    assert (read.question, read.options, read.answer_index) == (
        "What colour is the cup the woman picks up?", ("Red", "Blue", "Green", "White"), 1)
    assert [u.question_id for u in twin.unusable] == ["q_0002", "q_0003"]
    assert {u.reason for u in twin.unusable} == {
        "the options the upstream doc_to_choice gives are not those of any field of the document"}


def test_an_option_that_starts_with_its_own_letter_is_read_whole():
    """'A.C. Milan' at A and 'B.B. King' at B are options, not 'C. Milan' and 'B. King' with their letters."""
    twin = read_upstream("nextqa_mc_test", FIXTURES / "nextqa_mc_own_letter.jsonl")
    assert not twin.unusable
    assert [(q.options, q.answer_index) for q in twin.questions] == [
        (("A.C. Milan", "Juventus", "Inter", "Napoli", "Roma"), 0),
        (("Elvis", "B.B. King", "Adele", "Madonna", "Queen"), 1)]


# The field each fixture's task takes its category from (docs/twins.md, "Categories"); None: no field holds the
# question's type. Written out from the fixtures.
CATEGORY_FIELD = {
    "videomme": "task_type", "nextqa_mc_test": "type", "lvbench": "question_type", "mmworld": None,
    "tempcompass_caption_matching": "dim", "tempcompass_multi_choice": "dim", "mmvu_val": None,
    "mvbench_action_antonym": None,
}


def test_categories_are_the_question_types():
    """LVBench's category is its `question_type` list (its `type` is the video's genre); Video-MMMU's is the subject
    its own scoring groups by (its `question_type` only says 'multiple-choice', the same for every kept row)."""
    lvbench = read_upstream("lvbench", FIXTURES / "lvbench.jsonl")
    assert [q.category for q in lvbench.questions] == ["key information retrieval", "event understanding, reasoning"]
    mmmu = read_upstream("video_mmmu_perception", FIXTURES / "video_mmmu_perception.jsonl")
    assert [q.category for q in mmmu.questions] == ["Art_Theory", "Chemistry"]
    mmvu = read_upstream("mmvu_val", FIXTURES / "mmvu_val.jsonl")
    assert [q.category for q in mmvu.questions] == [None, None]  # 'multiple-choice' is no question type


@pytest.mark.parametrize(("task", "field"), list(CATEGORY_FIELD.items()))
def test_each_fixture_task_takes_its_category_from_the_field_docs_name(task, field):
    from lmms_eval_tasks.upstream.convert import category_field

    twin = read_upstream(task, FIXTURES / f"{task}.jsonl")
    for q, doc in zip(twin.questions, twin.documents, strict=True):
        found = category_field(doc)
        assert (found and found[0]) == (field or None) and q.category == (found and found[1])
    docs = (Path(__file__).resolve().parents[2] / "docs" / "twins.md").read_text(encoding="utf-8")
    assert f"| `{task}` | {f'`{field}`' if field else 'none'} |" in docs


def test_generic_path_cuts_no_option_silently():
    """An option holding a newline renders over two lines: the cross-check refuses the record instead of keeping
    a truncated option list (3 LongVideoBench option lists in one reading)."""
    twin = read_upstream("longvideobench_val_v", FIXTURES / "longvideobench_val_v.jsonl")
    [cut] = twin.unusable
    assert cut.question_id == "a2_0" and "not those of any field" in cut.reason


def test_videomme_video_is_where_the_task_looks_relative_to_its_folder():
    twin = read_upstream("videomme", FIXTURES / "videomme.jsonl")
    assert [q.video for q in twin.questions] == ["data/fFjv93ACGo8.mp4", "data/y9Fne3oUwX4.mp4"]
    assert [q.category for q in twin.questions] == ["Counting Problem", "Temporal Reasoning"]


def _vitatecs_order(caption: str, counterfactual: str) -> tuple[list[str], int]:
    """VITATECS's own rule (its utils.py): a coin flip seeded by the sum of the texts' code points mod 100 puts the
    caption first when it lands above 0.5; options end with '.' and are capitalised."""
    random.seed(sum(ord(c) for c in caption + counterfactual) % 100)
    first = random.random() > 0.5
    shown = [t if t.endswith(".") else t + "." for t in (caption, counterfactual)]
    shown = [t.capitalize() for t in shown]
    return (shown, 0) if first else (shown[::-1], 1)


def test_vitatecs_reproduces_the_seeded_option_order():
    twin = read_upstream("vitatecs_direction", FIXTURES / "vitatecs_direction.jsonl")
    assert twin.adapter == "vitatecs" and not twin.unusable
    for q, doc in zip(twin.questions, twin.documents, strict=True):
        options, gold = _vitatecs_order(doc["caption"], doc["counterfactual"])
        assert (list(q.options), q.answer_index) == (options, gold)


def test_a_hub_download_at_import_is_a_clear_refusal_offline():
    """xmod_bench's utils.py downloads from the hub when it is imported: offline and without that cache, reading its
    text-option task is refused with what the import did, in one line (its option records, {modality, input}, are
    cross-checked in test_upstream_generic.py)."""
    with pytest.raises(TwinRefused, match=r"its utils.py fails at import \(LocalEntryNotFoundError\)"):
        read_upstream("xmod_bench_video_text", FIXTURES / "xmod_bench_video_text.jsonl")


def test_longvideobench_candidates_form_is_unusable_not_guessed():
    twin = read_upstream("longvideobench_val_v", FIXTURES / "longvideobench_candidates_form.jsonl")
    assert not twin.questions
    assert {u.reason for u in twin.unusable} == {"the upstream doc_to_text fails on the record"}


def test_mlvu_release_form_is_unusable_not_guessed():
    twin = read_upstream("mlvu_dev", FIXTURES / "mlvu_release_form.jsonl")
    assert not twin.questions
    assert {u.reason for u in twin.unusable} == {"no lettered option lines in the prompt"}


@pytest.mark.parametrize(("task", "reason"), [
    ("cinepile", "carries the video's content (the scene's subtitles)"),
    ("vrbench_mcq", "carries the video's content (a summary of the video)"),
    ("av_odyssey", "options are media"),
    ("xmod_bench_video_audio", "options are media"),
    ("videomme_w_subtitle", "subtitle variant"),
    ("videomme_no_visual", "blind variant"),
    ("mlvu_test", "no public gold"),
])
def test_refused_tasks_name_their_reason(task, reason):
    with pytest.raises(TwinRefused, match=re.escape(reason)) as refused:
        read_upstream(task, FIXTURES / "videomme.jsonl")
    assert refused.value.task == task and str(refused.value).startswith(f"{task}: refused: ")
