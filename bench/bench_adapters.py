"""Speed of the visdep adapters against the naive reference, and against lmms-eval's `llava_hf`.

Video questions on the synthetic benchmarks (32-frame mp4s / frame folders at the official paths),
scored by tiny random-weight checkpoints sized so model compute dominates (`build_tiny(size="bench")`:
16 frames are about 1,000 visual tokens, fewer than real checkpoints use). In one run it times

- the adapter (`visdep_vlm`: shared prefix, batching, each video decoded once, decoding timed) and
- the naive reference (one full forward per option, no cache, no batching; frames decoded
  beforehand and not timed, which favours the reference),

on three question sets: one question per video with K = 4 (VRU-Accident) and K = 5 (MM-AU frame
folders), and the VRU-Accident layout of six questions per video (K = 4), letter and option scoring.
Targets: letter scoring >= 0.8 K times faster than naive with one question per video, >= 10 times
with six per video; exactly one decode per video (counted); values equal within 1e-4.

Peer: lmms-eval's own `llava_hf` on the tiny LLaVA-OneVision checkpoint (it imports `decord`). Each
input route it has is tried on one question and its outcome printed; its per-request procedure
(decode the video, encode, one full forward, for every option) is then timed against the adapter.

    python bench/bench_adapters.py [--videos 3] [--max-frames 16] [--batch-size 8] [--repeats 1] [--threads 1]

Exits non-zero if a value or decode count is wrong; timing targets are printed, not enforced.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import torch
from loguru import logger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the naive reference lives in tests/helpers

from lmms_eval_tasks import tasks
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.adapter import VisdepVLM
from model_adapters.frames import FrameSource, read_frames
from tests.helpers.naive import naive_option_scores
from visdep_metrics.demo.fixtures import write_fixtures
from visdep_metrics.demo.tiny import build_tiny


def requests_for(model, docs: list[dict], to_visual=tasks.doc_to_visual_video) -> list:
    """lmms-eval's multiple_choice requests (K per document), wired to the model like the evaluator does."""
    from lmms_eval.api.instance import Instance

    model.task_dict = {"bench": {"test": docs}}
    return [Instance("loglikelihood", (tasks.doc_to_text(d), c, to_visual, i, "bench", "test"), k,
                     metadata={"task": "bench", "doc_id": i, "repeats": 1})
            for i, d in enumerate(docs) for k, c in enumerate(tasks.doc_to_choice(d))]


