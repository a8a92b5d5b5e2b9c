"""The whole audit in memory: runs -> diagnostics, question scores, filters, sweeps (no file is written here).

`run_audit(run_dirs, ...)` returns an `Audit` whose tables `report.write_audit` writes. Intervals: `intervals.py`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from loguru import logger

from model_adapters.identity import file_sha256
from visdep_metrics.audit.diagnostics import (
    TEXTUAL_EVIDENCE,
    chance,
    shortcut_score,
    subset_diagnostics,
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
from visdep_metrics.audit.intervals import (
    METRICS,
    Design,
    adjust_family,
    comparison_rows,
    frame_rows,
    subsets,
    summary_rows,
)
from visdep_metrics.audit.ladder import (
    adjust_ladder,
    condition_models,
    find_ladders,
    ladder_rows,
    temporal_keep,
    temporal_scores,
)
from visdep_metrics.audit.nonvisual import StressTest, StressTestError, align_stress_test, read_stress_test
from visdep_metrics.audit.pairing import BenchmarkResults, RunPlan, RunSet, plan_runs, read_benchmark
from visdep_metrics.audit.panels import DEFAULT_TAU_ORDER, Panel, check_panel, inferred_panel, load_panel, resolve_panel
from visdep_metrics.audit.runs import ModelInfo, RunFile, resolve_model_keys
from visdep_metrics.audit.samples import read_prompts
from visdep_metrics.audit.settings import AuditSettings, check_settings
from visdep_metrics.parallel import cpu_seconds, forked_map
from visdep_metrics.provenance import HashCache, package_versions

TOP_SHORTCUTS = 20
QUESTION_COLUMNS = ["benchmark", "question_id", "category", "source", "video", "prompt_id", "n_options",
                    "answer_index", "T", "V", "S", "grounded", "V_frame", "V_order", "temporal", "inspector_hits",
                    "kept_llm_inspector", "kept_b_clean", "s_tst", "tst_correct"]


@dataclass
class Audit:
    runs: RunSet
    settings: AuditSettings
    summary: pd.DataFrame
    questions: pd.DataFrame
    filters: pd.DataFrame
    sweep: pd.DataFrame
    panel_used: pd.DataFrame  # benchmark, panel (T/V/inspector/b_clean), models used (a tuple of names)
    solvability: pd.DataFrame  # benchmark, subset, n, tst_solvability, chance in % (only with --tst)
    headline: pd.DataFrame  # per benchmark and subset: the mean of the evaluation VLMs
    comparison: pd.DataFrame  # each model minus the baseline (only with one)
    frames: pd.DataFrame  # frame budgets of one checkpoint
    ladder: pd.DataFrame  # the temporal ladder: each rung's accuracy, FG and OG (`ladder.py`)
    top_shortcuts: pd.DataFrame  # the highest-S questions with their prompt
    notes: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    @property
    def panel(self) -> Panel:
        return self.settings.panel

    @property
    def tau(self) -> float:
        return self.settings.tau

    @property
    def roles(self) -> dict[str, str]:
        return self.settings.roles

    @property
    def baseline(self) -> str | None:
        return self.settings.baseline

    def grounded_ids(self) -> dict[str, list[str]]:
        """Kept question ids per benchmark, for benchmarks with a shortcut score."""
        q = self.questions[self.questions["grounded"].fillna(False).astype(bool)]
        scored = self.questions.loc[self.questions["S"].notna(), "benchmark"].unique()
        return {b: q.loc[q["benchmark"] == b, "question_id"].tolist() for b in scored}

    def temporal_ids(self) -> dict[str, list[str]]:
        """The questions that need the video as a video (grounded, V_order >= tau_order) per benchmark, for
        benchmarks with V_order."""
        if "temporal" not in self.questions:
            return {}
        q = self.questions[self.questions["temporal"].fillna(False).astype(bool)]
        scored = self.questions.loc[self.questions["V_order"].notna() & self.questions["S"].notna(),
                                    "benchmark"].unique()
        return {b: q.loc[q["benchmark"] == b, "question_id"].tolist() for b in scored}

    def label(self, model: str) -> str:
        return self.runs.label(model)


@dataclass
class _BenchmarkPart:
    """One benchmark's results and its share of the audit's tables (rows, or frames to concatenate)."""

    bench: BenchmarkResults
    summary: list = field(default_factory=list)
    headline: list = field(default_factory=list)
    filters: list = field(default_factory=list)
    sweeps: list = field(default_factory=list)
    solvability: list = field(default_factory=list)
    comparison: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    ladder: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    questions: pd.DataFrame | None = None
    panel_used: pd.DataFrame | None = None
    top_shortcuts: pd.DataFrame | None = None
    read_cpu: float = 0.0  # seconds of CPU spent reading and pairing its runs
    compute_cpu: float = 0.0  # and computing its tables


def _question_scores(bench: BenchmarkResults, settings: AuditSettings, notes: list[str]):
    """Per-question T, V, S, grounded, the ladder's V_frame, V_order and temporal, and the baseline filters'
    decisions; and which models were used."""
    panel = settings.panel
    k = bench.questions["n_options"].to_numpy()
    t_rows = bench.model_rows(panel.text_llms)
    with_video = {m for m, video in zip(bench.models, bench.has_video, strict=True) if video}
    v_rows = bench.model_rows([m for m in panel.vlms if m in with_video])
    inspector_rows = bench.model_rows(panel.inspector)
    clean_rows = bench.model_rows(panel.vlms)
    nan = np.full(len(k), np.nan)
    textual = TEXTUAL_EVIDENCE[settings.textual_evidence]
    t = (textual(bench.correct_blind[t_rows], bench.entropy_blind[t_rows], bench.p_answer_blind[t_rows], k)
         if t_rows.size else nan)
    v = visual_necessity(bench.p_answer_video[v_rows], bench.p_answer_blind[v_rows], k) if v_rows.size else nan
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
    scores["grounded"] = pd.array(np.where(np.isnan(s), None, shortcut_keep(s, settings.tau)), dtype="boolean")
    with_video_panel = [m for m in panel.vlms if m in with_video]
    temporal = temporal_scores(bench, with_video_panel, settings.ladders)
    if any(not np.isnan(values).all() for values in temporal.values()):
        scores = scores.assign(**temporal)
        scores["temporal"] = pd.array(np.where(np.isnan(temporal["V_order"]) | np.isnan(s), None,
                                               temporal_keep(scores["grounded"], temporal["V_order"],
                                                             settings.tau_order)), dtype="boolean")
    if inspector_rows.size:
        scores["inspector_hits"] = bench.correct_blind[inspector_rows].sum(axis=0).astype(int)
        scores["kept_llm_inspector"] = llm_inspector_keep(bench.correct_blind[inspector_rows], settings.max_hits)
    if clean_rows.size:
        scores["kept_b_clean"] = b_clean_keep(bench.correct_blind[clean_rows])
    used = {"T": t_rows, "V": v_rows, "llm_inspector": inspector_rows, "b_clean": clean_rows}
    for column, rung in (("V_frame", "single"), ("V_order", "shuffled")):
        chosen = [name for ladder in settings.ladders if ladder.video in with_video_panel
                  and (rung_model := getattr(ladder, rung)) in bench.models for name in (ladder.video, rung_model)]
        used[column] = bench.model_rows(chosen)
    panel_used = pd.DataFrame([{"benchmark": bench.benchmark, "panel": name,
                                "models": tuple(bench.models[i] for i in rows)} for name, rows in used.items()])
    return scores, panel_used


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
    blind = next(f for f in bench.files if f.mode == "blind")
    prompts = read_prompts(blind.samples_path, top["question_id"].tolist())
    columns = ["benchmark", "question_id", "category", "video", "n_options", "answer_index", "T", "V", "S"]
    out = top[columns].reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    out["prompt"] = out["question_id"].map(prompts)
    return out


def _design_notes(bench: BenchmarkResults) -> list[str]:
    if bench.videos is None:
        return [f"{bench.benchmark}: the samples name no video for some questions (runs written before visdep "
                f"recorded `video`): intervals count each question as its own video, which is too narrow where several "
                f"questions share a video; rerun with the current tasks to count videos"]
    if bench.prompts is None:
        return [f"{bench.benchmark}: the samples name no blind prompt for some questions (runs written before visdep "
                f"recorded `prompt_id`): intervals count shared videos only, which is too narrow where questions about "
                f"different videos share a prompt; rerun with the current tasks to count shared prompts too"]
    return []


def _audit_benchmark(job: tuple[str, list[RunFile]], model_info: dict[str, ModelInfo], settings: AuditSettings,
                     hashes: HashCache) -> _BenchmarkPart:
    """Read one benchmark's runs and compute every table's rows of it."""
    benchmark, files = job
    cpu = cpu_seconds()
    bench = read_benchmark(benchmark, files, hashes)
    part = _BenchmarkPart(bench=bench, notes=_design_notes(bench), read_cpu=cpu_seconds() - cpu)
    cpu = cpu_seconds()
    scores, part.panel_used = _question_scores(bench, settings, part.notes)
    if not bench.missing_in_video.empty:
        ids = bench.missing_in_video["question_id"].tolist()
        part.notes.append(f"{bench.benchmark}: {len(ids)} question(s) are left out of every metric because a video "
                          f"run lacks them (VISDEP_SKIP_MISSING_VIDEOS=1 drops questions whose video is missing): "
                          f"{', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''} (all in audit.json)")
    if bench.benchmark in settings.stress_tests:
        aligned = align_stress_test(settings.stress_tests[bench.benchmark], scores["question_id"],
                                    scores["n_options"])
        scores["s_tst"] = aligned["s"].to_numpy()
        scores["tst_correct"] = aligned["correct"].to_numpy().astype(int)
        for subset, keep in (("full", np.ones(len(scores), dtype=bool)),
                             ("grounded", scores["grounded"].fillna(False).to_numpy(dtype=bool))):
            if keep.any():
                part.solvability.append({"benchmark": bench.benchmark, "subset": subset, "n": int(keep.sum()),
                                         "tst_solvability": 100.0 * scores["tst_correct"].to_numpy()[keep].mean(),
                                         "chance": 100.0 * chance(scores["n_options"].to_numpy()[keep])})
    design = Design.of(bench)
    part.summary, part.headline = summary_rows(bench, scores, settings, design)
    part.filters = _filter_rows(bench, scores, settings.roles)
    if settings.baseline is not None:
        selected_by = {m for models in part.panel_used.loc[part.panel_used["panel"].isin(["T", "V"]), "models"]
                       for m in models}
        part.comparison = comparison_rows(bench, scores, settings, design, selected_by=sorted(selected_by))
    part.frames = frame_rows(bench, scores, part.summary, model_info, settings, design)
    part.ladder = ladder_rows(bench, scores, subsets(scores), part.summary, settings.ladders, settings, design)
    part.sweeps = _sweep_rows(bench, scores)
    part.questions = scores
    part.top_shortcuts = _top_shortcuts(bench, scores)
    if scores["S"].notna().all() and not scores["grounded"].any():
        part.notes.append(f"{bench.benchmark}: no question has S(q) <= {settings.tau:g}: no grounded subset or task")
    part.compute_cpu = cpu_seconds() - cpu
    return part


def _same_checkpoint_notes(panel: Panel, runs: RunPlan) -> list[str]:
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


def _stress_tests(tst_dirs: Sequence[str | Path]) -> dict[str, StressTest]:
    found: dict[str, StressTest] = {}
    for folder in tst_dirs:
        test = read_stress_test(folder)
        if test.benchmark in found:
            raise StressTestError(f"two --tst folders for {test.benchmark}: {found[test.benchmark].folder} and "
                                  f"{folder}")
        found[test.benchmark] = test
    return found


def _percent(frame: pd.DataFrame) -> pd.DataFrame:
    """Accuracies and gaps in %, and every delta_ column but p-values."""
    percent = {"chance", *METRICS, *(f"{m}_{bound}" for m in METRICS for bound in ("lo", "hi"))}
    columns = [c for c in frame.columns
               if c in percent or (c.startswith("delta_") and not c.endswith(("_p", "_p_adj", "_note", "_method")))]
    frame[columns] = frame[columns] * 100.0
    return frame


def _table(rows: list) -> pd.DataFrame:
    return _percent(pd.DataFrame(rows))


def _ladder_table(rows: list) -> pd.DataFrame:
    """The ladder's accuracies and gains in %."""
    frame = pd.DataFrame(rows)
    columns = [c for c in frame.columns if c.startswith(("acc_", "frame_gain", "order_gain"))
               and not c.endswith(("_p", "_note", "_model"))]
    frame[columns] = frame[columns] * 100.0
    return frame


