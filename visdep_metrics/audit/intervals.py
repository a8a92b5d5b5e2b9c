"""The audit's numbers with intervals: per model, metric, category and subset (`summary_rows`), every model against a
baseline (`comparison_rows`, with family-adjusted p-values: `adjust_family`) and frame budgets (`frame_rows`).

Intervals and p-values come from `visdep_metrics.stats.crossed_intervals`: within each group (a benchmark, a category,
the grounded subset) the design effect of each quantity is estimated from the videos and the prompts its questions
share; accuracies get Clopper-Pearson intervals on the independent answers that leaves, differences (VG, a model minus a
baseline) t intervals with the p-value of the same statistic (VG over shared prompts: its blind accuracy's interval for
the part that moves with it and a t for the rest, each VG naming its Acc_B; over shared videos and no shared prompt:
its video accuracy's likewise; a difference between models over a few
dominant prompts and no shared video: the prompts' wild cluster bootstrap, `visdep_metrics.wild_bootstrap`; one model
under two frame conditions, the ladder's gains: Tango's paired score interval, `visdep_metrics.paired`). Where the
records name no prompt only videos enter, where they name no video each question is its own (and a note says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from visdep_metrics.audit.diagnostics import subset_diagnostics
from visdep_metrics.audit.pairing import BenchmarkResults
from visdep_metrics.audit.panels import CONDITION_ROLE
from visdep_metrics.audit.runs import FRAMES_SETTING, ModelInfo
from visdep_metrics.degrees_of_freedom import effective_units
from visdep_metrics.stats import (
    WILD,
    Intervals,
    T,
    crossed_intervals,
    holm,
    labels,
    shares_prompts,
    units_per_group,
)

if TYPE_CHECKING:
    from visdep_metrics.audit.settings import AuditSettings

METRICS = ("acc_blind", "acc_video", "blind_gap", "visual_gain")
DELTA_NAMES = {"acc_blind": "ΔAcc_B", "acc_video": "ΔAcc_V", "visual_gain": "ΔVG"}
ALL = "all"
P_FAMILY = "Holm over every p-value of this table"


@dataclass(frozen=True)
class Design:
    """What a benchmark's intervals account for: integer labels of each question's video and prompt."""

    videos: np.ndarray  # one label per question; each question its own where the records name no video
    prompts: np.ndarray | None  # None where the records name no prompt
    unit: str  # "videos", or "questions" where the records name no video

    @classmethod
    def of(cls, bench: BenchmarkResults) -> Design:
        n = len(bench.questions)
        videos, prompts = bench.videos, bench.prompts
        return cls(videos=labels(videos, n), prompts=None if prompts is None else labels(prompts, n),
                   unit="questions" if videos is None else "videos")

    def resampled(self, keep: np.ndarray) -> str:
        """What the intervals of the questions `keep` count as their units: where the records name prompts, the blind
        quantities' are the prompts alone (`crossed_intervals(blind=...)`), the other quantities' the videos and the
        prompts."""
        if self.prompts is None:
            return self.unit
        if shares_prompts(self.prompts, keep):
            return f"prompts (blind), {self.unit} and prompts (with video)"
        return f"questions (blind), {self.unit} (with video); no prompt shared"

    def counts(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per group: its videos and its distinct prompts (NaN where the records name no prompt)."""
        prompts = np.full(len(groups), np.nan) if self.prompts is None else units_per_group(groups, self.prompts)
        return units_per_group(groups, self.videos), prompts

    def intervals(self, values: np.ndarray, groups: np.ndarray, confidence_level: float,
                  outputs: _Outputs) -> Intervals:
        return crossed_intervals(values, groups, self.videos, self.prompts, confidence_level, outputs.contrasts(),
                                 np.array(outputs.proportion), np.array(outputs.robust), outputs.blind(),
                                 outputs.blind_parts(), np.array(outputs.paired, dtype=bool))


def subsets(scores: pd.DataFrame) -> dict[str, np.ndarray]:
    """The full benchmark and, where S(q) is known and keeps something, its grounded subset; where V_order(q) is known
    too and keeps something, the temporal subset (grounded and V_order >= tau_order: `ladder.py`)."""
    found = {"full": np.ones(len(scores), dtype=bool)}
    for name in ("grounded", "temporal"):
        if name in scores and scores[name].notna().all() and scores[name].any():
            found[name] = scores[name].to_numpy(dtype=bool)
    return found


