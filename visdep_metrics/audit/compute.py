"""The whole audit in memory: runs -> diagnostics, question scores, filters, sweeps (no file is written here).

`run_audit(run_dirs, ...)` returns an `Audit` whose tables `report.write_audit` writes.

Intervals are percentile cluster-bootstrap intervals (`diagnostics.bootstrap_mean_intervals`): the videos of
each group (a benchmark, a category, the grounded subset) are resampled within that group, every model and
metric on the same resamples, so VG and every comparison are paired. Where the records name no video, each
question is its own cluster (and a note says so).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from loguru import logger
from tqdm.auto import tqdm

from visdep_metrics.audit.diagnostics import (
    bootstrap_mean_intervals,
    bootstrap_settings,
    chance,
    cluster_permutation_pvalues,
    clusters_per_group,
    mcnemar_exact,
    shortcut_score,
    subset_diagnostics,
    textual_evidence,
    visual_necessity,
)
from visdep_metrics.audit.filters import (
    SWEEP_SIGNALS,
    b_clean_keep,
    llm_inspector_keep,
    shortcut_keep,
    sweep_taus,
    threshold_sweep,
)
from visdep_metrics.audit.nonvisual import StressTest, align_stress_test, read_stress_test
from visdep_metrics.audit.panels import Panel, check_panel, inferred_panel, load_panel, resolve_panel
from visdep_metrics.audit.runs import (
    FRAMES_SETTING,
    BenchmarkResults,
    RunDataError,
    RunSet,
    load_runs,
    resolve_model_keys,
)
from visdep_metrics.parallel import usable_cores
from visdep_metrics.provenance import file_sha256, package_versions

METRICS = ("acc_blind", "acc_video", "blind_gap", "visual_gain")
COMPARED = ("acc_blind", "acc_video", "visual_gain")
ALL = "all"
TOP_SHORTCUTS = 20


@dataclass
class Audit:
    runs: RunSet
    panel: Panel
    tau: float
    max_hits: int
    n_resamples: int
    confidence_level: float
    seed: int
    roles: dict[str, str]
    summary: pd.DataFrame
    questions: pd.DataFrame
    filters: pd.DataFrame
    sweep: pd.DataFrame
    panel_used: pd.DataFrame  # benchmark, panel (T/V/inspector/b_clean), models used (a tuple of names)
    solvability: pd.DataFrame  # benchmark, subset, n, tst_solvability, chance in % (only with --tst)
    headline: pd.DataFrame = field(default_factory=pd.DataFrame)  # per benchmark and subset: mean of the VLMs
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)  # each model minus --baseline (only with it)
    frames: pd.DataFrame = field(default_factory=pd.DataFrame)  # frame budgets of one checkpoint
    top_shortcuts: pd.DataFrame = field(default_factory=pd.DataFrame)  # the highest-S questions with their prompt
    baseline: str | None = None
    stress_tests: dict[str, StressTest] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    def grounded_ids(self) -> dict[str, list[str]]:
        """Kept question ids per benchmark, for benchmarks with a shortcut score."""
        q = self.questions[self.questions["grounded"].fillna(False).astype(bool)]
        scored = self.questions.loc[self.questions["S"].notna(), "benchmark"].unique()
        return {b: q.loc[q["benchmark"] == b, "question_id"].tolist() for b in scored}

    def label(self, model: str) -> str:
        return self.runs.label(model)


@dataclass
class _BenchmarkPart:
    """One benchmark's share of the audit's tables (rows, or frames to concatenate), in benchmark order."""

    summary: list = field(default_factory=list)
    headline: list = field(default_factory=list)
    questions: list = field(default_factory=list)
    filters: list = field(default_factory=list)
    sweeps: list = field(default_factory=list)
    panel_used: list = field(default_factory=list)
    solvability: list = field(default_factory=list)
    comparison: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rng(seed: int, *key: str) -> np.random.Generator:
    """One generator per benchmark, so its intervals do not depend on which other benchmarks were audited."""
    return np.random.default_rng([seed, zlib.crc32("/".join(key).encode())])


def _question_scores(bench: BenchmarkResults, panel: Panel, tau: float, max_hits: int, notes: list[str]):
    """Per-question T, V, S, grounded and the baseline filters' decisions; and which models were used."""
    k = bench.questions["n_options"].to_numpy()
    n = len(k)
    t_rows = bench.model_rows(panel.text_llms)
    with_video = {m for m, video in zip(bench.models, bench.has_video, strict=True) if video}
    v_rows = bench.model_rows([m for m in panel.vlms if m in with_video])
    inspector_rows = bench.model_rows(panel.inspector)
    clean_rows = bench.model_rows(panel.vlms)
    nan = np.full(n, np.nan)
    t = textual_evidence(bench.correct_blind[t_rows], bench.entropy_blind[t_rows]) if t_rows.size else nan
    v = (visual_necessity(bench.p_answer_video[v_rows], bench.p_answer_blind[v_rows], k) if v_rows.size else nan)
    s = shortcut_score(t, v)
    panels = (("T(q)", "text_llms", panel.text_llms, t_rows, "S(q) and the grounded subset are not computed"),
              ("V(q)", "vlms", panel.vlms, v_rows, "S(q) and the grounded subset are not computed"),
              ("LLM-Inspector", "inspector_llms", panel.inspector, inspector_rows, "its filter is not computed"),
              ("B-Clean", "vlms", panel.vlms, clean_rows, "its filter is not computed"))
    for what, name, members, rows, consequence in panels:
        present = {bench.models[i] for i in rows}
        absent = [m for m in members if m not in present]
        if members and not rows.size:
            notes.append(f"{bench.benchmark}: no model of the panel's {name} has the runs {what} needs, so "
                         f"{consequence}")
        elif absent:
            notes.append(f"{bench.benchmark}: {what} leaves out {absent} (panel {name}): no run of it here")
    scores = bench.questions.assign(benchmark=bench.benchmark, T=t, V=v, S=s)
    scores["grounded"] = pd.array(np.where(np.isnan(s), None, shortcut_keep(s, tau)), dtype="boolean")
    if inspector_rows.size:
        scores["inspector_hits"] = bench.correct_blind[inspector_rows].sum(axis=0).astype(int)
        scores["kept_llm_inspector"] = llm_inspector_keep(bench.correct_blind[inspector_rows], max_hits)
    if clean_rows.size:
        scores["kept_b_clean"] = b_clean_keep(bench.correct_blind[clean_rows])
    used = {"T": t_rows, "V": v_rows, "llm_inspector": inspector_rows, "b_clean": clean_rows}
    panel_used = pd.DataFrame([{"benchmark": bench.benchmark, "panel": name,
                                "models": tuple(bench.models[i] for i in rows)} for name, rows in used.items()])
    return scores, panel_used


