"""Write an `Audit`: CSV tables, grounded task YAMLs, plots and report.md (tables laid out like the paper's).

Everything is written into a fresh folder beside OUT and moved into place at the end, so an error
leaves no half-written output. An existing OUT is replaced only if it holds an earlier audit
(its `audit.json`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
from loguru import logger

from lmms_eval_tasks.export import write_subset_tasks
from visdep_metrics.audit.compute import Audit
from visdep_metrics.audit.filters import SWEEP_SIGNALS
from visdep_metrics.parallel import fork_context

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MANIFEST = "audit.json"
GROUNDED_SUFFIX = "grounded"
DISPLAY = {"mmau": "MM-AU", "trafficqa": "TrafficQA", "accidentbench": "AccidentBench", "vru_accident": "VRU-Accident"}
_METRIC_HEADERS = {"acc_blind": "Acc_B", "acc_video": "Acc_V", "blind_gap": "BG↓", "visual_gain": "VG↑"}
_FILTER_HEADERS = {"none": "No Filtering", "llm_inspector": "LLM-Inspector", "b_clean": "B-Clean",
                   "s_score": "S-score"}


class OutputDirError(ValueError):
    """OUT exists and is not an earlier audit output."""


class PlotError(RuntimeError):
    """The process drawing the plots failed (it printed its own traceback)."""


def check_out_dir(out: str | Path) -> Path:
    """OUT may be new, empty, or an earlier audit output (which will be replaced)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise OutputDirError(f"{out}: exists and is not an earlier visdep audit output (no {MANIFEST}); "
                             f"choose a new or empty folder")
    return out


# --------------------------------------------------------------------------- markdown helpers
def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{value + 0.0:.{digits}f}" if round(value, digits) else f"{0.0:.{digits}f}"  # no "-0.00"
    return str(value)


def _interval(row: pd.Series, metric: str) -> str:
    if metric not in row or np.isnan(row[metric]):
        return "–"
    return f"{_fmt(row[metric])} [{_fmt(row[metric + '_lo'])}, {_fmt(row[metric + '_hi'])}]"


