"""report.md: the verdicts, sentences and sections around the tables (`tables.py`).

A sentence says no more than the intervals show: "needs the video" only where the video adds accuracy and the
models score below chance without it; where the Blind Gap cannot be told from zero, "no text shortcut detected at
this size", with its interval and the independent answers behind it; a flagged checkpoint is told what was flagged;
a comparison on a grounded subset chosen with the compared models' own runs says so.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pandas as pd

from visdep_metrics.audit.compute import TOP_SHORTCUTS, Audit
from visdep_metrics.audit.diagnostics import TEXTUAL_EVIDENCE
from visdep_metrics.audit.intervals import ALL, P_FAMILY, evaluation_models, sign, significant
from visdep_metrics.audit.ladder import TEMPORAL_SUFFIX, share_interval
from visdep_metrics.audit.tables import (
    before_after_table,
    design_table,
    dropped_table,
    files_table,
    filtering_table,
    global_diagnosis_table,
    interval,
    intervals_table,
    markdown,
    missing,
    models_table,
    name,
    ordered,
    p_value,
    scores_table,
    withheld,
)

GROUNDED_SUFFIX = "grounded"
MANIFEST = "audit.json"


def points(row, metric: str) -> str:
    value = f"{row[metric]:+.1f} points"
    if missing(row[f"{metric}_lo"]):
        return f"{value} (no interval: {withheld(row, metric)})"
    return f"{value} [{row[f'{metric}_lo']:+.1f}, {row[f'{metric}_hi']:+.1f}]"


def _blind_clause(row) -> str:
    chance = f"chance {row['chance']:.1f}%"
    bg = sign(row, "blind_gap")
    if bg > 0:
        return f"Blind Gap {points(row, 'blind_gap')}: without the video the models beat {chance}"
    if bg < 0:
        return f"Blind Gap {points(row, 'blind_gap')}: without the video the models score below {chance}"
    answers = "" if missing(row.get("deff_blind")) else \
        f", ≈ {row['n'] / max(row['deff_blind'], 1.0):,.0f} independent blind answers"
    return (f"no text shortcut detected at this size: Blind Gap {points(row, 'blind_gap')} cannot be told from zero "
            f"({chance}{answers})")


def lead_line(row, models: list[str]) -> str:
    """One plain line on a benchmark (or its grounded subset) from the mean of `models` (labels)."""
    who = f"the mean of {', '.join(models)}" if models else "no model"
    bg = sign(row, "blind_gap")
    text = _blind_clause(row)
    if missing(row["visual_gain"]):
        verdict = {1: "answerable from the text alone", 0: "no verdict on the video without video runs",
                   -1: "no verdict on the video without video runs"}[bg]
        return f"{text}; no video runs, so no Visual Gain ({who}). Verdict: {verdict}."
    vg = sign(row, "visual_gain")
    effect = {1: "the video adds accuracy", -1: "the video costs accuracy",
              0: "the video's effect cannot be told from zero"}[vg]
    text += f". Visual Gain {points(row, 'visual_gain')}: {effect} ({who})"
    verdict = {(-1, 1): "needs the video: below chance without it, above with it",
               (0, 1): "the video adds accuracy, and no text shortcut was detected at this size",
               (1, 1): "the video adds accuracy, but part of the accuracy comes from the text alone"}.get(
        (bg, vg), "answerable from the text: its accuracy says little about the use of the video" if bg > 0 else
        "neither the text nor the video lifts these models beyond what this many questions can tell")
    return f"{text}. Verdict: {verdict}."


def lead(audit: Audit) -> list[str]:
    lines = []
    for benchmark in ordered(audit.headline.get("benchmark", [])):
        block = audit.headline[audit.headline["benchmark"] == benchmark].set_index("subset")
        full = block.loc["full"]
        judges, held_out = evaluation_models(audit.runs.benchmarks[benchmark], audit.roles)
        models = judges or audit.runs.benchmarks[benchmark].models  # as the headline rows: else every model
        prompts = "" if missing(full["n_prompts"]) else f", {int(full['n_prompts']):,} distinct prompts"
        line = (f"- **{name(benchmark)}** ({int(full['n']):,} questions, {int(full['n_videos']):,} videos{prompts}): "
                f"{lead_line(full, [audit.label(m) for m in models])}")
        if "grounded" in block.index:
            g = block.loc["grounded"]
            line += (f" Grounded subset (S ≤ {audit.tau:g}, {int(g['n']):,} questions): Blind Gap "
                     f"{points(g, 'blind_gap')}" + (f", Visual Gain {points(g, 'visual_gain')}"
                                                    if not missing(g["visual_gain"]) else ""))
            line += ("." if held_out else "; these models' own runs selected the subset, which favours them: "
                     "held-out models (`held_out` in a --panel file) are the fair judges there.")
        lines.append(line)
    return lines


def _p(r, metric: str) -> str:
    """The raw p-value and, where the family was adjusted, the adjusted one."""
    adjusted = r.get(f"{metric}_p_adj")
    raw = p_value(r.get(f"{metric}_p"))
    return raw if missing(adjusted) else f"{raw}, adjusted {p_value(adjusted)}"


def comparison_sentence(audit: Audit, r: pd.Series) -> str:
    """One plain sentence on a checkpoint against the baseline on one benchmark and subset; a change is told from
    none where its family-adjusted p-value is below 1 − confidence."""
    alpha = 1 - audit.settings.confidence_level
    head = f"- **{audit.label(r['model'])}** on {name(r['benchmark'])} ({r['subset']}, {int(r['n'])} questions): "
    note = f" Note: {r['selection_note']}." if isinstance(r.get("selection_note"), str) and r["selection_note"] else ""
    if missing(r.get("delta_acc_video")):
        return head + (f"Acc_B {points(r, 'delta_acc_blind')} (p {_p(r, 'delta_acc_blind')}); no video runs "
                       f"to compare.{note}")
    head += (f"Acc_V {points(r, 'delta_acc_video')} (p {_p(r, 'delta_acc_video')}), Blind Gap "
             f"{points(r, 'delta_acc_blind')} (p {_p(r, 'delta_acc_blind')}), Visual Gain "
             f"{points(r, 'delta_visual_gain')} (p {_p(r, 'delta_visual_gain')}): ")
    if r.get("text_shortcut_gain") is True:
        flagged = " and ".join(f"the {what}" for what in str(r["flagged"]).split("; "))
        return head + (f"**gain from text shortcuts**: its accuracy rose while {flagged}, so what it gained it also "
                       f"has without the video.{note}")
    if significant(r, "delta_acc_video", alpha) > 0:
        return head + ("the gain came with more use of the video." if significant(r, "delta_visual_gain", alpha) > 0
                       else "accuracy rose with neither a rise of the Blind Gap nor a fall of the Visual Gain the "
                       "questions can tell.") + note
    if significant(r, "delta_acc_video", alpha) < 0:
        return head + "accuracy fell." + note
    return head + "no change of Acc_V the questions can tell from none." + note


def _comparison_section(audit: Audit) -> list[str]:
    c = audit.comparison
    rows = [[audit.label(r["model"]), name(r["benchmark"]), r["subset"], r["n"]]
            + [v for m in ("acc_blind", "acc_video", "visual_gain")
               for v in (interval(r, f"delta_{m}"), _p(r, f"delta_{m}"))]
            + [{True: "yes", False: "no"}.get(r.get("text_shortcut_gain"), "–"), "†" if r["limit_note"] else ""]
            for _, r in c.iterrows()]
    tests = ", ".join(sorted(set(c["p_test"])))
    limited = [f"† {audit.label(r['model'])}, {name(r['benchmark'])} ({r['subset']}): {r['limit_note']}."
               for _, r in c.iterrows() if r["limit_note"]]
    return [f"## Against the baseline {audit.label(audit.baseline)}", "",
            "Each model minus the baseline on the same questions (percentage points), with paired intervals (the "
            "same questions, videos and prompts for both models). ΔAcc_B is also the change of the Blind Gap "
            "(chance is shared); ΔVG the change of the Visual Gain. p (H0: no change): from the test the interval "
            f"is built on, so p < {1 - audit.settings.confidence_level:g} exactly where the "
            f"interval excludes 0 ({tests}); adjusted: {P_FAMILY}, the family whose chance of any false "
            "flag is held at that level. Text-shortcut gain: Acc_V rose while the Blind Gap rose or the Visual Gain "
            "fell, each at an adjusted p below it: the SFT case of the paper's appendix B.5.", "",
            markdown(["Model", "Benchmark", "Subset", "n", "ΔAcc_B (= ΔBG)", "p", "ΔAcc_V", "p", "ΔVG", "p",
                      "Text-shortcut gain", ""], rows), "", *limited, *([""] if limited else []),
            *[comparison_sentence(audit, r) for _, r in c.iterrows()], ""]


def _frames_section(audit: Audit, plots: dict[str, str]) -> list[str]:
    rows = [[r["checkpoint"], name(r["benchmark"]), int(r["max_frames"]), r["n"], interval(r, "acc_video"),
             interval(r, "visual_gain"), interval(r, "delta_acc_video"), _p(r, "delta_acc_video"),
             interval(r, "delta_visual_gain"), _p(r, "delta_visual_gain"), "†" if r["limit_note"] else ""]
            for _, r in audit.frames.iterrows()]
    limited = [f"† {r['checkpoint']}, {name(r['benchmark'])}, {int(r['max_frames'])} frames: {r['limit_note']}."
               for _, r in audit.frames.iterrows() if r["limit_note"]]
    lines = ["## Frame budgets", "",
             "Runs of one checkpoint that differ only in `max_frames` (a run without it used the adapter's default): "
             "Acc_V and VG per budget, and the change against its fewest frames (paired over the same questions; "
             "p as for the baseline comparison, adjusted over this table's p-values).", "",
             markdown(["Checkpoint", "Benchmark", "Frames", "n", "Acc_V", "VG", "ΔAcc_V vs fewest", "p",
                       "ΔVG vs fewest", "p", ""], rows), "", *limited, *([""] if limited else [])]
    if "frames" in plots:
        lines += [f"![Acc_V and VG against frames]({plots['frames']})", ""]
    return lines


def ladder_verdict(audit: Audit, benchmark: str) -> str:
    """The ladder's verdict on one benchmark: how many questions need the order (the temporal subset, with the
    interval of its share), and the evaluation models' Frame and Order Gains."""
    bench = audit.runs.benchmarks[benchmark]
    q = audit.questions[audit.questions["benchmark"] == benchmark]
    parts = []
    if "temporal" in q and q["temporal"].notna().all():
        keep = q["temporal"].to_numpy(dtype=bool)
        share, low, high = share_interval(bench, keep, audit.settings.confidence_level)
        parts.append(f"needs the order: {int(keep.sum())} of {len(keep)} questions ({100 * share:.1f}% "
                     f"[{100 * low:.1f}, {100 * high:.1f}]: S(q) ≤ {audit.tau:g} and V_order(q) ≥ "
                     f"{audit.settings.tau_order:g})")
    judges, _ = evaluation_models(bench, audit.roles)
    rows = audit.ladder[(audit.ladder["benchmark"] == benchmark) & (audit.ladder["subset"] == "full")
                        & (audit.ladder["category"] == ALL) & audit.ladder["model"].isin(judges)]
    for _, r in rows.iterrows():
        gains = [f"{what} {points(r, gain)}" for gain, what in (("frame_gain", "Frame Gain"),
                                                               ("order_gain", "Order Gain")) if not missing(r[gain])]
        if gains:
            parts.append(f"{audit.label(r['model'])}: {', '.join(gains)}")
    return f"- **{name(benchmark)}**: " + "; ".join(parts) + "." if parts else ""


