"""Synthetic benchmark downloads, for tests and the offline demo: the content (questions with each format's
quirks, and clips); `lmms_eval_tasks.layouts` lays them out as their owners distribute them.

`write_fixtures(root)` writes small copies of all four traffic benchmarks (annotation files, mp4 videos made with
PyAV, MM-AU frame folders) and returns the environment variables that point the tasks at them;
`write_general_fixtures(root)` the three general VideoQA benchmarks' Hugging Face records and videos. Every video
shows a different pattern, so a model that sees frames sees different inputs for different videos.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmms_eval_tasks.layouts import (
    AccidentBenchQuestion,
    CapQuestion,
    DadaQuestion,
    TrafficQaRecord,
    VruQuestion,
    write_accidentbench,
    write_hub_split,
    write_mmau,
    write_mp4,
    write_trafficqa,
    write_vru_accident,
)
from lmms_eval_tasks.traffic import VRU_SOURCES

CAUSES = ["pedestrian runs the red light.", "the car driver is in distracted driving.", "the car is out of control.",
          "the car ahead decelerates or stops suddenly.", "the car drives too fast with short braking distance.",
          "the road is slippery.", "a cyclist crosses the road suddenly."]
VRU_QUESTIONS = {
    "weather and light": ("What's the weather and lighting?",
                          ["sunny day", "cloudy night", "stormy day", "rainy evening"]),
    "location": ("Where did the accident happen?", ["rural", "urban", "suburban", "industrial"]),
    "road type": ("What type of road is shown?", ["roundabout", "crossroad", "T-junction", "dead-end"]),
    "accident type": ("What kind of accident occurred?", ["bicycle collides with parked car",
                                                          "pedestrian was hit by surrounding vehicle",
                                                          "ego-car hits a crossing pedestrian",
                                                          "motorcycle crashes into a tree"]),
    "accident reason": ("Why did the accident happen?", ["The ego-car's view is blocked, and there's no time to brake",
                                                         "Cyclist does not notice the coming vehicles.",
                                                         "poor road conditions caused the crash",
                                                         "the pedestrian, distracted, crosses late"]),
    "prevention method": ("How could this accident be prevented?", ["Drivers should slow down",
                                                                    "Pedestrian should use designated crosswalk",
                                                                    "Cyclists should wear bright colors",
                                                                    "Bus drivers should check their mirrors"]),
}
VRU_SUFFIX = " Choose the correct option (A, B, C, or D) without any explanations."


def _frames(seed: int, n: int = 8, size: int = 64) -> np.ndarray:
    """n frames (n, size, size, 3) uint8: a moving bar whose colour and speed depend on the seed."""
    rng = np.random.default_rng(seed)
    colour = rng.integers(40, 256, 3, dtype=np.uint8)
    background = rng.integers(0, 60, 3, dtype=np.uint8)
    step = int(rng.integers(2, 8))
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    out[:] = background
    for t in range(n):
        x = (t * step) % (size - 8)
        out[t, :, x:x + 8] = colour
    return out


def write_mmau_fixture(root: Path, n_cap: int = 6, n_dada: int = 4, videos: bool = True) -> None:
    """CAP answers as strings; DADA float cells and video numbers repeated across accident types; jpg / png frame
    folders."""
    cap, dada = [], []
    for i in range(n_cap):
        cap.append(CapQuestion(str(7800 + i), [1, 11, 12, 43, 44, 62][i % 6], f"{1000 + i:06d}",
                               "what is the cause of the accident?",
                               [CAUSES[(i + k) % len(CAUSES)] for k in range(5)], i % 5))
    for i in range(n_dada):
        dada.append(DadaQuestion(93 + i // 2, [11, 43][i % 2], "What is the cause of the accident?",  # 093 twice
                                 [CAUSES[(i + 2 + k) % len(CAUSES)].capitalize().rstrip(".") for k in range(5)],
                                 (i + 3) % 5, (1.0, 2.0, 3.0, 8.0)))
    frames = {}
    if videos:
        frames = {q.frames_folder: _frames(100 + i) for i, q in enumerate(cap)}
        frames |= {q.frames_folder: _frames(200 + i) for i, q in enumerate(dada)}
    write_mmau(root, cap, dada, frames)


def _vru_options(options: list[str], style: int) -> str:
    """The official comma-joined string, including the two broken spacings found in the real files."""
    parts = [f"{letter}. {o}" for letter, o in zip("ABCD", options, strict=True)]
    if style == 1:
        parts[1] = "B." + options[1]  # 'B.Cyclist ...'
    if style == 2:
        return parts[0] + ".,  " + ", ".join(parts[1:])  # '.,  B.'
    return ", ".join(parts)


def write_vru_fixture(root: Path, videos_per_source: int = 2, videos: bool = True) -> None:
    """VRU-Accident's layout, six questions per video, GT a letter, with the official strings' broken spacings."""
    questions, clips, n = [], {}, 0
    for s, src in enumerate(VRU_SOURCES):
        for v in range(1, videos_per_source + 1):
            for c, (category, (question, pool)) in enumerate(VRU_QUESTIONS.items()):
                shift = (n + c) % 4
                opts = pool[shift:] + pool[:shift]
                if category == "accident reason" and v == 2 and s == 0:
                    opts[3] = opts[1]  # two identical option texts, as in CAP_DATA VRU_2
                questions.append(VruQuestion(src, f"VRU_{v}", category, question + VRU_SUFFIX, opts, (n + c) % 4,
                                             options_text=_vru_options(opts, (n + c) % 3)))
            if videos:
                clips[questions[-1].video_path] = _frames(300 + n)
            n += 1
    write_vru_accident(root, questions, clips)


def write_trafficqa_fixture(root: Path, n_questions: int = 8, videos: bool = True) -> None:
    """Two questions per video; some options padded with "" (3-option and 2-option questions)."""
    records, clips = [], {}
    for i in range(n_questions):
        options = ["Head-on collision", "No accident happened.", "The vehicle collided with road infrastructure.",
                   "Others"]
        answer = i % 4
        if i % 3 == 1:  # a padded 3-option question
            options[(answer + 1) % 4] = ""
        if i % 4 == 2:  # a padded 2-option question
            for pad in [(answer + 1) % 4, (answer + 2) % 4]:
                options[pad] = ""
        vid = f"b_clip_{i // 2:03d}.mp4"
        records.append(TrafficQaRecord(9000 + i, 20000 + i // 2, vid, 1 + 2 * (i % 2),
                                       "What type of accident happened?", "UAFRCI"[i % 6], options, answer))
        if videos and i % 2 == 0:
            clips[f"raw_videos/{vid}"] = _frames(400 + i)
    write_trafficqa(root, records, clips)


def write_accidentbench_fixture(root: Path, per_file: int = 2, videos: bool = True) -> None:
    """Shuffled options carrying their own letter (lowercase in one file), K from 2 to 12, scene names without
    extension."""
    rng = np.random.default_rng(5)
    questions, clips, n = [], {}, 0
    for length in ("short", "long"):
        for level, k in (("easy", 2), ("hard", 12)):
            for style in ("temporal_causal_reasoning", "spatial_reasoning"):
                for _ in range(per_file):
                    kk = k if n % 2 == 0 else max(2, k // 2)
                    letters = "ABCDEFGHIJKL"[:kk]
                    if length == "long" and level == "hard":
                        letters = letters.lower()
                    texts = [f"[{2 * j},{2 * j + 1}] vehicles" for j in range(kk)]
                    order = rng.permutation(kk)
                    question = AccidentBenchQuestion(length, level, n, f"land_space_{length}", f"{n:06d}", style,
                                                     "How many vehicles are involved?", letters[n % kk].upper(),
                                                     [f"{letters[j]}. {texts[j]}" for j in order])
                    questions.append(question)
                    if videos:
                        clips[question.video_path] = _frames(500 + n)
                    n += 1
    write_accidentbench(root, questions, clips)


def write_fixtures(root: str | Path, videos: bool = True, scale: int = 1) -> dict[str, str]:
    """Write all four synthetic benchmarks under `root`; return {ENV_VAR: benchmark root}.

    `scale` multiplies the number of questions (and videos) of every benchmark."""
    root = Path(root)
    env = {"MMAU_ROOT": root / "mm_au", "VRU_ACCIDENT_ROOT": root / "vru_accident",
           "TRAFFICQA_ROOT": root / "trafficqa", "ACCIDENTBENCH_ROOT": root / "accidentbench"}
    write_mmau_fixture(env["MMAU_ROOT"], n_cap=6 * scale, n_dada=4 * scale, videos=videos)
    write_vru_fixture(env["VRU_ACCIDENT_ROOT"], videos_per_source=2 * scale, videos=videos)
    write_trafficqa_fixture(env["TRAFFICQA_ROOT"], n_questions=8 * scale, videos=videos)
    write_accidentbench_fixture(env["ACCIDENTBENCH_ROOT"], per_file=2 * scale, videos=videos)
    return {k: str(v) for k, v in env.items()}


# --------------------------------------------------------------------------- general VideoQA (Hugging Face records)
VIDEOMME_DOMAINS = ["Knowledge", "Film & Television", "Sports Competition", "Life Record"]
VIDEOMME_TASKS = ["Counting Problem", "Action Reasoning", "Object Recognition", "Temporal Perception"]
MLVU_TYPES = ["plotQA", "needle", "ego", "count", "order", "anomaly_reco", "topic_reasoning"]


def write_videomme(annotations: Path, videos: Path | None, n_videos: int = 4) -> None:
    """lmms-eval/Video-MME's test parquet (three questions per video, options "A. ...", answer a letter) and
    `data/<videoID>.mp4` videos; the last video is a Matroska file, the one before an upper-case .MP4, as
    lmms-eval's own task also accepts."""
    rows = []
    for v in range(n_videos):
        video_id = f"vid{v:03d}xYz"
        for q in range(3):
            n = 3 * v + q
            answer = "ABCD"[n % 4]
            options = [f"{letter}. {CAUSES[(n + k) % len(CAUSES)].rstrip('.')}." for k, letter in enumerate("ABCD")]
            rows.append({"video_id": f"{v + 1:03d}", "duration": ["short", "medium", "long"][v % 3],
                         "domain": VIDEOMME_DOMAINS[v % 4], "sub_category": "Humanity & History",
                         "url": f"https://www.youtube.com/watch?v={video_id}", "videoID": video_id,
                         "question_id": f"{v + 1:03d}-{q + 1}", "task_type": VIDEOMME_TASKS[n % 4],
                         "question": f"What happens in part {q + 1} of the video?", "options": options,
                         "answer": answer})
        if videos is not None:
            suffix = ".mkv" if v == n_videos - 1 else ".MP4" if v == n_videos - 2 else ".mp4"
            write_mp4(videos / "data" / f"{video_id}{suffix}", _frames(600 + v, n=12))
    write_hub_split(annotations, "videomme", rows)


