"""The temporal ladder: does a benchmark need the video, or would one frame do, and does the order of the frames matter?

A checkpoint run under the frame conditions of `model_adapters.settings` forms a ladder of models that differ only in
`max_frames`, `frames` and `frame_order` (`LADDER_SETTINGS`):

- blind: the model's blind runs (no frame);
- single: `frames=middle`, the middle frame alone;
- shuffled, reversed: `frame_order=shuffled|reversed`, the sampled frames out of order, their timestamps unchanged;
- video: the frames as sampled (`frames=uniform`, `frame_order=original`), at the budget of the order rungs.

A rung needs only its video runs: its blind answers are the checkpoint's, whatever its frames (`pairing` pairs it with
a blind run of the same checkpoint and other settings). Rungs are conditions, not models of the panel: they enter no
filtering decision and no mean of the evaluation models (role `frame_condition`).

Per model, benchmark, subset and category (`ladder_rows`):

    FG  = Acc_video − Acc_single     (Frame Gain: what more than one frame adds)
    OG  = Acc_video − Acc_shuffled   (Order Gain: what the frames' order adds)
    OGr = Acc_video − Acc_reversed

each a mean of per-question differences of one model's answers under two conditions, with the paired interval and
p-value of `intervals.comparison_rows(conditions=True)`: Tango's score interval for paired binary answers on the design
effect of the units the questions share (`visdep_metrics.paired`; near the ceiling a condition's few disagreements
with the video lie nearly all one way, and a symmetric interval lay below real gains), McNemar's p on the same
effective counts, Holm over the table.

Per question (`temporal_scores`), over the panel's VLMs that have the rung, as V(q) is formed (paper eq. 4-5):

    V_frame(q) = mean_m (P_m(y* | video) − P_m(y* | single)) / (1 − 1/K)
    V_order(q) = mean_m (P_m(y* | video) − P_m(y* | shuffled)) / (1 − 1/K)

and the subset that needs the video as a video: grounded (S(q) <= τ) and V_order(q) >= τ_order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from model_adapters.settings import LADDER_SETTINGS
from model_adapters.settings import condition_of as rung_of
from visdep_metrics.audit.diagnostics import visual_necessity
from visdep_metrics.audit.intervals import Design, comparison_rows
from visdep_metrics.audit.runs import ModelInfo
from visdep_metrics.audit.settings import AuditSettings, Ladder
from visdep_metrics.stats import crossed_intervals, holm

if TYPE_CHECKING:
    from visdep_metrics.audit.pairing import BenchmarkResults

GAINS = {"frame_gain": "single", "order_gain": "shuffled", "order_gain_reversed": "reversed"}
TEMPORAL_SUFFIX = "temporal"


def _checkpoint_key(info: ModelInfo) -> tuple:
    return info.pretrained, tuple((k, v) for k, v in info.settings if k not in LADDER_SETTINGS)


def find_ladders(model_info: Mapping[str, ModelInfo], vision_models: set[str]) -> list[Ladder]:
    """The ladders among the VLMs: per checkpoint (its settings but the ladder's), each full-video model with the
    single-frame model and the order rungs at its frame budget; a full-video model without any rung forms none."""
    by_checkpoint: dict[tuple, list[ModelInfo]] = {}
    for name in sorted(vision_models):
        if name in model_info:
            by_checkpoint.setdefault(_checkpoint_key(model_info[name]), []).append(model_info[name])
    ladders = []
    for members in by_checkpoint.values():
        rung = {m.name: rung_of(dict(m.settings)) for m in members}
        single = next((m.name for m in members if rung[m.name] == "single"), None)
        for video in (m for m in members if rung[m.name] == "video"):
            order = {r: next((m.name for m in members if rung[m.name] == r and m.max_frames == video.max_frames), None)
                     for r in ("shuffled", "reversed")}
            if single is not None or any(order.values()):
                ladders.append(Ladder(video=video.name, max_frames=video.max_frames, single=single, **order))
    return ladders


def condition_models(model_info: Mapping[str, ModelInfo]) -> set[str]:
    """The models that are a frame condition (a ladder's rung, not a model of its own)."""
    return {name for name, info in model_info.items() if rung_of(dict(info.settings)) != "video"}


def temporal_scores(bench: BenchmarkResults, panel_vlms: list[str], ladders: list[Ladder],
                    ) -> dict[str, np.ndarray]:
    """V_frame(q) and V_order(q) (module docstring) over the panel VLMs that have the rung; NaN where none has."""
    k = bench.questions["n_options"].to_numpy()
    found = {}
    for column, rung in (("V_frame", "single"), ("V_order", "shuffled")):
        pairs = [(ladder.video, getattr(ladder, rung)) for ladder in ladders
                 if ladder.video in panel_vlms and getattr(ladder, rung) is not None]
        pairs = [(v, c) for v, c in pairs if v in bench.models and c in bench.models]
        if not pairs:
            found[column] = np.full(len(k), np.nan)
            continue
        full, condition = bench.model_rows([v for v, _ in pairs]), bench.model_rows([c for _, c in pairs])
        found[column] = visual_necessity(bench.p_answer_video[full], bench.p_answer_video[condition], k)
    return found


def temporal_keep(grounded: pd.Series, v_order: np.ndarray, tau_order: float) -> np.ndarray:
    """The subset that needs the video as a video: grounded and V_order(q) >= tau_order (NaN: not kept)."""
    with np.errstate(invalid="ignore"):
        return grounded.fillna(False).to_numpy(dtype=bool) & (v_order >= tau_order)


def ladder_groups(scores: pd.DataFrame, subsets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each subset over all questions and per category, named "subset|category"."""
    categories = sorted(scores["category"].dropna().unique())
    groups = {}
    for subset, keep in subsets.items():
        groups[f"{subset}|all"] = keep
        for category in categories:
            members = keep & (scores["category"] == category).to_numpy()
            if members.any():
                groups[f"{subset}|{category}"] = members
    return groups


def ladder_rows(bench: BenchmarkResults, scores: pd.DataFrame, subsets: dict[str, np.ndarray], summary: list[dict],
                ladders: list[Ladder], settings: AuditSettings, design: Design) -> list[dict]:
    """Per ladder, subset and category: each rung's accuracy with its interval (from the summary's rows) and FG, OG,
    OGr with paired intervals and raw p-values (`adjust_ladder` adds the adjusted ones)."""
    groups = ladder_groups(scores, subsets)
    accuracy = {(r["model"], r["subset"], r["category"]): r for r in summary}
    rows = []
    for ladder in ladders:
        if ladder.video not in bench.models:
            continue
        rungs = {r: m for r, m in ladder.rungs().items() if m in bench.models}
        if not rungs:
            continue
        deltas = {(r["model"], r["subset"]): r for r in comparison_rows(
            bench, scores, settings, design, baseline=ladder.video, others=list(rungs.values()), groups=groups,
            conditions=True)}
        for group in groups:
            subset, category = group.split("|", 1)
            full = accuracy.get((ladder.video, subset, category))
            if full is None:
                continue
            row = {"benchmark": bench.benchmark, "model": ladder.video, "max_frames": ladder.max_frames,
                   "subset": subset, "category": category,
                   **{key: full[key] for key in ("n", "n_videos", "n_prompts", "resampled")},
                   "acc_blind": full["acc_blind"], "acc_blind_lo": full["acc_blind_lo"],
                   "acc_blind_hi": full["acc_blind_hi"], "acc_video": full["acc_video"],
                   "acc_video_lo": full["acc_video_lo"], "acc_video_hi": full["acc_video_hi"]}
            for gain, rung in GAINS.items():
                model = rungs.get(rung)
                rung_row = accuracy.get((model, subset, category)) if model else None
                delta = deltas.get((model, group)) if model else None
                row[f"{rung}_model"] = model or ""
                for suffix in ("", "_lo", "_hi"):
                    row[f"acc_{rung}{suffix}"] = np.nan if rung_row is None else rung_row[f"acc_video{suffix}"]
                if delta is None:
                    row |= {gain: np.nan, f"{gain}_lo": np.nan, f"{gain}_hi": np.nan, f"{gain}_p": np.nan,
                            f"{gain}_note": ""}
                    continue
                # the gain is the full video minus the condition: the comparison's (condition − video), negated
                row |= {gain: 0.0 - delta["delta_acc_video"], f"{gain}_lo": 0.0 - delta["delta_acc_video_hi"],
                        f"{gain}_hi": 0.0 - delta["delta_acc_video_lo"], f"{gain}_p": delta["delta_acc_video_p"],
                        f"{gain}_note": delta["delta_acc_video_note"]}
            rows.append(row)
    return rows


def share_interval(bench: BenchmarkResults, keep: np.ndarray, confidence_level: float) -> tuple[float, float, float]:
    """The share of a benchmark's questions in a subset (`keep`), with the interval of a proportion over the videos
    and prompts its questions share (`intervals.Design`): (share, low, high), in [0, 1]."""
    design = Design.of(bench)
    values = np.asarray(keep, dtype=np.float64)[None, :]
    found = crossed_intervals(values, np.ones((1, len(keep)), dtype=bool), design.videos, design.prompts,
                              confidence_level, np.eye(1), np.array([True]), np.array([True]), np.array([False]),
                              np.array([-1]))
    return float(values.mean()), float(found.low[0, 0]), float(found.high[0, 0])


def adjust_ladder(frame: pd.DataFrame) -> pd.DataFrame:
    """Holm-adjusted p-values (`*_p_adj`) over every gain's p-value of the ladder table (one family)."""
    if frame.empty:
        return frame
    raw = [f"{gain}_p" for gain in GAINS]
    adjusted = holm(frame[raw].to_numpy(dtype=np.float64))
    for j, column in enumerate(raw):
        frame[f"{column}_adj"] = adjusted[:, j]
    frame["p_family"] = f"Holm over every gain's p-value of this table ({int(np.isfinite(adjusted).sum())} p-values)"
    return frame
