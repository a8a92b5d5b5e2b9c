"""Write an `Audit` into OUT: CSV tables, grounded task YAMLs, plots, report.md and audit.json.

Everything is written into a staging folder beside OUT and put in OUT's place at the end
(`visdep_metrics.outdir.staged`), so an error leaves no half-written output. An existing OUT is replaced only where
it holds an earlier audit's files, unchanged (listed in its `visdep_files.json`), and never where it holds an input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
from loguru import logger

from lmms_eval_tasks.export import write_subset_tasks
from visdep_metrics.audit.compute import Audit
from visdep_metrics.audit.ladder import TEMPORAL_SUFFIX
from visdep_metrics.audit.narrative import GROUNDED_SUFFIX, MANIFEST, report_markdown
from visdep_metrics.audit.plots import draw_plots, planned_plots
from visdep_metrics.audit.tables import dropped_by_reason
from visdep_metrics.explorer import write_explorer
from visdep_metrics.outdir import OutputDirError, staged
from visdep_metrics.outdir import check_out_dir as _check_out_dir
from visdep_metrics.parallel import cpu_seconds

__all__ = ["MANIFEST", "OutputDirError", "check_out_dir", "write_audit"]


def check_out_dir(out: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """OUT may be new, empty, or an earlier audit output (which will be replaced), and holds none of `inputs`."""
    return _check_out_dir(out, "audit", inputs)


def _manifest(audit: Audit, exported: dict[str, int], temporal: dict[str, int]) -> dict:
    s = audit.settings
    head = audit.headline[audit.headline["subset"] == "full"].set_index("benchmark") if not audit.headline.empty \
        else pd.DataFrame()
    return {
        "panel": {"source": s.panel.source, "text_llms": list(s.panel.text_llms), "vlms": list(s.panel.vlms),
                  "held_out": list(s.panel.held_out), "inspector_llms": list(s.panel.inspector)},
        "tau": s.tau, "baseline": s.baseline, "inspector_max_hits": s.max_hits, "textual_evidence": s.textual_evidence,
        "confidence_level": s.confidence_level, "roles": s.roles,
        "files_used": [{"model": f.model, "model_args": f.model_args, "task": f.task, "date": f.date,
                        "results": str(f.results_path), "samples": str(f.samples_path), "checkpoint": f.checkpoint,
                        "checkpoint_source": f.checkpoint_source} for f in audit.runs.used],
        "replaced": [{"replaced": str(old.samples_path), "by": str(new.samples_path)}
                     for old, new in audit.runs.replaced],
        "stress_tests": {b: str(t.folder) for b, t in s.stress_tests.items()},
        "grounded_questions": exported, "tau_order": s.tau_order, "temporal_questions": temporal,
        "chosen_by": _chosen_by(audit), "ladders": [vars(ladder) for ladder in s.ladders], "notes": audit.notes,
        "models": {m.name: {"label": m.label, "pretrained": m.pretrained, "settings": dict(m.settings)}
                   for m in audit.runs.model_info.values()},
        "resampling": {b: {"unit": str(r["resampled"]), "n_questions": int(r["n"]), "n_videos": int(r["n_videos"]),
                           "n_prompts": None if pd.isna(r["n_prompts"]) else int(r["n_prompts"]),
                           "deff_blind": _number(r["deff_blind"]),
                           "deff_video": _number(r["deff_video"])} for b, r in head.iterrows()},
        "dropped_questions": {b.benchmark: b.missing_in_video.to_dict(orient="records")
                              for b in audit.runs.benchmarks.values() if not b.missing_in_video.empty},
        "dropped_by_tasks": dropped_by_reason(audit),
        **audit.provenance,
    }


def _chosen_by(audit: Audit) -> dict[str, dict[str, list[dict]]]:
    """Per benchmark and score (T, V, V_frame, V_order): the runs whose answers chose the grounded and temporal
    subsets (model, task, samples file)."""
    files = {(f.model, f.benchmark): [] for f in audit.runs.used}
    for f in audit.runs.used:
        files[(f.model, f.benchmark)].append({"model": f.model, "task": f.task, "samples": str(f.samples_path)})
    used = audit.panel_used[audit.panel_used["panel"].isin(["T", "V", "V_frame", "V_order"])]
    return {b: {r["panel"]: [run for m in r["models"] for run in files.get((m, b), [])]
                for _, r in used[used["benchmark"] == b].iterrows()} for b in used["benchmark"].unique()}


def _number(value) -> float | None:
    return None if pd.isna(value) else float(value)


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    """pyarrow's writer: a tenth of DataFrame.to_csv's time on questions.csv (booleans come out as true/false)."""
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), path,
                     write_options=pa_csv.WriteOptions(quoting_style="needed"))


def _write_all(audit: Audit, folder: Path, out: Path, video_roots: Mapping[str, Path] | None = None,
               explorer: bool = True) -> None:
    tables = {"summary": audit.summary, "questions": audit.questions, "filters": audit.filters,
              "sweep": audit.sweep, "headline": audit.headline}
    optional = {"compare": audit.comparison, "frames": audit.frames, "ladder": audit.ladder,
                "top_shortcuts": audit.top_shortcuts}
    tables |= {name: table for name, table in optional.items() if not table.empty}
    for name, table in tables.items():
        _write_csv(table, folder / f"{name}.csv")
    exported = {}
    for benchmark, ids in audit.grounded_ids().items():
        if ids:
            write_subset_tasks(folder / "tasks", benchmark, ids, GROUNDED_SUFFIX,
                               description=f"Grounded subset of the visdep audit: S(q) <= {audit.tau:g}.")
            exported[benchmark] = len(ids)
    temporal = {}
    for benchmark, ids in audit.temporal_ids().items():
        if ids:
            write_subset_tasks(folder / "tasks", benchmark, ids, TEMPORAL_SUFFIX,
                               description=f"Temporal subset of the visdep audit: S(q) <= {audit.tau:g} and "
                                           f"V_order(q) >= {audit.settings.tau_order:g}.")
            temporal[benchmark] = len(ids)
    plots = planned_plots(audit)
    (folder / "report.md").write_text(report_markdown(audit, out, plots, exported, temporal), encoding="utf-8")
    (folder / MANIFEST).write_text(json.dumps(_manifest(audit, exported, temporal), indent=2), encoding="utf-8")
    draw_plots(audit, folder, plots)
    # Further outputs go here, into `folder`: the file list `staged` writes holds whatever the folder holds.
    if explorer:
        write_explorer(audit, folder, previous=out if out.is_dir() else None, video_roots=video_roots)


def _inputs(audit: Audit) -> list[Path]:
    """Every file and folder the audit read: OUT may hold none of them."""
    files = [Path(p) for p in audit.provenance.get("input_sha256", {})]
    files += [p for f in audit.runs.used for p in (f.results_path, f.samples_path)]
    return files + [t.folder for t in audit.settings.stress_tests.values()]


def write_audit(audit: Audit, out: str | Path, inputs: Iterable[str | Path] = (),
                video_roots: Mapping[str, Path] | None = None, explorer: bool = True) -> Path:
    """Write every output of the audit into OUT (replacing an earlier audit there); returns OUT. `inputs`: what
    else OUT may not hold (the run folders, specs), besides every file the audit read. `video_roots`: benchmark ->
    the folder its videos are under, for the explorer's frames (default: the benchmark's root variable);
    `explorer`: write explorer.html and its frames."""
    started, cpu = time.perf_counter(), cpu_seconds()
    with staged(out, "audit", [*inputs, *_inputs(audit)]) as target:
        _write_all(audit, target.folder, target.out, video_roots, explorer)
    out = target.out
    logger.info(f"wrote the audit to {out} in {time.perf_counter() - started:.2f} s (CPU {cpu_seconds() - cpu:.2f} s)")
    return out