def write_longvideobench(annotations: Path, videos: Path | None, n_questions: int = 6) -> None:
    """longvideobench/LongVideoBench's validation parquet: option0..4 with unused options "N/A" (K 4 or 5),
    correct_choice an index, video_path under `videos/` (one starting with '@', as some real ids do)."""
    rows = []
    for i in range(n_questions):
        k = 5 if i % 2 else 4
        video_path = f"@clip{i // 2}.mp4" if i < 2 else f"clip{i // 2}.mp4"
        options = {f"option{j}": (CAUSES[(i + j) % len(CAUSES)] if j < k else "N/A") for j in range(5)}
        rows.append({"video_id": video_path.removesuffix(".mp4"), "id": f"{video_path.removesuffix('.mp4')}_{i}",
                     "video_path": video_path, "subtitle_path": f"{video_path.removesuffix('.mp4')}_en.json",
                     "correct_choice": (2 * i + 1) % k, "question": f"What does the driver do in scene {i}?",
                     **options, "duration": [9.5, 45.0, 420.0][i % 3], "duration_group": [15, 60, 600][i % 3],
                     "question_category": ["S2E", "T3O", "TAA"][i % 3], "topic_category": "NP-News-Programs",
                     "starting_timestamp_for_subtitles": 0.0})
        if videos is not None and i % 2 == 0:
            write_mp4(videos / "videos" / video_path, _frames(700 + i, n=10))
    write_hub_split(annotations, "longvideobench", rows)