def _subsets(scores: pd.DataFrame) -> dict[str, np.ndarray]:
    """The full benchmark and, where S(q) is known and keeps something, its grounded subset."""
    subsets = {"full": np.ones(len(scores), dtype=bool)}
    if scores["grounded"].notna().all() and scores["grounded"].any():
        subsets["grounded"] = scores["grounded"].to_numpy(dtype=bool)
    return subsets


def _interval_notes(groups: np.ndarray, clusters: np.ndarray | None) -> tuple[np.ndarray, list[str]]:
    """Per group: the units its bootstrap resamples, and why it has no interval ("" where it has one)."""
    units = clusters_per_group(groups, clusters)
    notes = []
    for n, c in zip(groups.sum(axis=1), units, strict=True):
        if n < 2:
            notes.append("one question: nothing to resample")
        elif c < 2:
            notes.append(f"all {n} questions are about one video: resampling videos needs two or more")
        else:
            notes.append("")
    return units, notes


def evaluation_models(bench: BenchmarkResults, roles: dict[str, str]) -> tuple[list[str], bool]:
    """Models that judge the benchmark and its filters: the held-out VLMs, else every VLM (then not held out)."""
    vlms = [m for m, video in zip(bench.models, bench.has_video, strict=True) if video]
    held_out = [m for m in vlms if roles[m] == "held_out"]
    return (held_out, True) if held_out else (vlms, False)


