"""Test-set stress test with a random forest (TsT-RF, Brown et al. 2025, arXiv:2511.04655, sections 3.1 and 3.3).

What can a model learn about the answers from the benchmark's own text, without the video? The
questions are split into k folds, grouped by video (no video's questions are split between training
and held-out) and stratified by category and answer position. For each fold a random forest is
trained on the other folds and scores the held-out questions:

* one row per (question, option); the forest predicts "this option is the correct answer";
* per question the K predicted probabilities are normalised to sum to 1,
  p_k(x) = f(x, k) / sum_j f(x, j) (uniform when the forest gives every option 0);
* the bias score s(x) = p_{y*}(x), the held-out probability of the correct option;
* the held-out prediction is argmax_k p_k(x), exact ties broken at random (seeded), and the
  non-visual solvability is the cross-validated accuracy mean_x [argmax_k p_k(x) = y*(x)],
  compared with chance, mean_x 1/K(x).

Features (names in `FEATURES`, built in `visdep_metrics.tst.features`). Label-free, from the question itself: option
position, K, category, source, option length (characters, words, rank and ratio within the question), word overlap
of the option with the question and with the other options, repeated option texts. Label-derived, from the training
folds only: how often the option's text was the correct answer and how often it appeared at all (per category,
smoothed), the same for the option's words, and each rate's margin over the best other option of the question.
Training rows get these statistics out of fold (inner k-fold on the training questions), so the forest learns from
statistics that, like the held-out ones, never include the row's own label.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from loguru import logger
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
from tqdm.auto import tqdm

from lmms_eval_tasks.errors import OptionError
from lmms_eval_tasks.records import Question
from lmms_eval_tasks.tasks import prompt_id
from visdep_metrics.provenance import package_versions
from visdep_metrics.stats import crossed_intervals
from visdep_metrics.tst.features import (
    FEATURES,
    LABEL_FEATURES,
    LABEL_FREE_FEATURES,
    StatKeys,
    label_features,
    option_table,
    stat_keys,
)

S_X_COLUMNS = ["question_id", "category", "n_options", "s", "s_minus_chance", "fold", "correct"]



@dataclass(frozen=True)
class TstConfig:
    """Settings of one stress test. `smoothing` is alpha of the smoothed answer rates."""

    folds: int = 5
    seed: int = 42
    n_estimators: int = 200
    min_samples_leaf: int = 3
    smoothing: float = 2.0
    n_jobs: int = 1


class FoldDesign(NamedTuple):
    """The forest's inputs for one outer fold; rows are option rows of `option_table`."""

    train_rows: np.ndarray  # indices into the option table
    test_rows: np.ndarray
    X_train: np.ndarray     # (len(train_rows), len(FEATURES))
    y_train: np.ndarray     # 1 where the option is the answer
    X_test: np.ndarray


@dataclass
class TstResult:
    s_x: pd.DataFrame       # S_X_COLUMNS, one row per question in the benchmark's order
    summary: dict


# --------------------------------------------------------------------------- folds
def stratum_labels(records: Sequence[Question], folds: int) -> tuple[np.ndarray, str]:
    """Stratification label per question and what it is: '<category or source>|<answer index>' when some
    stratum has at least `folds` questions (StratifiedGroupKFold needs one), else the category or source
    alone, else one stratum for all (small sets)."""
    kind = np.array([str(r.category if r.category is not None else r.source) for r in records])
    fine = np.char.add(np.char.add(kind, "|"), np.array([str(r.answer_index) for r in records]))
    for labels, name in ((fine, "category (source if none) and answer position"), (kind, "category (source if none)")):
        if np.unique(labels, return_counts=True)[1].max() >= folds:
            return labels, name
    return np.zeros(len(records), dtype=int).astype(str), "none (too few questions per stratum)"


