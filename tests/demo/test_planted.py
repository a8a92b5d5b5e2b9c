"""The planted benchmark, its training streams, and the scoring of filters against its truth (fast: no model)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.frames import read_frames
from tests.helpers.by_hand import clustered_accuracy_interval
from visdep_metrics.demo.pipeline import HELD_OUT, LLM_STEPS, ROLE_OF, TEXT_LLMS, VLM_STEPS, VLMS
from visdep_metrics.demo.planted import (
    CANONICAL_REASONS,
    CATEGORIES,
    COLOURS,
    CUES,
    PlantedConfig,
    planted_clips,
    write_planted,
)
from visdep_metrics.demo.training import BATCH, training_stream
from visdep_metrics.demo.truth import drivers, evidence_contributions, filter_scores, threshold_sweep

# the phrases the splits share on purpose: they are the patterns (and the colours, the answers to the clip)
PATTERN_PHRASES = set(CANONICAL_REASONS) | set(CANONICAL_REASONS.values()) | set(CUES.values()) | set(COLOURS)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    write_planted(root, PlantedConfig(videos=24, seed=3))
    return root, pd.read_csv(root / "planted.csv")


def test_the_loader_reads_it_as_vru_accident_and_the_truth_names_its_questions(planted):
    root, truth = planted
    docs = [q.document() for q in load_benchmark("vru_accident", root)]
    assert sorted(d["question_id"] for d in docs) == sorted(truth["question_id"])
    assert len(docs) == 4 * 24 and {d["category"] for d in docs} == set(CATEGORIES)
    assert all(len(d["options"]) == 4 for d in docs)
    by_id = {d["question_id"]: d for d in docs}
    for row in truth.itertuples():
        doc = by_id[row.question_id]
        assert doc["video"] == row.video
        if row.planted_type in ("video_only", "both"):
            # the clip shows the answer: the square's pixels are the answer's colour
            frames, _ = read_frames(root / row.video, 8)
            colour = np.array(COLOURS[doc["options"][doc["answer_index"]]])
            assert (np.abs(frames.astype(int) - colour).sum(axis=-1) < 60).mean() > 0.15, row.question_id
    expected = {"vehicle colour": {"video_only", "both"}, "driver name": {"neither"},
                "accident reason": {"text_only", "neither"}, "prevention method": {"text_only", "neither"}}
    for category, types in truth.groupby("category")["planted_type"]:
        assert set(types) <= expected[category]
    assert (truth["text_solvable"] == truth["planted_type"].isin(["text_only", "both"])).all()


def test_the_dials_are_exact_shares_of_the_clips(tmp_path):
    write_planted(tmp_path, PlantedConfig(videos=20, shortcut_share=0.7, strength=0.8, both_share=0.3))
    truth = pd.read_csv(tmp_path / "planted.csv")
    by = truth.groupby("category")
    assert (by.get_group("vehicle colour")["planted_type"] == "both").sum() == 6  # 0.3 of 20
    for category in ("accident reason", "prevention method"):
        types = by.get_group(category)["planted_type"].value_counts()
        # 14 of 20 carry a pattern, of which round(0.8 * 14) = 11 point at the right answer
        assert (types["text_only"], types["misleading"], types["neither"]) == (11, 3, 6), category
    reasons = by.get_group("accident reason")["pattern"].value_counts()
    assert reasons["recurring phrase"] == reasons["negated copy"] == 7


def test_the_dials_change_what_is_planted(tmp_path):
    write_planted(tmp_path / "a", PlantedConfig(videos=20, shortcut_share=0.0, both_share=0.0))
    assert set(pd.read_csv(tmp_path / "a" / "planted.csv")["planted_type"]) == {"video_only", "neither"}
    write_planted(tmp_path / "b", PlantedConfig(videos=20, shortcut_share=1.0, strength=0.0))
    weak = pd.read_csv(tmp_path / "b" / "planted.csv")
    patterned = weak[weak["category"].isin(["accident reason", "prevention method"])]
    assert set(patterned["planted_type"]) == {"misleading"}


def _item(question: str, options, answer: int) -> tuple:
    """What a model could memorise of a question: its text, its options in any order, its answer."""
    return question, frozenset(options), options[answer]


def _consumed(config: PlantedConfig, role: str) -> list:
    """At least every example a model of `role` learns from: the trainer fills `steps` batches of BATCH from two
    groups (with and without the clip), so it draws fewer than (steps + 2) * BATCH examples."""
    steps = LLM_STEPS if role == "text" else VLM_STEPS
    return list(itertools.islice(training_stream(config, role), (steps + 2) * BATCH))


@pytest.fixture(scope="module")
def streams() -> dict[str, list]:
    config = PlantedConfig()  # the demo's: its training and its test split
    return {role: _consumed(config, role) for role in ("text", "vision", "held_out")}


def test_no_text_solvable_misleading_or_open_test_item_occurs_in_any_training_stream(tmp_path, streams):
    write_planted(tmp_path, PlantedConfig())
    truth = pd.read_csv(tmp_path / "planted.csv").set_index("question_id")
    test = [(d, truth.loc[d["question_id"], "planted_type"])
            for d in (q.document() for q in load_benchmark("vru_accident", tmp_path))]
    trained = {_item(e.question.question, e.question.options, e.question.answer)
               for examples in streams.values() for e in examples}
    assert len(test) == 240 and all(len(examples) > 4000 for examples in streams.values())
    shared = {kind: sum(_item(d["question"], d["options"], d["answer_index"]) in trained for d, t in test if t == kind)
              for kind in ("text_only", "both", "misleading", "neither", "video_only")}
    assert shared["text_only"] == shared["both"] == shared["misleading"] == shared["neither"] == 0, shared
    # the comparison finds what does repeat: the plain colour question, whose answer is the clip's
    assert shared["video_only"] == sum(t == "video_only" for _, t in test) > 0
    # and none of the test split's wordings, distractors or names was ever shown in training
    trained_questions = {e.question.question for examples in streams.values() for e in examples}
    trained_options = {o for examples in streams.values() for e in examples for o in e.question.options}
    for d, kind in test:
        if kind != "video_only":
            assert d["question"] not in trained_questions, d
        assert not (set(d["options"]) - PATTERN_PHRASES) & trained_options, d


def test_the_same_check_finds_the_overlap_of_a_test_split_drawn_from_the_training_pools(streams):
    # what the demo did before its splits had pools of their own: the same generator with another seed
    trained = {_item(e.question.question, e.question.options, e.question.answer) for e in streams["text"]}
    reused = [q for _, questions in planted_clips(PlantedConfig(), "train", (9, 1)) for q in questions]
    for kind in ("text_only", "both", "neither"):
        assert any(_item(q.question, q.options, q.answer) in trained for q in reused if q.planted_type == kind), kind


def test_the_held_out_vlm_learns_from_a_stream_of_its_own(streams):
    assert [ROLE_OF[k] for k in HELD_OUT] == ["held_out"] and {ROLE_OF[k] for k in VLMS} == {"vision"}
    assert {ROLE_OF[k] for k in TEXT_LLMS} == {"text"}
    same = sum(h.question == v.question and (h.frames is None) == (v.frames is None)
               and (h.frames is None or np.array_equal(h.frames, v.frames))
               for h, v in zip(streams["held_out"], streams["vision"], strict=True))
    assert same < len(streams["vision"]) // 100, same
    # both see the clip in about three of four examples and the colour questions about half the time
    for role in ("held_out", "vision"):
        examples = streams[role]
        assert 0.7 < np.mean([e.frames is not None for e in examples]) < 0.8
        assert 0.45 < np.mean([e.question.category == "vehicle colour" for e in examples]) < 0.55
    assert all(e.frames is None for e in streams["text"])


def test_splits_and_streams_are_checked():
    with pytest.raises(ValueError, match="split"):
        next(planted_clips(PlantedConfig(), "dev"))
    with pytest.raises(ValueError, match="positive"):
        next(planted_clips(PlantedConfig(), "train"))
    with pytest.raises(ValueError, match="role"):
        next(training_stream(PlantedConfig(), "panel"))


def test_precision_recall_and_video_only_kept_by_hand():
    # 6 questions on 3 videos: TS = {0, 1, 2}; video-only = {3, 4}; a filter removing {0, 1, 3}
    truth = pd.DataFrame({"question_id": list("abcdef"), "video": ["v1", "v1", "v2", "v2", "v3", "v3"],
                          "planted_type": ["text_only", "both", "text_only", "video_only", "video_only", "neither"]})
    removed = np.array([True, True, False, True, False, False])
    [row] = filter_scores({"f": removed}, truth).to_dict("records")
    assert row["n_removed"] == 3
    assert row["precision"] == pytest.approx(2 / 3) and row["recall"] == pytest.approx(2 / 3)
    assert row["video_only_kept"] == pytest.approx(1 / 2)
    # three questions are too few independent answers for an interval: withheld, not made up
    assert np.isnan([row["precision_lo"], row["precision_hi"], row["recall_lo"]]).all()
    sweep = threshold_sweep(np.array([0.9, 0.5, 0.05, 0.2, -0.3, 0.0]), truth, taus=[0.1, 0.6])
    assert sweep["n_removed"].tolist() == [3, 1]  # > 0.1: a, b, d; > 0.6: a
    assert sweep["precision"].tolist() == pytest.approx([2 / 3, 1.0])
    assert sweep["recall"].tolist() == pytest.approx([2 / 3, 1 / 3])
    assert sweep["video_only_kept"].tolist() == pytest.approx([1 / 2, 1.0])


def test_evidence_contributions_and_their_drivers_by_hand():
    # three text models, four questions; the wrongly removed: 0, 1, 2; unanswerable: 2, 3
    correct = np.array([[1, 1, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]], dtype=float)
    entropy = np.array([[0.2, 0.4, 0.0, 0.0], [0.0, 0.0, 0.5, 0.9], [0.0, 0.0, 0.0, 0.0]])
    among, unanswerable = np.array([True, True, True, False]), np.array([False, False, True, True])
    table = evidence_contributions(correct, entropy, ["a", "b", "c"], among, unanswerable).set_index("model")
    # a: (0.8 + 0.6 + 1.0) / 3 / 3 = 0.2667; b: 0.5 / 3 / 3 = 0.0556; c: 0
    assert table["contribution"].tolist() == pytest.approx([2.4 / 9, 0.5 / 9, 0.0])
    assert table["share"].tolist() == pytest.approx([2.4 / 2.9, 0.5 / 2.9, 0.0])
    assert table["right"].tolist() == [3, 1, 0] and set(table["of"]) == {3}
    assert table.loc["a", "confidence"] == pytest.approx(0.8) and table.loc["b", "confidence"] == pytest.approx(0.5)
    assert np.isnan(table.loc["c", "confidence"])
    assert table["accuracy_unanswerable"].tolist() == pytest.approx([0.5, 1.0, 0.0])
    assert table["confidence_unanswerable"].tolist() == pytest.approx([1.0, 0.3, 1.0])
    # a alone makes up more than half: the one driver
    assert drivers(table.reset_index())["model"].tolist() == ["a"]
    even = pd.DataFrame({"model": ["x", "y", "z"], "contribution": [0.3, 0.3, 0.2]})
    assert drivers(even)["model"].tolist() == ["x", "y"]
    assert drivers(even.assign(contribution=0.0)).empty


def test_a_filter_that_removes_every_text_solvable_question_gets_no_zero_width_recall_interval():
    # 40 videos of 3 questions; the filter removes every text-solvable one and one video-only one in four: recall is
    # 1 on every draw, and its interval (the audit's, Clopper-Pearson's on the answers the videos leave) has a width
    rng = np.random.default_rng(3)
    types = rng.choice(["text_only", "both", "video_only", "neither"], 120)
    truth = pd.DataFrame({"question_id": [f"q{i}" for i in range(120)], "video": np.repeat(np.arange(40), 3),
                          "planted_type": types})
    text_solvable = np.isin(types, ["text_only", "both"])
    removed = text_solvable | ((types == "video_only") & (np.arange(120) % 4 == 0))
    [row] = filter_scores({"f": removed}, truth).to_dict("records")
    assert row["recall"] == 1.0 and row["recall_hi"] == 1.0 and row["recall_lo"] < 0.98
    videos = truth["video"].to_numpy()
    for measure, values, member in (("recall", removed, text_solvable), ("precision", text_solvable, removed),
                                    ("video_only_kept", ~removed, types == "video_only")):
        expected = clustered_accuracy_interval(values[member].astype(float), videos[member])
        assert (row[f"{measure}_lo"], row[f"{measure}_hi"]) == pytest.approx(expected), measure
