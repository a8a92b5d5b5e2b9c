"""Write an `Audit`: CSV tables, grounded task YAMLs, plots and report.md (tables laid out like the paper's).

Everything is written into a fresh folder beside OUT and moved into place at the end, so an error
leaves no half-written output. An existing OUT is replaced only if it holds an earlier audit
(its `audit.json`).
"""

from __future__ import annotations

import json
import math
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
from lmms_eval_tasks.loaders import BENCHMARKS
from visdep_metrics.audit.compute import TOP_SHORTCUTS, Audit, evaluation_models
from visdep_metrics.audit.filters import SWEEP_SIGNALS, signal_range
from visdep_metrics.outdir import OutputDirError, chmod_like_mkdir
from visdep_metrics.outdir import check_out_dir as _check_out_dir
from visdep_metrics.parallel import fork_context

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MANIFEST = "audit.json"
GROUNDED_SUFFIX = "grounded"
PAPER_ORDER = ("mmau", "trafficqa", "accidentbench", "vru_accident")  # the paper's tables list them so
_METRIC_HEADERS = {"acc_blind": "Acc_B", "acc_video": "Acc_V", "blind_gap": "BG↓", "visual_gain": "VG↑"}
_FILTER_HEADERS = {"none": "No Filtering", "llm_inspector": "LLM-Inspector", "b_clean": "B-Clean",
                   "s_score": "S-score"}


class PlotError(RuntimeError):
    """The process drawing the plots failed (it printed its own traceback)."""


def check_out_dir(out: str | Path) -> Path:
    """OUT may be new, empty, or an earlier audit output (which will be replaced)."""
    return _check_out_dir(out, MANIFEST, "audit")


__all__ = ["OutputDirError", "PlotError", "check_out_dir", "write_audit"]


# --------------------------------------------------------------------------- markdown helpers
def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{value + 0.0:.{digits}f}" if round(value, digits) else f"{0.0:.{digits}f}"  # no "-0.00"
    return str(value)


def _interval(row: pd.Series, metric: str) -> str:
    """value [lo, hi]; where the value has no interval, why (a row's `interval_note`)."""
    if metric not in row or _missing(row[metric]):
        return "–"
    if _missing(row[metric + "_lo"]):
        return f"{_fmt(row[metric])} (no interval: {row.get('interval_note') or 'not computed'})"
    return f"{_fmt(row[metric])} [{_fmt(row[metric + '_lo'])}, {_fmt(row[metric + '_hi'])}]"


