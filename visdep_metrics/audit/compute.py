"""The whole audit in memory: runs -> diagnostics, question scores, filters, sweeps (no file is written here).

`run_audit(run_dirs, ...)` returns an `Audit` whose tables `report.write_audit` writes.
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
    shortcut_score,
    subset_diagnostics,
    textual_evidence,
    visual_necessity,
)
from visdep_metrics.audit.filters import (
    SWEEP_SIGNALS,
    SWEEP_TAUS,
    b_clean_keep,
    llm_inspector_keep,
    shortcut_keep,
    threshold_sweep,
)
from visdep_metrics.audit.nonvisual import StressTest, align_stress_test, read_stress_test
from visdep_metrics.audit.panels import Panel, check_panel, inferred_panel, load_panel
from visdep_metrics.audit.runs import BenchmarkResults, RunSet, load_runs
from visdep_metrics.parallel import usable_cores

METRICS = ("acc_blind", "acc_video", "blind_gap", "visual_gain")
ALL = "all"


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
    panel_used: pd.DataFrame  # benchmark, panel (T/V/inspector/b_clean), models used
    solvability: pd.DataFrame  # benchmark, subset, n, tst_solvability, chance in % (only with --tst)
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)  # each model minus --baseline (only with it)
    baseline: str | None = None
    stress_tests: dict[str, StressTest] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def grounded_ids(self) -> dict[str, list[str]]:
        """Kept question ids per benchmark, for benchmarks with a shortcut score."""
        q = self.questions[self.questions["grounded"].fillna(False).astype(bool)]
        scored = self.questions.loc[self.questions["S"].notna(), "benchmark"].unique()
        return {b: q.loc[q["benchmark"] == b, "question_id"].tolist() for b in scored}


@dataclass
class _BenchmarkPart:
    """One benchmark's share of the audit's tables (rows, or frames to concatenate), in benchmark order."""

    summary: list = field(default_factory=list)
    questions: list = field(default_factory=list)
    filters: list = field(default_factory=list)
    sweeps: list = field(default_factory=list)
    panel_used: list = field(default_factory=list)
    solvability: list = field(default_factory=list)
    comparison: list = field(default_factory=list)
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
    for signal, name, members, rows in (("T", "text_llms", panel.text_llms, t_rows), ("V", "vlms", panel.vlms, v_rows)):
        absent = [m for m in members if m not in {bench.models[i] for i in rows}]
        if not rows.size:
            notes.append(f"{bench.benchmark}: no model of the panel's {name} has the runs {signal}(q) needs, so S(q) "
                         f"and the grounded subset are not computed")
        elif absent:
            notes.append(f"{bench.benchmark}: {signal}(q) leaves out {absent} (panel {name}): no run of it here")
    scores = bench.questions.assign(benchmark=bench.benchmark, T=t, V=v, S=s)
    scores["grounded"] = pd.array(np.where(np.isnan(s), None, shortcut_keep(s, tau)), dtype="boolean")
    if inspector_rows.size:
        scores["inspector_hits"] = bench.correct_blind[inspector_rows].sum(axis=0).astype(int)
        scores["kept_llm_inspector"] = llm_inspector_keep(bench.correct_blind[inspector_rows], max_hits)
    if clean_rows.size:
        scores["kept_b_clean"] = b_clean_keep(bench.correct_blind[clean_rows])
    used = {"T": t_rows, "V": v_rows, "llm_inspector": inspector_rows, "b_clean": clean_rows}
    panel_used = pd.DataFrame([{"benchmark": bench.benchmark, "panel": name,
                                "models": ", ".join(bench.models[i] for i in rows) or "(none)"}
                               for name, rows in used.items()])
    return scores, panel_used


def _summary_rows(bench: BenchmarkResults, scores: pd.DataFrame, roles: dict[str, str], n_resamples: int,
                  confidence_level: float, seed: int) -> list[dict]:
    """Acc, chance, BG, VG with bootstrap intervals per model, for the full benchmark and the grounded subset,
    over all questions and per category."""
    k = scores["n_options"].to_numpy()
    subsets = {"full": np.ones(len(k), dtype=bool)}
    if scores["grounded"].notna().all() and scores["grounded"].any():
        subsets["grounded"] = scores["grounded"].to_numpy(dtype=bool)
    categories = sorted(scores["category"].dropna().unique())
    groups = [(subset, category, in_subset & (True if category == ALL else (scores["category"] == category).to_numpy()))
              for subset, in_subset in subsets.items() for category in [ALL] + categories]
    groups = [(subset, category, keep) for subset, category, keep in groups if keep.any()]
    # Per-question values whose means are the metrics; one resampling of the benchmark's questions serves every
    # row and group, which makes the VG interval paired.
    all_rows, video_rows = np.arange(len(bench.models)), np.flatnonzero(bench.has_video)
    cb, cv = bench.correct_blind, bench.correct_video[video_rows]
    blocks = (("acc_blind", all_rows, cb), ("blind_gap", all_rows, cb - 1.0 / k),
              ("acc_video", video_rows, cv), ("visual_gain", video_rows, cv - cb[video_rows]))
    low, high = bootstrap_mean_intervals(np.concatenate([values for _, _, values in blocks]),
                                         np.stack([keep for _, _, keep in groups]), n_resamples, confidence_level,
                                         _rng(seed, bench.benchmark))
    rows = []
    for g, (subset, category, keep) in enumerate(groups):
        d = subset_diagnostics(keep, bench.correct_blind, bench.correct_video, k)
        bounds = {name: np.full((2, len(bench.models)), np.nan) for name in METRICS}
        start = 0
        for name, model_rows, _ in blocks:
            bounds[name][:, model_rows] = low[g, start:start + len(model_rows)], high[g, start:start + len(model_rows)]
            start += len(model_rows)
        for i, model in enumerate(bench.models):
            row = {"model": model, "role": roles[model], "benchmark": bench.benchmark, "subset": subset,
                   "category": category, "n": int(d["n"][i]), "chance": d["chance"][i]}
            for name in METRICS:
                row[name] = d[name][i]
                row[f"{name}_lo"], row[f"{name}_hi"] = bounds[name][0][i], bounds[name][1][i]
            rows.append(row)
    return rows


COMPARED = ("acc_blind", "acc_video", "visual_gain")


def _comparison_rows(bench: BenchmarkResults, scores: pd.DataFrame, baseline: str, roles: dict[str, str],
                     n_resamples: int, confidence_level: float, seed: int) -> list[dict]:
    """Each model minus the baseline checkpoint on the same questions, with paired bootstrap intervals.

    delta_acc_blind = mean_q(c_blind[m, q] - c_blind[base, q]) (= the change of Blind Gap: chance is shared),
    delta_acc_video likewise, delta_visual_gain = mean_q((c_video - c_blind)[m, q] - (c_video - c_blind)[base, q]).
    One resampling of the questions serves both models, so each interval is that of a paired difference."""
    if baseline not in bench.models:
        return []
    base = bench.models.index(baseline)
    k = scores["n_options"].to_numpy()
    subsets = {"full": np.ones(len(k), dtype=bool)}
    if scores["grounded"].notna().all() and scores["grounded"].any():
        subsets["grounded"] = scores["grounded"].to_numpy(dtype=bool)
    others = [i for i in range(len(bench.models)) if i != base]
    if not others:
        return []
    cb, cv = bench.correct_blind, bench.correct_video
    video = [i for i in others if bench.has_video[i]] if bench.has_video[base] else []
    blocks = [("acc_blind", others, cb[others] - cb[base])]
    if video:
        blocks += [("acc_video", video, cv[video] - cv[base]),
                   ("visual_gain", video, (cv[video] - cb[video]) - (cv[base] - cb[base]))]
    values = np.concatenate([d for _, _, d in blocks])
    low, high = bootstrap_mean_intervals(values, np.stack(list(subsets.values())), n_resamples, confidence_level,
                                         _rng(seed, bench.benchmark, "baseline", baseline))
    rows = []
    for g, (subset, keep) in enumerate(subsets.items()):
        for i in others:
            row = {"model": bench.models[i], "role": roles[bench.models[i]], "baseline": baseline,
                   "benchmark": bench.benchmark, "subset": subset, "n": int(keep.sum())}
            start = 0
            for name, members, deltas in blocks:
                if i in members:
                    j = members.index(i)
                    row[f"delta_{name}"] = deltas[j, keep].mean()
                    row[f"delta_{name}_lo"], row[f"delta_{name}_hi"] = low[g, start + j], high[g, start + j]
                start += len(members)
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
        sweep = threshold_sweep(signals[name], SWEEP_TAUS, bench.correct_blind, bench.correct_video, k)
        n_taus, n_models = sweep["acc_blind"].shape
        frame = pd.DataFrame({"benchmark": bench.benchmark, "signal": name,
                              "tau": np.repeat(sweep["tau"], n_models), "model": np.tile(bench.models, n_taus),
                              "n_kept": np.repeat(sweep["n_kept"], n_models),
                              "chance": np.repeat(sweep["chance"], n_models)})
        for metric in METRICS:
            frame[metric] = sweep[metric].ravel()
        frames.append(frame)
    return frames


def _percent(frame: pd.DataFrame) -> pd.DataFrame:
    percent = ["chance", *METRICS, *(f"{m}_{bound}" for m in METRICS for bound in ("lo", "hi"))]
    columns = [c for c in percent if c in frame.columns]
    frame[columns] = frame[columns] * 100.0
    return frame


def _percent_deltas(frame: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in frame.columns if c.startswith("delta_")]
    frame[columns] = frame[columns] * 100.0
    return frame


def _audit_benchmark(bench: BenchmarkResults, part: _BenchmarkPart, panel: Panel, tau: float, max_hits: int,
                     roles: dict[str, str], stress_tests: dict[str, StressTest], n_resamples: int,
                     confidence_level: float, seed: int, baseline: str | None) -> None:
    """Every table's rows of one benchmark, into `part`."""
    scores, used = _question_scores(bench, panel, tau, max_hits, part.notes)
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
    part.summary += _summary_rows(bench, scores, roles, n_resamples, confidence_level, seed)
    part.filters += _filter_rows(bench, scores, roles)
    if baseline is not None:
        part.comparison += _comparison_rows(bench, scores, baseline, roles, n_resamples, confidence_level, seed)
    part.sweeps += _sweep_rows(bench, scores)
    part.questions.append(scores)
    part.panel_used.append(used)
    if scores["S"].notna().all() and not scores["grounded"].any():
        part.notes.append(f"{bench.benchmark}: no question has S(q) <= {tau:g}: no grounded subset or task")


