"""Read `visdep tst` outputs (the test-set stress test) for the audit.

A `visdep tst` output folder holds ``s_x.csv`` (one row per question: question_id, category,
n_options, s, s_minus_chance, fold, correct; `correct` = 1 where the held-out random forest's argmax
is the answer) and ``summary.json`` (at least benchmark, accuracy, chance). The audit joins `s` to
its questions as ``s_tst`` and reports the non-visual solvability, the mean of `correct`, of the full
benchmark and of its grounded subset.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from lmms_eval_tasks.errors import VisdepError, excerpt
from lmms_eval_tasks.loaders import known_benchmarks
from lmms_eval_tasks.reading import decode, read_bytes, read_json

S_X_COLUMNS = ("question_id", "category", "n_options", "s", "s_minus_chance", "fold", "correct")


class StressTestError(VisdepError):
    """A `visdep tst` output that cannot be joined to the audit; the message names it."""


@dataclass(frozen=True)
class StressTest:
    benchmark: str
    folder: Path
    scores: pd.DataFrame  # question_id (str), n_options, s, correct
    summary: dict


def read_stress_test(folder: str | Path) -> StressTest:
    """Read and check one `visdep tst` output folder."""
    folder = Path(folder)
    s_x, summary_path = folder / "s_x.csv", folder / "summary.json"
    for path in (s_x, summary_path):
        if not path.exists():
            raise StressTestError(f"{folder}: no {path.name}; expected a `visdep tst` output folder")
    summary = read_json(summary_path, "tst", error=StressTestError)
    known = known_benchmarks()
    if not isinstance(summary, dict) or summary.get("benchmark") not in known:
        raise StressTestError(f"{summary_path}: 'benchmark' must be one of {', '.join(known)}")
    text = decode(read_bytes(s_x, "tst", error=StressTestError), s_x, error=StressTestError)
    try:
        scores = pd.read_csv(io.StringIO(text), dtype={"question_id": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise StressTestError(f"{s_x}: not a readable CSV ({excerpt(str(e), 200)})") from e
    missing = [c for c in S_X_COLUMNS if c not in scores.columns]
    if missing:
        raise StressTestError(f"{s_x}: missing column(s) {missing}")
    if scores["question_id"].isna().any() or scores["question_id"].duplicated().any():
        raise StressTestError(f"{s_x}: question_id must be present and unique on every row")
    for column in ("n_options", "s", "correct"):
        values = pd.to_numeric(scores[column], errors="coerce")
        if not np.isfinite(values).all():
            bad = scores.loc[~np.isfinite(values), "question_id"].head(3).tolist()
            raise StressTestError(f"{s_x}: column {column!r} is not a finite number for question(s) {excerpt(bad)}")
        scores[column] = values
    if not scores["correct"].isin([0, 1]).all():
        raise StressTestError(f"{s_x}: column 'correct' must be 0 or 1")
    return StressTest(benchmark=summary["benchmark"], folder=folder,
                      scores=scores[["question_id", "n_options", "s", "correct"]], summary=summary)


def align_stress_test(test: StressTest, question_ids: ArrayLike, n_options: ArrayLike) -> pd.DataFrame:
    """The test's rows in the order of the audit's questions; refuses other questions or option counts."""
    ids = pd.Index(np.asarray(question_ids, dtype=object))
    positions = pd.Index(test.scores["question_id"]).get_indexer(ids)
    extra = sorted(set(test.scores["question_id"]) - set(ids))
    if (positions < 0).any() or extra:
        absent = ids[positions < 0].tolist()
        raise StressTestError(
            f"{test.folder}: its {test.benchmark} questions differ from the audited runs: {len(absent)} audited "
            f"question(s) have no score (e.g. {absent[:3]}), {len(extra)} scored question(s) were not audited "
            f"(e.g. {extra[:3]})")
    aligned = test.scores.iloc[positions].reset_index(drop=True)
    differ = np.flatnonzero(aligned["n_options"].to_numpy() != np.asarray(n_options))
    if differ.size:
        raise StressTestError(f"{test.folder}: n_options differs from the audited runs for {differ.size} question(s), "
                              f"e.g. {aligned['question_id'].iloc[differ[:3]].tolist()}")
    return aligned
