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
    DIRECTIONS,
    FRAMES,
    PlantedConfig,
    clip,
    planted_clips,
    write_planted,
)
from visdep_metrics.demo.training import BATCH, CLIP_FIRST_EPOCHS, training_stream
from visdep_metrics.demo.truth import (
    decided_by,
    drivers,
    evidence_contributions,
    filter_scores,
    ladder_against_truth,
    subset_scores,
    threshold_sweep,
)

# the phrases the splits share on purpose: they are the patterns (and the colours and directions, the answers to the
# clip)
PATTERN_PHRASES = (set(CANONICAL_REASONS) | set(CANONICAL_REASONS.values()) | set(CUES.values()) | set(COLOURS)
                   | set(DIRECTIONS))
CLIP_ANSWERS = ("video_only", "order")  # the plain questions about the clip, which repeat across the splits


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    write_planted(root, PlantedConfig(videos=24, seed=3))
    return root, pd.read_csv(root / "planted.csv")


def test_the_loader_reads_it_as_vru_accident_and_the_truth_names_its_questions(planted):
    root, truth = planted
    docs = [q.document() for q in load_benchmark("vru_accident", root)]
    assert sorted(d["question_id"] for d in docs) == sorted(truth["question_id"])
    assert len(docs) == 5 * 24 and {d["category"] for d in docs} == set(CATEGORIES)
    assert all(len(d["options"]) == 4 for d in docs)
    by_id = {d["question_id"]: d for d in docs}
    for row in truth.itertuples():
        doc = by_id[row.question_id]
        assert doc["video"] == row.video
        if row.planted_type in ("video_only", "both"):
            # the clip shows the answer: the square's pixels are the answer's colour
            frames, _ = read_frames(root / row.video, FRAMES)
            colour = np.array(COLOURS[doc["options"][doc["answer_index"]]])
            assert (np.abs(frames.astype(int) - colour).sum(axis=-1) < 60).mean() > 0.15, row.question_id
        if row.planted_type == "order":
            # the clip, as the adapters decode it, moves the way the answer says
            frames, _ = read_frames(root / row.video, FRAMES)
            assert _direction(frames) == doc["options"][doc["answer_index"]], row.question_id
    expected = {"vehicle colour": {"video_only", "both"}, "vehicle direction": {"order"}, "driver name": {"neither"},
                "accident reason": {"text_only", "neither"}, "prevention method": {"text_only", "neither"}}
    for category, types in truth.groupby("category")["planted_type"]:
        assert set(types) <= expected[category]
    assert (truth["text_solvable"] == truth["planted_type"].isin(["text_only", "both"])).all()
    assert (truth["needs_order"] == (truth["planted_type"] == "order")).all()
    assert (truth.loc[truth["needs_order"], "video_decides"]).all()
    # every direction occurs, drawn per clip
    answers = [by_id[q]["options"][by_id[q]["answer_index"]] for q in truth.loc[truth["needs_order"], "question_id"]]
    assert set(answers) == set(DIRECTIONS)


def _direction(frames: np.ndarray) -> str:
    """Which way the bright square moves: its centre of mass in the first frame against the last."""
    bright = frames.astype(int).max(axis=-1) > 100
    first, last = (np.argwhere(bright[t]).mean(axis=0) for t in (0, -1))
    dy, dx = last - first
    if abs(dx) > abs(dy):
        return DIRECTIONS[0] if dx > 0 else DIRECTIONS[1]
    return DIRECTIONS[2] if dy > 0 else DIRECTIONS[3]