def run_audit(run_dirs: Sequence[str | Path], *, panel_path: str | Path | None = None, tau: float | None = None,
              max_hits: int | None = None, tst_dirs: Sequence[str | Path] = (),
              confidence_level: float = 0.95, baseline: str | None = None,
              labels: dict[str, str] | None = None, textual_evidence: str = "paper",
              tau_order: float | None = None) -> Audit:
    """Read the runs under `run_dirs` and compute every table of the audit (see `report.write_audit`).

    `baseline`: a model (its name, its label, or its `pretrained=` when that checkpoint has one model) every
    other model is compared with, question by question. `labels`: NAME -> ALIAS for the report. `tau_order`: the
    temporal subset's V_order(q) threshold (default: the panel's, else `panels.DEFAULT_TAU_ORDER`).
    `textual_evidence`: T(q)'s formula, a name in `diagnostics.TEXTUAL_EVIDENCE`. Options are checked before any run
    is read (`check_settings`); every error a user can fix is a VisdepError naming the option, file or model."""
    # before the long read of the runs (AuditSettings checks them again, with the panel's defaults filled in)
    check_settings(0.0 if tau is None else tau, 0 if max_hits is None else max_hits, textual_evidence,
                   DEFAULT_TAU_ORDER if tau_order is None else tau_order)
    stress_tests = _stress_tests(tst_dirs)  # first: a bad --tst folder fails before the long read of the runs
    panel = load_panel(panel_path) if panel_path else None
    plan = plan_runs(run_dirs, labels)
    models, vision = plan.models, plan.vision_models
    conditions = condition_models(plan.model_info) & vision
    panel = (inferred_panel(models, vision, conditions) if panel is None
             else resolve_panel(panel, plan.model_info))
    check_panel(panel, models, vision, conditions)
    if baseline is not None:
        (baseline,) = resolve_model_keys(baseline, plan.model_info, "--baseline")
    jobs = list(plan.by_benchmark.items())
    missing_tst = sorted(set(stress_tests) - {benchmark for benchmark, _ in jobs})
    if missing_tst:
        raise StressTestError(f"--tst given for {missing_tst}, which no run covers")
    settings = AuditSettings(panel=panel, tau=panel.tau if tau is None else float(tau),
                             max_hits=panel.inspector_max_hits if max_hits is None else int(max_hits),
                             tau_order=panel.tau_order if tau_order is None else float(tau_order),
                             ladders=find_ladders(plan.model_info, vision),
                             roles={m: panel.role(m, vision, conditions) for m in models},
                             confidence_level=confidence_level,
                             textual_evidence=textual_evidence, baseline=baseline, stress_tests=stress_tests)
    # Benchmarks are independent of each other, so large audits read and compute them in forked processes side by
    # side (`parallel.process_count` decides when the fork pays for itself).
    started, cpu = time.perf_counter(), cpu_seconds()
    hashes = HashCache.load()
    parts = forked_map(functools.partial(_audit_benchmark, model_info=plan.model_info, settings=settings,
                                         hashes=hashes.of([f.samples_path for f in plan.used])), jobs,
                       [sum(f.samples_path.stat().st_size for f in files) for _, files in jobs], "auditing")
    read = {path: (part.bench.states[path], sha) for part in parts for path, sha in part.bench.sha256.items()}
    known = sum(state is not None and hashes.known(Path(path), state) == sha for path, (state, sha) in read.items())
    hashes.save(read)
    logger.info(f"read {len(plan.used)} samples file(s) and computed {len(parts)} benchmark(s) in "
                f"{time.perf_counter() - started:.2f} s (CPU {cpu_seconds() - cpu:.2f} s: read "
                f"{sum(p.read_cpu for p in parts):.2f} s, computed {sum(p.compute_cpu for p in parts):.2f} s; "
                f"the sha256 of {known} of them kept from an earlier audit)")
    runs = RunSet(**vars(plan), benchmarks={part.bench.benchmark: part.bench for part in parts})
    notes = runs.notes + _same_checkpoint_notes(panel, runs) + [note for part in parts for note in part.notes]
    for note in notes:
        logger.warning(note)

    def rows(name: str) -> list:
        return [row for part in parts for row in getattr(part, name)]

    questions = pd.concat([part.questions for part in parts], ignore_index=True)
    top = [part.top_shortcuts for part in parts if not part.top_shortcuts.empty]
    audit = Audit(runs=runs, settings=settings, summary=_table(rows("summary")), headline=_table(rows("headline")),
                  questions=questions[[c for c in QUESTION_COLUMNS if c in questions.columns]],
                  filters=_table(rows("filters")), sweep=_percent(pd.concat(rows("sweeps"), ignore_index=True))
                  if rows("sweeps") else pd.DataFrame(), panel_used=pd.concat([p.panel_used for p in parts],
                                                                              ignore_index=True),
                  solvability=pd.DataFrame(rows("solvability")),
                  comparison=adjust_family(_table(rows("comparison")), settings.confidence_level),
                  frames=adjust_family(_table(rows("frames")), settings.confidence_level),
                  ladder=adjust_ladder(_ladder_table(rows("ladder"))),
                  top_shortcuts=pd.concat(top, ignore_index=True) if top else pd.DataFrame(), notes=notes,
                  provenance=_provenance(runs, panel_path, stress_tests))
    return audit