def assign_folds(groups: np.ndarray, strata: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold (0..folds-1) of each item: StratifiedGroupKFold, shuffled with `seed`; all items of a group
    share one fold. Unstratified (one stratum) when no stratum has `folds` items."""
    n_groups = len(np.unique(groups))
    if folds < 2:
        raise OptionError(f"--folds {folds}: cross-validation needs at least 2 folds")
    if n_groups < folds:
        raise OptionError(f"--folds {folds}: {folds} folds need at least {folds} videos (groups); these questions "
                          f"come from {n_groups}")
    if np.unique(strata, return_counts=True)[1].max() < folds:
        strata = np.zeros(len(groups), dtype=int)
    fold = np.full(len(groups), -1)
    # One item per group (MM-AU: one question per video) is plain stratified k-fold, which sklearn does
    # in one vectorised pass; StratifiedGroupKFold's group-by-group search takes ~0.6 s for 2,453 groups.
    singletons = n_groups == len(groups)
    splitter = (StratifiedKFold if singletons else StratifiedGroupKFold)(n_splits=folds, shuffle=True,
                                                                         random_state=seed)
    with warnings.catch_warnings():
        # Strata smaller than the number of folds are expected (rare answer positions, small sets).
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        splits = splitter.split(np.zeros(len(groups)), strata, None if singletons else groups)
        for f, (_, test) in enumerate(splits):
            fold[test] = f
    return fold


def fold_design(table: pd.DataFrame, fold_of_question: np.ndarray, fold: int, config: TstConfig,
                keys: StatKeys | None = None) -> FoldDesign:
    """Features of outer fold `fold`: held-out rows from all training questions' statistics, training rows
    from inner out-of-fold statistics (inner folds grouped and stratified like the outer ones).

    `table` is the one `cross_validation_setup` returns (with the video and stratum of each row)."""
    keys = keys or stat_keys(table)
    row_fold = fold_of_question[table["q"].to_numpy()]
    train_rows = np.flatnonzero(row_fold != fold)
    test_rows = np.flatnonzero(row_fold == fold)
    if not len(test_rows) or not len(train_rows):
        raise ValueError(f"fold {fold} leaves no held-out or no training question")
    static = table[LABEL_FREE_FEATURES].to_numpy(dtype=float)

    train_questions = table.loc[train_rows].drop_duplicates("q")
    inner_k = min(config.folds, train_questions["group"].nunique())
    inner_of_question = np.full(len(fold_of_question), -1)
    inner_of_question[train_questions["q"].to_numpy()] = assign_folds(
        train_questions["group"].to_numpy(), train_questions["stratum"].to_numpy(), inner_k, config.seed)
    inner_row = inner_of_question[table["q"].to_numpy()[train_rows]]
    train_label = np.empty((len(train_rows), len(LABEL_FEATURES)))
    for j in range(inner_k):
        part = inner_row == j
        train_label[part] = label_features(table, keys, train_rows[~part], train_rows[part], config.smoothing)
    test_label = label_features(table, keys, train_rows, test_rows, config.smoothing)
    return FoldDesign(train_rows, test_rows,
                      np.hstack([static[train_rows], train_label]),
                      table["is_answer"].to_numpy()[train_rows],
                      np.hstack([static[test_rows], test_label]))


# --------------------------------------------------------------------------- scores and summaries
def normalise_within_questions(prob: np.ndarray, q: np.ndarray, option: np.ndarray, n_questions: int) -> np.ndarray:
    """(n_questions, K_max) matrix P[x, k] = f(x, k) / sum_j f(x, j); NaN beyond a question's K; uniform 1/K
    where the forest gives every option of the question 0."""
    k_max = int(option.max()) + 1
    raw = np.full((n_questions, k_max), np.nan)
    raw[q, option] = prob
    total = np.nansum(raw, axis=1, keepdims=True)
    n_opts = np.sum(~np.isnan(raw), axis=1, keepdims=True)
    return np.where(total > 0, raw / np.where(total > 0, total, 1.0), np.where(np.isnan(raw), np.nan, 1.0 / n_opts))


def argmax_random_ties(p: np.ndarray, seed: int) -> np.ndarray:
    """Per row the index of the largest non-NaN entry, exact ties broken uniformly at random (seeded)."""
    filled = np.where(np.isnan(p), -np.inf, p)
    is_top = filled == filled.max(axis=1, keepdims=True)
    draw = np.random.default_rng(seed).random(p.shape)
    return np.argmax(np.where(is_top, draw, -1.0), axis=1)


def accuracy_table(s_x: pd.DataFrame, by: str | None = None) -> pd.DataFrame | dict:
    """n, accuracy = mean(correct), chance = mean(1/K), mean_s = mean(s), overall or per value of column `by`."""
    frame = s_x.assign(chance=1.0 / s_x["n_options"])
    if by is None:
        return {"n": int(len(frame)), "accuracy": float(frame["correct"].mean()),
                "chance": float(frame["chance"].mean()), "mean_s": float(frame["s"].mean())}
    grouped = frame.groupby(by, sort=True)
    return pd.DataFrame({"n": grouped.size(), "accuracy": grouped["correct"].mean(),
                         "chance": grouped["chance"].mean(), "mean_s": grouped["s"].mean()})


def question_order_sha256(question_ids: Sequence[str]) -> str:
    """sha256 hex digest of the question ids, in order, joined by newlines (UTF-8)."""
    return hashlib.sha256("\n".join(map(str, question_ids)).encode("utf-8")).hexdigest()


def _bootstrap_ci(correct: np.ndarray, records: Sequence[Question], seed: int) -> list[float | None]:
    """95% interval of the accuracy as the audit computes an accuracy's (`stats.crossed_intervals`: Clopper-Pearson on
    the independent answers the shared videos and blind prompts leave): the forest sees only the text, so the copies of
    one prompt get one prediction. [None, None] where the questions leave too few independent answers. `seed` is unused:
    the interval draws nothing."""
    del seed
    found = crossed_intervals(correct[None].astype(float), None, [r.video for r in records],
                              [prompt_id(r.document()) for r in records], 0.95, blind=True)
    low, high = float(found.low[0, 0]), float(found.high[0, 0])
    return [None, None] if np.isnan(low) else [low, high]


# --------------------------------------------------------------------------- the stress test
def question_folds(records: Sequence[Question], folds: int,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(fold, group = video, stratum) per question and what the folds are stratified by; the one split of
    every stress test (TsT-RF and TsT-LLM)."""
    groups = np.array([r.video for r in records])
    strata, stratified_by = stratum_labels(records, folds)
    return assign_folds(groups, strata, folds, seed), groups, strata, stratified_by


