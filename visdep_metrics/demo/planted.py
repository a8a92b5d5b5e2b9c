"""A traffic benchmark with planted truth: which questions the video decides, which the text gives away, and which
only the frames in their order decide.

Every clip shows one vehicle of one colour crossing the frame in one of four directions (left to right, right to
left, top to bottom, bottom to top), drawn per clip. Each clip is asked five questions, and each question is planted
as one of these types (a side file records it; the tasks never see it):

- `video_only` (the video decides, any one frame of it; the text does not give it away): "What colour is the
  vehicle that crosses the road?", four colours, shuffled.
- `order` (only the frames in their order decide): "Which way does the vehicle cross the road?", the four
  directions, shuffled. The vehicle passes the centre of the picture at the clip's middle frame whatever its
  direction, so that frame alone shows the same picture for all four; a clip and its reverse are the same frames in
  the opposite order (up and down: the same, transposed), so the frames as a set tell the axis (across or up and
  down) and never the direction. One frame leaves all four directions (chance, 1/4), the frames out of order two.
- `both` (the video decides and the text gives it away): a colour question naming a vehicle whose colour is
  always the same ("the taxi": yellow).
- `text_only` (the text gives it away; the video does not decide): accident reason, one of three recurring
  correct phrases among made-up distractors, or beside its own negated near-copy (the copy never right);
  prevention method, a give-away word in the question ("the driver was texting" -> "put the phone away").
- `misleading`: the same text patterns pointing at a wrong option (how often: `strength`).
- `neither`: accident reasons and advice without a pattern, and the driver's name: nothing tells.

The text patterns are the ones the test-set stress test found in the real benchmarks (recurring correct
answers, negated near-copies among the distractors, give-away words). The dials, each an exact share of a
split's clips (`clip_plans`): `shortcut_share`, the share of accident-reason and of prevention questions that
carry a pattern; `strength`, the share of those whose pattern points at the right answer; `both_share`, the
share of colour questions that name the vehicle.

Two splits share only the patterns: the recurring correct phrases and their negated copies
(`CANONICAL_REASONS`), the give-away words with their advice (`CUES`), the named vehicles with their colours,
and the plain colour and direction questions. Everything else, question wordings, made-up reasons, advice
distractors and names, comes from one pool per split (`POOLS`), so no question the text can answer, mislead on or
leave open occurs in both splits word for word: what a model carries from training to the test is a pattern, not a
memorised item. Only the plain colour and direction questions repeat, as their answer is the clip's.

`write_planted(root, config)` lays the test split out as the official VRU-Accident download (annotation JSON
files and mp4 clips; `VRU_ACCIDENT_ROOT` points at it) plus `planted.csv`; `planted_clips(config, "train",
stream)` draws training clips in memory, one independent stream per seed (`visdep_metrics.demo.training`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lmms_eval_tasks.traffic import VRU_SOURCES

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (40, 60, 230), "yellow": (230, 220, 40)}
VEHICLES = {"fire truck": "red", "tractor": "green", "police car": "blue", "taxi": "yellow"}  # named: colour known
VIDEO_ONLY_QUESTION = "What colour is the vehicle that crosses the road?"
# the recurring correct phrases, each with its negated near-copy (the copy is never right)
CANONICAL_REASONS = {"the driver was looking at a phone": "the driver was not looking at a phone",
                     "the car ran a red light": "the car did not run a red light",
                     "the truck turned without signalling": "the truck never turned without signalling"}
CUES = {"texting": "put the phone away", "speeding": "slow down before the crossing",
        "drowsy": "stop and take a rest", "drunk": "never drink and drive"}
CATEGORIES = ("vehicle colour", "vehicle direction", "accident reason", "prevention method", "driver name")
PATTERNS = ("named vehicle", "recurring phrase", "negated copy", "give-away word")
TEXT_SOLVABLE = ("text_only", "both")
VIDEO_DECIDES = ("video_only", "both", "order")
SPLITS = ("train", "test")
# the directions a vehicle crosses in: the first two along the road (left and right), the last two across it
DIRECTIONS = ("from left to right", "from right to left", "from top to bottom", "from bottom to top")
ORDER_QUESTION = "Which way does the vehicle cross the road?"
ONLY_VIDEO = ("video_only", "order")  # nothing but the clip decides them
# FRAMES odd: its middle frame, the one `frames=middle` shows ((FRAMES - 1) // 2), has the vehicle at the centre
FRAMES, SIDE, VEHICLE, FPS = 9, 56, 28, 4


@dataclass(frozen=True)
class Pools:
    """What one split draws its surface forms from; `{}` is the named vehicle, the give-away word."""

    both_questions: tuple[str, ...]
    reason_questions: tuple[str, ...]
    reasons: tuple[str, ...]  # made-up reasons: the distractors, and the options of the open questions
    cue_questions: tuple[str, ...]
    advice_questions: tuple[str, ...]  # the same questions without the give-away sentence
    advice: tuple[str, ...]  # distractors beside the give-away's advice, and the options of the open questions
    name_questions: tuple[str, ...]
    names: tuple[str, ...]


POOLS = {
    "train": Pools(
        both_questions=("What colour is the {} that crosses the road?", "What colour is the {} in the clip?",
                        "Which colour does the {} have?", "The {} is passing. What colour is it?",
                        "What is the colour of the {}?", "Which colour is the {} that drives by?"),
        reason_questions=("Why did the accident happen?", "What caused the accident?",
                          "What was the reason for the accident?"),
        reasons=("a dog ran onto the road", "the bridge was closed for repairs", "the sun was low and bright",
                 "a tyre burst on the highway", "the traffic lights were broken", "a delivery van blocked the lane",
                 "the road was icy after the storm", "a ball rolled into the street", "the bus stopped without warning",
                 "a cyclist swerved around a pothole", "the parking brake failed on a slope",
                 "fog covered the crossing", "a deer jumped out of the woods", "the mirror was folded in",
                 "a scooter came out of a side street", "the lane markings had faded"),
        cue_questions=("The driver was {}. How could the accident have been prevented?",
                       "The driver was {}. What should have been done?",
                       "The driver was {} at the time. What would have helped?"),
        advice_questions=("How could the accident have been prevented?", "What should have been done?",
                          "What would have helped?"),
        advice=("check the tyre pressure", "wash the windscreen", "use the horn more", "drive with the lights on",
                "keep both hands on the wheel", "take a different route", "wear a seat belt", "adjust the mirrors",
                "leave home earlier", "service the brakes"),
        name_questions=("What was the name of the driver?", "Who was driving?", "What is the name of the driver?"),
        names=("Alex", "Sam", "Robin", "Kim", "Jo", "Lee", "Max", "Ana", "Eli", "Noor")),
    "test": Pools(
        both_questions=("What colour is the {} driving across?", "Which colour is the {} seen on the road?"),
        reason_questions=("What led to the crash?", "Why did the collision occur?"),
        reasons=("a ladder fell off a roof rack", "the wipers stopped working", "a horse trailer came loose",
                 "oil was spilled across the junction", "the headlights were switched off",
                 "a kite string caught the windscreen", "the tram left its stop early", "gravel covered the bend",
                 "a pallet slid off a forklift", "the sat nav sent the car the wrong way",
                 "a goose walked across the lane", "the barrier rose too late", "smoke drifted over the motorway",
                 "a tarp blew off a lorry", "the kerb was hidden by snow", "a jogger stepped off the pavement"),
        cue_questions=("Witnesses say the driver was {}. What would have avoided the crash?",
                       "Police found the driver was {}. What would have prevented this?"),
        advice_questions=("What would have avoided the crash?", "What would have prevented this?"),
        advice=("fit winter tyres", "clean the number plate", "park further away", "replace the wiper blades",
                "sound the horn twice", "follow the bus lane", "tune the radio to traffic news", "lock the doors",
                "fill up the tank", "carry a warning triangle"),
        name_questions=("What is the driver called?", "Which name does the driver have?"),
        names=("Ines", "Omar", "Yuki", "Tariq", "Lena", "Pavel", "Zoe", "Ravi", "Mia", "Hugo")),
}


@dataclass(frozen=True)
class PlantedConfig:
    """The generator's dials (see the module docstring) and sizes."""

    videos: int = 60
    shortcut_share: float = 0.7
    strength: float = 1.0
    both_share: float = 0.3
    seed: int = 0