def evaluation_models(bench: BenchmarkResults, roles: dict[str, str]) -> tuple[list[str], bool]:
    """Models that judge the benchmark and its filters: the held-out VLMs, else every VLM (then not held out)."""
    vlms = [m for m, video in zip(bench.models, bench.has_video, strict=True) if video and roles[m] != CONDITION_ROLE]
    held_out = [m for m in vlms if roles[m] == "held_out"]
    return (held_out, True) if held_out else (vlms, False)


def _group_columns(bench: BenchmarkResults, design: Design, groups: np.ndarray, found: Intervals) -> list[dict]:
    """The columns every row of a group shares: n, its videos and prompts, what the interval accounts for, and why
    the group has no interval at all ("" where it has)."""
    videos, prompts = design.counts(groups)
    notes = [next((str(n) for n in row if n), "") if np.isnan(deff).all() else "" for row, deff in
             zip(found.note, found.deff, strict=True)]
    return [{"benchmark": bench.benchmark, "n": int(keep.sum()), "n_videos": int(v), "n_prompts": p,
             "resampled": design.resampled(keep), "interval_note": note}
            for keep, v, p, note in zip(groups, videos, prompts, notes, strict=True)]


class _Outputs:
    """The quantities one estimation computes: named blocks of contrasts over the value rows, each a proportion or a
    difference, and where each block's rows land in the result. The first `n_blind` value rows are blind answers."""

    def __init__(self, n_values: int, n_blind: int):
        self.n_values, self.n_blind = n_values, n_blind
        self.blocks, self.terms, self.proportion, self.robust, self.gain_of, self.paired = {}, [], [], [], [], []

    def add(self, name: str, members: Sequence[int], terms: list[dict[int, float]], proportion: bool,
            video: bool, gain_of: str | None = None, paired: bool = False) -> None:
        """proportion: Clopper-Pearson's interval, else a difference's; video: its answers share more than their
        prompt; gain_of: for a Visual Gain, the block of its blind accuracies (the same members); paired: a
        difference of two binary answer rows of one model under two conditions (Tango's score interval)."""
        self.blocks[name] = (len(self.terms), list(members))
        self.terms += terms
        self.proportion += [proportion] * len(terms)
        self.robust += [video] * len(terms)
        self.paired += [paired] * len(terms)
        self.gain_of += [None if gain_of is None else (gain_of, member) for member in members]

    def blind_parts(self) -> np.ndarray:
        """Per output, the output of a Visual Gain's blind accuracy, -1 elsewhere (`crossed_intervals`)."""
        return np.array([-1 if part is None else self.at(*part) for part in self.gain_of], dtype=np.int64)

    def blind(self) -> np.ndarray:
        """Which outputs are made of blind answers alone (their units are the prompts)."""
        return np.array([all(i < self.n_blind for i in terms) for terms in self.terms], dtype=bool)

    def contrasts(self) -> np.ndarray:
        matrix = np.zeros((len(self.terms), self.n_values))
        for o, terms in enumerate(self.terms):
            for i, weight in terms.items():
                matrix[o, i] += weight
        return matrix

    def at(self, name: str, member: int) -> int | None:
        """The output index of a block's member, None where the block lacks it."""
        if name not in self.blocks or member not in self.blocks[name][1]:
            return None
        start, members = self.blocks[name]
        return start + members.index(member)


def few_prompts_note(prompts: np.ndarray) -> str:
    """#44's one measured limit, said wherever such an interval is printed: a difference over a few dominant prompts
    (the prompts' wild bootstrap) leans toward the model whose accuracy varies more from prompt to prompt."""
    return (f"a difference over a few dominant prompts (≈ {effective_units(prompts):,.0f} effective prompts): between "
            f"unalike models such intervals lay wholly on one side of the truth in up to 5.2% (docs/statistics.md)")


def _put(row: dict, metric: str, found: Intervals, g: int, o: int | None, shift: float = 0.0) -> None:
    """A metric's bounds (minus `shift`), p-value and note from output o of group g (NaN where absent)."""
    if o is None:
        row[f"{metric}_lo"] = row[f"{metric}_hi"] = np.nan
        row[f"{metric}_note"] = ""
        return
    row[f"{metric}_lo"], row[f"{metric}_hi"] = found.low[g, o] - shift, found.high[g, o] - shift
    row[f"{metric}_note"] = found.note[g, o]