def run_audit(run_dirs: Sequence[str | Path], panel_path: str | Path | None = None, tau: float | None = None,
              max_hits: int | None = None, tst_dirs: Sequence[str | Path] = (), n_resamples: int = 1000,
              confidence_level: float = 0.95, seed: int = 0, baseline: str | None = None) -> Audit:
    """Read the runs under `run_dirs` and compute every table of the audit (see `report.write_audit`).

    `baseline`: a model (as in `pretrained=`) every other model is compared with, question by question."""
    stress_tests = {}
    for folder in tst_dirs:  # read first: a bad --tst folder fails before the long read of the runs
        test = read_stress_test(folder)
        if test.benchmark in stress_tests:
            raise ValueError(f"two --tst folders for {test.benchmark}: {stress_tests[test.benchmark].folder} and "
                             f"{folder}")
        stress_tests[test.benchmark] = test
    panel = load_panel(panel_path) if panel_path else None
    started = time.perf_counter()
    runs = load_runs(run_dirs)
    logger.info(f"read {len(runs.used)} samples file(s) in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    models, vision = runs.models, runs.vision_models
    if panel is None:
        panel = inferred_panel(models, vision)
    check_panel(panel, models, vision)
    tau = panel.tau if tau is None else float(tau)
    max_hits = panel.inspector_max_hits if max_hits is None else int(max_hits)
    roles = {m: panel.role(m, vision) for m in models}
    if baseline is not None and baseline not in models:
        raise ValueError(f"--baseline {baseline!r} has no run here; models found: {', '.join(models)}")
    missing_tst = sorted(set(stress_tests) - set(runs.benchmarks))
    if missing_tst:
        raise ValueError(f"--tst given for {missing_tst}, which no run covers")
    parts = [_BenchmarkPart() for _ in runs.benchmarks]

    # Benchmarks are independent and the bootstrap's numpy work releases the GIL: one thread per core.
    with (bootstrap_settings(),
          ThreadPoolExecutor(max_workers=max(1, min(len(parts), usable_cores()))) as pool):
        jobs = [pool.submit(_audit_benchmark, bench, part, panel, tau, max_hits, roles, stress_tests, n_resamples,
                            confidence_level, seed, baseline)
                for bench, part in zip(runs.benchmarks.values(), parts, strict=True)]
        for job in tqdm(as_completed(jobs), total=len(jobs), desc="auditing", unit="benchmark", leave=False):
            job.result()
    notes = [note for part in parts for note in part.notes]
    summary, questions, filters, sweeps, panel_used, solvability, comparison = (
        [row for part in parts for row in getattr(part, name)]
        for name in ("summary", "questions", "filters", "sweeps", "panel_used", "solvability", "comparison"))
    question_columns = ["benchmark", "question_id", "category", "source", "n_options", "answer_index", "T", "V", "S",
                        "grounded", "inspector_hits", "kept_llm_inspector", "kept_b_clean", "s_tst", "tst_correct"]
    questions_table = pd.concat(questions, ignore_index=True)
    questions_table = questions_table[[c for c in question_columns if c in questions_table.columns]]
    for note in notes:
        logger.warning(note)
    logger.info(f"computed the diagnostics, intervals, filters and sweeps in {time.perf_counter() - started:.1f} s")
    return Audit(runs=runs, panel=panel, tau=tau, max_hits=max_hits, n_resamples=n_resamples,
                 confidence_level=confidence_level, seed=seed, roles=roles,
                 summary=_percent(pd.DataFrame(summary)), questions=questions_table,
                 filters=_percent(pd.DataFrame(filters)),
                 sweep=_percent(pd.concat(sweeps, ignore_index=True)) if sweeps else pd.DataFrame(),
                 panel_used=pd.concat(panel_used, ignore_index=True),
                 solvability=pd.DataFrame(solvability), stress_tests=stress_tests, notes=notes,
                 comparison=_percent_deltas(pd.DataFrame(comparison)), baseline=baseline)