def test_only_the_frames_in_order_tell_the_direction():
    """The middle frame is the same picture for all four directions; the frames as a set, as `max_frames` samples
    them, show the axis and never the direction; in order they show it."""
    from model_adapters.frames import frame_indices, sample_indices

    clips = {d: clip("blue", d, np.random.default_rng(5)) for d in DIRECTIONS}
    [middle] = frame_indices(FRAMES, 4, "middle")
    assert all(np.array_equal(clips[d][middle], clips[DIRECTIONS[0]][middle]) for d in DIRECTIONS)
    for max_frames in (2, 3, 4, FRAMES):
        sampled = sample_indices(FRAMES, max_frames)

        def as_set(d, sampled=sampled):
            return sorted(frame.tobytes() for frame in clips[d][sampled])

        assert as_set(DIRECTIONS[0]) == as_set(DIRECTIONS[1]) and as_set(DIRECTIONS[2]) == as_set(DIRECTIONS[3])
        assert as_set(DIRECTIONS[0]) != as_set(DIRECTIONS[2])
    assert [_direction(clips[d]) for d in DIRECTIONS] == list(DIRECTIONS)
    with pytest.raises(ValueError, match="direction"):
        clip("blue", "sideways", np.random.default_rng(5))


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
    assert set(pd.read_csv(tmp_path / "a" / "planted.csv")["planted_type"]) == {"video_only", "order", "neither"}
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
    assert len(test) == 300 and all(len(examples) > 4000 for examples in streams.values())
    shared = {kind: sum(_item(d["question"], d["options"], d["answer_index"]) in trained for d, t in test if t == kind)
              for kind in ("text_only", "both", "misleading", "neither", *CLIP_ANSWERS)}
    assert shared["text_only"] == shared["both"] == shared["misleading"] == shared["neither"] == 0, shared
    # the comparison finds what does repeat: the plain colour and direction questions, whose answer is the clip's
    for kind in CLIP_ANSWERS:
        assert shared[kind] == sum(t == kind for _, t in test) > 0, kind
    # and none of the test split's wordings, distractors or names was ever shown in training
    trained_questions = {e.question.question for examples in streams.values() for e in examples}
    trained_options = {o for examples in streams.values() for e in examples for o in e.question.options}
    for d, kind in test:
        if kind not in CLIP_ANSWERS:
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
    # both see the clip in about three of four examples, in order; first only the questions about the clip, then
    # those in two of three examples (colour and direction a third each)
    first = 2 * 60 * CLIP_FIRST_EPOCHS  # the first epochs' examples: two questions about each of 60 clips
    for role in ("held_out", "vision"):
        examples = streams[role]
        assert 0.7 < np.mean([e.frames is not None for e in examples]) < 0.8
        assert {e.question.category for e in examples[:first]} == {"vehicle colour", "vehicle direction"}
        later = examples[first:]
        for category in ("vehicle colour", "vehicle direction"):
            assert 0.28 < np.mean([e.question.category == category for e in later]) < 0.38, category
        # the frames the VLMs learn from are in order: the direction question's answer is what the clip shows
        seen = [e for e in examples[:400] if e.frames is not None and e.question.category == "vehicle direction"]
        assert len(seen) > 50
        assert all(_direction(e.frames) == e.question.options[e.question.answer] for e in seen)
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


def test_the_temporal_subset_is_scored_against_the_order_questions_by_hand():
    # 6 questions on 3 videos: the order questions b, d; a subset choosing b, c
    truth = pd.DataFrame({"question_id": list("abcdef"), "video": ["v1", "v1", "v2", "v2", "v3", "v3"],
                          "planted_type": ["video_only", "order", "neither", "order", "text_only", "both"]})
    [row] = subset_scores({"t": np.array([False, True, True, False, False, False])}, truth).to_dict("records")
    assert (row["n_chosen"], row["n_target"]) == (2, 2)
    assert row["precision"] == pytest.approx(0.5) and row["recall"] == pytest.approx(0.5)
    assert row["chosen_by_type"] in ("order 1; neither 1", "neither 1; order 1")
    assert np.isnan([row["precision_lo"], row["recall_hi"]]).all()  # too few answers: withheld
    [empty] = subset_scores({"none": np.zeros(6, dtype=bool)}, truth).to_dict("records")
    assert empty["n_chosen"] == 0 and np.isnan(empty["precision"]) and empty["recall"] == 0.0
    # with enough videos, the intervals are the audit's (as for the filters)
    rng = np.random.default_rng(4)
    types = rng.choice(["order", "video_only", "neither"], 120)
    many = pd.DataFrame({"question_id": [f"q{i}" for i in range(120)], "video": np.repeat(np.arange(40), 3),
                         "planted_type": types})
    chosen = (types == "order") & (np.arange(120) % 5 != 0) | ((types == "neither") & (np.arange(120) % 7 == 0))
    [row] = subset_scores({"t": chosen}, many).to_dict("records")
    order, videos = types == "order", many["video"].to_numpy()
    for measure, values, member in (("precision", order, chosen), ("recall", chosen, order)):
        assert row[measure] == pytest.approx(values[member].mean())
        expected = clustered_accuracy_interval(values[member].astype(float), videos[member])
        assert (row[f"{measure}_lo"], row[f"{measure}_hi"]) == pytest.approx(expected), measure


