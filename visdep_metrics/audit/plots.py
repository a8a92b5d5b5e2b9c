"""The audit's plots: the Blind Gap-Visual Gain diagnostic space, the threshold sweeps (the paper's figure 4), the
distributions of T, V and S, and Acc_V and VG against frame budgets. matplotlib is imported where a plot is drawn:
the rest of the audit does without it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from visdep_metrics.audit.compute import Audit
from visdep_metrics.audit.filters import SWEEP_SIGNALS, signal_range
from visdep_metrics.audit.intervals import ALL, evaluation_models
from visdep_metrics.audit.tables import name, ordered

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOTS = {"diagnostic_space": "diagnostic_space.png", "sweeps": "sweeps.png", "scores": "scores.png",
         "frames": "frames.png"}


def overall_video_rows(audit: Audit) -> pd.DataFrame:
    """Summary rows over all categories of models with video runs: the points of the diagnostic space."""
    return audit.summary[(audit.summary["category"] == ALL) & audit.summary["acc_video"].notna()]


def planned_plots(audit: Audit) -> dict[str, str]:
    """The plots the audit has data for: name -> file name."""
    planned = {"diagnostic_space": not overall_video_rows(audit).empty, "sweeps": not audit.sweep.empty,
               "scores": audit.questions[["T", "V", "S"]].notna().any().any(), "frames": not audit.frames.empty}
    return {plot: file_name for plot, file_name in PLOTS.items() if planned[plot]}


def draw_plots(audit: Audit, folder: Path, plots: dict[str, str]) -> None:
    """Draw `plots` (name -> file name) into `folder`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = {"diagnostic_space": diagnostic_space, "sweeps": sweep_figure, "scores": scores_figure,
               "frames": frames_figure}
    for plot, file_name in plots.items():
        figure = figures[plot](audit)
        FigureCanvasAgg(figure)
        figure.savefig(folder / file_name, dpi=100)


def diagnostic_space(audit: Audit) -> Figure:
    from matplotlib.figure import Figure

    points = overall_video_rows(audit).groupby(["benchmark", "subset"])
    means = points[["blind_gap", "visual_gain", "acc_video"]].mean()
    figure = Figure(figsize=(6, 5))
    ax = figure.add_subplot()
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axvline(0, color="0.7", lw=0.8)
    # A legend, not labels at the points: benchmarks often sit close together, and labels there overlap.
    handles = []
    for i, benchmark in enumerate(ordered(b for b, subset in means.index if subset == "full")):
        color = f"C{i}"
        full = means.loc[(benchmark, "full")]
        handles.append(ax.scatter(full["blind_gap"], full["visual_gain"], s=8 * full["acc_video"], color=color,
                                  alpha=0.6, label=name(benchmark)))
        if (benchmark, "grounded") in means.index:
            g = means.loc[(benchmark, "grounded")]
            ax.scatter(g["blind_gap"], g["visual_gain"], s=8 * g["acc_video"], facecolor="none", edgecolor=color)
            ax.annotate("", (g["blind_gap"], g["visual_gain"]), (full["blind_gap"], full["visual_gain"]),
                        arrowprops={"arrowstyle": "->", "color": color})
    if any(subset == "grounded" for _, subset in means.index):
        handles.append(ax.scatter([], [], s=60, facecolor="none", edgecolor="0.3", label="its grounded subset"))
    legend = ax.legend(handles=handles, fontsize=8, loc="best")
    for handle in legend.legend_handles:
        handle.set_sizes([60])  # one marker size in the legend; at the points, size is Acc_V
    ax.set_xlabel("Blind Gap (%) ↓")
    ax.set_ylabel("Visual Gain (%) ↑")
    ax.set_title("Diagnostic space (mean over VLMs; size ∝ Acc_V)")
    return figure