@dataclass(frozen=True)
class PlantedQuestion:
    category: str
    question: str
    options: tuple[str, ...]
    answer: int
    planted_type: str
    pattern: str  # the text pattern it carries (`PATTERNS`), "none" without one


def clip(colour: str, direction: str, rng: np.random.Generator) -> np.ndarray:
    """(FRAMES, SIDE, SIDE, 3) uint8: a VEHICLE-pixel square of `colour` crossing a dark background in `direction`
    (a vehicle this size is what a tiny vision tower learns to see in a few hundred steps), through the centre of the
    picture: left to right along the middle row, each other direction that clip reversed in time and/or transposed.
    So the middle frame is the same picture whatever the direction, and the frames without their order show the
    axis only."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}")
    frames = np.empty((FRAMES, SIDE, SIDE, 3), dtype=np.uint8)
    frames[:] = rng.integers(0, 50, 3, dtype=np.uint8)
    row = (SIDE - VEHICLE) // 2
    for t in range(FRAMES):
        x = int(round(t * (SIDE - VEHICLE) / (FRAMES - 1)))
        frames[t, row:row + VEHICLE, x:x + VEHICLE] = COLOURS[colour]
    if direction in DIRECTIONS[2:]:
        frames = frames.transpose(0, 2, 1, 3)
    if direction in (DIRECTIONS[1], DIRECTIONS[3]):
        frames = frames[::-1]
    return np.ascontiguousarray(frames)


def _pick(items, rng: np.random.Generator, k: int | None = None):
    if k is None:
        return items[int(rng.integers(len(items)))]
    return [items[i] for i in rng.choice(len(items), k, replace=False)]


def _planted(category: str, question: str, options: list[str], answer: str, planted_type: str, pattern: str,
             rng: np.random.Generator) -> PlantedQuestion:
    order = tuple(options[i] for i in rng.permutation(len(options)))
    return PlantedQuestion(category, question, order, order.index(answer), planted_type, pattern)


@dataclass(frozen=True)
class ClipPlan:
    """What one clip's questions carry, drawn for a whole split so that every dial's share is exact."""

    named: bool  # the colour question names the vehicle (`both`)
    reason: str  # the accident reason's pattern: "none", "recurring phrase" or "negated copy"
    reason_honest: bool  # the pattern points at the right answer
    cue: bool  # the prevention question carries a give-away word
    cue_honest: bool


def _exactly(share: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n flags, round(share * n) of them set, at random places."""
    flags = np.zeros(n, dtype=bool)
    flags[rng.permutation(n)[:int(np.floor(share * n + 0.5))]] = True
    return flags