def cross_validation_setup(records: Sequence[Question], config: TstConfig) -> tuple[pd.DataFrame, np.ndarray, str]:
    """The option table with each row's `group` (video) and `stratum`, the outer fold of each question, and
    what the folds are stratified by."""
    table = option_table(records)
    fold, groups, strata, stratified_by = question_folds(records, config.folds, config.seed)
    table["group"] = groups[table["q"].to_numpy()]
    table["stratum"] = strata[table["q"].to_numpy()]
    return table, fold, stratified_by


def run_tst(records: Sequence[Question], config: TstConfig | None = None, benchmark: str | None = None,
            progress: bool = True) -> TstResult:
    """k-fold TsT-RF over normalized questions (see the module docstring); s_x rows follow `records`."""
    config = config or TstConfig()
    records = list(records)
    benchmark = benchmark or (records[0].benchmark if records else "?")
    table, fold_of_question, stratified_by = cross_validation_setup(records, config)
    keys = stat_keys(table)
    logger.info(f"TsT-RF {benchmark}: {len(records)} questions, {len(np.unique(table['group']))} videos, "
                f"{config.folds} folds grouped by video, stratified by {stratified_by}")

    prob = np.empty(len(table))
    importances = np.zeros(len(FEATURES))
    fold_iter = tqdm(range(config.folds), desc=f"TsT-RF {benchmark} ({len(records)} questions)", unit="fold",
                     disable=not progress, leave=False)
    for fold in fold_iter:
        design = fold_design(table, fold_of_question, fold, config, keys)
        forest = RandomForestClassifier(n_estimators=config.n_estimators, min_samples_leaf=config.min_samples_leaf,
                                        n_jobs=config.n_jobs, random_state=config.seed + fold)
        forest.fit(design.X_train, design.y_train)
        prob[design.test_rows] = forest.predict_proba(design.X_test)[:, list(forest.classes_).index(1)]
        importances += forest.feature_importances_ / config.folds

    p = normalise_within_questions(prob, table["q"].to_numpy(), table["option"].to_numpy(), len(records))
    s_x = score_table(records, p, fold_of_question, config.seed)
    model = {"method": "TsT-RF", "name": "RandomForestClassifier",
             **{k: v for k, v in asdict(config).items() if k not in ("folds", "seed")}}
    summary = summarize(s_x, records, benchmark, config.folds, config.seed, model, list(FEATURES),
                        dict(zip(FEATURES, importances.tolist(), strict=True)), stratified_by)
    return TstResult(s_x, summary)