def sweep_figure(audit: Audit) -> Figure:
    """The paper's figure 4: one row per benchmark, one column per signal (T, -V, S)."""
    from matplotlib.figure import Figure

    benchmarks = ordered(audit.sweep["benchmark"])
    height = 3.2 * len(benchmarks)
    figure = Figure(figsize=(4.8 * len(SWEEP_SIGNALS), height))
    # fixed margins (in inches): constrained layout measured ~0.6 s per figure
    figure.subplots_adjust(left=0.06, right=0.94, bottom=0.55 / height, top=1 - 0.3 / height, wspace=0.45,
                           hspace=0.6)
    for row, benchmark in enumerate(benchmarks):
        models, _ = evaluation_models(audit.runs.benchmarks[benchmark], audit.roles)
        sweep = audit.sweep[(audit.sweep["benchmark"] == benchmark) & audit.sweep["model"].isin(models)]
        full = audit.filters[(audit.filters["benchmark"] == benchmark) & (audit.filters["filter"] == "none")
                             & audit.filters["model"].isin(models)][["blind_gap", "visual_gain"]].mean()
        for col, signal in enumerate(SWEEP_SIGNALS):
            ax = figure.add_subplot(len(benchmarks), len(SWEEP_SIGNALS), row * len(SWEEP_SIGNALS) + col + 1)
            curve = sweep[sweep["signal"] == signal].groupby("tau")[["blind_gap", "visual_gain", "n_kept"]].mean()
            ax.set_title(f"{name(benchmark)} ({', '.join(map(audit.label, models)) or 'no VLM'})", fontsize=8)
            ax.set_xlabel(f"τ on {signal.replace('-', '−')}")
            if curve.empty:
                ax.text(0.5, 0.5, "not computed (see the notes)", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            ax.plot(curve.index, curve["blind_gap"], color="C0", label="Blind Gap")
            ax.plot(curve.index, curve["visual_gain"], color="C1", label="Visual Gain")
            ax.axhline(full["blind_gap"], color="C0", ls="--", lw=0.8)
            ax.axhline(full["visual_gain"], color="C1", ls="--", lw=0.8)
            if signal == "S":
                ax.axvline(audit.tau, color="0.5", lw=0.8)
            ax.set_ylabel("%")
            kept = ax.twinx()
            kept.plot(curve.index, curve["n_kept"], color="0.5", ls=":")
            kept.set_ylabel("# kept")
            if row == col == 0:
                ax.legend(fontsize=8, loc="best")
    return figure


def scores_figure(audit: Audit) -> Figure:
    """Histograms of T, V and S, one panel per benchmark (two columns), the three as outlines over S's whole range
    (T in [0, 1] and V in [-r, r] lie inside it); τ marked. One panel per benchmark, not per score: drawing time
    goes with the number of axes."""
    from matplotlib.figure import Figure

    q = audit.questions
    benchmarks = ordered(q["benchmark"].unique())
    n_rows = (len(benchmarks) + 1) // 2
    figure = Figure(figsize=(11, 3.2 * n_rows))
    figure.subplots_adjust(left=0.07, right=0.98, bottom=0.5 / (3.2 * n_rows), top=1 - 0.35 / (3.2 * n_rows),
                           wspace=0.25, hspace=0.55)
    for i, benchmark in enumerate(benchmarks):
        ax = figure.add_subplot(n_rows, 2, i + 1)
        block = q[q["benchmark"] == benchmark]
        ax.set_title(f"{name(benchmark)} ({len(block)} questions)", fontsize=9)
        extent = signal_range("S", block["n_options"].to_numpy())
        drawn = False
        for color, signal in enumerate(("T", "V", "S")):
            values = block[signal].dropna()
            if values.empty:
                continue
            counts, edges = np.histogram(values, bins=60, range=extent)
            ax.stairs(counts, edges, color=f"C{color}", lw=1.2, label=signal)  # one artist, not 60 bars
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "not computed (see the notes)", ha="center", va="center", transform=ax.transAxes)
            continue
        ax.axvline(audit.tau, color="0.3", lw=0.8, ls="--", label=f"τ = {audit.tau:g}")
        ax.set_ylabel("questions")
        ax.legend(fontsize=8, loc="upper right")
    return figure


def frames_figure(audit: Audit) -> Figure:
    """Acc_V and VG against max_frames, with intervals: one panel per benchmark, one pair of lines per checkpoint."""
    from matplotlib.figure import Figure

    frames = audit.frames
    benchmarks = ordered(frames["benchmark"])
    figure = Figure(figsize=(5.5 * len(benchmarks), 4))
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.9, wspace=0.3)
    for col, benchmark in enumerate(benchmarks):
        ax = figure.add_subplot(1, len(benchmarks), col + 1)
        block = frames[frames["benchmark"] == benchmark]
        for i, (checkpoint, rows) in enumerate(block.groupby("checkpoint", sort=True)):
            rows = rows.sort_values("max_frames")
            for metric, style in (("acc_video", "-o"), ("visual_gain", "--s")):
                err = np.abs(np.vstack([rows[metric] - rows[f"{metric}_lo"], rows[f"{metric}_hi"] - rows[metric]]))
                ax.errorbar(rows["max_frames"], rows[metric], yerr=np.nan_to_num(err), fmt=style, color=f"C{i}",
                            capsize=3, label=f"{checkpoint}: {'Acc_V' if metric == 'acc_video' else 'VG'}")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_xticks(sorted(block["max_frames"].unique()))
        ax.set_xlabel("frames (max_frames)")
        ax.set_ylabel("%")
        ax.set_title(name(benchmark))
        ax.legend(fontsize=7, loc="best")
    return figure
