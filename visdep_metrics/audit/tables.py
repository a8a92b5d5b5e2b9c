"""The report's tables in markdown, from an `Audit`'s frames (the sentences around them: `narrative.py`).

Three tables follow the paper's layout: the global diagnosis of every model on every benchmark (its table 1), the
filtering strategies judged by the evaluation models (table 2), and each model before and after filtering to the
grounded subset (table 5).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lmms_eval_tasks.loaders import known_benchmarks
from visdep_metrics.audit.compute import Audit
from visdep_metrics.audit.intervals import ALL, evaluation_models

PAPER_ORDER = ("mmau", "trafficqa", "accidentbench", "vru_accident")  # the paper's tables list them so
METRIC_HEADERS = {"acc_blind": "Acc_B", "acc_video": "Acc_V", "blind_gap": "BG↓", "visual_gain": "VG↑"}
FILTER_HEADERS = {"none": "No Filtering", "llm_inspector": "LLM-Inspector", "b_clean": "B-Clean",
                  "s_score": "S-score"}


def missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def fmt(value, digits: int = 2) -> str:
    if missing(value):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{value + 0.0:.{digits}f}" if round(value, digits) else f"{0.0:.{digits}f}"  # no "-0.00"
    return str(value)


def interval(row: pd.Series, metric: str) -> str:
    """value [lo, hi]; where the value has no interval, why (`withheld`)."""
    if metric not in row or missing(row[metric]):
        return "–"
    if missing(row[metric + "_lo"]):
        return f"{fmt(row[metric])} (no interval: {withheld(row, metric)})"
    return f"{fmt(row[metric])} [{fmt(row[metric + '_lo'])}, {fmt(row[metric + '_hi'])}]"


def withheld(row, metric: str) -> str:
    """Why a metric of a row has no interval: its own note, else its group's."""
    for key in (f"{metric}_note", "interval_note"):
        note = row.get(key)
        if isinstance(note, str) and note:
            return note
    return "not computed"