def summary_rows(bench: BenchmarkResults, scores: pd.DataFrame, settings: AuditSettings,
                 design: Design) -> tuple[list[dict], list[dict]]:
    """Acc, chance, BG, VG with intervals per model, for the full benchmark and the grounded subset, over all
    questions and per category, with the design effects of blind and video correctness; and the same for the mean
    of the evaluation VLMs (the report's lead). BG's interval is Acc_B's less the group's chance, which is known."""
    roles = settings.roles
    k = scores["n_options"].to_numpy()
    categories = sorted(scores["category"].dropna().unique())
    groups = [(subset, category, in_subset & (True if category == ALL else (scores["category"] == category).to_numpy()))
              for subset, in_subset in subsets(scores).items() for category in [ALL] + categories]
    groups = [(subset, category, keep) for subset, category, keep in groups if keep.any()]
    members = np.stack([keep for _, _, keep in groups])
    all_rows, video_rows = np.arange(len(bench.models)), np.flatnonzero(bench.has_video)
    judges, _ = evaluation_models(bench, roles)
    judge_rows = bench.model_rows(judges)
    headline_rows = judge_rows if judge_rows.size else all_rows
    # the values: each model's blind correctness, then the video correctness of the VLMs; every metric is a linear
    # combination of their means (VG = Acc_V - Acc_B, the mean of the VLMs)
    n_models = len(bench.models)
    video_at = {int(i): n_models + j for j, i in enumerate(video_rows)}
    values = np.concatenate([bench.correct_blind, bench.correct_video[video_rows]])
    judge_video = [video_at[int(i)] for i in judge_rows]
    out = _Outputs(len(values), n_models)
    out.add("acc_blind", all_rows, [{int(i): 1.0} for i in all_rows], True, False)
    out.add("acc_video", video_rows, [{video_at[int(i)]: 1.0} for i in video_rows], True, True)
    out.add("visual_gain", video_rows, [{video_at[int(i)]: 1.0, int(i): -1.0} for i in video_rows], False, True,
            gain_of="acc_blind")
    out.add("mean_acc_blind", [0], [_mean_of(headline_rows)], True, False)
    if judge_rows.size:
        out.add("mean_acc_video", [0], [_mean_of(judge_video)], True, True)
        out.add("mean_visual_gain", [0], [_combined(_mean_of(judge_video), _mean_of(headline_rows), -1.0)], False,
                True, gain_of="mean_acc_blind")
    found = design.intervals(values, members, settings.confidence_level, out)
    rows, headline = [], []
    for g, (common, (subset, category, keep)) in enumerate(zip(_group_columns(bench, design, members, found),
                                                               groups, strict=True)):
        common = {**common, "subset": subset, "category": category}
        d = subset_diagnostics(keep, bench.correct_blind, bench.correct_video, k)
        for i, model in enumerate(bench.models):
            blind, video = out.at("acc_blind", i), out.at("acc_video", i)
            row = {"model": model, "role": roles[model], **common, "chance": d["chance"][i],
                   "deff_blind": found.deff[g, blind], "deff_video": np.nan if video is None else found.deff[g, video]}
            for name in METRICS:
                row[name] = d[name][i]
            _put(row, "acc_blind", found, g, blind)
            _put(row, "blind_gap", found, g, blind, shift=d["chance"][i])
            _put(row, "acc_video", found, g, video)
            _put(row, "visual_gain", found, g, out.at("visual_gain", i))
            rows.append(row)
        if category == ALL:
            chance = d["chance"][0]
            row = {**common, "models": "; ".join(bench.models[i] for i in headline_rows),
                   "held_out": bool(judge_rows.size) and all(roles[bench.models[i]] == "held_out" for i in judge_rows),
                   "chance": chance, "deff_blind": found.deff[g, out.at("mean_acc_blind", 0)],
                   "deff_video": found.deff[g, out.at("mean_acc_video", 0)] if judge_rows.size else np.nan}
            blind = bench.correct_blind[headline_rows][:, keep].mean()
            row |= {"acc_blind": blind, "blind_gap": blind - chance, "acc_video": np.nan, "visual_gain": np.nan}
            if judge_rows.size:
                video = bench.correct_video[judge_rows][:, keep].mean()
                row |= {"acc_video": video, "visual_gain": video - blind}
            _put(row, "acc_blind", found, g, out.at("mean_acc_blind", 0))
            _put(row, "blind_gap", found, g, out.at("mean_acc_blind", 0), shift=chance)
            _put(row, "acc_video", found, g, out.at("mean_acc_video", 0))
            _put(row, "visual_gain", found, g, out.at("mean_visual_gain", 0))
            headline.append(row)
    return rows, headline


