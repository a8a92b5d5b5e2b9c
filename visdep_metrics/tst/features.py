"""The stress test's features (TsT-RF, `visdep_metrics.tst.stress_test`): one row per (question, option) with the
label-free features of the question itself, and the label-derived answer statistics computed from given rows only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from lmms_eval_tasks.records import Question

LABEL_FREE_FEATURES = [
    "position",             # 0-based option index
    "position_frac",        # index / (K - 1)
    "is_last",
    "n_options",            # K
    "category_code",        # index of the category in the benchmark's sorted categories, -1 if none
    "source_code",          # index of the sub-dataset (CAP, DADA, ...)
    "n_chars",
    "n_words",
    "length_rank",          # percentile rank of n_chars within the question
    "length_ratio",         # n_chars / mean n_chars of the question's options
    "question_overlap",     # Jaccard similarity of the option's and the question's word sets
    "max_option_overlap",   # highest Jaccard similarity with another option of the question
    "mean_option_overlap",
    "n_same_text",          # other options of the question with the same normalised text
]
LABEL_FEATURES = [
    "text_answer_rate",     # (a + alpha p0) / (n + alpha): a = times the text was the answer, n = times it appeared
    "text_answer_log_count",  # ln(1 + a)
    "text_seen_log_count",    # ln(1 + n)
    "word_answer_rate",     # mean over the option's words of the same smoothed rate, per word
    "text_rate_margin",     # rate - highest rate among the question's other options
    "word_rate_margin",
]
FEATURES = LABEL_FREE_FEATURES + LABEL_FEATURES

_WORD = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- option table
def words_of(text: str) -> list[str]:
    """Lower-case alphanumeric words: 'The car is out of control.' -> ['the', 'car', 'is', 'out', 'of', 'control']."""
    return _WORD.findall(text.lower())


def _jaccard(a: frozenset, b: frozenset) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def option_table(records: Sequence[Question]) -> pd.DataFrame:
    """One row per (question, option) with the keys of the answer statistics and the label-free features.

    Columns: `q` (question position), `option` (index k), `is_answer`, `text_key` / `category_key` (the
    option's normalised text and its category, '' if none), `words` (its set of words) and LABEL_FREE_FEATURES.
    Rows are ordered by question, then option."""
    if not records:
        raise ValueError("no questions: the stress test needs a non-empty benchmark")
    categories = sorted({r.category for r in records if r.category is not None})
    sources = sorted({str(r.source) for r in records})
    category_code = {c: i for i, c in enumerate(categories)}
    source_code = {s: i for i, s in enumerate(sources)}
    rows = []
    for q, r in enumerate(records):
        options = r.options
        k_n = len(options)
        if not 0 <= r.answer_index < k_n:
            raise ValueError(f"question {r.question_id!r}: answer_index {r.answer_index} outside 0..{k_n - 1}")
        word_sets = [frozenset(words_of(o)) for o in options]
        norm = [" ".join(words_of(o)) or o.strip().lower() for o in options]
        question_words = frozenset(words_of(r.question))
        category = r.category if r.category is not None else ""
        for k, text in enumerate(options):
            others = [_jaccard(word_sets[k], word_sets[j]) for j in range(k_n) if j != k]
            rows.append({
                "q": q, "option": k, "is_answer": int(k == r.answer_index),
                "category_key": category, "text_key": norm[k], "words": word_sets[k],
                "position": k, "position_frac": k / (k_n - 1), "is_last": int(k == k_n - 1), "n_options": k_n,
                "category_code": category_code.get(r.category, -1), "source_code": source_code[str(r.source)],
                "n_chars": len(text), "n_words": len(text.split()),
                "question_overlap": _jaccard(word_sets[k], question_words),
                "max_option_overlap": max(others), "mean_option_overlap": float(np.mean(others)),
                "n_same_text": norm.count(norm[k]) - 1,
            })
    table = pd.DataFrame(rows)
    by_question = table.groupby("q")["n_chars"]
    table["length_rank"] = by_question.rank(pct=True)
    table["length_ratio"] = table["n_chars"] / by_question.transform("mean")
    return table


class StatKeys(NamedTuple):
    """Integer ids that the answer statistics are counted over (computed once per option table)."""

    text_id: np.ndarray       # per option row: id of (category, normalised text)
    word_row: np.ndarray      # per (option row, word) pair: the option row
    word_id: np.ndarray       # per pair: id of (category, word)
    n_words: np.ndarray       # per option row: number of distinct words (>= 1 for the mean)


def stat_keys(table: pd.DataFrame) -> StatKeys:
    text_id, _ = pd.factorize(table["category_key"] + "\x1f" + table["text_key"])
    exploded = table[["category_key", "words"]].explode("words").dropna(subset=["words"])
    word_id, _ = pd.factorize(exploded["category_key"] + "\x1f" + exploded["words"].astype(str))
    n_words = np.bincount(exploded.index.to_numpy(), minlength=len(table))
    return StatKeys(text_id, exploded.index.to_numpy(), word_id, np.maximum(n_words, 1))


def _smoothed_rates(ids: np.ndarray, is_answer: np.ndarray, n_ids: int, prior: float, alpha: float):
    """Per id: (answers a, appearances n, (a + alpha prior) / (n + alpha))."""
    answers = np.bincount(ids, weights=is_answer, minlength=n_ids)
    seen = np.bincount(ids, minlength=n_ids).astype(float)
    return answers, seen, (answers + alpha * prior) / (seen + alpha)


def _margin_over_others(values: np.ndarray, q: np.ndarray, option: np.ndarray) -> np.ndarray:
    """values - max over the question's other options (0 for a value tied with another at the top)."""
    question = np.unique(q, return_inverse=True)[1]
    matrix = np.full((question.max() + 1, option.max() + 1), -np.inf)
    matrix[question, option] = values
    ordered = np.sort(matrix, axis=1)
    first, second = ordered[:, -1][question], ordered[:, -2][question]  # every question has K >= 2
    return values - np.where(values >= first, second, first)


def label_features(table: pd.DataFrame, keys: StatKeys, stat_rows: np.ndarray, target_rows: np.ndarray,
                   smoothing: float) -> np.ndarray:
    """LABEL_FEATURES of `target_rows` from the answers of `stat_rows` only (both whole questions).

    p0 = answers / option rows among `stat_rows` (the prior a text never seen gets)."""
    is_answer = table["is_answer"].to_numpy(dtype=float)
    prior = is_answer[stat_rows].mean()
    n_text = int(keys.text_id.max()) + 1
    answers, seen, text_rate = _smoothed_rates(keys.text_id[stat_rows], is_answer[stat_rows], n_text, prior,
                                               smoothing)
    in_stats = np.zeros(len(table), dtype=bool)
    in_stats[stat_rows] = True
    pair_in_stats = in_stats[keys.word_row]
    n_word = int(keys.word_id.max()) + 1 if len(keys.word_id) else 1
    _, _, word_rate = _smoothed_rates(keys.word_id[pair_in_stats], is_answer[keys.word_row[pair_in_stats]], n_word,
                                      prior, smoothing)
    word_mean = np.bincount(keys.word_row, weights=word_rate[keys.word_id], minlength=len(table)) / keys.n_words
    # An option without any alphanumeric word gets the prior, as an unseen text does.
    word_mean = np.where(np.bincount(keys.word_row, minlength=len(table)) > 0, word_mean, prior)

    t = keys.text_id[target_rows]
    q = table["q"].to_numpy()[target_rows]
    option = table["option"].to_numpy()[target_rows]
    rate_t, word_t = text_rate[t], word_mean[target_rows]
    return np.column_stack([rate_t, np.log1p(answers[t]), np.log1p(seen[t]), word_t,
                            _margin_over_others(rate_t, q, option), _margin_over_others(word_t, q, option)])
