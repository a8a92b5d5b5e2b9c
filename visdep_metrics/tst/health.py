"""Health figures of a benchmark's text, for a designer iterating on questions: no model, no video.

Each figure is a pattern the stress test (TsT) can learn from the test set itself (Brown et al. 2025,
section 2.3: skewed answers, imbalanced labels), counted directly so a designer sees which to fix:

* answer-letter balance: how often each position is the answer, per K, against 1/K (chi-square test);
* recurring correct answers: option texts that are the answer of several questions, and how often they
  appear as distractors (VRU-Accident: the answers are reused labels, the distractors made up per
  question); the answer-frequency heuristic picks, in each question, the option whose text is most often
  the answer of the *other* questions (ties split evenly);
* duplicate options within a question (the same words) and near-duplicates (the same words but for
  articles and a final -s: "the car stops" / "car stop");
* negated near-copies: two options of a question that differ only by a negation ("is in distracted
  driving" / "is not in distracted driving"; "notices the vehicle" / "does not notice the vehicle", MM-AU),
  and whether the answer is one of the pair (2/K of the time if the pair told nothing).

Texts are compared lower-cased, as their alphanumeric words (`features.words_of`), with "n't" and
"cannot" read as "not".
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import chisquare

from lmms_eval_tasks.records import LETTERS, Question
from visdep_metrics.tst.features import words_of

NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without"})
ARTICLES = frozenset({"a", "an", "the"})
AUXILIARIES = frozenset({"do", "does", "did"})  # "notices" / "does not notice"
_CONTRACTION = re.compile(r"n't\b|n’t\b", re.I)
_CANNOT = re.compile(r"\bcannot\b", re.I)

BALANCE_COLUMNS = ["n_options", "letter", "n_answers", "share", "expected_share"]
RECURRING_COLUMNS = ["text", "n_correct", "n_distractor", "answer_rate"]
PAIR_COLUMNS = ["question_id", "kind", "option_a", "option_b", "text_a", "text_b", "involves_answer"]


def text_words(text: str) -> list[str]:
    """Lower-case words with negations spelled out: "doesn't stop" -> ['does', 'not', 'stop']."""
    return words_of(_CANNOT.sub("can not", _CONTRACTION.sub(" not", str(text))))


def _key(text: str) -> str:
    return " ".join(text_words(text)) or str(text).strip().lower()


# --------------------------------------------------------------------------- answer positions
def answer_balance(records: Sequence[Question]) -> tuple[pd.DataFrame, list[dict]]:
    """(per K and letter: answers at that position, their share, 1/K; per K: n, the most frequent letter and its
    share, chi-square statistic and p-value against uniform positions)."""
    by_k: dict[int, Counter] = defaultdict(Counter)
    for r in records:
        by_k[len(r.options)][r.answer_index] += 1
    rows, tests = [], []
    for k in sorted(by_k):
        counts = np.array([by_k[k][i] for i in range(k)])
        n = int(counts.sum())
        rows += [{"n_options": k, "letter": LETTERS[i], "n_answers": int(counts[i]), "share": counts[i] / n,
                  "expected_share": 1 / k} for i in range(k)]
        statistic, p_value = chisquare(counts) if n > 0 else (float("nan"), float("nan"))
        top = int(np.argmax(counts))
        tests.append({"n_options": k, "n": n, "most_frequent_letter": LETTERS[top],
                      "most_frequent_share": float(counts[top] / n), "chi_square": float(statistic),
                      "p_value": float(p_value)})
    return pd.DataFrame(rows, columns=BALANCE_COLUMNS), tests


# --------------------------------------------------------------------------- recurring answers
def recurring_answers(records: Sequence[Question]) -> pd.DataFrame:
    """Option texts that are the correct answer of two or more questions: how often correct, how often a
    distractor, and answer_rate = correct / (correct + distractor); most often correct first."""
    correct, distractor, shown = Counter(), Counter(), {}
    for r in records:
        for k, option in enumerate(r.options):
            key = _key(option)
            shown.setdefault(key, option)
            (correct if k == r.answer_index else distractor)[key] += 1
    rows = [{"text": shown[key], "n_correct": n, "n_distractor": distractor[key],
             "answer_rate": n / (n + distractor[key])} for key, n in correct.items() if n >= 2]
    frame = pd.DataFrame(rows, columns=RECURRING_COLUMNS)
    return frame.sort_values(["n_correct", "answer_rate"], ascending=False, kind="stable").reset_index(drop=True)


def answer_frequency_heuristic(records: Sequence[Question]) -> np.ndarray:
    """Per question, the expected correctness of picking the option whose text is most often the correct answer of
    the other questions (leave-one-out; a tie among m options, all-zero included, scores 1/m if the answer is
    among them)."""
    correct = Counter(_key(r.options[r.answer_index]) for r in records)
    scores = np.empty(len(records))
    for q, r in enumerate(records):
        answer_key = _key(r.options[r.answer_index])
        elsewhere = [correct[_key(o)] - (_key(o) == answer_key) for o in r.options]
        best = max(elsewhere)
        tied = [k for k, v in enumerate(elsewhere) if v == best]
        scores[q] = (r.answer_index in tied) / len(tied)
    return scores


# --------------------------------------------------------------------------- option pairs
def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _pair_kind(words_a: list[str], words_b: list[str]) -> str | None:
    """duplicate (same words), negated (the same but for a negation, and do/does/did or a final -s), near_duplicate
    (the same but for articles and a final -s), or None."""
    if words_a == words_b:
        return "duplicate"
    negations_a = sum(w in NEGATIONS for w in words_a)
    negations_b = sum(w in NEGATIONS for w in words_b)
    if negations_a != negations_b:
        def core(words: list[str]) -> list[str]:
            return [_stem(w) for w in words if w not in NEGATIONS and w not in AUXILIARIES]

        if core(words_a) == core(words_b):
            return "negated"
    if [_stem(w) for w in words_a if w not in ARTICLES] == [_stem(w) for w in words_b if w not in ARTICLES]:
        return "near_duplicate"
    return None


def option_pairs(records: Sequence[Question]) -> pd.DataFrame:
    """Pairs of options of one question that are duplicates, near-duplicates or negated near-copies."""
    rows = []
    for r in records:
        words = [text_words(o) for o in r.options]
        for a in range(len(words)):
            for b in range(a + 1, len(words)):
                kind = _pair_kind(words[a], words[b])
                if kind is not None:
                    rows.append({"question_id": r.question_id, "kind": kind, "option_a": LETTERS[a],
                                 "option_b": LETTERS[b], "text_a": r.options[a], "text_b": r.options[b],
                                 "involves_answer": r.answer_index in (a, b)})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


# --------------------------------------------------------------------------- all figures
def health_summary(records: Sequence[Question]) -> tuple[dict, dict[str, pd.DataFrame]]:
    """(figures for report.md and health.json, tables for the CSVs)."""
    n = len(records)
    balance, balance_tests = answer_balance(records)
    recurring = recurring_answers(records)
    pairs = option_pairs(records)
    recurring_keys = {_key(t) for t in recurring["text"]}
    answer_keys = [_key(r.options[r.answer_index]) for r in records]
    heuristic = answer_frequency_heuristic(records)
    chance = float(np.mean([1 / len(r.options) for r in records]))

    def questions_with(kind: str, answer_only: bool = False) -> set[str]:
        chosen = pairs.loc[pairs["kind"] == kind]
        if answer_only:
            chosen = chosen.loc[chosen["involves_answer"].astype(bool)]  # an empty frame's column is of objects
        return set(chosen["question_id"])

    negated = questions_with("negated")
    negated_with_answer = questions_with("negated", answer_only=True)
    k_of = {r.question_id: len(r.options) for r in records}
    figures = {
        "n_questions": n,
        "chance": chance,
        "answer_balance": balance_tests,
        "recurring_answer_texts": int(len(recurring)),
        "questions_whose_answer_recurs": int(sum(k in recurring_keys for k in answer_keys)),
        "answer_frequency_heuristic_accuracy": float(heuristic.mean()),
        "questions_with_duplicate_options": len(questions_with("duplicate")),
        "questions_with_near_duplicate_options": len(questions_with("near_duplicate")),
        "questions_with_negated_pair": len(negated),
        "questions_whose_answer_has_negated_copy": len(negated_with_answer),
        # if a negated pair said nothing about the answer, the answer would be one of the pair 2/K of the time
        "negated_pair_expected_with_answer": float(sum(2 / k_of[q] for q in negated)),
    }
    return figures, {"answer_balance": balance, "recurring_answers": recurring, "option_pairs": pairs}
