"""`visdep spec report`: a first look at a benchmark without any model or video.

The test-set stress test (TsT-RF, `stress_test.run_tst`) says how much of the benchmark its own text answers;
the health figures (`health`) say which patterns to fix; the most text-solvable questions are shown with their
text. Written to OUT: report.md, health.json, answer_balance.csv, recurring_answers.csv, option_pairs.csv,
most_text_solvable.csv, and tst/ (s_x.csv, summary.json: pass it to `visdep audit --tst`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lmms_eval_tasks.records import LETTERS, Question
from visdep_metrics.tst.health import health_summary
from visdep_metrics.tst.stress_test import TstConfig, TstResult, format_summary, run_tst, write_tst

MARKER = "health.json"  # what makes OUT an earlier output of this command
TOP_COLUMNS = ["rank", "question_id", "category", "s", "correct", "question", "options", "answer"]


def verdict(summary: dict) -> str:
    """One line: the cross-validated accuracy of the text alone against chance, judged by its 95% interval."""
    acc, chance = summary["accuracy"], summary["chance"]
    lo, hi = summary["accuracy_ci95"]
    if lo is None:  # too few independent answers for an interval (stress_test._bootstrap_ci)
        return (f"**Too few independent answers to judge.** TsT-RF answers {100 * acc:.1f}% of the questions from "
                f"their text alone against {100 * chance:.1f}% by chance, but they leave too few independent answers "
                f"for an interval.")
    measured = (f"TsT-RF answers {100 * acc:.1f}% of the questions from their text alone (95% CI {100 * lo:.1f}-"
                f"{100 * hi:.1f}) against {100 * chance:.1f}% by chance")
    if lo > chance:
        return (f"**The text gives answers away.** {measured}: {100 * (acc - chance):+.1f} points that no model needs "
                f"the video for.")
    return f"**No evidence that the text gives answers away.** {measured}: the interval includes chance."


def most_text_solvable(records: Sequence[Question], result: TstResult, top: int) -> pd.DataFrame:
    """The `top` questions with the highest held-out probability of the correct option, s(x), with their text."""
    order = result.s_x["s"].to_numpy().argsort(kind="stable")[::-1][:top]
    rows = []
    for rank, q in enumerate(order, 1):
        r = records[q]
        rows.append({"rank": rank, "question_id": r.question_id, "category": r.category,
                     "s": float(result.s_x["s"].iloc[q]), "correct": int(result.s_x["correct"].iloc[q]),
                     "question": r.question,
                     "options": " | ".join(f"{LETTERS[k]}. {o}" for k, o in enumerate(r.options)),
                     "answer": LETTERS[r.answer_index]})
    return pd.DataFrame(rows, columns=TOP_COLUMNS)


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _markdown_table(frame: pd.DataFrame) -> list[str]:
    def cell(value) -> str:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return lines


def render_report(name: str, origin: str, records: Sequence[Question], result: TstResult, figures: dict,
                  tables: dict[str, pd.DataFrame], top: pd.DataFrame) -> str:
    n = len(records)
    k_counts = Counter(len(r.options) for r in records)
    categories = Counter(r.category for r in records if r.category)
    lines = [f"# First look at {name}: does its text give the answers away?", "", verdict(result.summary), "",
             f"{origin}: {n:,} questions about {len({r.video for r in records}):,} videos; options per question "
             f"{dict(sorted(k_counts.items()))}; chance {100 * figures['chance']:.1f}%"
             + (f"; categories {dict(categories)}" if categories else "") + ".",
             "", "No model and no video were used: everything below comes from the annotation text.", "",
             "## Test-set stress test", "",
             "A random forest trained on the benchmark's own questions and options (k-fold cross-validation grouped "
             "by video; `visdep tst`). Answer statistics come from the training folds only.", "",
             "```", format_summary(result.summary), "```", "",
             "## Health figures", "", "### Answer letters", ""]
    for test in figures["answer_balance"]:
        shares = tables["answer_balance"].query("n_options == @test['n_options']")
        lines.append(f"- K = {test['n_options']} ({test['n']:,} questions): "
                     + ", ".join(f"{row.letter} {100 * row.share:.1f}%" for row in shares.itertuples())
                     + f" (uniform {100 / test['n_options']:.1f}%); chi-square p = {test['p_value']:.3g}")
    recurring = tables["recurring_answers"]
    recurs = figures["questions_whose_answer_recurs"]
    lines += ["", "### Recurring correct answers", "",
              f"{recurs:,} questions ({_pct(recurs, n)}) have an answer text that is also the answer of another "
              f"question ({figures['recurring_answer_texts']:,} such texts). Picking, in each question, the option "
              f"most often correct elsewhere scores "
              f"{100 * figures['answer_frequency_heuristic_accuracy']:.1f}% (chance {100 * figures['chance']:.1f}%). "
              "A text that is often correct and rarely a distractor (answer_rate near 1) is a label the model can "
              "learn without the video.", ""]
    if len(recurring):
        lines += _markdown_table(recurring.head(10)) + [""]
    pairs = tables["option_pairs"]
    lines += ["### Duplicate and negated options", "",
              f"- {figures['questions_with_duplicate_options']:,} questions with two options of the same words, "
              f"{figures['questions_with_near_duplicate_options']:,} with two options that differ only by articles "
              "or a final -s (option scoring cannot separate duplicates; a reader can't separate either).",
              f"- {figures['questions_with_negated_pair']:,} questions with two options that differ only by a "
              f"negation; in {figures['questions_whose_answer_has_negated_copy']:,} of them the answer is one of the "
              f"pair (expected {figures['negated_pair_expected_with_answer']:.1f} if the pair told nothing). A negated "
              "near-copy of the answer among the distractors points at the answer.", ""]
    if len(pairs):
        lines += _markdown_table(pairs.head(10)) + [""]
    lines += [f"## The {len(top)} most text-solvable questions", "",
              "Highest s(x), the held-out probability TsT-RF gives the correct option (the forest never saw the "
              "question's own answer).", ""]
    by_id = {r.question_id: r for r in records}
    for row in top.itertuples(index=False):
        record = by_id[row.question_id]
        lines += [f"{row.rank}. `{row.question_id}`" + (f" ({row.category})" if row.category else "")
                  + f": s = {row.s:.3f}, {'right' if row.correct else 'wrong'} when held out", "",
                  f"   {record.question}", ""]
        lines += [f"   - {LETTERS[k]}. {o}{'  ← answer' if k == record.answer_index else ''}"
                  for k, o in enumerate(record.options)] + [""]
    lines += ["## Files", "",
              "`health.json` (these figures), `answer_balance.csv`, `recurring_answers.csv`, `option_pairs.csv`, "
              "`most_text_solvable.csv`, `tst/s_x.csv` and `tst/summary.json` (pass `tst/` to `visdep audit --tst`)."]
    return "\n".join(lines) + "\n"


def write_first_look(records: Sequence[Question], name: str, origin: str, out: str | Path,
                     config: TstConfig | None = None, top: int = 10) -> list[Path]:
    """Run the stress test and the health figures on `records` and write OUT; returns the written paths."""
    records = list(records)
    out = Path(out)
    result = run_tst(records, config or TstConfig(), name)
    figures, tables = health_summary(records)
    solvable = most_text_solvable(records, result, top)
    out.mkdir(parents=True, exist_ok=True)
    written = write_tst(result, out / "tst")
    for table_name, frame in (*tables.items(), ("most_text_solvable", solvable)):
        path = out / f"{table_name}.csv"
        frame.to_csv(path, index=False)
        written.append(path)
    health = {"benchmark": name, "origin": origin, "verdict": verdict(result.summary),
              "tst": {k: result.summary[k] for k in ("accuracy", "accuracy_ci95", "chance", "folds", "seed")},
              **figures}
    (out / MARKER).write_text(json.dumps(health, indent=2) + "\n")
    (out / "report.md").write_text(render_report(name, origin, records, result, figures, tables, solvable))
    return [out / "report.md", out / MARKER, *written]
