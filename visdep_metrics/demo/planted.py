"""A traffic benchmark with planted truth: which questions the video decides, which the text gives away.

Every clip shows one vehicle of one colour crossing the frame. Each clip is asked four questions, and each
question is planted as one of these types (a side file records it; the tasks never see it):

- `video_only` (the video decides; the text does not give it away): "What colour is the vehicle that crosses
  the road?", four colours, shuffled.
- `both` (the video decides and the text gives it away): the same, naming a vehicle whose colour is always the
  same ("the taxi": yellow).
- `text_only` (the text gives it away; the video does not decide): accident reason, one of three recurring
  correct phrases among made-up distractors, or beside its own negated near-copy (never right); prevention
  method, a give-away word in the question ("The driver was texting." -> "put the phone away").
- `misleading`: the same text patterns pointing at a wrong option (how often: `strength`).
- `neither`: the same questions without a pattern, and the driver's name: nothing tells.

The text patterns are the ones the test-set stress test found in the real benchmarks (recurring correct
answers, negated near-copies among the distractors, give-away words). The dials: `shortcut_share`, the share
of accident-reason and prevention questions that carry a pattern; `strength`, the probability that a pattern
points at the right answer; `both_share`, the share of colour questions that name the vehicle.

`write_planted(root, config)` lays the test split out as the official VRU-Accident download (annotation JSON
files and mp4 clips; `VRU_ACCIDENT_ROOT` points at it) plus `planted.csv`; `training_examples(config, n)`
draws a separate training split in memory, for the demo's panel to learn from.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lmms_eval_tasks.loaders import VRU_SOURCES

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (40, 60, 230), "yellow": (230, 220, 40)}
VEHICLES = {"fire truck": "red", "tractor": "green", "police car": "blue", "taxi": "yellow"}  # named: colour known
CANONICAL_REASONS = ["the driver was looking at a phone", "the car ran a red light",
                     "the truck turned without signalling"]
MADE_UP_REASONS = ["a dog ran onto the road", "the bridge was closed for repairs", "the sun was low and bright",
                   "a tyre burst on the highway", "the traffic lights were broken", "a delivery van blocked the lane",
                   "the road was icy after the storm", "a ball rolled into the street",
                   "the bus stopped without warning", "a cyclist swerved around a pothole",
                   "the parking brake failed on a slope", "fog covered the crossing", "a deer jumped out of the woods",
                   "the mirror was folded in", "a scooter came out of a side street", "the lane markings had faded"]
CUES = {"texting": "put the phone away", "speeding": "slow down before the crossing",
        "drowsy": "stop and take a rest", "drunk": "never drink and drive"}
NAMES = ["Alex", "Sam", "Robin", "Kim", "Jo", "Lee", "Max", "Ana", "Eli", "Noor"]
CATEGORIES = ("vehicle colour", "accident reason", "prevention method", "driver name")
TEXT_SOLVABLE = ("text_only", "both")
VIDEO_DECIDES = ("video_only", "both")
FRAMES, SIDE, FPS = 8, 56, 4


@dataclass(frozen=True)
class PlantedConfig:
    """The generator's dials (see the module docstring) and sizes."""

    videos: int = 60
    shortcut_share: float = 0.7
    strength: float = 1.0
    both_share: float = 0.3
    seed: int = 0


def clip(colour: str, rng: np.random.Generator) -> np.ndarray:
    """(FRAMES, SIDE, SIDE, 3) uint8: a 28-pixel square of `colour` crossing a dark background left to right or
    right to left (a vehicle this size is what a tiny vision tower learns to see in a few hundred steps)."""
    frames = np.empty((FRAMES, SIDE, SIDE, 3), dtype=np.uint8)
    frames[:] = rng.integers(0, 50, 3, dtype=np.uint8)
    row = int(rng.integers(0, SIDE - 28))
    leftwards = bool(rng.integers(2))
    for t in range(FRAMES):
        x = int(t * (SIDE - 28) / (FRAMES - 1))
        x = SIDE - 28 - x if leftwards else x
        frames[t, row:row + 28, x:x + 28] = COLOURS[colour]
    return frames


def _shuffled(options: list[str], answer: str, rng: np.random.Generator) -> tuple[list[str], int]:
    order = [options[i] for i in rng.permutation(len(options))]
    return order, order.index(answer)


