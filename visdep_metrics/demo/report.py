"""OUT/report.md of `visdep demo`: what ran, the grounded subset against the full set, every filter against the
planted truth, why S removes what the text does not give away, and the temporal ladder against the truth (which
VLMs learnt to read the order, each gain beside what the planted kinds imply, the temporal subset against the
planted order questions).

Every sentence states a number computed from the tables the demo wrote under OUT/planted
(`visdep_metrics.demo.pipeline.evaluate_against_truth`), and a sentence whose case does not arise is not written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from visdep_metrics.demo.planted import TEXT_SOLVABLE
from visdep_metrics.demo.truth import TEMPORAL_SUBSET

REPORT_TAUS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
GOOD = 0.8  # the precision and recall a filter should reach together
LEARNS_FROM = {"text": "the text panel's training stream", "vision": "the V panel's training stream",
               "held_out": "a training stream of its own"}


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _with_interval(row: pd.Series, measure: str) -> str:
    if np.isnan(row[measure]):
        return "–"
    lo, hi = row[f"{measure}_lo"], row[f"{measure}_hi"]
    return f"{row[measure]:.2f}" + ("" if np.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _listing(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _tau_ranges(taus: np.ndarray) -> str:
    """0.2, 0.25, 0.3, 0.5 -> "0.2 to 0.3, 0.5" (consecutive points of the sweep's grid joined)."""
    if not len(taus):
        return "none"
    step = 0.05 + 1e-9
    runs, start = [], taus[0]
    for previous, tau in zip(taus[:-1], taus[1:], strict=True):
        if tau - previous > step:
            runs.append((start, previous))
            start = tau
    runs.append((start, taus[-1]))
    return ", ".join(f"{a:g}" if a == b else f"{a:g} to {b:g}" for a, b in runs)


def panel_section(models: pd.DataFrame, subsets: pd.DataFrame) -> list[str]:
    full = subsets[subsets["subset"] == "full"].set_index("model")
    rows = []
    for m in models.itertuples():
        acc = full.loc[m.label]
        video = "–" if np.isnan(acc["acc_video"]) else f"{acc['acc_video']:.1f}"
        rows.append([m.label, LEARNS_FROM[m.role] if m.trained else "untrained", f"{acc['acc_blind']:.1f}", video])
    members = {role: _listing(models.loc[models["role"] == role, "label"].str.split(",").str[0].tolist())
               for role in ("text", "vision", "held_out") if (models["role"] == role).any()}
    decides = [f"T(q) is computed from {members['text']}" if "text" in members else "",
               f"V(q) from {members['vision']}" if "vision" in members else "",
               f"{members['held_out']} takes part in no decision" if "held_out" in members else ""]
    return ["## The panel", "", *_table(["model", "learns from", "Acc_B (%)", "Acc_V (%)"], rows), "",
            "; ".join(part for part in decides if part) + "."]


def grounded_section(subsets: pd.DataFrame) -> list[str]:
    vlms = subsets[subsets["role"] != "text"]
    lines = ["## Grounded subset against the full set (each VLM; %)", "",
             *_table(["model", "subset", "n", "Acc_B", "Acc_V", "BG", "VG"],
                     [[r.model, r.subset, int(r.n), f"{r.acc_blind:.1f}", f"{r.acc_video:.1f}", f"{r.blind_gap:.1f}",
                       f"{r.visual_gain:.1f}"] for r in vlms.sort_values(["model", "subset"]).itertuples()])]
    by = {subset: rows.set_index("model") for subset, rows in vlms.groupby("subset")}
    n_full, n_kept = int(by["full"]["n"].iloc[0]), int(by["grounded"]["n"].iloc[0])
    lines += ["", f"The grounded subset keeps {n_kept} of {n_full} questions."]
    if 0 < n_kept < n_full:
        gain = by["grounded"]["visual_gain"] - by["full"]["visual_gain"]
        higher = int((gain > 0).sum())
        held_out = [f"{m}: {by['full'].loc[m, 'visual_gain']:.1f} → {by['grounded'].loc[m, 'visual_gain']:.1f} points"
                    for m in by["full"].index[by["full"]["role"] == "held_out"]]
        which = "every VLM" if higher == len(gain) else f"{higher} of {len(gain)} VLMs"
        where = "higher" if higher else "not higher"
        lines[-1] += (f" VG is {where} there than on the full set for {which if higher else 'any VLM'}"
                      + (f" ({'; '.join(held_out)})" if held_out else "") + ".")
        bg = by["full"]["blind_gap"].mean(), by["grounded"]["blind_gap"].mean()
        lines[-1] += f" Their mean Blind Gap {'falls' if bg[1] < bg[0] else 'rises'} from {bg[0]:.1f} to {bg[1]:.1f}."
    return lines


def filters_section(filters: pd.DataFrame, tau: float) -> list[str]:
    return [f"## Filters against the truth (τ = {tau:g}; 95% intervals resampling videos)", "",
            *_table(["filter", "removed", "precision", "recall", "video-only kept"],
                    [[r["filter"], int(r["n_removed"]), _with_interval(r, "precision"), _with_interval(r, "recall"),
                      _with_interval(r, "video_only_kept")] for _, r in filters.iterrows()])]


def sweep_section(sweeps: pd.DataFrame) -> list[str]:
    signals = [s for s in sweeps["signal"].unique() if s.startswith("S")]
    rows, reach = [], []
    for signal in signals:
        s = sweeps[sweeps["signal"] == signal].set_index("tau")
        cells = []
        for tau in REPORT_TAUS:
            r = s.loc[min(s.index, key=lambda t: abs(t - tau))]
            cells.append("–" if np.isnan(r["precision"]) else f"{r['precision']:.2f} / {r['recall']:.2f}")
        rows.append([signal, *cells])
        good = s[(s["precision"] >= GOOD) & (s["recall"] >= GOOD)].index.to_numpy()
        reach.append([signal, _tau_ranges(good)])
    return ["## S and the chance-aware variants of T(q) across τ (precision / recall; removed: S(q) > τ)", "",
            *_table(["signal", *(f"τ = {t:g}" for t in REPORT_TAUS)], rows), "",
            *_table(["signal", f"τ where precision and recall both reach {GOOD:g}"], reach)]


def wrong_removals_section(planted: pd.DataFrame, questions: pd.DataFrame, contributions: pd.DataFrame,
                           filters: pd.DataFrame, tau: float) -> list[str]:
    """What S > τ removes that the text does not give away, and which text model's T drives it."""
    from visdep_metrics.demo.truth import drivers

    table = planted.assign(T=questions["T"].to_numpy(), V=questions["V"].to_numpy(), S=questions["S"].to_numpy())
    wrong = table[(table["S"] > tau) & ~table["planted_type"].isin(TEXT_SOLVABLE)]
    if wrong.empty:
        return ["", f"S > {tau:g} removes no question that the text does not give away."]
    kinds = wrong["planted_type"].value_counts()
    lines = ["", f"## What S > {tau:g} removes that the text does not give away", "",
             f"{_count(len(wrong), 'question')}: " + _listing([f"{n} planted `{kind}`" for kind, n in kinds.items()])
             + (" (`neither`: nothing in the question or the clip decides the answer)" if "neither" in kinds else "")
             + ". Mean T and V:", "",
             *_table(["planted", "category", "removed", "of", "T", "V"],
                     [[kind, category, len(rows),
                       int(((table["planted_type"] == kind) & (table["category"] == category)).sum()),
                       f"{rows['T'].mean():.2f}", f"{rows['V'].mean():.2f}"]
                      for (kind, category), rows in wrong.groupby(["planted_type", "category"])]),
             "", "Each text model's part in their T (contribution: its mean term [correct] · (1 − H) / |M|; the "
                 "contributions add up to the mean T):", "",
             *_table(["model", "contribution", "share", "right blind", "1 − H when right", "Acc on `neither`",
                      "1 − H on `neither`"],
                     [[r.model, f"{r.contribution:.3f}", "–" if np.isnan(r.share) else f"{r.share:.0%}",
                       f"{r.right} of {r.of}", "–" if np.isnan(r.confidence) else f"{r.confidence:.2f}",
                       f"{r.accuracy_unanswerable:.2f}", f"{r.confidence_unanswerable:.2f}"]
                      for r in contributions.itertuples()])]
    top = drivers(contributions)
    if not top.empty:
        chance = float((1.0 / questions.loc[(planted["planted_type"] == "neither").to_numpy(), "n_options"]).mean())
        parts = [f"{r.model} {r.contribution:.3f} ({r.share:.0%}; right blind on {r.right} of {r.of} with mean "
                 f"confidence 1 − H = {r.confidence:.2f}; on the `neither` questions right on "
                 f"{r.accuracy_unanswerable:.0%}, chance {chance:.0%}, with mean confidence "
                 f"{r.confidence_unanswerable:.2f})" for r in top.itertuples()]
        lines += ["", f"Their mean T of {contributions['contribution'].sum():.3f} comes mostly from "
                      f"{_listing(parts)}."]
    fewer = [f"{r['filter']} removes {int(r['n_removed_not_text_solvable'])}"
             for _, r in filters[filters["filter"].str.startswith("S (")].iterrows()]
    if fewer:
        lines += ["", f"Of the questions that are not text-solvable, S <= {tau:g} removes {len(wrong)}; "
                      f"{_listing(fewer)}."]
    return lines


def _gain(value: float, lo: float, hi: float) -> str:
    if np.isnan(value):
        return "–"
    return f"{value:+.1f}" + ("" if np.isnan(lo) else f" [{lo:+.1f}, {hi:+.1f}]")


def _accuracy(row, rung: str) -> str:
    value = row[f"acc_{rung}"]
    return "–" if np.isnan(value) else f"{value:.1f}"


def ladder_section(ladder: pd.DataFrame, truth: pd.DataFrame, models: pd.DataFrame) -> list[str]:
    """Each VLM's rungs and gains (the audit's ladder.csv, full set: all questions and each category the order
    decides), which VLMs read the order, and each gain against what the planted kinds imply (OUT/planted/ladder.csv).
    models: OUT/models.csv (label, pretrained, steps)."""
    label = dict(zip(models["pretrained"], models["label"], strict=True))
    order_categories = sorted(truth.loc[truth["decided_by"] == "the order", "category"].unique())
    shown = ladder[(ladder["subset"] == "full") & ladder["category"].isin(["all", *order_categories])]
    rank = {p: i for i, p in enumerate(models["pretrained"])}
    shown = shown.assign(rank=shown["model"].map(rank)).sort_values(["rank", "category"])
    rows = [[label.get(r["model"], r["model"]), r["category"], int(r["n"]), _accuracy(r, "blind"),
             _accuracy(r, "single"), _accuracy(r, "shuffled"), _accuracy(r, "video"),
             _gain(r["frame_gain"], r["frame_gain_lo"], r["frame_gain_hi"]),
             _gain(r["order_gain"], r["order_gain_lo"], r["order_gain_hi"])]
            for _, r in shown.iterrows()]
    lines = ["## The temporal ladder (each VLM; %, 95% intervals)", "",
             "Each VLM also answered every question with the clip's middle frame alone and with its sampled frames "
             "shuffled (the audit's `ladder.csv`, where the rungs' intervals are): Frame Gain FG = Acc_video − "
             "Acc_one frame, Order Gain OG = Acc_video − Acc_shuffled, both paired over the same questions.", "",
             *_table(["model", "questions", "n", "Acc blind", "Acc one frame", "Acc shuffled", "Acc video", "FG", "OG"],
                     rows)]
    order = truth[truth["decided_by"] == "the order"]
    if order.empty:
        return lines
    steps = dict(zip(models["label"], models["steps"], strict=True)) if "steps" in models else {}
    reads, not_reads = order[order["reads_order"].astype(bool)], order[~order["reads_order"].astype(bool)]

    def measured(r) -> str:
        trained = f"{int(steps[r.model]):,} steps; " if r.model in steps else ""
        return (f"{r.model} ({trained}{r.acc_video:.1f} with the frames in order, {r.acc_shuffled:.1f} shuffled, "
                f"{r.acc_single:.1f} with one frame)")

    first = order.iloc[0]
    lines += ["", f"Only the frames in order decide the {int(first['n'])} {_listing(order_categories)} questions (one "
                  "frame is the same picture for every direction; the frames out of order still show the axis, two of "
                  "the four directions): a VLM reads the order where its accuracy with the frames in order lies above "
                  f"{first['reads_above']:g}% (the lower bound of its interval)."]
    if not reads.empty:
        lines[-1] += f" {_listing([measured(r) for r in reads.itertuples()])} " + \
            ("reads" if len(reads) == 1 else "read") + " the order."
    if not not_reads.empty:
        lines[-1] += f" {_listing([measured(r) for r in not_reads.itertuples()])} did not learn it in its training."
    if reads.empty:
        lines[-1] += (" No tiny VLM learnt the order, so the ladder cannot find the order questions here; "
                      "tests/metrics/test_ladder.py shows FG, OG and the temporal subset recovering a planted truth on "
                      "constructed runs whose models answer the order questions right only with the frames in order.")
    agree = truth["frame_gain_agrees"].astype(bool) & truth["order_gain_agrees"].astype(bool)
    lines += ["", "Each gain against what the planted kinds imply (FG = OG = 0 where the clip decides nothing or any "
                  "one frame decides; on the order's questions FG > 0 and OG > 0 for a VLM that reads the order, "
                  "both 0 for one that does not):", "",
              *_table(["model", "category", "decided by", "FG", "implied", "OG", "implied", "agrees"],
                      [[r["model"], r["category"], r["decided_by"],
                        _gain(r["frame_gain"], r["frame_gain_lo"], r["frame_gain_hi"]), r["implied_frame_gain"],
                        _gain(r["order_gain"], r["order_gain_lo"], r["order_gain_hi"]), r["implied_order_gain"],
                        "yes" if ok else "no"]
                       for (_, r), ok in zip(truth.iterrows(), agree, strict=True)]), "",
              f"{int(agree.sum())} of {len(truth)} rows agree with the truth."]
    disagree = truth[~agree]
    if not disagree.empty:
        lines[-1] += " Where not: " + "; ".join(
            f"{r['model']}, {r['category']}: " + ", ".join(
                f"{name} {_gain(r[gain], r[f'{gain}_lo'], r[f'{gain}_hi'])} against {r[f'implied_{gain}']}"
                for gain, name in (("frame_gain", "FG"), ("order_gain", "OG")) if not r[f"{gain}_agrees"])
            for _, r in disagree.iterrows()) + "."
    return lines


def temporal_section(temporal: pd.DataFrame, subset: str, panel_reads: dict[str, bool] | None = None) -> list[str]:
    """The audit's temporal subset (and V_order, V_frame alone) as a choice of the planted order questions;
    panel_reads: {V panel VLM: whether it reads the order}, whose mean V_order(q) is."""
    lines = ["## The temporal subset against the truth (95% intervals resampling videos)", "",
             *_table(["subset", "chosen", "precision", "recall", "chosen by planted type"],
                     [[r["subset"], int(r["n_chosen"]), _with_interval(r, "precision"), _with_interval(r, "recall"),
                       r["chosen_by_type"] if isinstance(r["chosen_by_type"], str) else "–"]
                      for _, r in temporal.iterrows()])]
    main = temporal[temporal["subset"] == subset]
    if not main.empty:
        r = main.iloc[0]
        lines += ["", f"The audit's temporal subset (questions.csv `temporal`: grounded, and V_order(q) at least "
                      f"τ_order) holds {int(r['n_chosen'])} questions; of the {int(r['n_target'])} planted order "
                      f"questions it finds {int(round(r['recall'] * r['n_target']))}"
                  + ("" if np.isnan(r["precision"]) else f", precision {_with_interval(r, 'precision')}, recall "
                                                          f"{_with_interval(r, 'recall')}") + "."]
        if panel_reads:
            readers = [m for m, reads in panel_reads.items() if reads]
            lines[-1] += (f" V_order(q) is the mean over the V panel's VLMs ({_listing(list(panel_reads))}), of which "
                          + (f"{len(readers)} reads the order ({_listing(readers)})" if len(readers) == 1 else
                             f"{len(readers)} read the order" + (f" ({_listing(readers)})" if readers else ""))
                          + ".")
    return lines


def _pr_figure(out: Path, sweeps: pd.DataFrame, filters: pd.DataFrame) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {}
    for signal, rows in sweeps.groupby("signal", sort=False):
        [line] = ax.plot(rows["recall"], rows["precision"], marker=".", label=f"{signal} > τ removed")
        colours[signal] = line.get_color()
    baselines = iter(("s", "^", "D", "v", "P", "X"))
    for _, row in filters.iterrows():
        signal = row["filter"].rsplit(" <= ", 1)[0]
        style = {"color": colours[signal], "marker": "o"} if signal in colours else \
            {"color": "0.25", "marker": next(baselines, "o")}
        ax.errorbar(row["recall"], row["precision"], xerr=[[row["recall"] - row["recall_lo"]],
                                                          [row["recall_hi"] - row["recall"]]],
                    yerr=[[row["precision"] - row["precision_lo"]], [row["precision_hi"] - row["precision"]]],
                    linestyle="none", capsize=3, label=row["filter"], **style)
    ax.set_xlabel("recall of the text-solvable questions")
    ax.set_ylabel("precision of the removed questions")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title("Filters against the planted truth (intervals: videos resampled)", fontsize=9)
    path = out / "planted" / "precision_recall.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def write_report(out: Path, timing: dict, tau: float) -> None:
    """OUT/report.md from OUT/data/planted.csv, OUT/models.csv, OUT/planted/*.csv and the audit's questions.csv."""
    planted = pd.read_csv(out / "data" / "planted.csv")
    models = pd.read_csv(out / "models.csv")
    folder = out / "planted"
    filters, sweeps = pd.read_csv(folder / "filters.csv"), pd.read_csv(folder / "sweeps.csv")
    contributions, subsets = pd.read_csv(folder / "contributions.csv"), pd.read_csv(folder / "subsets.csv")
    questions = pd.read_csv(out / "audit" / "questions.csv").set_index("question_id").loc[planted["question_id"]]
    patterns = planted.loc[planted["pattern"] != "none", "pattern"].value_counts()
    figure = _pr_figure(out, sweeps, filters)
    lines = ["# visdep demo: the audit against planted truth", "",
             f"{len(planted)} questions about {planted['video'].nunique()} generated clips, planted as "
             + _listing([f"{t} {n}" for t, n in planted["planted_type"].value_counts().sort_index().items()])
             + " (text-solvable: `text_only` and `both`); text patterns: "
             + _listing([f"{p} {n}" for p, n in patterns.items()]) + ".", "",
             f"Wall time {timing['total_s']:.0f} s: training {timing['train_s']:.0f} s (checkpoints cached in "
             f"{timing['cached_checkpoints']}), lmms-eval {timing['lmms_eval_s']:.0f} s, TsT + IBP + audit + this "
             f"report {timing['tst_ibp_audit_truth_s']:.0f} s.", ""]
    lines += panel_section(models, subsets) + [""] + grounded_section(subsets) + [""] + filters_section(filters, tau)
    lines += [""] + sweep_section(sweeps)
    lines += wrong_removals_section(planted, questions, contributions, filters, tau)
    if (folder / "ladder.csv").is_file():

        ladder = pd.read_csv(out / "audit" / "ladder.csv")
        truth = pd.read_csv(folder / "ladder.csv")
        reads = truth[truth["decided_by"] == "the order"].groupby("model")["reads_order"].all()
        panel = models.loc[models["role"] == "vision", "label"]
        lines += ["", *ladder_section(ladder, truth, models), "",
                  *temporal_section(pd.read_csv(folder / "temporal.csv"), TEMPORAL_SUBSET,
                                    {m: bool(reads.get(m, False)) for m in panel})]
    lines += ["", f"![precision and recall]({figure.relative_to(out)})", "",
              "Precision: the share of removed questions that the text gives away; recall: the share of those the "
              "filter removes; video-only kept: the share of questions only the video answers that stay. The "
              "variants of T(q) are `visdep_metrics.audit.diagnostics.TEXTUAL_EVIDENCE`; the sweeps across τ are in "
              "`planted/sweeps.csv`; the audit itself in `audit/report.md`."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