def _ladder_section(audit: Audit) -> list[str]:
    ladder = audit.ladder
    rows = [[audit.label(r["model"]), name(r["benchmark"]), r["subset"], r["category"], r["n"],
             interval(r, "acc_blind"), interval(r, "acc_single"), interval(r, "acc_shuffled"),
             interval(r, "acc_reversed"), interval(r, "acc_video"), interval(r, "frame_gain"), _p(r, "frame_gain"),
             interval(r, "order_gain"), _p(r, "order_gain"), interval(r, "order_gain_reversed")]
            for _, r in ladder[ladder["category"] == ALL].iterrows()]
    verdicts = [v for b in ordered(ladder["benchmark"]) if (v := ladder_verdict(audit, b))]
    return ["## The temporal ladder: one frame, frames out of order, the video", "",
            "Runs of one checkpoint under the frame conditions (docs/ladder.md): its blind answers, the middle frame "
            "alone (`frames=middle`), the sampled frames shuffled or reversed with their timestamps unchanged "
            "(`frame_order`), and the frames as sampled. Frame Gain FG = Acc_video − Acc_single (what more than one "
            "frame adds), Order Gain OG = Acc_video − Acc_shuffled (what the order adds; OGr with the frames "
            "reversed), each with Tango's score interval for paired answers on the design effect of the units the "
            "questions share, p (McNemar's, H0: no gain) adjusted by Holm over this table's p-values. The temporal "
            "subset: the grounded questions (S(q) ≤ "
            f"{audit.tau:g}) whose V_order(q), the panel VLMs' mean drop in P(answer) when the frames are shuffled "
            f"(normalised as V(q)), is at least τ_order = {audit.settings.tau_order:g}. Per category: ladder.csv; per "
            "question V_frame and V_order: questions.csv.", "",
            *verdicts, "",
            markdown(["Model", "Benchmark", "Subset", "Category", "n", "Acc blind", "Acc one frame", "Acc shuffled",
                      "Acc reversed", "Acc video", "FG", "p", "OG", "p", "OGr"], rows), ""]


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
    for benchmark in ordered(top["benchmark"]):
        lines += [f"**{name(benchmark)}**", ""]
        for r in top[top["benchmark"] == benchmark].itertuples():
            answer = chr(ord("A") + int(r.answer_index))
            category = f", {r.category}" if isinstance(r.category, str) and r.category else ""
            lines.append(f"{r.rank}. S {r.S:.2f} (T {r.T:.2f}, V {r.V:.2f}) `{r.question_id}`{category}, answer "
                         f"{answer}")
            lines += _quoted(r.prompt) if isinstance(r.prompt, str) else ["   > (no prompt logged in the samples)"]
        lines.append("")
    return lines