def p_value(value) -> str:
    if missing(value):
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def markdown(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def name(benchmark: str) -> str:
    known = known_benchmarks()
    return known[benchmark].title if benchmark in known else benchmark


def ordered(present) -> list[str]:
    """The benchmarks among `present` in the report's order: the traffic four as the paper lists them, then every
    other registered one (general VideoQA, specs), then any the registry does not know."""
    present = set(present)
    known = known_benchmarks()
    others = [b for b in known if b not in PAPER_ORDER] + sorted(present - set(known))
    return [b for b in (*PAPER_ORDER, *others) if b in present]


def overall(audit: Audit, subset: str = "full") -> pd.DataFrame:
    """Summary rows of every model over all of a benchmark's questions (or of its grounded subset)."""
    s = audit.summary
    return s[(s["category"] == ALL) & (s["subset"] == subset)]


def global_diagnosis_table(audit: Audit) -> str:
    """Acc_B, Acc_V, BG and VG of every model on every benchmark, VLMs first, their mean on top."""
    rows_of = overall(audit)
    benchmarks = ordered(rows_of["benchmark"])
    vlms = sorted(rows_of.loc[rows_of["acc_video"].notna(), "model"].unique())
    llms = sorted(set(rows_of["model"]) - set(vlms))
    wide = rows_of.set_index(["model", "benchmark"])[list(METRIC_HEADERS)]
    header = ["Model"] + [f"{name(b)} {METRIC_HEADERS[m]}" for b in benchmarks for m in METRIC_HEADERS]
    rows = []
    if vlms:
        means = rows_of[rows_of["acc_video"].notna()].groupby("benchmark")[list(METRIC_HEADERS)].mean()
        rows.append(["Average VLM"] + [means.loc[b, m] if b in means.index else np.nan
                                       for b in benchmarks for m in METRIC_HEADERS])
    for model in vlms + llms:
        rows.append([audit.label(model)] + [wide.loc[(model, b), m] if (model, b) in wide.index else np.nan
                                            for b in benchmarks for m in METRIC_HEADERS])
    first = rows_of.groupby("benchmark").first()
    sizes = ", ".join(f"{name(b)} {int(first.loc[b, 'n'])} questions (chance {first.loc[b, 'chance']:.2f})"
                      for b in benchmarks)
    return markdown(header, rows) + f"\n\n{sizes}. Text-only LLMs have no video accuracy by design (–)."


def design_table(audit: Audit) -> str:
    """Per benchmark: questions, videos, distinct prompts, what the intervals count as independent draws, and the
    design effects of blind and video correctness (of the evaluation models' mean, `stats.crossed_intervals`) with
    the independent answers they leave (per model and category: summary.csv)."""
    head = audit.headline[audit.headline["subset"] == "full"].set_index("benchmark")
    rows = []
    for b in ordered(head.index):
        r = head.loc[b]
        rows.append([name(b), f"{int(r['n']):,}", f"{int(r['n_videos']):,}", _count(r["n_prompts"]),
                     r["resampled"], _deff(r["deff_blind"], r["n"]), _deff(r["deff_video"], r["n"])])
    return markdown(["Benchmark", "Questions", "Videos", "Distinct prompts", "Independent units",
                     "Design effect, blind (≈ independent answers)", "Design effect, video (≈ independent answers)"],
                    rows)


def _count(value) -> str:
    return "–" if missing(value) else f"{int(value):,}"


def _deff(deff: float, n: float) -> str:
    """The design effect and the independent answers it leaves: never more than the questions (an estimate below 1
    is noise around 1, or answers that agree less than chance)."""
    return "–" if missing(deff) else f"{deff:.2f} (≈ {n / max(deff, 1.0):,.0f})"


def intervals_table(audit: Audit) -> str:
    """Every model's metrics with intervals, per benchmark, over all questions and per category."""
    parts = []
    s = audit.summary[audit.summary["subset"] == "full"]
    for benchmark in ordered(s["benchmark"]):
        block = s[s["benchmark"] == benchmark]
        categories = [ALL] + sorted(c for c in block["category"].unique() if c != ALL)
        rows = [[c if c != ALL else "(all)", audit.label(r["model"]), r["n"], r["n_videos"], _count(r["n_prompts"])]
                + [interval(r, m) for m in METRIC_HEADERS]
                for c in categories for _, r in block[block["category"] == c].iterrows()]
        parts.append(f"**{name(benchmark)}**\n\n" + markdown(
            ["Category", "Model", "n", "videos", "prompts"] + list(METRIC_HEADERS.values()), rows))
    return "\n\n".join(parts)


def filtering_table(audit: Audit) -> str:
    """Acc_V, BG, VG and questions kept under each filter, for each evaluation model."""
    parts = []
    for benchmark in ordered(audit.filters["benchmark"]):
        models, held_out = evaluation_models(audit.runs.benchmarks[benchmark], audit.roles)
        block = audit.filters[audit.filters["benchmark"] == benchmark].set_index(["filter", "model"])
        filters = [f for f in FILTER_HEADERS if f in block.index.get_level_values("filter")]
        for model in models:
            rows = [[label] + [block.loc[(f, model), metric] for f in filters]
                    for metric, label in (("acc_video", "Acc_V"), ("blind_gap", "BG↓"), ("visual_gain", "VG↑"))]
            rows.append(["# QA"] + [int(block.loc[(f, model), "n_kept"]) for f in filters])
            note = "held out" if held_out else "not held out: it is in the panel"
            parts.append(f"**{name(benchmark)}, {audit.label(model)}** ({note})\n\n"
                         + markdown(["Metric"] + [FILTER_HEADERS[f] for f in filters], rows))
    return "\n\n".join(parts)


def before_after_table(audit: Audit) -> str:
    """Each model's metrics on the full benchmark and on its grounded subset."""
    parts = []
    full_rows, grounded_rows = overall(audit), overall(audit, "grounded")
    for benchmark in ordered(audit.summary["benchmark"]):
        full = full_rows[full_rows["benchmark"] == benchmark].set_index("model")
        grounded = grounded_rows[grounded_rows["benchmark"] == benchmark].set_index("model")
        if grounded.empty:
            continue
        header = (["Model"] + [f"Original {h}" for h in METRIC_HEADERS.values()]
                  + [f"Filtered (G) {h}" for h in METRIC_HEADERS.values()])
        models = sorted(full.index, key=lambda m: (bool(pd.isna(full.loc[m, "acc_video"])), m))
        rows = [[audit.label(m)] + [full.loc[m, k] for k in METRIC_HEADERS] + [grounded.loc[m, k]
                                                                              for k in METRIC_HEADERS]
                for m in models]
        parts.append(f"**{name(benchmark)}**: original {int(full['n'].iloc[0])} samples, filtered (G) "
                     f"{int(grounded['n'].iloc[0])} samples\n\n" + markdown(header, rows))
    return "\n\n".join(parts) if parts else "No benchmark has a grounded subset."


def models_table(audit: Audit) -> str:
    rows = []
    for model in audit.runs.models:
        info = audit.runs.model_info.get(model)
        settings = ", ".join(f"{k}={v}" for k, v in info.settings) if info else ""
        rows.append([audit.label(model), model, settings, audit.roles.get(model, "")])
    return markdown(["Label", "Model", "Score-changing settings", "Role"], rows)


def files_table(audit: Audit) -> str:
    rows = [[f.model, f.task, f.date, str(f.samples_path)] for f in audit.runs.used]
    text = markdown(["Model", "Task", "Run date", "Samples file"], rows)
    if audit.runs.replaced:
        text += "\n\nReplaced by a later run of the same model and task:\n\n" + "\n".join(
            f"- {old.samples_path} → {new.samples_path}" for old, new in audit.runs.replaced)
    if audit.runs.skipped:
        text += "\n\nSkipped:\n\n" + "\n".join(f"- {path}: {why}" for path, why in audit.runs.skipped)
    return text


def dropped_by_reason(audit: Audit) -> dict[str, dict[str, list[dict]]]:
    """task -> reason -> the questions the task left out for it (results["visdep"]["dropped"])."""
    found: dict[str, dict[str, list[dict]]] = {}
    for task, entries in sorted(audit.runs.dropped.items()):
        for entry in entries:
            found.setdefault(task, {}).setdefault(entry["reason"], []).append(entry)
    return found


def dropped_table(audit: Audit) -> str:
    rows = [[task, reason, len(entries), ", ".join(str(e["question_id"] or e["where"]) for e in entries[:5])
             + (" ..." if len(entries) > 5 else "")]
            for task, reasons in dropped_by_reason(audit).items() for reason, entries in reasons.items()]
    return markdown(["Task", "Reason", "Questions", "e.g."], rows)


def scores_table(audit: Audit) -> str:
    """Distribution of T, V and S per benchmark."""
    q = audit.questions
    rows = []
    blocks = dict(tuple(q.groupby("benchmark")[["T", "V", "S"]]))
    for benchmark in ordered(blocks):
        block = blocks[benchmark]
        for signal in ("T", "V", "S"):
            values = block[signal].dropna()
            if not values.empty:
                rows.append([name(benchmark), signal, len(values), values.mean(), values.quantile(0.1),
                             values.median(), values.quantile(0.9), values.min(), values.max()])
    return markdown(["Benchmark", "Score", "n", "mean", "10%", "median", "90%", "min", "max"], rows) if rows else ""
