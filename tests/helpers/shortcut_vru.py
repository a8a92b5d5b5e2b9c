"""Synthetic benchmarks with a known amount of text shortcut, written in VRU-Accident's official layout
(`MetaData/<SRC>/<SRC>_VQA_annotation.json`, six questions per video)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lmms_eval_tasks.layouts import VruQuestion, write_vru_accident
from lmms_eval_tasks.traffic import VRU_CATEGORIES, VRU_SOURCES
from visdep_metrics.demo.fixtures import VRU_SUFFIX

# Shortcut questions: the answer comes from a small pool of labels that never appear as distractors,
# the distractors are made up per question (the pattern the issue describes for VRU-Accident).
LABELS = ["sunny day", "urban street", "arterial road", "car hits pedestrian", "driver is distracted"]
# Shortcut-free questions: all four options from one shared pool, the answer drawn uniformly.
NEUTRAL = ["red car", "blue car", "green car", "white car", "black car", "grey car", "yellow car", "silver car"]
VOCAB = ["rain", "fog", "bridge", "tunnel", "truck", "bus", "lane", "curb", "signal", "ramp", "park", "turn"]


def write_shortcut_vru(root: Path, videos_per_source: int, shortcut_fraction: float, seed: int = 0,
                       unique_fraction: float = 0.0) -> Path:
    """Write the benchmark; each question is a shortcut question with probability `shortcut_fraction`, else
    (with probability `unique_fraction`) one whose four options are all made up for it, else one with four
    options from the shared NEUTRAL pool. Returns `root`; the shortcut questions' ids are listed in
    root/shortcut_ids.json."""
    rng = np.random.default_rng(seed)
    shortcut_ids, questions = [], []
    for src in VRU_SOURCES:
        for v in range(1, videos_per_source + 1):
            for category in VRU_CATEGORIES:
                answer = int(rng.integers(4))
                made_up = [" ".join(rng.choice(VOCAB, 3)) + f" {int(rng.integers(10**6))}" for _ in range(4)]
                if rng.random() < shortcut_fraction:
                    shortcut_ids.append(f"{src}/VRU_{v}/{category}")
                    options = made_up
                    options[answer] = LABELS[int(rng.integers(len(LABELS)))]
                elif rng.random() < unique_fraction:
                    options = made_up
                else:
                    options = [str(o) for o in rng.choice(NEUTRAL, 4, replace=False)]
                questions.append(VruQuestion(src, f"VRU_{v}", category, f"Question about {category}?" + VRU_SUFFIX,
                                             options, answer))
    write_vru_accident(root, questions)
    (root / "shortcut_ids.json").write_text(json.dumps(shortcut_ids))
    return root