def comparison_rows(bench: BenchmarkResults, scores: pd.DataFrame, settings: AuditSettings, design: Design, *,
                    baseline: str | None = None, others: Sequence[str] | None = None, selected_by: Sequence[str] = (),
                    groups: dict[str, np.ndarray] | None = None, conditions: bool = False) -> list[dict]:
    """Models (`others`, default every model) minus a baseline (default `settings.baseline`) on the same questions,
    with paired intervals and raw p-values (`adjust_family` adds the adjusted ones and the flags).

    delta_acc_blind = mean_q(c_blind[m, q] - c_blind[base, q]) (= the change of Blind Gap: chance is shared),
    delta_acc_video likewise, delta_visual_gain = mean_q((c_video - c_blind)[m, q] - (c_video - c_blind)[base, q]):
    each a mean of per-question differences, whose interval and p-value (H0: no change) come from one t statistic.
    `selected_by`: the models whose runs chose the grounded subset (T and V panels): a comparison there involving one
    of them says so. conditions: the video rows are one model under frame conditions (the temporal ladder's rungs
    against its full video, `ladder.py`): delta_acc_video gets Tango's score interval for paired binary answers on the
    design effect (`visdep_metrics.paired`) instead of the t or the prompts' wild bootstrap."""
    baseline = settings.baseline if baseline is None else baseline
    if baseline is None or baseline not in bench.models:
        return []
    base = bench.models.index(baseline)
    others_rows = [bench.models.index(m) for m in (bench.models if others is None else others)
                   if m in bench.models and m != baseline]
    if not others_rows:
        return []
    groups = subsets(scores) if groups is None else groups
    cb, cv = bench.correct_blind, bench.correct_video
    video = [i for i in others_rows if bench.has_video[i]] if bench.has_video[base] else []
    # values: each model's blind correctness, then the video correctness of the baseline and the others
    n_models = len(bench.models)
    video_at = {i: n_models + j for j, i in enumerate([base, *video] if video else [])}
    values = np.concatenate([cb, cv[[base, *video]]]) if video else cb
    out = _Outputs(len(values), n_models)
    out.add("acc_blind", others_rows, [{i: 1.0, base: -1.0} for i in others_rows], False, False)
    if video:
        # in a paired difference what the two models share (a video's, a prompt's difficulty) cancels: no bound
        out.add("acc_video", video, [{video_at[i]: 1.0, video_at[base]: -1.0} for i in video], False, False,
                paired=conditions)
        out.add("visual_gain", video, [_combined({video_at[i]: 1.0, i: -1.0}, {video_at[base]: 1.0, base: -1.0}, -1.0)
                                       for i in video], False, False)
    members = np.stack(list(groups.values()))
    found = design.intervals(values, members, settings.confidence_level, out)
    deltas = out.contrasts() @ values
    rows = []
    for g, (common, (subset, keep)) in enumerate(zip(_group_columns(bench, design, members, found), groups.items(),
                                                     strict=True)):
        for i in others_rows:
            model = bench.models[i]
            by = found.method[g, out.at("acc_blind", i)]
            row = {"model": model, "role": settings.roles[model], "baseline": baseline, **common, "subset": subset,
                   "p_test": f"{T} over {common['resampled']}" if by == T else f"{WILD} (sign flips of whole prompts)"}
            limited = []
            for name in ("acc_blind", "acc_video", "visual_gain"):
                o = out.at(name, i)
                row[f"delta_{name}"] = np.nan if o is None else deltas[o, keep].mean()
                _put(row, f"delta_{name}", found, g, o)
                row[f"delta_{name}_p"] = np.nan if o is None else found.p_value[g, o]
                row[f"delta_{name}_method"] = "" if o is None else str(found.method[g, o])
                if row[f"delta_{name}_method"] == WILD and not np.isnan(row[f"delta_{name}_lo"]):
                    limited.append(DELTA_NAMES[name])
            row["limit_note"] = (f"{', '.join(limited)}: {few_prompts_note(design.prompts[keep])}"
                                 if limited else "")
            involved = sorted({model, baseline} & set(selected_by))
            row["selection_note"] = (f"the subset was selected with the runs of {', '.join(involved)}: it favours "
                                     f"them; held-out models are the fair comparison" if subset == "grounded"
                                     and involved else "")
            rows.append(row)
    return rows


