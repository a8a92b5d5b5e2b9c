"""Each filter scored against the planted truth: does it remove the questions the text gives away, and keep
the ones only the video answers?

For a filter that removes the set R of questions, with TS the text-solvable ones (planted `text_only` or
`both`) and VO the ones only the video answers (`video_only` and `order`):

    precision = |R ∩ TS| / |R|      recall = |R ∩ TS| / |TS|      video-only kept = |VO \\ R| / |VO|

each a mean over a group of questions (precision: of [q in TS] over R; recall: of [q in R] over TS; kept: of
[q not in R] over VO), with the audit's 95% interval of an accuracy over questions that share videos
(`visdep_metrics.stats.crossed_intervals`: Clopper-Pearson's on the independent answers the videos leave, never of zero
width; withheld, NaN, below ten). Filters: S(q) <= τ (the grounded subset) for the paper's
T(q) and for each chance-aware variant (`visdep_metrics.audit.diagnostics.TEXTUAL_EVIDENCE`), the
LLM-Inspector and B-Clean columns of the audit's questions.csv, TsT-RF's s(x) (removed where s(x) - 1/K > τ),
and IBP's removed ids. `evidence_contributions` says which text model raises T(q) on a set of questions.

The temporal ladder against the same truth: `subset_scores` scores the audit's temporal subset (grounded and
V_order(q) >= τ_order) as a choice of the planted `order` questions, with the same measures and intervals, and
`ladder_against_truth` sets each VLM's Frame and Order Gain per category beside what the planted kinds imply:

- a category the clip does not decide (accident reason, prevention, driver's name): FG = OG = 0, the frames carry
  nothing the answer needs;
- a category any one frame decides (the colour): FG = OG = 0;
- the direction (`order`): one frame is the same picture for all four directions, so with it a model can but guess;
  the frames out of order still show the axis, two of the four directions. A model that reads the order (Acc_video
  above 100 · 2/K, its lower bound: more than the axis gives) so has FG > 0 and OG > 0; one that does not has
  FG = OG = 0 (what it makes of the frames does not depend on their order or number).

A gain agrees with the truth where its interval holds 0 (implied 0) or lies above 0 (implied > 0); a gain without an
interval (every paired difference the same) where it equals 0, or is above 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from visdep_metrics.demo.planted import ONLY_VIDEO, TEXT_SOLVABLE, VIDEO_DECIDES
from visdep_metrics.stats import crossed_intervals

TEMPORAL_SUBSET = "temporal subset"  # the audit's questions.csv `temporal`: S <= τ and V_order >= τ_order

TAUS = np.round(np.arange(-0.5, 1.01, 0.05), 2)
RUNGS = ("blind", "single", "shuffled", "video")  # the ladder's rungs the demo runs, as ladder.csv's acc_ columns
MEASURES = ("precision", "recall", "video_only_kept")


def filter_scores(removed: Mapping[str, np.ndarray], planted: pd.DataFrame) -> pd.DataFrame:
    """One row per filter: n_removed, n_removed_not_text_solvable, precision, recall, video_only_kept, the last
    three with `_lo`/`_hi`.

    removed: {filter name: (n,) booleans in the order of `planted`}; planted: question_id, video, planted_type."""
    text_solvable = planted["planted_type"].isin(TEXT_SOLVABLE).to_numpy()
    video_only = planted["planted_type"].isin(ONLY_VIDEO).to_numpy()
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
    video_only = planted["planted_type"].isin(ONLY_VIDEO).to_numpy()
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


def subset_scores(chosen: Mapping[str, np.ndarray], planted: pd.DataFrame, target: str = "order") -> pd.DataFrame:
    """One row per subset of `chosen` ({name: (n,) booleans in the order of `planted`}) as a choice of the planted
    `target` questions: n_chosen, n_target, precision = |C ∩ O| / |C|, recall = |C ∩ O| / |O| (each with `_lo`/`_hi`,
    the intervals of `filter_scores`), and what it chose by planted type ("order 40; video_only 2")."""
    relevant = (planted["planted_type"] == target).to_numpy()
    types = planted["planted_type"].to_numpy()
    rows = []
    for name, c in chosen.items():
        c = np.asarray(c, dtype=bool)
        if c.shape != relevant.shape:
            raise ValueError(f"subset {name}: {c.shape} flags for {relevant.shape[0]} questions")
        values = np.stack([relevant, c]).astype(float)
        groups = np.stack([c, relevant])
        found = crossed_intervals(values, groups, planted["video"].to_numpy(), None, 0.95, proportion=True)
        kinds = pd.Series(types[c]).value_counts()
        row = {"subset": name, "target": target, "n_chosen": int(c.sum()), "n_target": int(relevant.sum()),
               "chosen_by_type": "; ".join(f"{kind} {n}" for kind, n in kinds.items())}
        for m, measure in enumerate(("precision", "recall")):
            member = groups[m]
            row[measure] = float(values[m][member].mean()) if member.any() else np.nan
            row[f"{measure}_lo"], row[f"{measure}_hi"] = float(found.low[m, m]), float(found.high[m, m])
        rows.append(row)
    return pd.DataFrame(rows)


def decided_by(planted: pd.DataFrame) -> dict[str, str]:
    """{category: what decides its questions}: "the order" where all are planted `order`, "one frame" where the clip
    decides some (`video_only`, `both`), else "not the clip"."""
    found = {}
    for category, types in planted.groupby("category")["planted_type"]:
        kinds = set(types)
        found[category] = "the order" if kinds == {"order"} else \
            "one frame" if kinds & set(VIDEO_DECIDES) else "not the clip"
    return found


def ladder_against_truth(ladder: pd.DataFrame, planted: pd.DataFrame, n_options: np.ndarray,
                         labels: Mapping[str, str]) -> pd.DataFrame:
    """Each VLM's FG and OG per category (the audit's ladder.csv rows of the full set, in %) beside what the planted
    kinds imply (module docstring): one row per model and category with the rungs' accuracies, the gains with their
    intervals, `implied_frame_gain`, `implied_order_gain` ("0" or "> 0"), `reads_order` and `reads_above`
    (the order's categories only: whether Acc_video's lower bound lies above 100 · 2/K, that bound), and
    `frame_gain_agrees`, `order_gain_agrees`.

    n_options: (n,) K of each question of `planted`; labels: {audit model name: the demo's label}."""
    deciding = decided_by(planted)
    chance = (100.0 / pd.Series(np.asarray(n_options, dtype=float), index=planted.index)).groupby(
        planted["category"]).mean()
    rows = []
    for _, r in ladder[(ladder["subset"] == "full") & ladder["category"].isin(list(deciding))].iterrows():
        by, at_chance = deciding[r["category"]], float(chance[r["category"]])
        row = {"model": labels.get(r["model"], r["model"]), "category": r["category"], "decided_by": by,
               "n": int(r["n"]), **{f"acc_{rung}": r[f"acc_{rung}"] for rung in RUNGS}}
        for gain in ("frame_gain", "order_gain"):
            row |= {gain: r[gain], f"{gain}_lo": r[f"{gain}_lo"], f"{gain}_hi": r[f"{gain}_hi"]}
        if by == "the order":
            reads = bool(r["acc_video_lo"] > 2 * at_chance)  # above what the frames' set allows (the axis)
            implied = "> 0" if reads else "0"
            row |= {"reads_order": reads, "reads_above": 2 * at_chance, "implied_frame_gain": implied,
                    "implied_order_gain": implied, "frame_gain_agrees": _agrees(r, "frame_gain", reads),
                    "order_gain_agrees": _agrees(r, "order_gain", reads)}
        else:
            row |= {"reads_order": np.nan, "reads_above": np.nan, "implied_frame_gain": "0", "implied_order_gain": "0",
                    "frame_gain_agrees": _agrees(r, "frame_gain", False),
                    "order_gain_agrees": _agrees(r, "order_gain", False)}
        rows.append(row)
    return pd.DataFrame(rows)


def _agrees(row: pd.Series, gain: str, positive: bool) -> bool:
    """Whether the gain agrees with an implied "> 0" (`positive`: its interval above 0) or "0" (its interval holds 0);
    without an interval, whether the gain itself is above 0, or 0."""
    value, lo, hi = row[gain], row[f"{gain}_lo"], row[f"{gain}_hi"]
    if np.isnan(lo) or np.isnan(hi):
        return bool(value > 0) if positive else bool(np.isclose(value, 0.0))
    return bool(lo > 0) if positive else bool(lo - 1e-9 <= 0.0 <= hi + 1e-9)