def _missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def _p(value) -> str:
    if _missing(value):
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _markdown(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _name(benchmark: str) -> str:
    return BENCHMARKS[benchmark].title if benchmark in BENCHMARKS else benchmark


def _ordered(present) -> list[str]:
    """The benchmarks among `present` in the report's order: the traffic four as the paper lists them, then every
    other registered one (general VideoQA, specs), then any the registry does not know."""
    present = set(present)
    others = [b for b in BENCHMARKS if b not in PAPER_ORDER] + sorted(present - set(BENCHMARKS))
    return [b for b in (*PAPER_ORDER, *others) if b in present]


# --------------------------------------------------------------------------- report sections
def _evaluation_models(audit: Audit, benchmark: str) -> tuple[list[str], bool]:
    """Models that judge the filters: the held-out VLMs, else every VLM (then not held out)."""
    return evaluation_models(audit.runs.benchmarks[benchmark], audit.roles)


def _table1(audit: Audit) -> str:
    overall = audit.summary[(audit.summary["category"] == "all") & (audit.summary["subset"] == "full")]
    benchmarks = _ordered(overall["benchmark"])
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
        row = [audit.label(model)]
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
    for benchmark in _ordered(s["benchmark"]):
        block = s[s["benchmark"] == benchmark]
        categories = ["all"] + sorted(c for c in block["category"].unique() if c != "all")
        rows = [[c if c != "all" else "(all)", audit.label(r["model"]), r["n"], r["n_resampled"]]
                + [_interval(r, m) for m in _METRIC_HEADERS]
                for c in categories for _, r in block[block["category"] == c].iterrows()]
        unit = block["resampled"].iloc[0]
        parts.append(f"**{_name(benchmark)}**\n\n" + _markdown(
            ["Category", "Model", "n", f"{unit} resampled"] + list(_METRIC_HEADERS.values()), rows))
    return "\n\n".join(parts)


def _table2(audit: Audit) -> str:
    parts = []
    for benchmark in _ordered(audit.filters["benchmark"]):
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
            parts.append(f"**{_name(benchmark)}, {audit.label(model)}** ({note})\n\n"
                         + _markdown(["Metric"] + [_FILTER_HEADERS[f] for f in filters], rows))
    return "\n\n".join(parts)


def _table5(audit: Audit) -> str:
    overall = audit.summary[audit.summary["category"] == "all"]
    parts = []
    for benchmark in _ordered(overall["benchmark"]):
        block = overall[overall["benchmark"] == benchmark]
        full, grounded = block[block["subset"] == "full"], block[block["subset"] == "grounded"]
        if grounded.empty:
            continue
        header = (["Model"] + [f"Original {h}" for h in _METRIC_HEADERS.values()]
                  + [f"Filtered (G) {h}" for h in _METRIC_HEADERS.values()])
        rows = []
        for model in sorted(full["model"], key=lambda m: (full.loc[full["model"] == m, "acc_video"].isna().item(), m)):
            f, g = full[full["model"] == model].iloc[0], grounded[grounded["model"] == model].iloc[0]
            rows.append([audit.label(model)] + [f[m] for m in _METRIC_HEADERS] + [g[m] for m in _METRIC_HEADERS])
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


def _resampling_sentence(audit: Audit) -> str:
    """Per benchmark: what the bootstrap drew (videos, or questions where the records name no video)."""
    overall = audit.summary[(audit.summary["subset"] == "full") & (audit.summary["category"] == "all")]
    parts = []
    for benchmark in _ordered(overall["benchmark"]):
        row = overall[overall["benchmark"] == benchmark].iloc[0]
        if row["resampled"] == "videos":
            parts.append(f"{_name(benchmark)}: {int(row['n_resampled']):,} videos ({int(row['n']):,} questions)")
        else:
            parts.append(f"{_name(benchmark)}: {int(row['n']):,} questions, one by one (the records name no video, "
                         f"so questions about one video are treated as independent: too narrow)")
    return "; ".join(parts)


def _points(row, metric: str) -> str:
    value = f"{row[metric]:+.1f} points"
    if _missing(row[f"{metric}_lo"]):
        return f"{value} (no interval: {row.get('interval_note') or 'not computed'})"
    return f"{value} [{row[f'{metric}_lo']:+.1f}, {row[f'{metric}_hi']:+.1f}]"


def _sign(row, metric: str) -> int:
    """+1 / -1 where the interval lies above / below 0, else 0 (a change the questions cannot tell from none)."""
    lo, hi = row.get(f"{metric}_lo"), row.get(f"{metric}_hi")
    if _missing(lo) or _missing(hi):
        return 0
    return 1 if lo > 0 else -1 if hi < 0 else 0


def _lead_line(row, models: list[str]) -> str:
    """One plain line on a benchmark (or its grounded subset) from the mean of `models` (labels)."""
    who = f"the mean of {', '.join(models)}" if models else "no model"
    bg = {1: f"without the video the models beat chance ({row['chance']:.1f}%)",
          -1: f"without the video the models score below chance ({row['chance']:.1f}%)",
          0: f"without the video the models cannot be told from chance ({row['chance']:.1f}%)"}[_sign(row, "blind_gap")]
    text = f"Blind Gap {_points(row, 'blind_gap')}: {bg}"
    if _missing(row["visual_gain"]):
        verdict = ("answerable from the text alone" if _sign(row, "blind_gap") > 0 else
                   "no verdict on the video without video runs")
        return f"{text}; no video runs, so no Visual Gain ({who}). Verdict: {verdict}."
    vg = {1: "the video adds accuracy", -1: "the video costs accuracy",
          0: "the video's effect cannot be told from zero"}[_sign(row, "visual_gain")]
    text += f". Visual Gain {_points(row, 'visual_gain')}: {vg} ({who})"
    verdict = {(1, 1): "needs the video in part, but part of its accuracy comes from the text alone",
               (0, 1): "needs the video", (-1, 1): "needs the video",
               }.get((_sign(row, "blind_gap"), _sign(row, "visual_gain")),
                     "answerable from the text: its accuracy says little about the use of the video"
                     if _sign(row, "blind_gap") > 0 else
                     "neither the text nor the video lifts these models: it does not tell them apart")
    return f"{text}. Verdict: {verdict}."


def _lead(audit: Audit) -> list[str]:
    lines = []
    for benchmark in _ordered(audit.headline.get("benchmark", [])):
        block = audit.headline[audit.headline["benchmark"] == benchmark].set_index("subset")
        full = block.loc["full"]
        judges, _ = evaluation_models(audit.runs.benchmarks[benchmark], audit.roles)
        models = judges or audit.runs.benchmarks[benchmark].models  # as compute's headline rows: else every model
        line = (f"- **{_name(benchmark)}** ({int(full['n']):,} questions, {int(full['n_resampled']):,} "
                f"{full['resampled']} resampled): {_lead_line(full, [audit.label(m) for m in models])}")
        if "grounded" in block.index:
            g = block.loc["grounded"]
            line += (f" Grounded subset (S ≤ {audit.tau:g}, {int(g['n']):,} questions): Blind Gap "
                     f"{_points(g, 'blind_gap')}" + (f", Visual Gain {_points(g, 'visual_gain')}."
                                                      if not _missing(g["visual_gain"]) else "."))
        lines.append(line)
    return lines


def _models_section(audit: Audit) -> str:
    rows = []
    for model in audit.runs.models:
        info = audit.runs.model_info.get(model)
        settings = ", ".join(f"{k}={v}" for k, v in info.settings) if info else ""
        rows.append([audit.label(model), model, settings, audit.roles.get(model, "")])
    return _markdown(["Label", "Model", "Score-changing settings", "Role"], rows)


def _comparison_sentence(audit: Audit, r: pd.Series) -> str:
    """One plain sentence on a checkpoint against the baseline on one benchmark."""
    head = f"- **{audit.label(r['model'])}** on {_name(r['benchmark'])} ({r['subset']}, {int(r['n'])} questions): "
    if _missing(r.get("delta_acc_video")):
        return head + (f"Acc_B {_points(r, 'delta_acc_blind')} (McNemar p {_p(r['delta_acc_blind_p'])}); "
                       f"no video runs to compare.")
    head += (f"Acc_V {_points(r, 'delta_acc_video')} (McNemar p {_p(r['delta_acc_video_p'])}), Blind Gap "
             f"{_points(r, 'delta_acc_blind')} (p {_p(r['delta_acc_blind_p'])}), Visual Gain "
             f"{_points(r, 'delta_visual_gain')} (permutation p {_p(r['delta_visual_gain_p'])}): ")
    if r.get("text_shortcut_gain") is True:
        return head + ("**gain from text shortcuts**: its accuracy rose while "
                       + ("the Blind Gap rose" if _sign(r, "delta_acc_blind") > 0 else "the Visual Gain fell")
                       + ", so what it gained it also has without the video.")
    if _sign(r, "delta_acc_video") > 0:
        return head + ("the gain came with more use of the video." if _sign(r, "delta_visual_gain") > 0 else
                       "accuracy rose with neither a rise of the Blind Gap nor a fall of the Visual Gain the "
                       "questions can tell.")
    if _sign(r, "delta_acc_video") < 0:
        return head + "accuracy fell."
    return head + "no change of Acc_V the questions can tell from none."


def _comparison_section(audit: Audit) -> list[str]:
    rows = [[audit.label(r["model"]), _name(r["benchmark"]), r["subset"], r["n"]]
            + [v for m in ("acc_blind", "acc_video", "visual_gain")
               for v in (_interval(r, f"delta_{m}"), _p(r.get(f"delta_{m}_p")))]
            + [{True: "yes", False: "no"}.get(r.get("text_shortcut_gain"), "–")]
            for _, r in audit.comparison.iterrows()]
    full = audit.comparison[audit.comparison["subset"] == "full"]
    return [f"## Against the baseline {audit.label(audit.baseline)}", "",
            "Each model minus the baseline on the same questions (percentage points), with paired intervals (the "
            "same resampled videos for both models). ΔAcc_B is also the change of the Blind Gap (chance is shared); "
            "ΔVG the change of the Visual Gain. p: McNemar's exact test for ΔAcc_B and ΔAcc_V (it treats questions "
            "as independent, optimistic where videos carry several), a sign-flip permutation test over videos for "
            "ΔVG. Text-shortcut gain: Acc_V rose while the Blind Gap rose or the Visual Gain fell (each interval "
            "clear of 0), the SFT case of the paper's appendix B.5.", "",
            _markdown(["Model", "Benchmark", "Subset", "n", "ΔAcc_B (= ΔBG)", "p", "ΔAcc_V", "p", "ΔVG", "p",
                       "Text-shortcut gain"], rows), "",
            *[_comparison_sentence(audit, r) for _, r in full.iterrows()], ""]


def _frames_section(audit: Audit, plots: dict[str, str]) -> list[str]:
    rows = [[r["checkpoint"], _name(r["benchmark"]), int(r["max_frames"]), r["n"], _interval(r, "acc_video"),
             _interval(r, "visual_gain"), _interval(r, "delta_acc_video"), _p(r["delta_acc_video_p"]),
             _interval(r, "delta_visual_gain"), _p(r["delta_visual_gain_p"])]
            for _, r in audit.frames.iterrows()]
    lines = ["## Frame budgets", "",
             "Runs of one checkpoint that differ only in `max_frames`: Acc_V and VG per budget, and the change "
             "against its fewest frames (paired over the same resampled videos; p: McNemar for ΔAcc_V, sign-flip "
             "permutation over videos for ΔVG).", "",
             _markdown(["Checkpoint", "Benchmark", "Frames", "n", "Acc_V", "VG", "ΔAcc_V vs fewest", "p",
                        "ΔVG vs fewest", "p"], rows), ""]
    if "frames" in plots:
        lines += [f"![Acc_V and VG against frames]({plots['frames']})", ""]
    return lines


def _scores_section(audit: Audit, plots: dict[str, str]) -> list[str]:
    q = audit.questions
    rows = []
    for benchmark in _ordered(q["benchmark"].unique()):  # unique(): 100,000 rows
        block = q[q["benchmark"] == benchmark]
        for signal in ("T", "V", "S"):
            values = block[signal].dropna()
            if values.empty:
                continue
            rows.append([_name(benchmark), signal, len(values), values.mean(), values.quantile(0.1), values.median(),
                         values.quantile(0.9), values.min(), values.max()])
    if not rows:
        return []
    lines = ["## Distributions of T, V and S", "",
             "Per question: T (textual evidence, in [0, 1]), V (visual necessity, in [−K/(K−1), K/(K−1)]) and "
             f"S = T − V; the grounded subset is S ≤ τ = {audit.tau:g}.", "",
             _markdown(["Benchmark", "Score", "n", "mean", "10%", "median", "90%", "min", "max"], rows), ""]
    if "scores" in plots:
        lines += [f"![Histograms of T, V and S]({plots['scores']})", ""]
    return lines


def _quoted(text: str) -> list[str]:
    return [f"   > {line}" if line.strip() else "   >" for line in text.splitlines()]


def _top_section(audit: Audit) -> list[str]:
    top = audit.top_shortcuts
    if top.empty:
        return []
    lines = [f"## The {TOP_SHORTCUTS} highest-S questions", "",
             "What the shortcut looks like: the questions the text-only models answer most confidently and the "
             "video helps least. The text is the prompt lmms-eval logged for the question (a sample's `input`: the "
             "question and its lettered options, as every model saw them).", ""]
    for benchmark in _ordered(top["benchmark"]):
        lines += [f"**{_name(benchmark)}**", ""]
        for r in top[top["benchmark"] == benchmark].itertuples():
            answer = chr(ord("A") + int(r.answer_index))
            category = f", {r.category}" if isinstance(r.category, str) and r.category else ""
            lines.append(f"{r.rank}. S {r.S:.2f} (T {r.T:.2f}, V {r.V:.2f}) `{r.question_id}`{category}, answer "
                         f"{answer}")
            lines += _quoted(r.prompt) if isinstance(r.prompt, str) else ["   > (no prompt logged in the samples)"]
        lines.append("")
    return lines


def _report(audit: Audit, out: Path, plots: dict[str, str], exported: dict[str, int]) -> str:
    p = audit.panel
    label = audit.label
    panel_rows = [["T (text_llms)", ", ".join(map(label, p.text_llms)) or "(none)"],
                  ["V (vlms)", ", ".join(map(label, p.vlms)) or "(none)"],
                  ["held out", ", ".join(map(label, p.held_out)) or "(none)"],
                  ["LLM-Inspector", ", ".join(map(label, p.inspector)) or "(none)"]]
    others = [label(m) for m, r in audit.roles.items() if r in ("vlm", "text_llm")]
    if others:
        panel_rows.append(["in no panel", ", ".join(others)])
    used = [[_name(r.benchmark), r.panel, ", ".join(map(label, r.models)) or "(none)"]
            for r in audit.panel_used.itertuples()]
    lines = ["# Visual-dependence audit", ""]
    lead = _lead(audit)
    if lead:
        lines += ["Per benchmark, from the mean of its held-out VLMs (else of every VLM), with "
                  f"{audit.confidence_level:.0%} intervals:", "", *lead, ""]
    lines += [
        f"Panel: {p.source}. τ = {audit.tau:g} (S(q) ≤ τ keeps a question). LLM-Inspector drops a question when "
        f"more than {audit.max_hits} of its LLMs answer it correctly blind; B-Clean drops it when a panel VLM does. "
        f"Intervals: {audit.confidence_level:.0%} percentile cluster bootstrap ({audit.n_resamples} resamples, seed "
        f"{audit.seed}): the videos of a benchmark are drawn with replacement, each with all its questions, "
        f"because questions about one video are not independent (Miller 2024, \"Adding Error Bars to Evals\"). "
        f"Each category and the grounded subset is resampled within itself; within one, every model and metric is "
        f"computed on the same resamples (so VG and comparisons are paired). Resampled: "
        f"{_resampling_sentence(audit)}. All values in %.", "",
        "Models (a model is a checkpoint under one set of score-changing settings; tables use its label):", "",
        _models_section(audit), "",
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
    lines += _scores_section(audit, plots)
    if "sweeps" in plots:
        lines += ["## Threshold sweeps", "",
                  "BG and VG on {q : signal(q) ≤ τ} for the signals T, −V and S over each signal's whole range (mean "
                  "over the held-out VLMs, else over every VLM); dashed: the full benchmark; dotted (right axis): "
                  "questions kept. Every model in sweep.csv.", ""]
        lines += [f"![Threshold sweeps]({plots['sweeps']})", ""]
    lines += _top_section(audit)
    if not audit.comparison.empty:
        lines += _comparison_section(audit)
    if not audit.frames.empty:
        lines += _frames_section(audit, plots)
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
    lines += ["## Files used", "", _files_section(audit), "",
              f"Package versions and the sha256 of every input file: `{MANIFEST}`.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots
PLOTS = {"diagnostic_space": "diagnostic_space.png", "sweeps": "sweeps.png", "scores": "scores.png",
         "frames": "frames.png"}


def _overall_video_rows(audit: Audit) -> pd.DataFrame:
    """Summary rows over all categories of models with video runs: the points of the diagnostic space."""
    return audit.summary[(audit.summary["category"] == "all") & audit.summary["acc_video"].notna()]


def _planned_plots(audit: Audit) -> dict[str, str]:
    """The plots the audit has data for: name -> file name."""
    planned = {"diagnostic_space": not _overall_video_rows(audit).empty, "sweeps": not audit.sweep.empty,
               "scores": audit.questions[["T", "V", "S"]].notna().any().any(), "frames": not audit.frames.empty}
    return {name: file_name for name, file_name in PLOTS.items() if planned[name]}


def _draw_plots(audit: Audit, folder: Path, plots: dict[str, str]) -> None:
    # matplotlib is imported here, where plots are drawn (the forked process; this one once its tables are
    # written): the rest of the audit does without it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures = {"diagnostic_space": _diagnostic_space, "sweeps": _sweep_figure, "scores": _scores_figure,
               "frames": _frames_figure}
    for name, file_name in plots.items():
        figure = figures[name](audit)
        FigureCanvasAgg(figure)
        figure.savefig(folder / file_name, dpi=100)


def _start_drawing(audit: Audit, folder: Path, plots: dict[str, str]) -> BaseProcess | None:
    """Draw plots in a forked process, beside the writing of the tables (drawing is seconds of one core); in this
    process where the platform cannot fork. Returns the process to join."""
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
    for i, benchmark in enumerate(_ordered(b for b, subset in means.index if subset == "full")):
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

    benchmarks = _ordered(audit.sweep["benchmark"])
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
            ax.set_title(f"{_name(benchmark)} ({', '.join(map(audit.label, models)) or 'no VLM'})", fontsize=8)
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


def _scores_figure(audit: Audit) -> Figure:
    """Histograms of T, V and S, one panel per benchmark (two columns), the three as outlines over S's whole range
    (T in [0, 1] and V in [-r, r] lie inside it); τ marked. One panel per benchmark, not per score: drawing time
    goes with the number of axes."""
    from matplotlib.figure import Figure

    q = audit.questions
    benchmarks = _ordered(q["benchmark"].unique())
    n_rows = (len(benchmarks) + 1) // 2
    figure = Figure(figsize=(11, 3.2 * n_rows))
    figure.subplots_adjust(left=0.07, right=0.98, bottom=0.5 / (3.2 * n_rows), top=1 - 0.35 / (3.2 * n_rows),
                           wspace=0.25, hspace=0.55)
    for i, benchmark in enumerate(benchmarks):
        ax = figure.add_subplot(n_rows, 2, i + 1)
        block = q[q["benchmark"] == benchmark]
        ax.set_title(f"{_name(benchmark)} ({len(block)} questions)", fontsize=9)
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


def _frames_figure(audit: Audit) -> Figure:
    """Acc_V and VG against max_frames, with intervals: one panel per benchmark, one pair of lines per checkpoint."""
    from matplotlib.figure import Figure

    frames = audit.frames
    benchmarks = _ordered(frames["benchmark"])
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
        ax.set_title(_name(benchmark))
        ax.legend(fontsize=7, loc="best")
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
        "models": {m.name: {"label": m.label, "pretrained": m.pretrained, "settings": dict(m.settings)}
                   for m in audit.runs.model_info.values()},
        "resampling": {b.benchmark: {"unit": "videos" if b.clusters is not None else "questions",
                                     "n_questions": len(b.questions),
                                     "n_videos": None if b.clusters is None else int(pd.unique(b.clusters).size)}
                       for b in audit.runs.benchmarks.values()},
        "dropped_questions": {b.benchmark: b.dropped.to_dict(orient="records")
                              for b in audit.runs.benchmarks.values() if not b.dropped.empty},
        **audit.provenance,
    }


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """pyarrow's writer: a tenth of DataFrame.to_csv's time on questions.csv (booleans come out as true/false)."""
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), path,
                     write_options=pa_csv.WriteOptions(quoting_style="needed"))


# Drawn in a forked process while the tables and the report are written here; the other plots are drawn here
# afterwards, so that both processes end about together (on the bench audit: the child's matplotlib import and
# these two plots 1.6 s; here tables, report, import and the histograms 1.4 s).
CHILD_PLOTS = ("diagnostic_space", "sweeps")


def _write_all(audit: Audit, folder: Path, out: Path) -> None:
    plots = _planned_plots(audit)
    drawing = _start_drawing(audit, folder, {name: plots[name] for name in CHILD_PLOTS if name in plots})
    try:
        tables = {"summary": audit.summary, "questions": audit.questions, "filters": audit.filters,
                  "sweep": audit.sweep, "headline": audit.headline}
        optional = {"compare": audit.comparison, "frames": audit.frames, "top_shortcuts": audit.top_shortcuts}
        tables |= {name: table for name, table in optional.items() if not table.empty}
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
        try:
            _draw_plots(audit, folder, {name: file for name, file in plots.items() if name not in CHILD_PLOTS})
        except Exception as e:
            raise PlotError(f"drawing the plots failed: {type(e).__name__}: {e}") from e
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
        chmod_like_mkdir(staging)  # mkdtemp makes it 0700; OUT follows the umask like any folder the user makes
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