def _settings_paragraph(audit: Audit) -> str:
    s = audit.settings
    summary = (inspect.getdoc(TEXTUAL_EVIDENCE[s.textual_evidence]) or "").split("\n\n")[0].replace("\n", " ")
    formula = f" ({summary.rstrip('.')})" if summary else ""
    return (f"Panel: {s.panel.source}. T(q): `{s.textual_evidence}`{formula}. τ = {s.tau:g} (S(q) ≤ τ keeps a "
            f"question). LLM-Inspector drops a question when more than {s.max_hits} of its LLMs answer it correctly "
            f"blind; B-Clean drops it when a panel VLM does. Intervals ({s.confidence_level:.0%}): questions "
            f"about one video are not independent, and a model's blind answer to every copy of a prompt is one answer, "
            f"so each figure rests on fewer independent answers than questions: the questions over the design effect "
            f"estimated from the videos and prompts they share (docs/statistics.md). Accuracies get Clopper-Pearson "
            f"intervals on that many answers, BG Acc_B's less the known chance, differences (VG, comparisons) t "
            f"intervals on the per-question differences, so VG and comparisons are paired (where questions share "
            f"prompts VG's part that moves with Acc_B takes Acc_B's interval, its rest a t; where they share videos "
            f"and no prompt, VG's part that moves with Acc_V takes Acc_V's); each category and the grounded subset is "
            f"estimated within itself. Where too few independent answers remain the interval is "
            f"withheld and the reason printed in its place. All values in %.")


