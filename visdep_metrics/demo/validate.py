"""`visdep validate`: which settings of a benchmark let the Shortcut Score recover its planted shortcuts, with the
paper's T(q) and with each chance-aware variant?

For each setting of the generator's dials, `shortcut_share` (how many accident-reason and prevention
questions carry a textual give-away) and `strength` (how often a give-away points at the right answer), a
fresh planted benchmark is written and scored by the demo's trained panel (trained once on the default
generator's training split, `visdep_metrics.demo.training`, cached). For each text panel size (the first 1,
2, ... of the text LLMs), each variant of T(q) (`visdep_metrics.audit.diagnostics.TEXTUAL_EVIDENCE`) and each
τ, the questions with S(q) = T(q) - V(q) > τ are removed and compared with the planted text-solvable ones:
precision, recall and the share of video-only questions kept (`visdep_metrics.demo.truth`). A setting
"recovers" the shortcuts when precision and recall both reach 0.8 and at least 90% of the video-only
questions stay.

The models are scored in this process through the adapters (`visdep_llm`, `visdep_vlm`) with lmms-eval's own
request objects and the tasks' own prompt, choices and scoring (option texts), without lmms-eval's runner:
the same numbers the command line gives, without its start-up per model. What the command line would take from
the environment is passed explicitly: the scoring mode in the evaluation (`evaluation.Evaluation`) the
adapters score in, each setting's benchmark folder to the video paths of its requests.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from loguru import logger

from visdep_metrics.demo.planted import PlantedConfig, write_planted

TAUS = (0.0, 0.1, 0.2, 0.3)
SHARES = (0.3, 0.7)
STRENGTHS = (1.0, 0.8, 0.6)


def loglikelihood_requests(adapter, docs: list[dict], video: bool, task: str = "vru_accident",
                           video_of: Callable[[dict], list[str]] | None = None) -> list:
    """lmms-eval's `multiple_choice` requests for `docs` (K per document, the tasks' own prompt and choices),
    wired to the adapter's task_dict the way lmms-eval's evaluator wires them. `video_of(doc)`: the video task's
    visual (default the task's own `doc_to_visual_video`, which finds the benchmark through its variable)."""
    from lmms_eval.api.instance import Instance

    from lmms_eval_tasks import tasks

    to_visual = (video_of or tasks.doc_to_visual_video) if video else tasks.doc_to_visual_blind
    adapter.task_dict = {task: {"test": docs}}
    return [Instance("loglikelihood", (tasks.doc_to_text(doc), choice, to_visual, i, task, "test"), k,
                     metadata={"task": task, "doc_id": i, "repeats": 1})
            for i, doc in enumerate(docs) for k, choice in enumerate(tasks.doc_to_choice(doc))]


def _option_logprobs(adapter, docs: list[dict], video: bool, video_of: Callable[[dict], list[str]]) -> np.ndarray:
    """(n, K) log-probabilities (every question here has K = 4)."""
    requests = loglikelihood_requests(adapter, docs, video, video_of=video_of)
    losses = np.array([loss for loss, _, _ in adapter.loglikelihood(requests)])
    return -losses.reshape(len(docs), -1)


def score_setting(adapters: dict, text_llms: Sequence[str], vlms: Sequence[str], config: PlantedConfig,
                  work: Path, taus: Sequence[float] = TAUS) -> pd.DataFrame:
    """Rows (variant, panel_size, tau, n_removed, precision, recall, video_only_kept) of one generator setting."""
    from lmms_eval_tasks.loaders import get_benchmark, load_benchmark
    from visdep_metrics.audit.diagnostics import (
        TEXTUAL_EVIDENCE,
        answer_probability,
        normalised_entropy,
        option_probabilities,
        predicted_index,
        shortcut_score,
        visual_necessity,
    )
    from visdep_metrics.demo.truth import threshold_sweep

    root = work / f"share{config.shortcut_share:g}-strength{config.strength:g}"
    write_planted(root, config)
    docs = [q.document() for q in load_benchmark("vru_accident", root)]
    bench = get_benchmark("vru_accident")

    def video_of(doc: dict) -> list[str]:  # as the task finds it, with VRU_ACCIDENT_ROOT=root
        return [str(bench.video_path(doc["video"], root=root))]

    planted = pd.read_csv(root / "planted.csv").set_index("question_id").loc[[d["question_id"] for d in docs]]
    planted = planted.reset_index()
    k = np.array([len(d["options"]) for d in docs])
    answer = np.array([d["answer_index"] for d in docs])
    correct, entropy, p_answer = [], [], []
    for name in text_llms:
        p = option_probabilities(_option_logprobs(adapters[name], docs, False, video_of), k)
        correct.append(predicted_index(p) == answer)
        entropy.append(normalised_entropy(p, k))
        p_answer.append(answer_probability(p, answer))
    p_video, p_blind = [], []
    for name in vlms:
        for video, into in ((True, p_video), (False, p_blind)):
            logprobs = _option_logprobs(adapters[name], docs, video, video_of)
            into.append(answer_probability(option_probabilities(logprobs, k), answer))
    v = visual_necessity(np.array(p_video), np.array(p_blind), k)
    rows = []
    for variant, textual in TEXTUAL_EVIDENCE.items():
        for size in range(1, len(text_llms) + 1):
            t = textual(np.array(correct[:size]), np.array(entropy[:size]), np.array(p_answer[:size]), k)
            rows.append(threshold_sweep(shortcut_score(t, v), planted, taus).assign(variant=variant, panel_size=size))
    return pd.concat(rows).assign(shortcut_share=config.shortcut_share, strength=config.strength)


def recovery_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant: in how many settings (share, strength, panel size, τ) it recovers the shortcuts, of how many."""
    counts = table.groupby("variant", sort=False)["recovers"].agg(recovers="sum", settings="size").reset_index()
    return counts.astype({"recovers": int, "settings": int})


def validate(out: Path | None = None, cache_dir: Path | None = None, videos: int = 40, max_frames: int = 4,
             shares: Sequence[float] = SHARES, strengths: Sequence[float] = STRENGTHS,
             taus: Sequence[float] = TAUS, with_smollm2: bool = True) -> pd.DataFrame:
    """The sweep (one row per setting, variant, panel size and τ); written to OUT/validate.csv, with the counts
    per variant in OUT/recovery.csv, when `out` is given."""
    from lmms_eval_tasks.evaluation import Evaluation, evaluating
    from model_adapters.adapter import VisdepLLM, VisdepVLM
    from visdep_metrics.demo.pipeline import (
        LLM_STEPS,
        ROLE_OF,
        SMOLLM2,
        TEXT_LLMS,
        VLM_STEPS,
        VLMS,
        default_cache_dir,
        smollm2_gguf,
    )
    from visdep_metrics.demo.training import train_panel

    checkpoints = train_panel({kind: ROLE_OF[kind] for kind in TEXT_LLMS + VLMS}, cache_dir or default_cache_dir(),
                              PlantedConfig(), LLM_STEPS, VLM_STEPS, max_frames)
    adapters = {kind: VisdepLLM(pretrained=str(checkpoints[kind]), device="cpu", dtype="float32", batch_size=8)
                for kind in TEXT_LLMS}
    adapters.update({kind: VisdepVLM(pretrained=str(checkpoints[kind]), device="cpu", dtype="float32", batch_size=8,
                                     max_frames=max_frames) for kind in VLMS})
    text = list(TEXT_LLMS)
    gguf = smollm2_gguf() if with_smollm2 else None
    if gguf is not None:
        adapters[SMOLLM2] = VisdepLLM(pretrained=str(gguf.parent), gguf_file=gguf.name, device="cpu",
                                      dtype="float32", batch_size=8)
        text.append(SMOLLM2)
    with tempfile.TemporaryDirectory() as tmp, evaluating(Evaluation(scoring="option")):
        tables = []
        for share, strength in itertools.product(shares, strengths):
            config = PlantedConfig(videos=videos, shortcut_share=share, strength=strength, seed=11)
            logger.info(f"validate: shortcut share {share:g}, strength {strength:g}")
            tables.append(score_setting(adapters, text, list(VLMS), config, Path(tmp), taus))
    table = pd.concat(tables, ignore_index=True)
    table["recovers"] = (table["precision"] >= 0.8) & (table["recall"] >= 0.8) & (table["video_only_kept"] >= 0.9)
    table = table[["variant", "shortcut_share", "strength", "panel_size", "tau", "n_removed", "precision", "recall",
                   "video_only_kept", "recovers"]]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "validate.csv", index=False)
        recovery_counts(table).to_csv(out / "recovery.csv", index=False)
    return table