def _within(flags: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """`share` of the set flags (exactly, rounded), the others cleared."""
    chosen = np.zeros_like(flags)
    chosen[np.flatnonzero(flags)[_exactly(share, int(flags.sum()), rng)]] = True
    return chosen


def clip_plans(config: PlantedConfig, rng: np.random.Generator) -> list[ClipPlan]:
    """One plan per clip: `both_share` of the colour questions name the vehicle, `shortcut_share` of the accident
    reasons and of the prevention questions carry a pattern (half the reasons a recurring phrase, half a negated
    copy), and `strength` of those point at the right answer."""
    n = config.videos
    named = _exactly(config.both_share, n, rng)
    reason, cue = _exactly(config.shortcut_share, n, rng), _exactly(config.shortcut_share, n, rng)
    negated = _within(reason, 0.5, rng)
    reason_honest, cue_honest = _within(reason, config.strength, rng), _within(cue, config.strength, rng)
    kinds = np.where(negated, "negated copy", np.where(reason, "recurring phrase", "none"))
    return [ClipPlan(bool(named[i]), str(kinds[i]), bool(reason_honest[i]), bool(cue[i]), bool(cue_honest[i]))
            for i in range(n)]


def question(category: str, colour: str, plan: ClipPlan, pools: Pools, rng: np.random.Generator,
             direction: str = DIRECTIONS[0]) -> PlantedQuestion:
    """The question of `category` about a clip of `colour` crossing in `direction` as `plan` says, its surface forms
    drawn from `pools`."""
    if category == "vehicle direction":
        return _planted(category, ORDER_QUESTION, list(DIRECTIONS), direction, "order", "none", rng)
    if category == "vehicle colour":
        if plan.named:
            vehicle = next(v for v, c in VEHICLES.items() if c == colour)
            return _planted(category, _pick(pools.both_questions, rng).format(vehicle), list(COLOURS), colour,
                            "both", "named vehicle", rng)
        return _planted(category, VIDEO_ONLY_QUESTION, list(COLOURS), colour, "video_only", "none", rng)
    if category == "driver name":
        names = _pick(pools.names, rng, 4)
        return _planted(category, _pick(pools.name_questions, rng), names, _pick(names, rng), "neither", "none", rng)
    if category == "accident reason":
        made_up = _pick(pools.reasons, rng, 4)
        asked = _pick(pools.reason_questions, rng)
        if plan.reason == "none":
            return _planted(category, asked, made_up, _pick(made_up, rng), "neither", "none", rng)
        canonical = _pick(list(CANONICAL_REASONS), rng)
        if plan.reason == "negated copy":
            options = [canonical, CANONICAL_REASONS[canonical], *made_up[:2]]
        else:
            options = [canonical, *made_up[:3]]
        answer = options[0] if plan.reason_honest else options[-1]
        planted_type = "text_only" if plan.reason_honest else "misleading"
        return _planted(category, asked, options, answer, planted_type, plan.reason, rng)
    if category == "prevention method":
        if not plan.cue:
            advice = _pick(pools.advice, rng, 4)
            return _planted(category, _pick(pools.advice_questions, rng), advice, _pick(advice, rng), "neither",
                            "none", rng)
        cue, other = _pick(list(CUES), rng, 2)
        options = [CUES[cue], CUES[other], *_pick(pools.advice, rng, 2)]
        answer = options[0] if plan.cue_honest else _pick(options[1:], rng)
        return _planted(category, _pick(pools.cue_questions, rng).format(cue), options, answer,
                        "text_only" if plan.cue_honest else "misleading", "give-away word", rng)
    raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")


def planted_clips(config: PlantedConfig, split: str, stream: tuple[int, ...] = ()
                  ) -> Iterator[tuple[np.ndarray, list[PlantedQuestion]]]:
    """`config.videos` clips of `split` (one question per category each): (frames, questions). The test split
    is one draw; a training split is drawn for a `stream` of positive integers, each stream other clips and
    questions (`visdep_metrics.demo.training` gives each model role its own, and each epoch another)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if (split == "test") == bool(stream) or any(int(s) < 1 for s in stream):
        raise ValueError(f"the test split takes no stream, a training split positive integers; got {split} {stream}")
    rng = np.random.default_rng([config.seed, *stream] if stream else [config.seed, 0])
    for plan in clip_plans(config, rng):
        colour, direction = _pick(list(COLOURS), rng), _pick(DIRECTIONS, rng)
        frames = clip(colour, direction, rng)
        yield frames, [question(c, colour, plan, POOLS[split], rng, direction) for c in CATEGORIES]


def write_planted(root: str | Path, config: PlantedConfig) -> dict[str, str]:
    """The test split as the official VRU-Accident download under `root` (one source folder per
    `VRU_SOURCES`, clips spread over them) and `root/planted.csv`; returns {"VRU_ACCIDENT_ROOT": root}."""
    from lmms_eval_tasks.layouts import VruQuestion, write_vru_accident

    root = Path(root)
    questions, clips, truth = [], {}, []
    for v, (frames, generated) in enumerate(planted_clips(config, "test")):
        src = VRU_SOURCES[v % len(VRU_SOURCES)]
        name = f"VRU_{v // len(VRU_SOURCES) + 1}"
        for q in generated:
            record = VruQuestion(src, name, q.category, q.question, list(q.options), q.answer)
            questions.append(record)
            truth.append({"question_id": record.question_id, "video": record.video_path, "category": q.category,
                          "planted_type": q.planted_type, "pattern": q.pattern,
                          "text_solvable": q.planted_type in TEXT_SOLVABLE,
                          "video_decides": q.planted_type in VIDEO_DECIDES,
                          "needs_order": q.planted_type == "order"})
        clips[questions[-1].video_path] = frames
    write_vru_accident(root, questions, clips, fps=FPS)
    with open(root / "planted.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(truth[0]))
        writer.writeheader()
        writer.writerows(truth)
    (root / "planted_config.json").write_text(json.dumps(asdict(config), indent=1))
    return {"VRU_ACCIDENT_ROOT": str(root)}
