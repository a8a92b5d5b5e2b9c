"""Constructed runs with a planted temporal truth, for the ladder's tests: each question is answerable from the text,
from any one frame, only from several frames (in any order), or only from the frames in order.

Each model answers a question it can answer under a condition with the answer's probability drawn in [0.85, 0.9] and
any other question with a random option given 0.4 (right by chance, 1 / K): the text LLMs and every condition know
the text questions; one frame answers the one-frame questions too; shuffled frames all but the order questions; the
full video all of them. The truths below are computed from this construction, not from the audit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.runs import visdep_record, write_run

KINDS = ("text", "one_frame", "multi_frame", "order")
BENCHMARK = "vru_accident"
K = 4
# condition -> the kinds a model answers under it
KNOWS = {"blind": {"text"}, "single": {"text", "one_frame"}, "shuffled": {"text", "one_frame", "multi_frame"},
         "reversed": {"text", "one_frame", "multi_frame"}, "video": set(KINDS)}
CONDITION_ARGS = {"video": "max_frames=16", "single": "frames=middle", "shuffled": "max_frames=16,frame_order=shuffled",
                  "reversed": "max_frames=16,frame_order=reversed"}
TEXT_LLMS = ("org/text-a", "org/text-b")
VLMS = ("org/vlm-a", "org/vlm-b")
HELD_OUT = "org/vlm-held"


def planted_questions(n_videos: int = 40, per_video: int = 4) -> dict[str, np.ndarray]:
    """Each video asked one question of each kind; every question its own prompt."""
    n = n_videos * per_video
    kind = np.array([KINDS[i % len(KINDS)] for i in range(n)])
    return {"id": np.array([f"q{i}" for i in range(n)]), "kind": kind, "video": np.arange(n) // per_video,
            "answer": np.arange(n) % K}


def _records(q: dict, mode: str, knows: set[str], rng: np.random.Generator) -> list[dict]:
    records = []
    for qid, kind, video, answer in zip(q["id"], q["kind"], q["video"], q["answer"], strict=True):
        p = np.full(K, 0.0)
        if kind in knows:
            p[answer] = rng.uniform(0.85, 0.9)
            rest = [j for j in range(K) if j != answer]
        else:
            pick = int(rng.integers(K))
            p[pick] = 0.4
            rest = [j for j in range(K) if j != pick]
        p[rest] = (1 - p.max()) / len(rest)
        records.append(visdep_record(str(qid), BENCHMARK, mode, int(answer), list(np.log(p)), category=str(kind),
                                     video=f"videos/{video}.mp4", prompt_id=str(qid)))
    return records


def write_ladder_runs(root: Path, seed: int = 0, conditions=("single", "shuffled", "reversed"),
                      own_blind: bool = False) -> dict[str, np.ndarray]:
    """Text LLMs blind; VLMs (two panel, one held out) blind and video, and each condition's video run (with its own
    blind run where `own_blind`); returns the planted questions."""
    rng = np.random.default_rng(seed)
    q = planted_questions()
    for model in TEXT_LLMS:
        write_run(root, model, {f"{BENCHMARK}_blind": _records(q, "blind", KNOWS["blind"], rng)},
                  model_type="visdep_llm", extra_args="")
    for model in (*VLMS, HELD_OUT):
        for condition in ("video", *conditions):
            tasks = {f"{BENCHMARK}_video": _records(q, "video", KNOWS[condition], rng)}
            if condition == "video" or own_blind:
                tasks[f"{BENCHMARK}_blind"] = _records(q, "blind", KNOWS["blind"], rng)
            write_run(root, model, tasks, extra_args=CONDITION_ARGS[condition],
                      subfolder=f"{model.replace('/', '__')}_{condition}")
    return q


def truth(q: dict) -> dict[str, float]:
    """The expected accuracies of a VLM's rungs and its gains (in points), from the construction: a question a
    condition knows is right, any other right with probability 1 / K."""
    def acc(condition: str) -> float:
        known = np.isin(q["kind"], list(KNOWS[condition]))
        return 100 * float(np.mean(np.where(known, 1.0, 1 / K)))

    return {"acc_video": acc("video"), "acc_single": acc("single"), "acc_shuffled": acc("shuffled"),
            "frame_gain": acc("video") - acc("single"), "order_gain": acc("video") - acc("shuffled")}