def _markdown(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _name(benchmark: str) -> str:
    return DISPLAY.get(benchmark, benchmark)


# --------------------------------------------------------------------------- report sections
def _evaluation_models(audit: Audit, benchmark: str) -> tuple[list[str], bool]:
    """Models that judge the filters: the held-out VLMs, else every VLM (then not held out)."""
    rows = audit.summary[(audit.summary["benchmark"] == benchmark) & audit.summary["acc_video"].notna()]
    vlms = sorted(rows["model"].unique())
    held_out = [m for m in vlms if audit.roles[m] == "held_out"]
    return (held_out, True) if held_out else (vlms, False)


def _table1(audit: Audit) -> str:
    overall = audit.summary[(audit.summary["category"] == "all") & (audit.summary["subset"] == "full")]
    benchmarks = [b for b in DISPLAY if b in set(overall["benchmark"])]
    vlms = sorted(m for m in overall.loc[overall["acc_video"].notna(), "model"].unique())
    llms = sorted(set(overall["model"]) - set(vlms))
    header = ["Model"] + [f"{_name(b)} {_METRIC_HEADERS[m]}" for b in benchmarks for m in _METRIC_HEADERS]
    rows = []
    if vlms:
        average = ["Average VLM"]
        for b in benchmarks:
            block = overall[(overall["benchmark"] == b) & overall["acc_video"].notna()]
            average += [block[m].mean() if len(block) else np.nan for m in _METRIC_HEADERS]
        rows.append(average)
    for model in vlms + llms:
        row = [model]
        for b in benchmarks:
            hit = overall[(overall["benchmark"] == b) & (overall["model"] == model)]
            row += [hit[m].iloc[0] if len(hit) else np.nan for m in _METRIC_HEADERS]
        rows.append(row)
    sizes = ", ".join(f"{_name(b)} {int(overall.loc[overall['benchmark'] == b, 'n'].iloc[0])} questions "
                      f"(chance {overall.loc[overall['benchmark'] == b, 'chance'].iloc[0]:.2f})" for b in benchmarks)
    return _markdown(header, rows) + f"\n\n{sizes}. Text-only LLMs have no video accuracy by design (–)."


def _intervals(audit: Audit) -> str:
    parts = []
    s = audit.summary[audit.summary["subset"] == "full"]
    for benchmark in [b for b in DISPLAY if b in set(s["benchmark"])]:
        block = s[s["benchmark"] == benchmark]
        categories = ["all"] + sorted(c for c in block["category"].unique() if c != "all")
        rows = [[c if c != "all" else "(all)", r["model"], r["n"]] + [_interval(r, m) for m in _METRIC_HEADERS]
                for c in categories for _, r in block[block["category"] == c].iterrows()]
        parts.append(f"**{_name(benchmark)}**\n\n" + _markdown(
            ["Category", "Model", "n"] + list(_METRIC_HEADERS.values()), rows))
    return "\n\n".join(parts)


def _table2(audit: Audit) -> str:
    parts = []
    for benchmark in [b for b in DISPLAY if b in set(audit.filters["benchmark"])]:
        models, held_out = _evaluation_models(audit, benchmark)
        block = audit.filters[audit.filters["benchmark"] == benchmark]
        filters = [f for f in _FILTER_HEADERS if f in set(block["filter"])]
        for model in models:
            rows = []
            for metric, label in (("acc_video", "Acc_V"), ("blind_gap", "BG↓"), ("visual_gain", "VG↑"),
                                  ("n_kept", "# QA")):
                rows.append([label] + [block[(block["filter"] == f) & (block["model"] == model)][metric].iloc[0]
                                       for f in filters])
            rows[-1] = [rows[-1][0]] + [int(v) for v in rows[-1][1:]]
            note = "held out" if held_out else "not held out: it is in the panel"
            parts.append(f"**{_name(benchmark)}, {model}** ({note})\n\n"
                         + _markdown(["Metric"] + [_FILTER_HEADERS[f] for f in filters], rows))
    return "\n\n".join(parts)


def _table5(audit: Audit) -> str:
    overall = audit.summary[audit.summary["category"] == "all"]
    parts = []
    for benchmark in [b for b in DISPLAY if b in set(overall["benchmark"])]:
        block = overall[overall["benchmark"] == benchmark]
        full, grounded = block[block["subset"] == "full"], block[block["subset"] == "grounded"]
        if grounded.empty:
            continue
        header = (["Model"] + [f"Original {h}" for h in _METRIC_HEADERS.values()]
                  + [f"Filtered (G) {h}" for h in _METRIC_HEADERS.values()])
        rows = []
        for model in sorted(full["model"], key=lambda m: (full.loc[full["model"] == m, "acc_video"].isna().item(), m)):
            f, g = full[full["model"] == model].iloc[0], grounded[grounded["model"] == model].iloc[0]
            rows.append([model] + [f[m] for m in _METRIC_HEADERS] + [g[m] for m in _METRIC_HEADERS])
        parts.append(f"**{_name(benchmark)}**: original {int(full['n'].iloc[0])} samples, filtered (G) "
                     f"{int(grounded['n'].iloc[0])} samples\n\n" + _markdown(header, rows))
    return "\n\n".join(parts) if parts else "No benchmark has a grounded subset."


def _files_section(audit: Audit) -> str:
    rows = [[f.model, f.task, f.date, str(f.samples_path)] for f in audit.runs.used]
    text = _markdown(["Model", "Task", "Run date", "Samples file"], rows)
    if audit.runs.replaced:
        text += "\n\nReplaced by a later run of the same model and task:\n\n" + "\n".join(
            f"- {old.samples_path} → {new.samples_path}" for old, new in audit.runs.replaced)
    if audit.runs.skipped:
        text += "\n\nSkipped:\n\n" + "\n".join(f"- {path}: {why}" for path, why in audit.runs.skipped)
    return text


def _report(audit: Audit, out: Path, plots: dict[str, str], exported: dict[str, int]) -> str:
    p = audit.panel
    panel_rows = [["T (text_llms)", ", ".join(p.text_llms) or "(none)"], ["V (vlms)", ", ".join(p.vlms) or "(none)"],
                  ["held out", ", ".join(p.held_out) or "(none)"],
                  ["LLM-Inspector", ", ".join(p.inspector) or "(none)"]]
    others = [m for m, r in audit.roles.items() if r in ("vlm", "text_llm")]
    if others:
        panel_rows.append(["in no panel", ", ".join(others)])
    used = [[_name(r.benchmark), r.panel, r.models] for r in audit.panel_used.itertuples()]
    lines = [
        "# Visual-dependence audit", "",
        f"Panel: {p.source}. τ = {audit.tau:g} (S(q) ≤ τ keeps a question). LLM-Inspector drops a question when "
        f"more than {audit.max_hits} of its LLMs answer it correctly blind; B-Clean drops it when a panel VLM does. "
        f"Intervals: {audit.confidence_level:.0%} percentile bootstrap over the questions of each benchmark "
        f"({audit.n_resamples} resamples, seed {audit.seed}); every model, metric, category and subset is computed on "
        f"the same resamples (so VG is paired), a category's or subset's value being the mean over the drawn "
        f"questions in it. All values in %.", "",
        _markdown(["Panel", "Models"], panel_rows), "",
        "Panel members used per benchmark:", "", _markdown(["Benchmark", "Panel", "Models used"], used), "",
    ]
    if audit.notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in audit.notes] + [""]
    lines += ["## Table 1: Global diagnosis (Acc_B, Acc_V, Blind Gap, Visual Gain)", "", _table1(audit), ""]
    if "diagnostic_space" in plots:
        lines += [f"![Blind Gap–Visual Gain diagnostic space]({plots['diagnostic_space']})", "",
                  "Diagnostic space: one point per benchmark (mean over the VLMs), original and grounded (G-), "
                  "size ∝ Acc_V.", ""]
    lines += ["## Intervals per benchmark and category", "", _intervals(audit), "",
              "## Table 2: Filtering strategies", "", _table2(audit), "",
              "## Table 5: Before and after filtering", "", _table5(audit), ""]
    if "sweeps" in plots:
        lines += ["## Threshold sweeps", "",
                  "BG and VG on {q : signal(q) ≤ τ} for the signals T, −V and S (mean over the held-out VLMs, else "
                  "over every VLM); dashed: the full benchmark; dotted (right axis): questions kept. Every model "
                  "in sweep.csv.", ""]
        lines += [f"![Threshold sweeps]({plots['sweeps']})", ""]
    if not audit.comparison.empty:
        rows = [[r["model"], _name(r["benchmark"]), r["subset"], r["n"]] +
                [_interval(r, f"delta_{m}") for m in ("acc_blind", "acc_video", "visual_gain")]
                for _, r in audit.comparison.iterrows()]
        lines += [f"## Against the baseline {audit.baseline}", "",
                  "Each model minus the baseline on the same questions (percentage points), with paired bootstrap "
                  "intervals: ΔAcc_B is also the change of the Blind Gap (chance is shared); ΔVG = change of "
                  "Visual Gain. An interval that excludes 0 is a change the questions support.", "",
                  _markdown(["Model", "Benchmark", "Subset", "n", "ΔAcc_B (= ΔBG)", "ΔAcc_V", "ΔVG"], rows), ""]
    if not audit.solvability.empty:
        rows = [[_name(r.benchmark), r.subset, r.n, r.tst_solvability, r.chance]
                for r in audit.solvability.itertuples()]
        lines += ["## Non-visual solvability (test-set stress test)", "",
                  "Accuracy of the held-out random forest of `visdep tst` on the question text alone, on the full "
                  "benchmark and on its grounded subset.", "",
                  _markdown(["Benchmark", "Subset", "n", "Non-visual solvability", "Chance"], rows), ""]
    if exported:
        lines += ["## Grounded tasks", "",
                  "lmms-eval tasks restricted to the grounded subsets (same data, same `*_ROOT` variables):", ""]
        lines += [f"- `{b}_blind_{GROUNDED_SUFFIX}`, `{b}_video_{GROUNDED_SUFFIX}`: {n} questions "
                  f"(`lmms-eval --include_path {out / 'tasks'} --tasks {b}_video_{GROUNDED_SUFFIX}`)"
                  for b, n in exported.items()] + [""]
    lines += ["## Files used", "", _files_section(audit), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots
PLOTS = {"diagnostic_space": "diagnostic_space.png", "sweeps": "sweeps.png"}


def _overall_video_rows(audit: Audit) -> pd.DataFrame:
    """Summary rows over all categories of models with video runs: the points of the diagnostic space."""
    return audit.summary[(audit.summary["category"] == "all") & audit.summary["acc_video"].notna()]


def _planned_plots(audit: Audit) -> dict[str, str]:
    """The plots the audit has data for: name -> file name."""
    planned = {"diagnostic_space": not _overall_video_rows(audit).empty, "sweeps": not audit.sweep.empty}
    return {name: PLOTS[name] for name, drawn in planned.items() if drawn}


def _draw_plots(audit: Audit, folder: Path, plots: dict[str, str]) -> None:
    # matplotlib is imported here, in the process that draws: the rest of the audit does without it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = {"diagnostic_space": _diagnostic_space, "sweeps": _sweep_figure}
    for name, file_name in plots.items():
        figure = figures[name](audit)
        FigureCanvasAgg(figure)
        figure.savefig(folder / file_name, dpi=100)


def _start_drawing(audit: Audit, folder: Path, plots: dict[str, str]) -> BaseProcess | None:
    """Draw the plots in a forked process, beside the writing of the tables (drawing is a second of one core);
    in this process where the platform cannot fork. Returns the process to join."""
    if not plots:
        return None
    context = fork_context()
    if context is None:
        _draw_plots(audit, folder, plots)
        return None
    child = context.Process(target=_draw_plots, args=(audit, folder, plots), name="visdep-plots")
    child.start()
    return child


def _diagnostic_space(audit: Audit) -> Figure:
    from matplotlib.figure import Figure

    points = _overall_video_rows(audit).groupby(["benchmark", "subset"])
    means = points[["blind_gap", "visual_gain", "acc_video"]].mean()
    figure = Figure(figsize=(6, 5))
    ax = figure.add_subplot()
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axvline(0, color="0.7", lw=0.8)
    # A legend, not labels at the points: benchmarks often sit close together, and labels there overlap.
    handles = []
    for i, benchmark in enumerate(b for b in DISPLAY if (b, "full") in means.index):
        color = f"C{i}"
        full = means.loc[(benchmark, "full")]
        handles.append(ax.scatter(full["blind_gap"], full["visual_gain"], s=8 * full["acc_video"], color=color,
                                  alpha=0.6, label=_name(benchmark)))
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


def _sweep_figure(audit: Audit) -> Figure:
    """The paper's figure 4: one row per benchmark, one column per signal (T, -V, S)."""
    from matplotlib.figure import Figure

    benchmarks = [b for b in DISPLAY if b in set(audit.sweep["benchmark"])]
    height = 3.2 * len(benchmarks)
    figure = Figure(figsize=(4.8 * len(SWEEP_SIGNALS), height))
    # fixed margins (in inches): constrained layout measured ~0.6 s per figure
    figure.subplots_adjust(left=0.06, right=0.94, bottom=0.55 / height, top=1 - 0.3 / height, wspace=0.45,
                           hspace=0.6)
    for row, benchmark in enumerate(benchmarks):
        models, _ = _evaluation_models(audit, benchmark)
        sweep = audit.sweep[(audit.sweep["benchmark"] == benchmark) & audit.sweep["model"].isin(models)]
        full = audit.filters[(audit.filters["benchmark"] == benchmark) & (audit.filters["filter"] == "none")
                             & audit.filters["model"].isin(models)][["blind_gap", "visual_gain"]].mean()
        for col, signal in enumerate(SWEEP_SIGNALS):
            ax = figure.add_subplot(len(benchmarks), len(SWEEP_SIGNALS), row * len(SWEEP_SIGNALS) + col + 1)
            curve = sweep[sweep["signal"] == signal].groupby("tau")[["blind_gap", "visual_gain", "n_kept"]].mean()
            ax.set_title(f"{_name(benchmark)} ({', '.join(models) or 'no VLM'})", fontsize=8)
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


# --------------------------------------------------------------------------- writing
def _manifest(audit: Audit, exported: dict[str, int]) -> dict:
    return {
        "panel": {"source": audit.panel.source, "text_llms": list(audit.panel.text_llms),
                  "vlms": list(audit.panel.vlms), "held_out": list(audit.panel.held_out),
                  "inspector_llms": list(audit.panel.inspector)},
        "tau": audit.tau, "baseline": audit.baseline,
        "inspector_max_hits": audit.max_hits, "n_resamples": audit.n_resamples,
        "confidence_level": audit.confidence_level, "seed": audit.seed, "roles": audit.roles,
        "files_used": [{"model": f.model, "model_args": f.model_args, "task": f.task, "date": f.date,
                        "results": str(f.results_path), "samples": str(f.samples_path)} for f in audit.runs.used],
        "replaced": [{"replaced": str(old.samples_path), "by": str(new.samples_path)}
                     for old, new in audit.runs.replaced],
        "stress_tests": {b: str(t.folder) for b, t in audit.stress_tests.items()},
        "grounded_questions": exported, "notes": audit.notes,
    }


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """pyarrow's writer: a tenth of DataFrame.to_csv's time on questions.csv (booleans come out as true/false)."""
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), path,
                     write_options=pa_csv.WriteOptions(quoting_style="needed"))


