"""TsT-RF on synthetic benchmarks: no label leakage, grouped folds, chance on shortcut-free data, the
shortcut found where there is one, the output contract, the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.records import Question
from visdep_metrics.cli.main import main
from visdep_metrics.tst.features import FEATURES, LABEL_FEATURES, label_features, option_table
from visdep_metrics.tst.stress_test import (
    S_X_COLUMNS,
    TstConfig,
    argmax_random_ties,
    cross_validation_setup,
    fold_design,
    normalise_within_questions,
    question_order_sha256,
    run_tst,
)

FAST = TstConfig(folds=5, seed=7, n_estimators=60, n_jobs=1)


def _shift_answers(records: list[Question], which: np.ndarray) -> list[Question]:
    return [replace(r, answer_index=(r.answer_index + 1) % len(r.options)) if which[i] else r
            for i, r in enumerate(records)]


def test_held_out_answers_change_no_feature(shortcut_records):
    """Perturbing every held-out answer leaves the held-out features, and the training data, unchanged;
    perturbing training answers does change the held-out features (so the comparison can fail)."""
    table, folds, _ = cross_validation_setup(shortcut_records, FAST)
    for fold in range(FAST.folds):
        design = fold_design(table, folds, fold, FAST)
        held_out = folds == fold
        perturbed = _shift_answers(shortcut_records, held_out)
        table_p = cross_validation_setup(perturbed, FAST)[0]
        assert not np.array_equal(table_p["is_answer"], table["is_answer"])
        design_p = fold_design(table_p, folds, fold, FAST)
        np.testing.assert_array_equal(design_p.test_rows, design.test_rows)
        np.testing.assert_array_equal(design_p.X_test, design.X_test)
        np.testing.assert_array_equal(design_p.X_train, design.X_train)
        np.testing.assert_array_equal(design_p.y_train, design.y_train)

        control = cross_validation_setup(_shift_answers(shortcut_records, ~held_out), FAST)[0]
        design_c = fold_design(control, folds, fold, FAST)
        label_columns = [FEATURES.index(f) for f in LABEL_FEATURES]
        assert not np.array_equal(design_c.X_test[:, label_columns], design.X_test[:, label_columns])


def test_random_answers_score_chance(neutral_records):
    """Answers independent of the text: the cross-validated accuracy must stay within 3 standard errors of
    chance; leaked held-out labels would lift it far above."""
    summary = run_tst(neutral_records, FAST, progress=False).summary
    n, chance = summary["n_questions"], summary["chance"]
    assert chance == pytest.approx(0.25)
    assert abs(summary["accuracy"] - chance) < 3 * np.sqrt(chance * (1 - chance) / n), summary["accuracy"]


def test_shortcut_is_found(shortcut_records, shortcut_root):
    """Half the questions are solvable from the option texts: accuracy ~ 0.5 + 0.5 / 4, and s(x) separates them."""
    result = run_tst(shortcut_records, FAST, progress=False)
    shortcut = result.s_x["question_id"].isin(json.loads((shortcut_root / "shortcut_ids.json").read_text()))
    assert 0.35 < shortcut.mean() < 0.65
    summary = result.summary
    assert summary["accuracy"] > 0.5
    assert result.s_x.loc[shortcut, "correct"].mean() > 0.9
    assert result.s_x.loc[shortcut, "s"].mean() > result.s_x.loc[~shortcut, "s"].mean() + 0.4
    assert abs(result.s_x.loc[~shortcut, "correct"].mean() - 0.25) < 0.12
    assert set(summary["feature_importance"]) == set(FEATURES)


def test_folds_group_videos_and_stratify(shortcut_records):
    result = run_tst(shortcut_records, FAST, progress=False)
    folds = result.s_x.assign(video=[r.video for r in shortcut_records])
    assert (folds.groupby("video")["fold"].nunique() == 1).all()
    assert sorted(folds["fold"].unique()) == list(range(FAST.folds))
    sizes = folds["fold"].value_counts()
    assert sizes.max() - sizes.min() <= 0.15 * len(folds) / FAST.folds
    # Stratified: each fold's answer positions follow the benchmark's (a random video split of these 480
    # questions deviates by 0.06-0.12 for seeds 0-4; StratifiedGroupKFold by 0.03-0.05).
    answers = np.array([r.answer_index for r in shortcut_records])
    per_fold = pd.crosstab(folds["fold"], answers, normalize="index")
    assert (per_fold - np.bincount(answers) / len(answers)).abs().max().max() < 0.06
    assert result.summary["stratified_by"] == "category (source if none) and answer position"


def test_seeded_and_deterministic(shortcut_records):
    a = run_tst(shortcut_records, FAST, progress=False)
    b = run_tst(shortcut_records, FAST, progress=False)
    pd.testing.assert_frame_equal(a.s_x, b.s_x)
    c = run_tst(shortcut_records, TstConfig(folds=5, seed=8, n_estimators=60), progress=False)
    assert not np.array_equal(a.s_x["fold"], c.s_x["fold"])


def test_answer_rate_formula():
    """text_answer_rate = (a + alpha p0) / (n + alpha), counted per (category, normalised text) on the
    statistics rows only; an unseen text gets p0."""
    written = [(["Alpha.", "beta", "gamma"], 0), (["alpha", "gamma", "delta"], 2), (["alpha", "beta", "omega"], 1)]
    records = [Question(question_id=f"q{i}", benchmark="b", video=f"v{i}", question="Q?", options=options,
                        answer_index=answer, category="c", source="s") for i, (options, answer) in enumerate(written)]
    table = option_table(records)
    from visdep_metrics.tst.features import stat_keys

    stats_rows, target_rows = np.arange(6), np.arange(6, 9)
    feats = label_features(table, stat_keys(table), stats_rows, target_rows, smoothing=2.0)
    p0 = 2 / 6
    rate = feats[:, LABEL_FEATURES.index("text_answer_rate")]
    # 'alpha' (normalised from 'Alpha.') was the answer 1 of 2 times; 'beta' 0 of 1; 'omega' never seen.
    np.testing.assert_allclose(rate, [(1 + 2 * p0) / (2 + 2), (0 + 2 * p0) / (1 + 2), p0])
    np.testing.assert_allclose(feats[:, LABEL_FEATURES.index("text_seen_log_count")], np.log1p([2, 1, 0]))
    margin = feats[:, LABEL_FEATURES.index("text_rate_margin")]
    np.testing.assert_allclose(margin[0], rate[0] - max(rate[1], rate[2]))


def test_normalise_and_ties():
    q = np.array([0, 0, 0, 1, 1])
    option = np.array([0, 1, 2, 0, 1])
    p = normalise_within_questions(np.array([0.2, 0.6, 0.2, 0.0, 0.0]), q, option, 2)
    np.testing.assert_allclose(p[0], [0.2, 0.6, 0.2])
    np.testing.assert_allclose(p[1, :2], [0.5, 0.5])  # all-zero forest output: uniform
    assert np.isnan(p[1, 2])
    tied = np.tile([0.4, 0.4, 0.2], (4000, 1))
    picks = argmax_random_ties(tied, seed=0)
    assert set(picks) == {0, 1} and abs(picks.mean() - 0.5) < 0.05
    np.testing.assert_array_equal(picks, argmax_random_ties(tied, seed=0))


def test_variable_k_benchmark(fixture_env):
    """AccidentBench (K from 2 to 12) through the loaders: probabilities per question sum over K options."""
    records = load_benchmark("accidentbench", fixture_env["ACCIDENTBENCH_ROOT"])
    result = run_tst(records, TstConfig(folds=3, n_estimators=20), progress=False)
    k = np.array([len(r.options) for r in records])
    assert len(set(k)) > 2
    np.testing.assert_array_equal(result.s_x["n_options"], k)
    assert result.s_x["s"].between(0, 1).all()
    assert result.summary["chance"] == pytest.approx(np.mean(1 / k))


def test_cli_writes_the_contract(shortcut_root, shortcut_records, tmp_path, capsys):
    out = tmp_path / "tst"
    assert main(["tst", "--benchmark", "vru_accident", "--root", str(shortcut_root), "--out", str(out),
                 "--n-estimators", "40", "--seed", "3"]) == 0
    assert "cross-validated accuracy" in capsys.readouterr().out
    s_x = pd.read_csv(out / "s_x.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert list(s_x.columns) == S_X_COLUMNS
    ids = [r.question_id for r in shortcut_records]
    assert s_x["question_id"].tolist() == ids
    assert summary["question_order_sha256"] == question_order_sha256(ids)
    assert summary["benchmark"] == "vru_accident" and summary["folds"] == 5 and summary["seed"] == 3
    assert summary["features"] == FEATURES
    assert {"scikit-learn", "numpy", "pandas", "visdep"} <= set(summary["versions"])
    np.testing.assert_allclose(s_x["s_minus_chance"], s_x["s"] - 1 / s_x["n_options"])
    assert set(s_x["correct"]) <= {0, 1}
    assert (s_x.loc[s_x["s"] > 0.5, "correct"] == 1).all()  # more than half the mass is the argmax
    assert summary["accuracy"] == pytest.approx(s_x["correct"].mean())
    assert summary["chance"] == pytest.approx((1 / s_x["n_options"]).mean())
    by_category = s_x.groupby("category")["correct"].agg(["size", "mean"])
    assert set(summary["per_category"]) == set(by_category.index)
    for category, row in by_category.iterrows():
        assert summary["per_category"][category]["n"] == row["size"]
        assert summary["per_category"][category]["accuracy"] == pytest.approx(row["mean"])
        assert summary["per_category"][category]["chance"] == pytest.approx(0.25)


def test_cli_errors_are_clear(fixture_env, tmp_path, caplog):
    # The TrafficQA fixture has 8 questions from 4 videos: 5 grouped folds cannot be made.
    code = main(["tst", "--benchmark", "trafficqa", "--root", fixture_env["TRAFFICQA_ROOT"], "--out",
                 str(tmp_path / "t")])
    assert code == 2 and not (tmp_path / "t" / "s_x.csv").exists()
    code = main(["tst", "--benchmark", "mmau", "--root", str(tmp_path / "missing"), "--out", str(tmp_path / "m")])
    assert code == 2


def test_assign_folds_one_question_per_video():
    """Singleton groups (MM-AU) take the plain stratified split: every stratum spread evenly over the folds."""
    from visdep_metrics.tst.stress_test import assign_folds

    strata = np.repeat(["a", "b", "c"], [50, 30, 20])
    fold = assign_folds(np.arange(100).astype(str), strata, 5, seed=0)
    counts = pd.crosstab(fold, strata)
    assert (counts["a"] == 10).all() and (counts["b"] == 6).all() and (counts["c"] == 4).all()
    assert not np.array_equal(fold, assign_folds(np.arange(100).astype(str), strata, 5, seed=1))
    with pytest.raises(ValueError, match="at least 5 videos"):
        assign_folds(np.array(["v1", "v1", "v2", "v3", "v4", "v4"]), np.zeros(6).astype(str), 5, seed=0)


def test_out_is_checked_before_the_cross_validation(shortcut_root, tmp_path, monkeypatch, capsys):
    from visdep_metrics.tst import stress_test

    def refuse(*args, **kwargs):
        raise AssertionError("the cross-validation ran before --out was checked")

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep me")
    monkeypatch.setattr(stress_test, "run_tst", refuse)
    for command in ("tst", "ibp"):
        extra = ["--budget", "10", "--batch-size", "5"] if command == "ibp" else []
        assert main([command, "--benchmark", "vru_accident", "--root", str(shortcut_root), "--out", str(foreign),
                     *extra]) == 2
        assert f"{foreign}: holds what visdep {command} did not write there (mine.txt)" in capsys.readouterr().err
    assert [p.name for p in foreign.iterdir()] == ["mine.txt"]