def report_markdown(audit: Audit, out: Path, plots: dict[str, str], exported: dict[str, int],
                    temporal: dict[str, int] | None = None) -> str:
    p = audit.panel
    label = audit.label
    panel_rows = [["T (text_llms)", ", ".join(map(label, p.text_llms)) or "(none)"],
                  ["V (vlms)", ", ".join(map(label, p.vlms)) or "(none)"],
                  ["held out", ", ".join(map(label, p.held_out)) or "(none)"],
                  ["LLM-Inspector", ", ".join(map(label, p.inspector)) or "(none)"]]
    others = [label(m) for m, r in audit.roles.items() if r in ("vlm", "text_llm")]
    if others:
        panel_rows.append(["in no panel", ", ".join(others)])
    used = [[name(r.benchmark), r.panel, ", ".join(map(label, r.models)) or "(none)"]
            for r in audit.panel_used.itertuples()]
    lines = ["# Visual-dependence audit", ""]
    if not audit.headline.empty:
        lines += ["Per benchmark, from the mean of its held-out VLMs (else of every VLM), with "
                  f"{audit.settings.confidence_level:.0%} intervals:", "", *lead(audit), ""]
    lines += [_settings_paragraph(audit), "",
              "## The questions behind the numbers", "",
              "Questions that share a video or a blind prompt are not independent answers. The design effect is the "
              "variance of a mean over the variance it would have were its questions independent (here of the "
              "evaluation models' mean correctness; per model and category in summary.csv): the figures rest on about "
              "questions / design effect independent answers.", "",
              design_table(audit), "",
              "Models (a model is a checkpoint under one set of score-changing settings, the adapter's defaults "
              "filled in; tables use its label):", "", models_table(audit), "",
              markdown(["Panel", "Models"], panel_rows), "",
              "Panel members used per benchmark:", "", markdown(["Benchmark", "Panel", "Models used"], used), ""]
    if audit.notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in audit.notes] + [""]
    lines += ["## Global diagnosis: Acc_B, Acc_V, Blind Gap, Visual Gain (the paper's Table 1)", "",
              global_diagnosis_table(audit), ""]
    if "diagnostic_space" in plots:
        lines += [f"![Blind Gap–Visual Gain diagnostic space]({plots['diagnostic_space']})", "",
                  "Diagnostic space: one point per benchmark (mean over the VLMs), original and grounded (G-), "
                  "size ∝ Acc_V.", ""]
    lines += ["## Intervals per benchmark and category", "", intervals_table(audit), "",
              "## Filtering strategies (the paper's Table 2)", "", filtering_table(audit), "",
              "## Before and after filtering to the grounded subset (the paper's Table 5)", "",
              before_after_table(audit), ""]
    scores = scores_table(audit)
    if scores:
        lines += ["## Distributions of T, V and S", "",
                  "Per question: T (textual evidence, in [0, 1]), V (visual necessity, in [−K/(K−1), K/(K−1)]) and "
                  f"S = T − V; the grounded subset is S ≤ τ = {audit.tau:g}.", "", scores, ""]
        if "scores" in plots:
            lines += [f"![Histograms of T, V and S]({plots['scores']})", ""]
    if "sweeps" in plots:
        lines += ["## Threshold sweeps", "",
                  "BG and VG on {q : signal(q) ≤ τ} for the signals T, −V and S over each signal's whole range (mean "
                  "over the held-out VLMs, else over every VLM); dashed: the full benchmark; dotted (right axis): "
                  "questions kept. Every model in sweep.csv.", "", f"![Threshold sweeps]({plots['sweeps']})", ""]
    lines += _top_section(audit)
    if not audit.comparison.empty:
        lines += _comparison_section(audit)
    if not audit.frames.empty:
        lines += _frames_section(audit, plots)
    if not audit.ladder.empty:
        lines += _ladder_section(audit)
    if not audit.solvability.empty:
        rows = [[name(r.benchmark), r.subset, r.n, r.tst_solvability, r.chance] for r in audit.solvability.itertuples()]
        lines += ["## Non-visual solvability (test-set stress test)", "",
                  "Accuracy of the held-out random forest of `visdep tst` on the question text alone, on the full "
                  "benchmark and on its grounded subset.", "",
                  markdown(["Benchmark", "Subset", "n", "Non-visual solvability", "Chance"], rows), ""]
    if exported:
        lines += ["## Grounded tasks", "",
                  "lmms-eval tasks restricted to the grounded subsets (same data, same `*_ROOT` variables):", ""]
        lines += [f"- `{b}_blind_{GROUNDED_SUFFIX}`, `{b}_video_{GROUNDED_SUFFIX}`: {n} questions "
                  f"(`lmms-eval --include_path {out / 'tasks'} --tasks {b}_video_{GROUNDED_SUFFIX}`)"
                  for b, n in exported.items()] + [""]
    if temporal:
        lines += ["## Temporal tasks", "",
                  "lmms-eval tasks restricted to the temporal subsets (grounded and V_order(q) ≥ "
                  f"{audit.settings.tau_order:g}; audit.json's `chosen_by` names the runs that chose them):", ""]
        lines += [f"- `{b}_blind_{TEMPORAL_SUFFIX}`, `{b}_video_{TEMPORAL_SUFFIX}`: {n} questions "
                  f"(`lmms-eval --include_path {out / 'tasks'} --tasks {b}_video_{TEMPORAL_SUFFIX}`)"
                  for b, n in temporal.items()] + [""]
    if audit.runs.dropped:
        lines += ["## Questions the tasks left out", "",
                  "Questions a task left out before any model saw them (the runs' `results['visdep']['dropped']`), "
                  "by reason; every one is in audit.json.", "", dropped_table(audit), ""]
    lines += ["## Files used", "", files_table(audit), "",
              f"Package versions and the sha256 of every input file: `{MANIFEST}`.", ""]
    return "\n".join(lines)