def _write_all(audit: Audit, folder: Path, out: Path) -> None:
    plots = _planned_plots(audit)
    drawing = _start_drawing(audit, folder, plots)
    try:
        tables = {"summary": audit.summary, "questions": audit.questions, "filters": audit.filters,
                  "sweep": audit.sweep}
        if not audit.comparison.empty:
            tables["compare"] = audit.comparison
        for name, table in tables.items():
            _write_csv(table, folder / f"{name}.csv")
        exported = {}
        for benchmark, ids in audit.grounded_ids().items():
            if not ids:
                continue
            write_subset_tasks(folder / "tasks", benchmark, ids, GROUNDED_SUFFIX,
                               description=f"Grounded subset of the visdep audit: S(q) <= {audit.tau:g}.")
            exported[benchmark] = len(ids)
        (folder / "report.md").write_text(_report(audit, out, plots, exported), encoding="utf-8")
        (folder / MANIFEST).write_text(json.dumps(_manifest(audit, exported), indent=2), encoding="utf-8")
    finally:
        if drawing is not None:
            drawing.join()
    if drawing is not None and drawing.exitcode != 0:
        raise PlotError(f"drawing the plots failed (exit code {drawing.exitcode}); its error is printed above")


def write_audit(audit: Audit, out: str | Path) -> Path:
    """Write every output of the audit into OUT (replacing an earlier audit there); returns OUT."""
    started = time.perf_counter()
    out = check_out_dir(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-", dir=out.parent))
    try:
        _write_all(audit, staging, out)
        if out.exists():
            previous = Path(tempfile.mkdtemp(prefix=f".{out.name}.previous-", dir=out.parent))
            out.rename(previous / out.name)
            staging.rename(out)
            shutil.rmtree(previous)
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info(f"wrote the audit to {out} in {time.perf_counter() - started:.1f} s")
    return out
