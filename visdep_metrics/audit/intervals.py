"""The audit's numbers with intervals: per model, metric, category and subset (`summary_rows`), every model against a
baseline (`comparison_rows`) and frame budgets (`frame_rows`).

Intervals and p-values come from `visdep_metrics.stats.crossed_bootstrap`: within each group (a benchmark, a
category, the grounded subset) the videos and the prompts its questions share are resampled, every model and metric
on the same resamples, so VG, the mean of the VLMs and every comparison are paired. Where the records name no prompt
only videos are resampled, where they name no video each question is its own (and a note says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from visdep_metrics.audit.diagnostics import subset_diagnostics
from visdep_metrics.audit.pairing import BenchmarkResults
from visdep_metrics.audit.runs import FRAMES_SETTING, ModelInfo
from visdep_metrics.stats import BootstrapSettings, crossed_bootstrap, design_effect, labels, units_per_group

METRICS = ("acc_blind", "acc_video", "blind_gap", "visual_gain")
ALL = "all"


@dataclass(frozen=True)
class Design:
    """What a benchmark's bootstrap resamples: integer labels of each question's video and prompt."""

    videos: np.ndarray  # one label per question; each question its own where the records name no video
    prompts: np.ndarray | None  # None where the records name no prompt
    resampled: str  # "videos and prompts", "videos", "questions" (with " and prompts" where known)

    @classmethod
    def of(cls, bench: BenchmarkResults) -> Design:
        n = len(bench.questions)
        videos, prompts = bench.videos, bench.prompts
        unit = "questions" if videos is None else "videos"
        resampled = unit if prompts is None else f"{unit} and prompts"
        return cls(videos=labels(videos, n), prompts=None if prompts is None else labels(prompts, n),
                   resampled=resampled)

    def counts(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per group: its videos and its distinct prompts (NaN where the records name no prompt)."""
        prompts = np.full(len(groups), np.nan) if self.prompts is None else units_per_group(groups, self.prompts)
        return units_per_group(groups, self.videos), prompts

    def bootstrap(self, values: np.ndarray, groups: np.ndarray, settings: BootstrapSettings, *key: str,
                  contrasts: np.ndarray | None = None):
        return crossed_bootstrap(values, groups, self.videos, self.prompts, settings, settings.rng(*key), contrasts)

    def deff(self, correct: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """Design effect of each row of `correct` (rows, n) over the questions `keep`; NaN for NaN rows."""
        out = np.full(correct.shape[0], np.nan)
        finite = np.isfinite(correct[:, keep]).all(axis=1)
        if finite.any() and keep.sum() > 1:
            out[finite] = design_effect(correct[finite][:, keep], self.videos[keep],
                                        None if self.prompts is None else self.prompts[keep])
        return out


def subsets(scores: pd.DataFrame) -> dict[str, np.ndarray]:
    """The full benchmark and, where S(q) is known and keeps something, its grounded subset."""
    found = {"full": np.ones(len(scores), dtype=bool)}
    if scores["grounded"].notna().all() and scores["grounded"].any():
        found["grounded"] = scores["grounded"].to_numpy(dtype=bool)
    return found


def interval_notes(groups: np.ndarray, design: Design) -> list[str]:
    """Per group: why it has no interval ("" where it has one)."""
    notes = []
    for n, videos in zip(groups.sum(axis=1), units_per_group(groups, design.videos), strict=True):
        if n < 2:
            notes.append("one question: nothing to resample")
        elif videos < 2:
            notes.append(f"all {n} questions are about one video: resampling videos needs two or more")
        else:
            notes.append("")
    return notes


def evaluation_models(bench: BenchmarkResults, roles: dict[str, str]) -> tuple[list[str], bool]:
    """Models that judge the benchmark and its filters: the held-out VLMs, else every VLM (then not held out)."""
    vlms = [m for m, video in zip(bench.models, bench.has_video, strict=True) if video]
    held_out = [m for m in vlms if roles[m] == "held_out"]
    return (held_out, True) if held_out else (vlms, False)


def _group_columns(bench: BenchmarkResults, design: Design, groups: np.ndarray) -> list[dict]:
    """The columns every row of a group shares: n, its videos and prompts, what was resampled, why no interval."""
    videos, prompts = design.counts(groups)
    return [{"benchmark": bench.benchmark, "n": int(n), "n_videos": int(v), "n_prompts": p,
             "resampled": design.resampled, "interval_note": note}
            for n, v, p, note in zip(groups.sum(axis=1), videos, prompts, interval_notes(groups, design), strict=True)]


def summary_rows(bench: BenchmarkResults, scores: pd.DataFrame, roles: dict[str, str], design: Design,
                 settings: BootstrapSettings) -> tuple[list[dict], list[dict]]:
    """Acc, chance, BG, VG with intervals per model, for the full benchmark and the grounded subset, over all
    questions and per category (with the design effects of blind and video correctness over all questions); and
    the same for the mean of the evaluation VLMs (the report's lead)."""
    k = scores["n_options"].to_numpy()
    categories = sorted(scores["category"].dropna().unique())
    groups = [(subset, category, in_subset & (True if category == ALL else (scores["category"] == category).to_numpy()))
              for subset, in_subset in subsets(scores).items() for category in [ALL] + categories]
    groups = [(subset, category, keep) for subset, category, keep in groups if keep.any()]
    members = np.stack([keep for _, _, keep in groups])
    all_rows, video_rows = np.arange(len(bench.models)), np.flatnonzero(bench.has_video)
    cb, cv = bench.correct_blind, bench.correct_video[video_rows]
    judges, _ = evaluation_models(bench, roles)
    judge_rows = bench.model_rows(judges)
    headline_rows = judge_rows if judge_rows.size else all_rows
    mean_b = cb[headline_rows].mean(axis=0, keepdims=True)
    mean_v = bench.correct_video[judge_rows].mean(axis=0, keepdims=True) if judge_rows.size else None
    # The resampled values: each model's blind and video correctness and 1/K; every metric is a linear combination
    # of their means (BG = Acc_B - chance, VG = Acc_V - Acc_B, the mean of the VLMs), one resampling of a group
    # serving every one of them.
    n_models, video_at = len(bench.models), {int(i): len(bench.models) + j for j, i in enumerate(video_rows)}
    inverse_k = n_models + len(video_rows)
    values = np.concatenate([cb, cv, 1.0 / k[None, :]])
    judge_video = [video_at[int(i)] for i in judge_rows]
    blocks = [("acc_blind", all_rows, [{i: 1.0} for i in all_rows]),
              ("blind_gap", all_rows, [{i: 1.0, inverse_k: -1.0} for i in all_rows]),
              ("acc_video", video_rows, [{video_at[int(i)]: 1.0} for i in video_rows]),
              ("visual_gain", video_rows, [{video_at[int(i)]: 1.0, int(i): -1.0} for i in video_rows]),
              ("mean_acc_blind", [0], [_mean_of(headline_rows)]),
              ("mean_blind_gap", [0], [_mean_of(headline_rows) | {inverse_k: -1.0}])]
    if mean_v is not None:
        blocks += [("mean_acc_video", [0], [_mean_of(judge_video)]),
                   ("mean_visual_gain", [0], [_combined(_mean_of(judge_video), _mean_of(headline_rows), -1.0)])]
    contrasts = _contrasts([terms for _, _, block in blocks for terms in block], len(values))
    found = design.bootstrap(values, members, settings, bench.benchmark, contrasts=contrasts)
    rows, headline = [], []
    for g, (common, (subset, category, keep)) in enumerate(zip(_group_columns(bench, design, members), groups,
                                                               strict=True)):
        common = {**common, "subset": subset, "category": category}
        d = subset_diagnostics(keep, bench.correct_blind, bench.correct_video, k)
        deff_b, deff_v = ((design.deff(bench.correct_blind, keep), design.deff(bench.correct_video, keep))
                          if category == ALL else (np.full(len(bench.models), np.nan),) * 2)
        bounds, start = {}, 0
        for name, model_rows, _ in blocks:  # the mean blocks have one row, [0]
            lo, hi = (np.full(1 if name.startswith("mean_") else len(bench.models), np.nan) for _ in range(2))
            stop = start + len(model_rows)
            lo[model_rows], hi[model_rows] = found.low[g, start:stop], found.high[g, start:stop]
            bounds[name] = (lo, hi)
            start = stop
        for i, model in enumerate(bench.models):
            row = {"model": model, "role": roles[model], **common, "chance": d["chance"][i],
                   "deff_blind": deff_b[i], "deff_video": deff_v[i]}
            for name in METRICS:
                row[name] = d[name][i]
                row[f"{name}_lo"], row[f"{name}_hi"] = bounds[name][0][i], bounds[name][1][i]
            rows.append(row)
        if category == ALL:
            row = {**common, "models": "; ".join(bench.models[i] for i in headline_rows),
                   "held_out": bool(judge_rows.size) and all(roles[bench.models[i]] == "held_out" for i in judge_rows),
                   "chance": d["chance"][0], "deff_blind": _mean(deff_b[headline_rows]),
                   "deff_video": _mean(deff_v[judge_rows])}
            values = {"acc_blind": mean_b[0, keep].mean(), "blind_gap": mean_b[0, keep].mean() - d["chance"][0]}
            if mean_v is not None:
                values |= {"acc_video": mean_v[0, keep].mean(), "visual_gain": (mean_v - mean_b)[0, keep].mean()}
            for name in METRICS:
                row[name] = values.get(name, np.nan)
                row[f"{name}_lo"], row[f"{name}_hi"] = bounds.get(f"mean_{name}", ([np.nan], [np.nan]))[0][0], \
                    bounds.get(f"mean_{name}", ([np.nan], [np.nan]))[1][0]
            headline.append(row)
    return rows, headline


def comparison_rows(bench: BenchmarkResults, scores: pd.DataFrame, baseline: str, others: Sequence[str],
                    roles: dict[str, str], design: Design, settings: BootstrapSettings,
                    selected_by: Sequence[str] = (), groups: dict[str, np.ndarray] | None = None) -> list[dict]:
    """Models minus a baseline on the same questions, with paired intervals and p-values.

    delta_acc_blind = mean_q(c_blind[m, q] - c_blind[base, q]) (= the change of Blind Gap: chance is shared),
    delta_acc_video likewise, delta_visual_gain = mean_q((c_video - c_blind)[m, q] - (c_video - c_blind)[base, q]).
    Within a subset one resampling of its videos and prompts serves both models: each interval is that of a paired
    difference, and each p-value (H0: no change) is where that interval reaches 0 (`stats.bootstrap_p_values`).
    `text_shortcut_gain`: Acc_V rose (interval above 0) while BG rose or VG fell (interval above / below 0), the
    paper's appendix B.5 SFT case; `flagged` says which. `selected_by`: the models whose runs chose the grounded
    subset (T and V panels): a comparison there involving one of them says so."""
    if baseline not in bench.models:
        return []
    base = bench.models.index(baseline)
    others_rows = [bench.models.index(m) for m in others if m in bench.models and m != baseline]
    if not others_rows:
        return []
    groups = subsets(scores) if groups is None else groups
    cb, cv = bench.correct_blind, bench.correct_video
    video = [i for i in others_rows if bench.has_video[i]] if bench.has_video[base] else []
    # resampled values: each model's blind correctness, then the video correctness of the baseline and the others
    n_models = len(bench.models)
    video_at = {i: n_models + j for j, i in enumerate([base, *video] if video else [])}
    values = np.concatenate([cb, cv[[base, *video]]]) if video else cb
    blocks = [("acc_blind", others_rows, [{i: 1.0, base: -1.0} for i in others_rows])]
    if video:
        blocks += [("acc_video", video, [{video_at[i]: 1.0, video_at[base]: -1.0} for i in video]),
                   ("visual_gain", video, [_combined({video_at[i]: 1.0, i: -1.0}, {video_at[base]: 1.0, base: -1.0},
                                                     -1.0) for i in video])]
    contrasts = {name: _contrasts(block, len(values)) for name, _, block in blocks}
    members = np.stack(list(groups.values()))
    found = design.bootstrap(values, members, settings, bench.benchmark, "baseline", baseline,
                             contrasts=np.concatenate(list(contrasts.values())))
    blocks = [(name, members_of, contrasts[name] @ values) for name, members_of, _ in blocks]
    rows = []
    for g, (common, (subset, keep)) in enumerate(zip(_group_columns(bench, design, members), groups.items(),
                                                     strict=True)):
        for i in others_rows:
            model = bench.models[i]
            row = {"model": model, "role": roles[model], "baseline": baseline, **common, "subset": subset,
                   "p_test": f"paired bootstrap over {design.resampled}"}
            start = 0
            for name, members_of, deltas in blocks:
                if i in members_of:
                    j = start + members_of.index(i)
                    row[f"delta_{name}"] = deltas[members_of.index(i), keep].mean()
                    row[f"delta_{name}_lo"], row[f"delta_{name}_hi"] = found.low[g, j], found.high[g, j]
                    row[f"delta_{name}_p"] = found.p_value[g, j]
                start += len(members_of)
            if i in video:
                flagged = [what for what, holds in (("Blind Gap rose", sign(row, "delta_acc_blind") > 0),
                                                    ("Visual Gain fell", sign(row, "delta_visual_gain") < 0)) if holds]
                row["text_shortcut_gain"] = sign(row, "delta_acc_video") > 0 and bool(flagged)
                row["flagged"] = "; ".join(flagged) if row["text_shortcut_gain"] else ""
            involved = sorted({model, baseline} & set(selected_by))
            row["selection_note"] = (f"the subset was selected with the runs of {', '.join(involved)}: it favours "
                                     f"them; held-out models are the fair comparison" if subset == "grounded"
                                     and involved else "")
            rows.append(row)
    return rows


def _mean_of(rows) -> dict[int, float]:
    """The terms of the mean of some value rows."""
    return {int(i): 1.0 / len(rows) for i in rows}


def _combined(a: dict[int, float], b: dict[int, float], b_weight: float) -> dict[int, float]:
    return {i: a.get(i, 0.0) + b_weight * b.get(i, 0.0) for i in a.keys() | b.keys()}


def _contrasts(outputs: list[dict[int, float]], n_values: int) -> np.ndarray:
    """(outputs, values): each output's weights on the value rows."""
    matrix = np.zeros((len(outputs), n_values))
    for o, terms in enumerate(outputs):
        for i, weight in terms.items():
            matrix[o, i] += weight
    return matrix


def _mean(values: np.ndarray) -> float:
    """The mean of the finite values, NaN where there is none."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else np.nan


def sign(row, metric: str) -> int:
    """+1 / -1 where the interval lies above / below 0, else 0 (a change the questions cannot tell from none)."""
    lo, hi = row.get(f"{metric}_lo"), row.get(f"{metric}_hi")
    if pd.isna(lo) or pd.isna(hi):
        return 0
    return 1 if lo > 0 else -1 if hi < 0 else 0


def frame_rows(bench: BenchmarkResults, scores: pd.DataFrame, summary: list[dict], model_info: dict[str, ModelInfo],
               roles: dict[str, str], design: Design, settings: BootstrapSettings) -> list[dict]:
    """Frame budgets: models of one checkpoint that differ only in max_frames, their Acc_V and VG (from the
    summary rows) and, against the fewest frames, the paired differences of `comparison_rows`."""
    checkpoints: dict[tuple, list[str]] = {}
    for model, video in zip(bench.models, bench.has_video, strict=True):
        info = model_info.get(model)
        if video and info is not None and info.max_frames is not None:
            checkpoints.setdefault(info.without(FRAMES_SETTING), []).append(model)
    overall = {r["model"]: r for r in summary if r["subset"] == "full" and r["category"] == ALL}
    rows = []
    for models in checkpoints.values():
        if len({model_info[m].max_frames for m in models}) < 2:
            continue
        models = sorted(models, key=lambda m: model_info[m].max_frames)
        fewest = models[0]
        deltas = {r["model"]: r for r in comparison_rows(bench, scores, fewest, models[1:], roles, design, settings,
                                                         groups={"full": np.ones(len(scores), dtype=bool)})}
        for model in models:
            info = model_info[model]
            row = {"benchmark": bench.benchmark, "checkpoint": info.checkpoint_label(FRAMES_SETTING), "model": model,
                   "max_frames": info.max_frames, "fewest_frames_model": fewest}
            row |= {key: overall[model][key] for key in ("n", "n_videos", "n_prompts", "resampled", "interval_note",
                                                          "acc_video", "acc_video_lo", "acc_video_hi", "visual_gain",
                                                          "visual_gain_lo", "visual_gain_hi")}
            for name in ("acc_video", "visual_gain"):
                for suffix in ("", "_lo", "_hi", "_p"):
                    row[f"delta_{name}{suffix}"] = deltas.get(model, {}).get(f"delta_{name}{suffix}", np.nan)
            rows.append(row)
    return rows