def score_table(records: Sequence[Question], p: np.ndarray, fold_of_question: np.ndarray, seed: int) -> pd.DataFrame:
    """The s_x table from held-out option probabilities p (n_questions, K_max; NaN beyond K): s = p[x, y*],
    s - 1/K, fold, and correct = [argmax_k p[x, k] == y*] with exact ties broken at random (seeded)."""
    answer = np.array([r.answer_index for r in records])
    n_options = np.array([len(r.options) for r in records])
    s = p[np.arange(len(records)), answer]
    correct = (argmax_random_ties(p, seed) == answer).astype(int)
    return pd.DataFrame({"question_id": [r.question_id for r in records],
                         "category": [r.category for r in records],
                         "n_options": n_options, "s": s, "s_minus_chance": s - 1.0 / n_options,
                         "fold": fold_of_question, "correct": correct})


def summarize(s_x: pd.DataFrame, records: Sequence[Question], benchmark: str, folds: int, seed: int, model: dict,
              features: list[str], importances: dict[str, float], stratified_by: str) -> dict:
    """The summary.json contract: overall / per-category / per-source accuracy and chance, per-fold accuracy,
    settings, features and their importance (empty where the model has none), versions and the
    question-order fingerprint."""
    overall = accuracy_table(s_x)
    per_fold = s_x.groupby("fold")["correct"].mean()
    sources = s_x.assign(source=[str(r.source) for r in records])
    with_category = s_x[s_x["category"].notna()]
    return {
        "benchmark": benchmark,
        "n_questions": overall["n"],
        "accuracy": overall["accuracy"],
        "chance": overall["chance"],
        "accuracy_minus_chance": overall["accuracy"] - overall["chance"],
        "accuracy_ci95": _bootstrap_ci(s_x["correct"].to_numpy(), records, seed),
        "mean_s": overall["mean_s"],
        "fold_accuracy": [float(a) for a in per_fold.to_numpy()],
        "fold_accuracy_std": float(per_fold.std(ddof=1)) if len(per_fold) > 1 else 0.0,
        "per_category": _records_by_key(accuracy_table(with_category, "category")) if len(with_category) else {},
        "per_source": _records_by_key(accuracy_table(sources, "source")),
        "folds": folds,
        "seed": seed,
        "grouped_by": "video",
        "stratified_by": stratified_by,
        "model": model,
        "features": features,
        "feature_importance": dict(sorted(importances.items(), key=lambda kv: -kv[1])),
        "versions": package_versions(),
        "question_order_sha256": question_order_sha256(s_x["question_id"].tolist()),
    }


def _records_by_key(frame: pd.DataFrame) -> dict:
    return {str(key): {"n": int(row["n"]), "accuracy": float(row["accuracy"]), "chance": float(row["chance"]),
                       "mean_s": float(row["mean_s"])} for key, row in frame.iterrows()}


def write_tst(result: TstResult, out: str | Path) -> list[Path]:
    """OUT/s_x.csv (S_X_COLUMNS, question order) and OUT/summary.json; returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s_x_path, summary_path = out / "s_x.csv", out / "summary.json"
    result.s_x[S_X_COLUMNS].to_csv(s_x_path, index=False)
    summary_path.write_text(json.dumps(result.summary, indent=2) + "\n")
    return [s_x_path, summary_path]


def format_summary(summary: dict) -> str:
    """A plain-text table: overall, per category, per source."""
    def line(name: str, n: int, acc: float, chance: float) -> str:
        return f"  {name:<36} {n:>6} {100 * acc:>8.1f} {100 * chance:>7.1f} {100 * (acc - chance):>+8.1f}"

    lo, hi = summary["accuracy_ci95"]
    ci = "no 95% CI: too few independent answers" if lo is None else f"95% CI {100 * lo:.1f}-{100 * hi:.1f}"
    lines = [f"{summary['model']['method']} {summary['benchmark']}: {summary['folds']}-fold cross-validated accuracy "
             f"{100 * summary['accuracy']:.1f}% ({ci}; fold std "
             f"{100 * summary['fold_accuracy_std']:.1f}) vs chance {100 * summary['chance']:.1f}%",
             f"  {'':<36} {'n':>6} {'acc %':>8} {'chance':>7} {'gain':>8}",
             line("overall", summary["n_questions"], summary["accuracy"], summary["chance"])]
    for title, key in (("category", "per_category"), ("source", "per_source")):
        for name, row in summary[key].items():
            lines.append(line(f"{title}: {name}", row["n"], row["accuracy"], row["chance"]))
    top = list(summary["feature_importance"].items())[:5]
    if top:
        lines.append("  top features: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    return "\n".join(lines)