def _ladder_row(model, category, acc_video, acc_single, acc_shuffled, fg_ci, og_ci, acc_video_lo):
    return {"benchmark": "vru_accident", "model": model, "subset": "full", "category": category, "n": 20,
            "acc_blind": 25.0, "acc_single": acc_single, "acc_shuffled": acc_shuffled, "acc_video": acc_video,
            "acc_video_lo": acc_video_lo, "frame_gain": acc_video - acc_single, "frame_gain_lo": fg_ci[0],
            "frame_gain_hi": fg_ci[1], "order_gain": acc_video - acc_shuffled, "order_gain_lo": og_ci[0],
            "order_gain_hi": og_ci[1]}


def test_each_gain_is_set_beside_what_the_planted_kinds_imply():
    planted = pd.DataFrame({"category": ["vehicle direction"] * 2 + ["vehicle colour"] * 2 + ["driver name"],
                            "planted_type": ["order", "order", "video_only", "both", "neither"],
                            "video": ["v1", "v2", "v1", "v2", "v1"]})
    assert decided_by(planted) == {"vehicle direction": "the order", "vehicle colour": "one frame",
                                   "driver name": "not the clip"}
    ladder = pd.DataFrame([
        # reads the order: Acc_video 90, its lower bound 75 above 50 (what the axis gives); FG and OG above 0
        _ladder_row("/ckpt/a", "vehicle direction", 90.0, 25.0, 45.0, (50.0, 80.0), (30.0, 60.0), 75.0),
        # does not: Acc_video 30 [10, ...]; FG 5 in [-5, 15] and OG 0 in [-10, 10]
        _ladder_row("/ckpt/b", "vehicle direction", 30.0, 25.0, 30.0, (-5.0, 15.0), (-10.0, 10.0), 10.0),
        # reads it (lower bound 60) but its FG's interval reaches 0: disagrees
        _ladder_row("/ckpt/c", "vehicle direction", 70.0, 40.0, 40.0, (-2.0, 60.0), (10.0, 50.0), 60.0),
        # the colour: one frame decides, FG 0 implied; this one's interval misses 0
        _ladder_row("/ckpt/a", "vehicle colour", 100.0, 80.0, 100.0, (5.0, 35.0), (0.0, 0.0), 90.0),
        _ladder_row("/ckpt/a", "driver name", 30.0, 30.0, 30.0, (-3.0, 3.0), (-3.0, 3.0), 10.0),
        _ladder_row("/ckpt/a", "all", 60.0, 40.0, 50.0, (0.0, 40.0), (0.0, 20.0), 50.0)])
    # a gain without an interval (every paired difference the same): it agrees where it equals the implied 0
    constant = _ladder_row("/ckpt/d", "vehicle direction", 20.0, 20.0, 20.0, (np.nan, np.nan), (np.nan, np.nan), 8.0)
    table = ladder_against_truth(pd.concat([ladder, pd.DataFrame([constant])]), planted, np.full(5, 4),
                                 {"/ckpt/a": "A, V panel"}).set_index(["model", "category"])
    assert "all" not in table.index.get_level_values("category")
    reads = table.loc[("A, V panel", "vehicle direction")]
    assert reads["reads_order"] and reads["reads_above"] == 50.0
    assert (reads["implied_frame_gain"], reads["implied_order_gain"]) == ("> 0", "> 0")
    assert reads["frame_gain_agrees"] and reads["order_gain_agrees"]
    not_reads = table.loc[("/ckpt/b", "vehicle direction")]  # no label given: the audit's name
    assert not not_reads["reads_order"] and (not_reads["implied_frame_gain"], not_reads["implied_order_gain"]) == (
        "0", "0")
    assert not_reads["frame_gain_agrees"] and not_reads["order_gain_agrees"]
    unsure = table.loc[("/ckpt/c", "vehicle direction")]
    assert unsure["reads_order"] and not unsure["frame_gain_agrees"] and unsure["order_gain_agrees"]
    flat = table.loc[("/ckpt/d", "vehicle direction")]
    assert not flat["reads_order"] and flat["frame_gain_agrees"] and flat["order_gain_agrees"]
    colour = table.loc[("A, V panel", "vehicle colour")]
    assert colour["decided_by"] == "one frame" and not colour["frame_gain_agrees"] and colour["order_gain_agrees"]
    assert table.loc[("A, V panel", "driver name"), ["frame_gain_agrees", "order_gain_agrees"]].all()
