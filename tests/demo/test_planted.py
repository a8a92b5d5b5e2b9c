"""The planted benchmark and the scoring of filters against its truth (fast: no model)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.frames import read_frames
from visdep_metrics.demo.planted import CATEGORIES, COLOURS, PlantedConfig, training_examples, write_planted
from visdep_metrics.demo.truth import filter_scores, threshold_sweep


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    write_planted(root, PlantedConfig(videos=24, seed=3))
    return root, pd.read_csv(root / "planted.csv")


def test_the_loader_reads_it_as_vru_accident_and_the_truth_names_its_questions(planted):
    root, truth = planted
    docs = load_benchmark("vru_accident", root)
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


def test_the_dials_change_what_is_planted(tmp_path):
    write_planted(tmp_path / "a", PlantedConfig(videos=20, shortcut_share=0.0, both_share=0.0))
    assert set(pd.read_csv(tmp_path / "a" / "planted.csv")["planted_type"]) == {"video_only", "neither"}
    write_planted(tmp_path / "b", PlantedConfig(videos=20, shortcut_share=1.0, strength=0.0))
    weak = pd.read_csv(tmp_path / "b" / "planted.csv")
    patterned = weak[weak["category"].isin(["accident reason", "prevention method"])]
    assert set(patterned["planted_type"]) == {"misleading"}


def test_the_training_split_is_other_clips():
    config = PlantedConfig(videos=3)
    first = [f for f, *_ in training_examples(config, seed_offset=1)]
    second = [f for f, *_ in training_examples(config, seed_offset=2)]
    assert len(first) == 12 and not any(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_precision_recall_and_video_only_kept_by_hand():
    # 6 questions on 3 videos: TS = {0, 1, 2}; video-only = {3, 4}; a filter removing {0, 1, 3}
    truth = pd.DataFrame({"question_id": list("abcdef"), "video": ["v1", "v1", "v2", "v2", "v3", "v3"],
                          "planted_type": ["text_only", "both", "text_only", "video_only", "video_only", "neither"]})
    removed = np.array([True, True, False, True, False, False])
    [row] = filter_scores({"f": removed}, truth, n_resamples=200).to_dict("records")
    assert row["n_removed"] == 3
    assert row["precision"] == pytest.approx(2 / 3) and row["recall"] == pytest.approx(2 / 3)
    assert row["video_only_kept"] == pytest.approx(1 / 2)
    assert row["precision_lo"] <= row["precision"] <= row["precision_hi"]
    sweep = threshold_sweep(np.array([0.9, 0.5, 0.05, 0.2, -0.3, 0.0]), truth, taus=[0.1, 0.6])
    assert sweep["n_removed"].tolist() == [3, 1]  # > 0.1: a, b, d; > 0.6: a
    assert sweep["precision"].tolist() == pytest.approx([2 / 3, 1.0])
    assert sweep["recall"].tolist() == pytest.approx([2 / 3, 1 / 3])
    assert sweep["video_only_kept"].tolist() == pytest.approx([1 / 2, 1.0])