def _summary_rows(bench: BenchmarkResults, scores: pd.DataFrame, roles: dict[str, str], n_resamples: int,
                  confidence_level: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Acc, chance, BG, VG with bootstrap intervals per model, for the full benchmark and the grounded subset,
    over all questions and per category; and the same for the mean of the evaluation VLMs (the report's lead)."""
    k = scores["n_options"].to_numpy()
    categories = sorted(scores["category"].dropna().unique())
    groups = [(subset, category, in_subset & (True if category == ALL else (scores["category"] == category).to_numpy()))
              for subset, in_subset in _subsets(scores).items() for category in [ALL] + categories]
    groups = [(subset, category, keep) for subset, category, keep in groups if keep.any()]
    members = np.stack([keep for _, _, keep in groups])
    clusters = bench.clusters
    units, why = _interval_notes(members, clusters)
    resampled = "videos" if clusters is not None else "questions"
    # Per-question values whose means are the metrics; within a group one resampling serves every row, which
    # makes VG (and the mean of the VLMs) paired.
    all_rows, video_rows = np.arange(len(bench.models)), np.flatnonzero(bench.has_video)
    cb, cv = bench.correct_blind, bench.correct_video[video_rows]
    judges, _ = evaluation_models(bench, roles)
    judge_rows = bench.model_rows(judges)
    headline_rows = judge_rows if judge_rows.size else all_rows
    mean_b = cb[headline_rows].mean(axis=0, keepdims=True)
    mean_v = bench.correct_video[judge_rows].mean(axis=0, keepdims=True) if judge_rows.size else None
    blocks = [("acc_blind", all_rows, cb), ("blind_gap", all_rows, cb - 1.0 / k),
              ("acc_video", video_rows, cv), ("visual_gain", video_rows, cv - cb[video_rows]),
              ("mean_acc_blind", [0], mean_b), ("mean_blind_gap", [0], mean_b - 1.0 / k)]
    if mean_v is not None:
        blocks += [("mean_acc_video", [0], mean_v), ("mean_visual_gain", [0], mean_v - mean_b)]
    low, high = bootstrap_mean_intervals(np.concatenate([values for _, _, values in blocks]), members, clusters,
                                         n_resamples, confidence_level, _rng(seed, bench.benchmark))
    rows, headline = [], []
    for g, (subset, category, keep) in enumerate(groups):
        d = subset_diagnostics(keep, bench.correct_blind, bench.correct_video, k)
        bounds, start = {}, 0
        for name, model_rows, _ in blocks:  # the mean blocks have one row, [0]
            lo, hi = (np.full(1 if name.startswith("mean_") else len(bench.models), np.nan) for _ in range(2))
            stop = start + len(model_rows)
            lo[model_rows], hi[model_rows] = low[g, start:stop], high[g, start:stop]
            bounds[name] = (lo, hi)
            start += len(model_rows)
        common = {"benchmark": bench.benchmark, "subset": subset, "category": category, "n": int(keep.sum()),
                  "n_resampled": int(units[g]), "resampled": resampled, "interval_note": why[g]}
        for i, model in enumerate(bench.models):
            row = {"model": model, "role": roles[model], **common, "chance": d["chance"][i]}
            for name in METRICS:
                row[name] = d[name][i]
                row[f"{name}_lo"], row[f"{name}_hi"] = bounds[name][0][i], bounds[name][1][i]
            rows.append(row)
        if category == ALL:
            row = {**common, "models": "; ".join(bench.models[i] for i in headline_rows),
                   "held_out": bool(judge_rows.size) and all(roles[bench.models[i]] == "held_out" for i in judge_rows),
                   "chance": d["chance"][0]}
            values = {"acc_blind": mean_b[0, keep].mean(), "blind_gap": mean_b[0, keep].mean() - d["chance"][0]}
            if mean_v is not None:
                values |= {"acc_video": mean_v[0, keep].mean(), "visual_gain": (mean_v - mean_b)[0, keep].mean()}
            for name in METRICS:
                row[name] = values.get(name, np.nan)
                row[f"{name}_lo"], row[f"{name}_hi"] = (bounds[f"mean_{name}"][0][0], bounds[f"mean_{name}"][1][0]) \
                    if f"mean_{name}" in bounds else (np.nan, np.nan)
            headline.append(row)
    return rows, headline


def _comparison_rows(bench: BenchmarkResults, scores: pd.DataFrame, baseline: str, others: list[str],
                     roles: dict[str, str], n_resamples: int, confidence_level: float, seed: int,
                     subsets: dict[str, np.ndarray] | None = None) -> list[dict]:
    """Models minus a baseline on the same questions, with paired bootstrap intervals and paired tests.

    delta_acc_blind = mean_q(c_blind[m, q] - c_blind[base, q]) (= the change of Blind Gap: chance is shared),
    delta_acc_video likewise, delta_visual_gain = mean_q((c_video - c_blind)[m, q] - (c_video - c_blind)[base, q]).
    Within a subset one resampling of its videos serves both models, so each interval is that of a paired
    difference. p-values: McNemar's exact test for ΔAcc_B and ΔAcc_V (questions independent), a sign-flip
    permutation test over videos for ΔVG. `text_shortcut_gain`: Acc_V rose (interval above 0) while BG rose or
    VG fell (interval above / below 0), the paper's appendix B.5 SFT case."""
    if baseline not in bench.models:
        return []
    base = bench.models.index(baseline)
    others_rows = [bench.models.index(m) for m in others if m in bench.models and m != baseline]
    if not others_rows:
        return []
    subsets = _subsets(scores) if subsets is None else subsets
    cb, cv = bench.correct_blind, bench.correct_video
    video = [i for i in others_rows if bench.has_video[i]] if bench.has_video[base] else []
    blocks = [("acc_blind", others_rows, cb[others_rows] - cb[base])]
    if video:
        blocks += [("acc_video", video, cv[video] - cv[base]),
                   ("visual_gain", video, (cv[video] - cb[video]) - (cv[base] - cb[base]))]
    values = np.concatenate([d for _, _, d in blocks])
    members = np.stack(list(subsets.values()))
    clusters = bench.clusters
    low, high = bootstrap_mean_intervals(values, members, clusters, n_resamples, confidence_level,
                                         _rng(seed, bench.benchmark, "baseline", baseline))
    units, why = _interval_notes(members, clusters)
    rows = []
    for g, (subset, keep) in enumerate(subsets.items()):
        p_values = {"acc_blind": mcnemar_exact(cb[others_rows][:, keep], cb[base, keep])}
        if video:
            p_values["acc_video"] = mcnemar_exact(cv[video][:, keep], cv[base, keep])
            p_values["visual_gain"] = cluster_permutation_pvalues(
                blocks[2][2][:, keep], None if clusters is None else clusters[keep], n_resamples,
                _rng(seed, bench.benchmark, "permutation", baseline, subset))
        for i in others_rows:
            row = {"model": bench.models[i], "role": roles[bench.models[i]], "baseline": baseline,
                   "benchmark": bench.benchmark, "subset": subset, "n": int(keep.sum()),
                   "n_resampled": int(units[g]), "resampled": "videos" if clusters is not None else "questions",
                   "interval_note": why[g]}
            start = 0
            for name, members_of, deltas in blocks:
                if i in members_of:
                    j = members_of.index(i)
                    row[f"delta_{name}"] = deltas[j, keep].mean()
                    row[f"delta_{name}_lo"], row[f"delta_{name}_hi"] = low[g, start + j], high[g, start + j]
                    row[f"delta_{name}_p"] = p_values[name][j]
                start += len(members_of)
            if i in video:
                row["text_shortcut_gain"] = bool(row["delta_acc_video_lo"] > 0 and (
                    row["delta_acc_blind_lo"] > 0 or row["delta_visual_gain_hi"] < 0))
            rows.append(row)
    return rows


def _frame_rows(bench: BenchmarkResults, scores: pd.DataFrame, summary: list[dict], runs: RunSet,
                roles: dict[str, str], n_resamples: int, confidence_level: float, seed: int) -> list[dict]:
    """Frame budgets: models of one checkpoint that differ only in max_frames, their Acc_V and VG (from the
    summary rows) and, against the fewest frames, the paired differences of `_comparison_rows`."""
    checkpoints: dict[tuple, list[str]] = {}
    for model, video in zip(bench.models, bench.has_video, strict=True):
        info = runs.model_info.get(model)
        if video and info is not None and info.max_frames is not None:
            checkpoints.setdefault(info.without(FRAMES_SETTING), []).append(model)
    overall = {r["model"]: r for r in summary if r["subset"] == "full" and r["category"] == ALL}
    rows = []
    for models in checkpoints.values():
        if len({runs.model_info[m].max_frames for m in models}) < 2:
            continue
        models = sorted(models, key=lambda m: runs.model_info[m].max_frames)
        fewest = models[0]
        deltas = {r["model"]: r for r in _comparison_rows(
            bench, scores, fewest, models[1:], roles, n_resamples, confidence_level, seed,
            subsets={"full": np.ones(len(scores), dtype=bool)})}
        for model in models:
            info = runs.model_info[model]
            row = {"benchmark": bench.benchmark, "checkpoint": info.checkpoint_label(FRAMES_SETTING), "model": model,
                   "max_frames": info.max_frames, "fewest_frames_model": fewest}
            row |= {key: overall[model][key] for key in ("n", "n_resampled", "resampled", "interval_note", "acc_video",
                                                          "acc_video_lo", "acc_video_hi", "visual_gain",
                                                          "visual_gain_lo", "visual_gain_hi")}
            for name in ("acc_video", "visual_gain"):
                for suffix in ("", "_lo", "_hi", "_p"):
                    row[f"delta_{name}{suffix}"] = deltas.get(model, {}).get(f"delta_{name}{suffix}", np.nan)
            rows.append(row)
    return rows


def _filter_rows(bench: BenchmarkResults, scores: pd.DataFrame, roles: dict[str, str]) -> list[dict]:
    k = scores["n_options"].to_numpy()
    keeps = {"none": np.ones(len(k), dtype=bool)}
    if "kept_llm_inspector" in scores:
        keeps["llm_inspector"] = scores["kept_llm_inspector"].to_numpy()
    if "kept_b_clean" in scores:
        keeps["b_clean"] = scores["kept_b_clean"].to_numpy()
    if scores["grounded"].notna().all():
        keeps["s_score"] = scores["grounded"].to_numpy(dtype=bool)
    rows = []
    for name, keep in keeps.items():
        d = subset_diagnostics(keep, bench.correct_blind, bench.correct_video, k)
        for i, model in enumerate(bench.models):
            rows.append({"benchmark": bench.benchmark, "filter": name, "model": model, "role": roles[model],
                         "n_kept": int(d["n"][i]), **{m: d[m][i] for m in ("chance",) + METRICS}})
    return rows


def _sweep_rows(bench: BenchmarkResults, scores: pd.DataFrame) -> list[pd.DataFrame]:
    k = scores["n_options"].to_numpy()
    signals = {"T": scores["T"].to_numpy(), "-V": -scores["V"].to_numpy(), "S": scores["S"].to_numpy()}
    frames = []
    for name in SWEEP_SIGNALS:
        if np.isnan(signals[name]).all():
            continue
        sweep = threshold_sweep(signals[name], sweep_taus(name, k), bench.correct_blind, bench.correct_video, k)
        n_taus, n_models = sweep["acc_blind"].shape
        frame = pd.DataFrame({"benchmark": bench.benchmark, "signal": name,
                              "tau": np.repeat(sweep["tau"], n_models), "model": np.tile(bench.models, n_taus),
                              "n_kept": np.repeat(sweep["n_kept"], n_models),
                              "chance": np.repeat(sweep["chance"], n_models)})
        for metric in METRICS:
            frame[metric] = sweep[metric].ravel()
        frames.append(frame)
    return frames


def _top_shortcuts(bench: BenchmarkResults, scores: pd.DataFrame) -> pd.DataFrame:
    """The TOP_SHORTCUTS highest-S questions with the prompt lmms-eval logged (`input`: question and options)."""
    top = scores[scores["S"].notna()].sort_values("S", ascending=False, kind="stable").head(TOP_SHORTCUTS)
    if top.empty:
        return pd.DataFrame()
    blind = [run for run in bench.runs if run.mode == "blind"]
    prompts = blind[0].prompts(top["question_id"].tolist())
    columns = ["benchmark", "question_id", "category", "video", "n_options", "answer_index", "T", "V", "S"]
    out = top[columns].reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    out["prompt"] = out["question_id"].map(prompts)
    return out


def _percent(frame: pd.DataFrame) -> pd.DataFrame:
    percent = ["chance", *METRICS, *(f"{m}_{bound}" for m in METRICS for bound in ("lo", "hi"))]
    columns = [c for c in percent if c in frame.columns]
    frame[columns] = frame[columns] * 100.0
    return frame


def _percent_deltas(frame: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in frame.columns if c.startswith("delta_") and not c.endswith("_p")]
    frame[columns] = frame[columns] * 100.0
    return frame


def _audit_benchmark(bench: BenchmarkResults, part: _BenchmarkPart, runs: RunSet, panel: Panel, tau: float,
                     max_hits: int, roles: dict[str, str], stress_tests: dict[str, StressTest], n_resamples: int,
                     confidence_level: float, seed: int, baseline: str | None) -> None:
    """Every table's rows of one benchmark, into `part`."""
    scores, used = _question_scores(bench, panel, tau, max_hits, part.notes)
    if bench.clusters is None:
        part.notes.append(f"{bench.benchmark}: the samples name no video for some questions (runs written before "
                          f"visdep recorded `video`): intervals resample questions, which is too narrow where "
                          f"several questions share a video; rerun with the current tasks to resample videos")
    if not bench.dropped.empty:
        ids = bench.dropped["question_id"].tolist()
        part.notes.append(f"{bench.benchmark}: {len(ids)} question(s) are left out of every metric because a video "
                          f"run lacks them (VISDEP_SKIP_MISSING_VIDEOS=1 drops questions whose video is missing): "
                          f"{', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''} (all in audit.json)")
    if bench.benchmark in stress_tests:
        test = stress_tests[bench.benchmark]
        aligned = align_stress_test(test, scores["question_id"], scores["n_options"])
        scores["s_tst"] = aligned["s"].to_numpy()
        scores["tst_correct"] = aligned["correct"].to_numpy().astype(int)
        for subset, keep in (("full", np.ones(len(scores), dtype=bool)),
                             ("grounded", scores["grounded"].fillna(False).to_numpy(dtype=bool))):
            if keep.any():
                part.solvability.append({"benchmark": bench.benchmark, "subset": subset, "n": int(keep.sum()),
                                         "tst_solvability": 100.0 * scores["tst_correct"].to_numpy()[keep].mean(),
                                         "chance": 100.0 * chance(scores["n_options"].to_numpy()[keep])})
    summary, headline = _summary_rows(bench, scores, roles, n_resamples, confidence_level, seed)
    part.summary += summary
    part.headline += headline
    part.filters += _filter_rows(bench, scores, roles)
    if baseline is not None:
        part.comparison += _comparison_rows(bench, scores, baseline, bench.models, roles, n_resamples,
                                            confidence_level, seed)
    part.frames += _frame_rows(bench, scores, summary, runs, roles, n_resamples, confidence_level, seed)
    part.sweeps += _sweep_rows(bench, scores)
    part.questions.append(scores)
    part.panel_used.append(used)
    if scores["S"].notna().all() and not scores["grounded"].any():
        part.notes.append(f"{bench.benchmark}: no question has S(q) <= {tau:g}: no grounded subset or task")


def _same_checkpoint_notes(panel: Panel, runs: RunSet) -> list[str]:
    """Where T(q) or V(q) averages several models of one checkpoint (e.g. two frame budgets): that checkpoint
    weighs more in the mean."""
    notes = []
    for name, members in (("text_llms", panel.text_llms), ("vlms", panel.vlms)):
        by_checkpoint: dict[str, list[str]] = {}
        for model in members:
            if model in runs.model_info:
                by_checkpoint.setdefault(runs.model_info[model].pretrained, []).append(model)
        for checkpoint, models in by_checkpoint.items():
            if len(models) > 1:
                signal = "T" if name == "text_llms" else "V"
                notes.append(f"panel {name} holds {len(models)} models of checkpoint {checkpoint} "
                             f"({', '.join(models)}): it counts {len(models)} times in {signal}(q); name the ones "
                             f"to use in a --panel file")
    return notes


def _provenance(runs: RunSet, panel_path: str | Path | None, stress_tests: dict[str, StressTest]) -> dict:
    """Package versions and the sha256 of every input file (runs, panel, stress tests)."""
    inputs = dict(runs.sha256)
    if panel_path:
        inputs[str(panel_path)] = file_sha256(panel_path)
    for test in stress_tests.values():
        for name in ("s_x.csv", "summary.json"):
            inputs[str(test.folder / name)] = file_sha256(test.folder / name)
    return {"versions": package_versions(), "input_sha256": inputs}


def run_audit(run_dirs: Sequence[str | Path], panel_path: str | Path | None = None, tau: float | None = None,
              max_hits: int | None = None, tst_dirs: Sequence[str | Path] = (), n_resamples: int = 1000,
              confidence_level: float = 0.95, seed: int = 0, baseline: str | None = None,
              labels: dict[str, str] | None = None) -> Audit:
    """Read the runs under `run_dirs` and compute every table of the audit (see `report.write_audit`).

    `baseline`: a model (its name, its label, or its `pretrained=` when that checkpoint has one model) every
    other model is compared with, question by question. `labels`: NAME -> ALIAS for the report."""
    stress_tests = {}
    for folder in tst_dirs:  # read first: a bad --tst folder fails before the long read of the runs
        test = read_stress_test(folder)
        if test.benchmark in stress_tests:
            raise ValueError(f"two --tst folders for {test.benchmark}: {stress_tests[test.benchmark].folder} and "
                             f"{folder}")
        stress_tests[test.benchmark] = test
    panel = load_panel(panel_path) if panel_path else None
    started = time.perf_counter()
    runs = load_runs(run_dirs, labels)
    logger.info(f"read {len(runs.used)} samples file(s) in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    models, vision = runs.models, runs.vision_models
    panel = inferred_panel(models, vision) if panel is None else resolve_panel(panel, runs.model_info)
    check_panel(panel, models, vision)
    tau = panel.tau if tau is None else float(tau)
    max_hits = panel.inspector_max_hits if max_hits is None else int(max_hits)
    roles = {m: panel.role(m, vision) for m in models}
    if baseline is not None:
        try:
            (baseline,) = resolve_model_keys(baseline, runs.model_info, "--baseline")
        except RunDataError as e:
            raise ValueError(str(e)) from None
    missing_tst = sorted(set(stress_tests) - set(runs.benchmarks))
    if missing_tst:
        raise ValueError(f"--tst given for {missing_tst}, which no run covers")
    parts = [_BenchmarkPart() for _ in runs.benchmarks]

    # Benchmarks are independent and the bootstrap's numpy work releases the GIL: one thread per core.
    with (bootstrap_settings(),
          ThreadPoolExecutor(max_workers=max(1, min(len(parts), usable_cores()))) as pool):
        jobs = [pool.submit(_audit_benchmark, bench, part, runs, panel, tau, max_hits, roles, stress_tests,
                            n_resamples, confidence_level, seed, baseline)
                for bench, part in zip(runs.benchmarks.values(), parts, strict=True)]
        for job in tqdm(as_completed(jobs), total=len(jobs), desc="auditing", unit="benchmark", leave=False):
            job.result()
    notes = _same_checkpoint_notes(panel, runs) + [note for part in parts for note in part.notes]
    summary, headline, questions, filters, sweeps, panel_used, solvability, comparison, frames = (
        [row for part in parts for row in getattr(part, name)]
        for name in ("summary", "headline", "questions", "filters", "sweeps", "panel_used", "solvability",
                     "comparison", "frames"))
    question_columns = ["benchmark", "question_id", "category", "source", "video", "n_options", "answer_index", "T",
                        "V", "S", "grounded", "inspector_hits", "kept_llm_inspector", "kept_b_clean", "s_tst",
                        "tst_correct"]
    questions_table = pd.concat(questions, ignore_index=True)
    questions_table = questions_table[[c for c in question_columns if c in questions_table.columns]]
    top = [_top_shortcuts(bench, scores) for bench, scores in zip(runs.benchmarks.values(), questions, strict=True)]
    for note in notes:
        logger.warning(note)
    logger.info(f"computed the diagnostics, intervals, filters and sweeps in {time.perf_counter() - started:.1f} s")
    return Audit(runs=runs, panel=panel, tau=tau, max_hits=max_hits, n_resamples=n_resamples,
                 confidence_level=confidence_level, seed=seed, roles=roles,
                 summary=_percent(pd.DataFrame(summary)), headline=_percent(pd.DataFrame(headline)),
                 questions=questions_table, filters=_percent(pd.DataFrame(filters)),
                 sweep=_percent(pd.concat(sweeps, ignore_index=True)) if sweeps else pd.DataFrame(),
                 panel_used=pd.concat(panel_used, ignore_index=True),
                 solvability=pd.DataFrame(solvability), stress_tests=stress_tests, notes=notes,
                 comparison=_percent_deltas(pd.DataFrame(comparison)),
                 frames=_percent_deltas(_percent(pd.DataFrame(frames))),
                 top_shortcuts=pd.concat([t for t in top if not t.empty], ignore_index=True)
                 if any(not t.empty for t in top) else pd.DataFrame(),
                 baseline=baseline, provenance=_provenance(runs, panel_path, stress_tests))