def question(category: str, colour: str, config: PlantedConfig, rng: np.random.Generator,
             ) -> tuple[str, list[str], int, str]:
    """(question, options, answer index, planted type) of one category about a clip of `colour`."""
    if category == "vehicle colour":
        if rng.random() < config.both_share:
            vehicle = next(v for v, c in VEHICLES.items() if c == colour)
            options, answer = _shuffled(list(COLOURS), colour, rng)
            return f"What colour is the {vehicle} that crosses the road?", options, answer, "both"
        options, answer = _shuffled(list(COLOURS), colour, rng)
        return "What colour is the vehicle that crosses the road?", options, answer, "video_only"
    honest = rng.random() < config.strength
    if category == "accident reason":
        made_up = [str(x) for x in rng.choice(MADE_UP_REASONS, 4, replace=False)]
        if rng.random() >= config.shortcut_share:
            return ("Why did the accident happen?", *_shuffled(made_up, made_up[0], rng), "neither")
        canonical = CANONICAL_REASONS[int(rng.integers(len(CANONICAL_REASONS)))]
        if rng.random() < 0.5:  # a negated near-copy of the right answer among the distractors
            options = [canonical, canonical.replace("the driver was", "the driver was not").replace(
                " ran ", " did not run ").replace(" turned ", " never turned "), *made_up[:2]]
        else:  # a recurring correct phrase among made-up distractors
            options = [canonical, *made_up[:3]]
        answer = canonical if honest else options[-1]
        planted = "text_only" if honest else "misleading"
        return ("Why did the accident happen?", *_shuffled(options, answer, rng), planted)
    if category == "prevention method":
        advice = list(CUES.values())
        if rng.random() >= config.shortcut_share:
            answer = advice[int(rng.integers(4))]
            return ("How could the accident have been prevented?", *_shuffled(advice, answer, rng), "neither")
        cue = list(CUES)[int(rng.integers(4))]
        answer = CUES[cue] if honest else advice[(advice.index(CUES[cue]) + 1 + int(rng.integers(3))) % 4]
        return (f"The driver was {cue}. How could the accident have been prevented?",
                *_shuffled(advice, answer, rng), "text_only" if honest else "misleading")
    names = [str(x) for x in rng.choice(NAMES, 4, replace=False)]
    return "What was the name of the driver?", names, int(rng.integers(4)), "neither"


def _clips(config: PlantedConfig, seed_offset: int):
    rng = np.random.default_rng([config.seed, seed_offset])
    for v in range(config.videos):
        colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
        yield v, clip(colour, rng), [question(c, colour, config, rng) for c in CATEGORIES]


def training_examples(config: PlantedConfig, seed_offset: int = 1):
    """Yield (frames, question, options, answer index) of a training split: the generator with other seeds."""
    for _, frames, questions in _clips(config, seed_offset):
        for q, options, answer, _ in questions:
            yield frames, q, options, answer


def write_planted(root: str | Path, config: PlantedConfig) -> dict[str, str]:
    """The test split as the official VRU-Accident download under `root` (one source folder per
    `VRU_SOURCES`, clips spread over them) and `root/planted.csv`; returns {"VRU_ACCIDENT_ROOT": root}."""
    from lmms_eval_tasks.layouts import VruQuestion, write_vru_accident

    root = Path(root)
    questions, clips, truth = [], {}, []
    for v, frames, generated in _clips(config, seed_offset=0):
        src = VRU_SOURCES[v % len(VRU_SOURCES)]
        name = f"VRU_{v // len(VRU_SOURCES) + 1}"
        for category, (q, options, answer, planted) in zip(CATEGORIES, generated, strict=True):
            question = VruQuestion(src, name, category, q, options, answer)
            questions.append(question)
            truth.append({"question_id": question.question_id, "video": question.video_path,
                          "category": category, "planted_type": planted, "text_solvable": planted in TEXT_SOLVABLE,
                          "video_decides": planted in VIDEO_DECIDES})
        clips[questions[-1].video_path] = frames
    write_vru_accident(root, questions, clips, fps=FPS)
    with open(root / "planted.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(truth[0]))
        writer.writeheader()
        writer.writerows(truth)
    (root / "planted_config.json").write_text(json.dumps(asdict(config), indent=1))
    return {"VRU_ACCIDENT_ROOT": str(root)}