def write_mlvu(annotations: Path, videos: Path | None) -> None:
    """sy1998/MLVU_dev's test parquet: one question per multiple-choice task type, `question` repeating the
    candidates as "(A) ..." lines, `answer` a letter; plus one open-ended row without candidates."""
    rows = []
    for i, task_type in enumerate(MLVU_TYPES):
        candidates = [CAUSES[(i + j) % len(CAUSES)] for j in range(4)]
        question = f"What is the cause in the {task_type} clip?\n" + "".join(
            f"({letter}) {c}\n" for letter, c in zip("ABCD", candidates, strict=True))
        rows.append({"video_name": f"{task_type}_{i}.mp4", "duration": 120.0 + i, "question": question,
                     "candidates": candidates, "answer": "ABCD"[i % 4], "task_type": task_type,
                     "question_id": f"{task_type}_{i}"})
        if videos is not None:
            write_mp4(videos / f"{task_type}_{i}.mp4", _frames(800 + i, n=10))
    rows.append({"video_name": "summary_0.mp4", "duration": 300.0, "question": "Summarize the video.",
                 "candidates": None, "answer": "A car crashes.", "task_type": "summary", "question_id": "summary_0"})
    write_hub_split(annotations, "mlvu", rows)


def write_general_fixtures(root: str | Path, videos: bool = True) -> dict[str, str]:
    """Video-MME, LongVideoBench and MLVU dev as their Hugging Face records (parquet files laid out as in the
    dataset repositories) under `root/annotations`, and their videos where lmms-eval's own tasks unpack them
    under `root/hf_home` (`HF_HOME`). Returns the environment: the `*_ANNOTATIONS` variables and `HF_HOME`."""
    root = Path(root)
    hf_home = root / "hf_home"
    write_videomme(root / "annotations" / "videomme", hf_home / "videomme" if videos else None)
    write_longvideobench(root / "annotations" / "longvideobench",
                         hf_home / "datasets" / "longvideobench" if videos else None)
    write_mlvu(root / "annotations" / "mlvu", hf_home / "mlvu" if videos else None)
    hf_home.mkdir(parents=True, exist_ok=True)
    return {"VIDEOMME_ANNOTATIONS": str(root / "annotations" / "videomme"),
            "LONGVIDEOBENCH_ANNOTATIONS": str(root / "annotations" / "longvideobench"),
            "MLVU_ANNOTATIONS": str(root / "annotations" / "mlvu"), "HF_HOME": str(hf_home)}