def adjust_family(frame: pd.DataFrame, confidence_level: float) -> pd.DataFrame:
    """Holm-adjusted p-values (`delta_*_p_adj`) over every p-value of a comparison table (all its models,
    benchmarks, subsets and quantities: one family), and, for rows with video runs, the text-shortcut flags from
    them: `text_shortcut_gain` where Acc_V rose while the Blind Gap rose or the Visual Gain fell, each at adjusted
    p < 1 − confidence; `flagged` says which."""
    if frame.empty:
        return frame
    raw = [c for c in frame.columns if c.startswith("delta_") and c.endswith("_p")]
    adjusted = holm(frame[raw].to_numpy(dtype=np.float64))
    for j, column in enumerate(raw):
        frame[f"{column}_adj"] = adjusted[:, j]
    frame["p_family"] = f"{P_FAMILY} ({int(np.isfinite(adjusted).sum())} p-values)"
    alpha = 1 - confidence_level
    if "delta_acc_video_p" in frame and "delta_acc_blind_p" in frame and "delta_visual_gain_p" in frame:
        gains, flags = [], []
        for _, row in frame.iterrows():
            if pd.isna(row["delta_acc_video"]):
                gains.append(None)
                flags.append("")
                continue
            flagged = [what for what, holds in (("Blind Gap rose", significant(row, "delta_acc_blind", alpha) > 0),
                                                ("Visual Gain fell", significant(row, "delta_visual_gain", alpha) < 0))
                       if holds]
            gain = significant(row, "delta_acc_video", alpha) > 0 and bool(flagged)
            gains.append(gain)
            flags.append("; ".join(flagged) if gain else "")
        frame["text_shortcut_gain"] = pd.Series(gains, index=frame.index, dtype=object)
        frame["flagged"] = flags
    return frame


def significant(row, metric: str, alpha: float = 0.05) -> int:
    """+1 / -1 where a change is told from none at the family-adjusted level (else at its interval), 0 otherwise."""
    p = row.get(f"{metric}_p_adj")
    if p is None or pd.isna(p):
        return sign(row, metric)
    return int(np.sign(row[metric])) if p < alpha else 0


def _mean_of(rows) -> dict[int, float]:
    """The terms of the mean of some value rows."""
    return {int(i): 1.0 / len(rows) for i in rows}


def _combined(a: dict[int, float], b: dict[int, float], b_weight: float) -> dict[int, float]:
    return {i: a.get(i, 0.0) + b_weight * b.get(i, 0.0) for i in a.keys() | b.keys()}


def sign(row, metric: str) -> int:
    """+1 / -1 where the interval lies above / below 0, else 0 (a change the questions cannot tell from none)."""
    lo, hi = row.get(f"{metric}_lo"), row.get(f"{metric}_hi")
    if pd.isna(lo) or pd.isna(hi):
        return 0
    return 1 if lo > 0 else -1 if hi < 0 else 0


def frame_rows(bench: BenchmarkResults, scores: pd.DataFrame, summary: list[dict], model_info: dict[str, ModelInfo],
               settings: AuditSettings, design: Design) -> list[dict]:
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
        deltas = {r["model"]: r for r in comparison_rows(bench, scores, settings, design, baseline=fewest,
                                                         others=models[1:],
                                                         groups={"full": np.ones(len(scores), dtype=bool)})}
        for model in models:
            info = model_info[model]
            row = {"benchmark": bench.benchmark, "checkpoint": info.checkpoint_label(FRAMES_SETTING), "model": model,
                   "max_frames": info.max_frames, "fewest_frames_model": fewest}
            row |= {key: overall[model][key] for key in ("n", "n_videos", "n_prompts", "resampled", "interval_note",
                                                          "acc_video", "acc_video_lo", "acc_video_hi", "acc_video_note",
                                                          "visual_gain", "visual_gain_lo", "visual_gain_hi",
                                                          "visual_gain_note")}
            for name in ("acc_video", "visual_gain"):
                for suffix in ("", "_lo", "_hi", "_p", "_note"):
                    row[f"delta_{name}{suffix}"] = deltas.get(model, {}).get(f"delta_{name}{suffix}",
                                                                             "" if suffix == "_note" else np.nan)
            row["limit_note"] = deltas.get(model, {}).get("limit_note", "")
            rows.append(row)
    return rows
