"""Each filter scored against the planted truth: does it remove the questions the text gives away, and keep
the ones only the video answers?

For a filter that removes the set R of questions, with TS the text-solvable ones (planted `text_only` or
`both`) and VO the `video_only` ones:

    precision = |R ∩ TS| / |R|      recall = |R ∩ TS| / |TS|      video-only kept = |VO \\ R| / |VO|

each a mean over a group of questions (precision: of [q in TS] over R; recall: of [q in R] over TS; kept: of
[q not in R] over VO), with the audit's 95% interval of an accuracy over questions that share videos
(`visdep_metrics.stats.crossed_intervals`: Clopper-Pearson's on the independent answers the videos leave, never of zero
width; withheld, NaN, below ten). Filters: S(q) <= τ (the grounded subset) for the paper's
T(q) and for each chance-aware variant (`visdep_metrics.audit.diagnostics.TEXTUAL_EVIDENCE`), the
LLM-Inspector and B-Clean columns of the audit's questions.csv, TsT-RF's s(x) (removed where s(x) - 1/K > τ),
and IBP's removed ids. `evidence_contributions` says which text model raises T(q) on a set of questions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from visdep_metrics.demo.planted import TEXT_SOLVABLE
from visdep_metrics.stats import crossed_intervals

TAUS = np.round(np.arange(-0.5, 1.01, 0.05), 2)
MEASURES = ("precision", "recall", "video_only_kept")


def filter_scores(removed: Mapping[str, np.ndarray], planted: pd.DataFrame) -> pd.DataFrame:
    """One row per filter: n_removed, n_removed_not_text_solvable, precision, recall, video_only_kept, the last
    three with `_lo`/`_hi`.

    removed: {filter name: (n,) booleans in the order of `planted`}; planted: question_id, video, planted_type."""
    text_solvable = planted["planted_type"].isin(TEXT_SOLVABLE).to_numpy()
    video_only = (planted["planted_type"] == "video_only").to_numpy()
    rows = []
    for name, r in removed.items():
        r = np.asarray(r, dtype=bool)
        if r.shape != text_solvable.shape:
            raise ValueError(f"filter {name}: {r.shape} removal flags for {text_solvable.shape[0]} questions")
        values = np.stack([text_solvable, r, ~r]).astype(float)  # precision | recall | kept, as means
        groups = np.stack([r, text_solvable, video_only])
        found = crossed_intervals(values, groups, planted["video"].to_numpy(), None, 0.95, proportion=True)
        low, high = found.low, found.high
        row = {"filter": name, "n_removed": int(r.sum()),
               "n_removed_not_text_solvable": int((r & ~text_solvable).sum())}
        for m, measure in enumerate(MEASURES):
            member = groups[m]
            row[measure] = float(values[m][member].mean()) if member.any() else np.nan
            row[f"{measure}_lo"], row[f"{measure}_hi"] = float(low[m, m]), float(high[m, m])
        rows.append(row)
    return pd.DataFrame(rows)


def signal_name(variant: str) -> str:
    """The name of S(q) computed with a variant of T(q): "S" for the paper's, "S (variant)" otherwise."""
    return "S" if variant == "paper" else f"S ({variant})"


def removals(questions: pd.DataFrame, planted: pd.DataFrame, tau: float, shortcut_scores: Mapping[str, np.ndarray],
             s_tst: pd.Series | None = None, ibp_removed: set[str] | None = None) -> dict[str, np.ndarray]:
    """{filter: removed flags} in the order of `planted`: each S of `shortcut_scores` ({signal: (n,) S(q) in the
    order of `planted`}) above τ, and the baselines from the audit's questions.csv (one benchmark)."""
    q = questions.set_index("question_id").loc[planted["question_id"]]
    out = {f"{signal} <= {tau:g}": np.asarray(s) > tau for signal, s in shortcut_scores.items()}
    if "kept_llm_inspector" in q:
        out["LLM-Inspector"] = ~q["kept_llm_inspector"].astype(bool).to_numpy()
    if "kept_b_clean" in q:
        out["B-Clean"] = ~q["kept_b_clean"].astype(bool).to_numpy()
    if s_tst is not None:
        excess = s_tst.loc[planted["question_id"]].to_numpy() - 1 / q["n_options"].to_numpy()
        out[f"TsT-RF s(x) - 1/K <= {tau:g}"] = excess > tau
    if ibp_removed is not None:
        out["IBP"] = planted["question_id"].isin(ibp_removed).to_numpy()
    return out


def threshold_sweep(signal: np.ndarray, planted: pd.DataFrame, taus=TAUS) -> pd.DataFrame:
    """Precision, recall and video-only kept when removing {q : signal(q) > τ}, for each τ (no intervals)."""
    text_solvable = planted["planted_type"].isin(TEXT_SOLVABLE).to_numpy()
    video_only = (planted["planted_type"] == "video_only").to_numpy()
    removed = np.asarray(signal)[None, :] > np.asarray(taus)[:, None]  # (T, n)
    n_removed = removed.sum(axis=1)
    hits = (removed & text_solvable).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({"tau": taus, "n_removed": n_removed,
                             "precision": np.where(n_removed > 0, hits / n_removed, np.nan),
                             "recall": hits / max(int(text_solvable.sum()), 1),
                             "video_only_kept": (~removed & video_only).sum(axis=1) / max(int(video_only.sum()), 1)})


def evidence_contributions(correct_blind: np.ndarray, entropy_blind: np.ndarray, models: list[str],
                           among: np.ndarray, unanswerable: np.ndarray) -> pd.DataFrame:
    """Each text-panel model's part in the paper's T(q) on the questions `among` (booleans), one row per model:

        contribution_m = mean_{q in among} [Correct_m(q)] (1 - H_m(q)) / |M|    (they sum to the mean of T there)

    share = contribution / their sum; right = sum_{q in among} [Correct_m(q)]; confidence = mean of 1 - H_m(q) over
    those; and, as a measure of how the model guesses, its accuracy and mean 1 - H on the `unanswerable` ones.
    correct_blind, entropy_blind: (models, n) in the order of `models`."""
    c = np.asarray(correct_blind, dtype=float)
    h = np.asarray(entropy_blind, dtype=float)
    among, unanswerable = np.asarray(among, dtype=bool), np.asarray(unanswerable, dtype=bool)
    terms = c * (1.0 - h) / len(models)
    contribution = terms[:, among].mean(axis=1) if among.any() else np.zeros(len(models))
    total = contribution.sum()
    right = c[:, among].astype(bool)
    with np.errstate(invalid="ignore"):
        return pd.DataFrame({
            "model": models, "contribution": contribution,
            "share": contribution / total if total > 0 else np.full(len(models), np.nan),
            "right": right.sum(axis=1), "of": int(among.sum()),
            "confidence": [float((1.0 - h[m, among][right[m]]).mean()) if right[m].any() else np.nan
                           for m in range(len(models))],
            "accuracy_unanswerable": c[:, unanswerable].mean(axis=1) if unanswerable.any() else np.nan,
            "confidence_unanswerable": (1.0 - h[:, unanswerable]).mean(axis=1) if unanswerable.any() else np.nan})


def drivers(contributions: pd.DataFrame) -> pd.DataFrame:
    """The fewest models, largest first, whose contributions make up at least half of the total."""
    ranked = contributions[contributions["contribution"] > 0].sort_values("contribution", ascending=False)
    if ranked.empty:
        return ranked
    before = ranked["contribution"].cumsum().shift(fill_value=0.0)
    return ranked[before < 0.5 * ranked["contribution"].sum()]