PEER_TEMPLATE = (  # LLaVA-OneVision's ChatML for string contents: llava_hf sends the user turn as one string,
    # which the checkpoint's own template (a list of typed contents) renders empty.
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + ' ' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
FRAMES_PER_VIDEO = 32


def write_videos(docs: list[dict]) -> None:
    """Give every question's video FRAMES_PER_VIDEO frames (the fixtures' are shorter than 16)."""
    from lmms_eval_tasks.layouts import write_frame_folder, write_mp4

    for doc in docs:
        path = tasks.resolve_video(doc["benchmark"], doc["video"])
        rng = np.random.default_rng(zlib.crc32(str(doc["video"]).encode()))
        frames = np.repeat(rng.integers(0, 256, (FRAMES_PER_VIDEO, 16, 16, 3), dtype=np.uint8), 8, axis=1)
        frames = np.ascontiguousarray(np.repeat(frames, 8, axis=2))  # 128 x 128 blocky frames
        if path.suffix == ".mp4":
            write_mp4(path, frames)
        else:
            write_frame_folder(path, frames, ".jpg", 6)


def question_sets(n_videos: int) -> dict[str, tuple[list[dict], int]]:
    """{name: (questions, K)}."""
    vru = [q.document() for q in load_benchmark("vru_accident")]
    by_video: dict[str, list[dict]] = {}
    for q in vru:
        by_video.setdefault(q["video"], []).append(q)
    videos = list(by_video)[:n_videos]
    mmau = [q.document() for q in load_benchmark("mmau") if q.source == "CAP"][:n_videos]
    write_videos([by_video[v][0] for v in videos] + mmau)
    return {"one per video, K=4 (VRU-Accident)": ([by_video[v][0] for v in videos], 4),
            "one per video, K=5 (MM-AU frames)": (mmau, 5),
            "six per video, K=4 (VRU layout)": ([q for v in videos for q in by_video[v]], 4)}


def time_adapter(model: VisdepVLM, docs: list[dict], to_visual=tasks.doc_to_visual_video) -> tuple[float, list, dict]:
    model.engine.frames = FrameSource(model.engine.frames.max_frames)  # cold cache: decoding is timed and counted
    start = time.perf_counter()
    scores = model.loglikelihood(requests_for(model, docs, to_visual))
    return time.perf_counter() - start, scores, dict(model.engine.frames.decodes)


def time_naive(model: VisdepVLM, docs: list[dict], videos: dict[str, tuple]) -> tuple[float, list]:
    start = time.perf_counter()
    scores = []
    for d in docs:
        scores += naive_option_scores(model.model, model.engine.processor, tasks.doc_to_text(d), tasks.doc_to_choice(d),
                                      videos[tasks.doc_to_visual_video(d)[0]])
    return time.perf_counter() - start, scores


def bench_sets(model: VisdepVLM, sets: dict, max_frames: int, repeats: int) -> bool:
    """Print the table; True when every value matches the reference and every video was decoded once."""
    ok = True
    print(f"\n{'question set':36} {'scoring':8} {'adapter s':>9} {'naive s':>8} {'ratio':>6} {'target':>7}  "
          f"max|diff|  decodes/video")
    for name, (docs, k) in sets.items():
        paths = {tasks.doc_to_visual_video(d)[0] for d in docs}
        videos = {p: read_frames(Path(p), max_frames) for p in paths}
        for scoring in ("letter", "option"):
            os.environ["VISDEP_SCORING"] = scoring
            adapter_s, naive_s = [], []
            for _ in range(repeats):  # alternate, keep the fastest of each: the machine may be shared
                seconds, got, decodes = time_adapter(model, docs)
                adapter_s.append(seconds)
                seconds, ref = time_naive(model, docs, videos)
                naive_s.append(seconds)
            ratio = min(naive_s) / min(adapter_s)
            diff = float(np.max(np.abs(np.array([g[0] for g in got]) - np.array([r[0] for r in ref]))))
            once = decodes == {p: 1 for p in paths}
            ok &= diff <= 1e-4 and once
            target = 0.0 if scoring == "option" else (10.0 if name.startswith("six") else 0.8 * k)
            met = (">=" if ratio >= target else "< ") + f"{target:.1f}" if target else ""
            print(f"{name:36} {scoring:8} {min(adapter_s):9.2f} {min(naive_s):8.2f} {ratio:6.2f} {met:>7}  "
                  f"{diff:.1e}    {'1 (each)' if once else decodes}")
    return ok


def bench_llava_hf(path: Path, ours: VisdepVLM, docs: list[dict], max_frames: int, repeats: int) -> None:
    """lmms-eval's llava_hf on the same questions and checkpoint, and its procedure (per option: decode
    the video, encode, one full forward) timed against visdep_vlm."""
    from PIL import Image

    def frames_as_images(doc: dict) -> list:
        frames, _ = read_frames(Path(tasks.doc_to_visual_video(doc)[0]), max_frames)
        return [Image.fromarray(f) for f in frames]

    os.environ["VISDEP_SCORING"] = "letter"
    print(f"\nlmms-eval's llava_hf, tiny LLaVA-OneVision checkpoint, the {len(docs)} questions of one video, letter:")
    try:
        from lmms_eval.models.simple.llava_hf import LlavaHf

        peer = LlavaHf(pretrained=str(path), device="cpu", device_map="cpu", dtype="float32",
                       chat_template=PEER_TEMPLATE)
        routes = (("the task's mp4 path", tasks.doc_to_visual_video),
                  (f"the {max_frames} frames as images", frames_as_images),
                  ("no visual (blind)", tasks.doc_to_visual_blind))
        for label, to_visual in routes:
            try:
                peer.loglikelihood(requests_for(peer, docs[:1], to_visual))
                print(f"  {label}: runs")
            except Exception as e:  # noqa: BLE001 - report what the peer does with this input
                print(f"  {label}: fails, {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    except ImportError as e:
        print(f"  not importable: {e} (llava_hf imports decord: pip install decord)")

    def per_option_loop() -> None:  # what llava_hf's loglikelihood does per request
        for doc in docs:
            for choice in tasks.doc_to_choice(doc):
                video = read_frames(Path(tasks.doc_to_visual_video(doc)[0]), max_frames)
                naive_option_scores(ours.model, ours.engine.processor, tasks.doc_to_text(doc), [choice], video)

    loop_s, ours_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        per_option_loop()
        loop_s.append(time.perf_counter() - start)
        ours_s.append(time_adapter(ours, docs)[0])
    print(f"  its procedure (per option: decode, encode, full forward): {min(loop_s):.2f} s; "
          f"visdep_vlm {min(ours_s):.2f} s -> ratio {min(loop_s) / min(ours_s):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=3, help="videos per question set")
    parser.add_argument("--max-frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1, help="timings per measurement; the fastest is kept")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: ratios stay stable when other processes share the CPU)")
    args = parser.parse_args()
    logger.remove()
    logger.add(lambda m: None)  # the adapters log per call; the table is the output
    root = Path(tempfile.mkdtemp(prefix="bench_adapters_"))
    os.environ.update(write_fixtures(root / "benchmarks", videos=False, scale=max(1, -(-args.videos // 8))))
    torch.set_num_threads(args.threads)
    sets = question_sets(args.videos)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.videos} videos per set, "
          f"{args.max_frames} frames, batch_size {args.batch_size}")
    ok = True
    for kind in ("qwen2_5_vl", "llava_onevision"):
        path = build_tiny(kind, root / kind, size="bench")
        model = VisdepVLM(pretrained=str(path), max_frames=args.max_frames, device="cpu", dtype="float32",
                          batch_size=args.batch_size)
        model.loglikelihood(requests_for(model, sets["six per video, K=4 (VRU layout)"][0][:1]))  # warm-up
        print(f"\n== visdep_vlm on tiny {kind} (size=bench) ==", end="")
        ok &= bench_sets(model, sets, args.max_frames, args.repeats)
        if kind == "llava_onevision":
            # one video's six questions: llava_hf's 16 images are ~2,000 tokens a forward
            bench_llava_hf(path, model, sets["six per video, K=4 (VRU layout)"][0][:6], args.max_frames, args.repeats)
    if not ok:
        raise SystemExit("a value differed from the naive reference by more than 1e-4, or a video was decoded "
                         "more than once")


if __name__ == "__main__":
    main()
