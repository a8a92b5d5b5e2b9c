"""Decoding ahead of the model: serial against pipelined scoring of 720p videos, in one run.

Generated clips at 1280x720, 30 fps (x264 "veryfast", two B-frames: the size of VRU-Accident's DoTA videos)
and MM-AU-style 720p JPEG frame folders (`000001.jpg`, ...), hard-linked to as many distinct paths as asked
(the frame cache is keyed by path: each is decoded); a bench-size tiny VLM (`build_tiny(size="bench")`,
about 1,000 visual tokens per 16-frame video) on `--threads` torch threads, `--questions` questions per
video (six: VRU-Accident's layout, and about as much compute per video as decoding one on a core). It prints

- GIL: the share of the time a pure-Python loop waits for the GIL beside a worker thread that decodes
  (PyAV), runs the processor, or both (Linux schedstat: time blocked, so other processes' load does not
  count); beside a pure-Python worker, which holds the GIL whenever it runs, about 50%;
- decode throughput (decode, sample, processor; no model) against the number of workers;
- per question set: decode-only in the loop (the serial path's) and with the pipeline's workers,
  compute-only (inputs prepared beforehand), serial and pipelined wall times, pipelined over
  max(decode-only with workers, compute-only) (target <= 1.2), the overlap efficiency
  ((decode + compute - pipelined) / min(decode, compute): how much of the smaller is hidden), and
  whether the samples equal the serial ones bit for bit;
- peak resident memory per quarter of `--memory-videos` short 720p clips scored pipelined (one question
  each, so decoding runs ahead of the model and the window fills), and the most prepared bytes the pipeline
  held ahead: flat, as the prefetch is bounded.

    python bench/bench_pipeline.py [--videos 12] [--folders 6] [--memory-videos 200] [--questions 6]
        [--workers auto] [--threads 1] [--device auto] [--kind qwen2_5_vl] [--seconds 10]

`--device auto` takes CUDA when there is one: the same command measures a GPU machine (raise --videos there).
Exits non-zero when pipelined samples differ from the serial ones on the CPU (on CUDA it prints the difference).
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from loguru import logger
from tqdm import tqdm

from model_adapters import scoring
from model_adapters.adapter import VisdepVLM
from model_adapters.frames import FrameSource, read_frames
from model_adapters.prefetch import Prefetch, PreparedInOrder, cores_per_rank, decoder_threads_for, default_workers
from model_adapters.presentation import user_message
from visdep_metrics.demo.tiny import build_tiny

WIDTH, HEIGHT, FPS = 1280, 720, 30
MAX_FRAMES = 16
OPTIONS = ["a car turns left", "a cyclist crosses the street", "the light turns red", "nothing happens"]


def _no_bar(*args, **kwargs) -> tqdm:
    return tqdm(*args, **{**kwargs, "disable": True})


# --------------------------------------------------------------------------- videos
def _frames(seconds: float, seed: int):
    """A blocky random texture panning right, with bright bands moving down: motion x264 has to encode."""
    rng = np.random.default_rng(seed)
    texture = np.repeat(np.repeat(rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8), 8, 0), 8, 1)
    rows = np.arange(HEIGHT)
    for t in range(int(seconds * FPS)):
        frame = np.roll(texture, 6 * t, axis=1)
        frame[((rows + 5 * t) // 45) % 6 == 0] //= 3
        yield frame


def write_clip(path: Path, seconds: float, seed: int) -> None:
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=FPS, options={"preset": "veryfast", "bf": "2", "crf": "23"})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for frame in _frames(seconds, seed):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())


def write_jpeg_folder(folder: Path, seconds: float, seed: int) -> None:
    """MM-AU's layout: `000001.jpg`, ... (quality 90)."""
    from PIL import Image

    folder.mkdir(parents=True)
    for t, frame in enumerate(_frames(seconds, seed), start=1):
        Image.fromarray(frame).save(folder / f"{t:06d}.jpg", quality=90)


def linked_copies(sources: list[Path], n: int, root: Path) -> list[Path]:
    """`n` distinct paths, hard links to `sources` in turn (a folder: a folder of links)."""
    root.mkdir(parents=True)
    out = []
    for i in range(n):
        source = sources[i % len(sources)]
        target = root / f"{i:04d}{source.suffix}"
        if source.is_dir():
            target.mkdir()
            for f in source.iterdir():
                os.link(f, target / f.name)
        else:
            os.link(source, target)
        out.append(target)
    return out


# --------------------------------------------------------------------------- requests and runs
def requests_for(model: VisdepVLM, videos: list[Path], per_video: int) -> list:
    """lmms-eval's multiple_choice requests (four letters per question), `per_video` questions per video."""
    from lmms_eval.api.instance import Instance

    docs = [{"video": str(v), "question": f"Question {q} about this clip: what happens next?"}
            for v in videos for q in range(per_video)]
    model.task_dict = {"bench": {"test": docs}}
    to_visual = lambda doc: [doc["video"]]  # noqa: E731
    out = []
    for i, doc in enumerate(docs):
        context = "\n".join([doc["question"]] + [f"{'ABCD'[k]}. {o}" for k, o in enumerate(OPTIONS)]
                            + ["Answer with the option's letter from the given choices directly."])
        out += [Instance("loglikelihood", (context, letter, to_visual, i, "bench", "test"), k,
                         metadata={"task": "bench", "doc_id": i, "repeats": 1}) for k, letter in enumerate("ABCD")]
    return out


def configure(model: VisdepVLM, workers: int) -> None:
    """Cold frame cache, `workers` decode workers (as `decode_workers=` would set them)."""
    model.engine.prefetch = Prefetch.of(workers)
    model.engine.frames = FrameSource(MAX_FRAMES, decoder_threads=decoder_threads_for(workers))


def timed_run(model: VisdepVLM, requests: list, workers: int) -> tuple[float, list, str]:
    """(wall seconds, samples, the scoring log line)."""
    configure(model, workers)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO",
                      filter=lambda r: r["message"].startswith("visdep scoring:"))
    try:
        start = time.perf_counter()
        samples = model.loglikelihood(requests)
        return time.perf_counter() - start, samples, (lines or [""])[-1]
    finally:
        logger.remove(sink)


def prefix_text(model: VisdepVLM) -> str:
    prompt = model.engine.processor.apply_chat_template(user_message("x", True), add_generation_prompt=True,
                                                        tokenize=False)
    return prompt[: prompt.rfind(model.engine.family.video_end) + len(model.engine.family.video_end)]


def decode_only(model: VisdepVLM, videos: list[Path], workers: int) -> float:
    """Seconds to prepare every video (decode, sample, processor) with `workers` workers and no model."""
    configure(model, workers)
    text = prefix_text(model)
    start = time.perf_counter()
    prepare = [partial(model.engine._prepare_prefix, str(v), text) for v in videos]
    with PreparedInOrder(prepare, model.engine.prefetch) as prepared:
        for _ in videos:
            prepared.take()
    return time.perf_counter() - start


def compute_only(model: VisdepVLM, requests: list, videos: list[Path], sources: list[Path]) -> float:
    """Seconds of the scoring with every video's inputs prepared beforehand (no decoding in the timed run)."""
    configure(model, 0)
    text = prefix_text(model)
    ready = {str(s): model.engine._prepare_prefix(str(s), text) for s in sources}
    source_of = {str(v): str(sources[i % len(sources)]) for i, v in enumerate(videos)}
    model.engine._prepare_prefix = lambda video, _text: ready[source_of[video]]
    try:
        start = time.perf_counter()
        model.loglikelihood(requests)
        return time.perf_counter() - start
    finally:
        del model.engine._prepare_prefix  # the class's method again


def samples_differ(a: list, b: list) -> float | None:
    """None when equal bit for bit, else the largest difference of a loss."""
    if a == b:
        return None
    return max(abs(x[0] - y[0]) for x, y in zip(a, b, strict=True))


def bench_set(name: str, model: VisdepVLM, videos: list[Path], sources: list[Path], per_video: int, workers: int,
              ) -> bool:
    """Print the times of one question set; True when the pipelined samples equal the serial ones bit for bit."""
    model.loglikelihood(requests_for(model, videos[:1], 1))  # warm-up
    requests = requests_for(model, videos, per_video)
    decode_serial = decode_only(model, videos, 0)
    decode_workers = decode_only(model, videos, workers)
    compute = compute_only(model, requests, videos, sources)
    serial_s, serial, _ = timed_run(model, requests, 0)
    pipelined_s, pipelined, line = timed_run(model, requests, workers)
    differ = samples_differ(serial, pipelined)
    bound = max(decode_workers, compute)
    hidden = (decode_workers + compute - pipelined_s) / min(decode_workers, compute)

    def row(label: str, seconds: float, note: str = "") -> None:
        print(f"  {label:44} {seconds:8.2f} s {seconds / len(videos):7.3f} s/video  {note}")

    print(f"\n{name}: {len(videos)} videos, {per_video} questions each (K = 4, letters)")
    row("decode-only, in the loop (FFmpeg's threads)", decode_serial)
    row(f"decode-only, {workers} worker(s)", decode_workers)
    row("compute-only (inputs prepared beforehand)", compute)
    row("serial", serial_s, f"decode-only in the loop + compute-only = {decode_serial + compute:.2f} s")
    row(f"pipelined, {workers} worker(s)", pipelined_s,
        f"{pipelined_s / bound:.2f} x max(decode-only with workers, compute-only) (target <= 1.20); "
        f"{serial_s / pipelined_s:.2f}x faster than serial")
    print(f"  overlap efficiency: {hidden:.0%} of the smaller of decode and compute hidden")
    print(f"  log: {line}")
    print("  samples equal to the serial run:", "bit for bit" if differ is None else f"NO, max |diff| {differ:.3g}")
    return differ is None


# --------------------------------------------------------------------------- throughput, GIL, memory
def throughput(model: VisdepVLM, videos: list[Path], worker_counts: list[int], seconds: float) -> None:
    """Videos per second prepared by each number of workers, over at least three videos per worker."""
    print(f"\ndecode throughput (decode, sample {MAX_FRAMES} frames, processor; no model), 720p H.264 {seconds:g} s "
          "clips:")
    print(f"  {'workers':>7} {'decoder threads':>15} {'videos':>6} {'s':>7} {'videos/s':>9}")
    for w in worker_counts:
        n = min(len(videos), max(8, 3 * w))
        took = decode_only(model, videos[:n], w)
        print(f"  {w:7d} {decoder_threads_for(w) or 'FFmpeg':>15} {n:6d} {took:7.2f} {n / took:9.2f}")


GIL_WORK = {"none": "nothing (no worker thread)",
            "python": "a pure-Python loop (holds the GIL whenever it runs)",
            "decode": "PyAV: decode, sample 16 frames to RGB",
            "processor": "the processor on 16 decoded frames",
            "both": "both: a prefix's CPU part"}


def _schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for a CPU) of the calling thread, from Linux's schedstat."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        on_cpu, waiting, _ = map(int, f.read().split())
    return on_cpu, waiting


def gil_wait_share(step, seconds: float) -> float:
    """The share of its time a pure-Python loop on this thread spends waiting for the GIL while another thread
    repeats `step` (None: no other thread), for `seconds`. Its wall time is time on a CPU, time runnable but
    waiting for a CPU (other processes' load) and time blocked; a loop that never sleeps blocks only on the GIL,
    so blocked = wall - on CPU - waiting for a CPU, and the share is blocked / (blocked + on CPU), whatever else
    the machine runs."""
    stop = threading.Event()

    def repeat() -> None:
        while not stop.is_set():
            step()

    worker = None
    if step is not None:
        step()  # warm
        worker = threading.Thread(target=repeat)
        worker.start()
        time.sleep(0.2)
    try:
        cpu0, wait0 = _schedstat()
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            pass
        wall = time.perf_counter() - start
        cpu1, wait1 = _schedstat()
    finally:
        stop.set()
        if worker is not None:
            worker.join()
    on_cpu = (cpu1 - cpu0) / 1e9
    blocked = max(0.0, wall - on_cpu - (wait1 - wait0) / 1e9)
    return blocked / (blocked + on_cpu)


def gil_table(model: VisdepVLM, path: Path, seconds: float) -> None:
    processor = copy.deepcopy(model.engine.processor)  # the workers' own copy, as in the pipeline
    text = prefix_text(model)
    decoded = read_frames(path, MAX_FRAMES, decoder_threads=1)

    def run(kind: str) -> None:
        frames, metadata = decoded if kind == "processor" else read_frames(path, MAX_FRAMES, decoder_threads=1)
        if kind != "decode":
            processor(text=[text], videos=[frames], video_metadata=[metadata], do_sample_frames=False,
                      return_tensors="pt", add_special_tokens=False)

    steps = {"none": None, "python": lambda: sum(range(100_000)), "decode": partial(run, "decode"),
             "processor": partial(run, "processor"), "both": partial(run, "both")}
    print(f"\nGIL: the share of {seconds:g} s a pure-Python loop waits for the GIL beside a thread doing ... "
          "(Linux schedstat: time blocked, other processes' load excluded; about 50%: the work holds it always)")
    for kind, label in GIL_WORK.items():
        print(f"  {label:52} {gil_wait_share(steps[kind], seconds):6.1%}")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_run(model: VisdepVLM, videos: list[Path], workers: int) -> None:
    """Score `videos` pipelined (one question each), sampling resident memory; print its peak per quarter."""
    requests = requests_for(model, videos, 1)
    taken = [0]
    to_model = model.engine._prefix_to_model

    def counted(encoding):
        taken[0] += 1
        return to_model(encoding)

    model.engine._prefix_to_model = counted
    samples: list[tuple[int, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            samples.append((taken[0], rss_bytes()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        seconds, _, line = timed_run(model, requests, workers)
    finally:
        done.set()
        sampler.join()
        del model.engine._prefix_to_model
    n = len(videos)
    quarters = [max((r for k, r in samples if q * n / 4 <= k < (q + 1) * n / 4), default=0) for q in range(4)]
    print(f"\nmemory: {n} videos scored pipelined (decode workers: {workers}, one question each) in {seconds:.1f} s; "
          "peak resident memory while the model was on videos")
    print("  " + "   ".join(f"{int(q * n / 4) + 1}-{int((q + 1) * n / 4)}: {r / 2**20:,.0f} MiB"
                           for q, r in enumerate(quarters)))
    if torch.cuda.is_available() and model.device.type == "cuda":
        print(f"  CUDA: at most {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB allocated")
    print(f"  log: {line}")


# --------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=12, help="mp4 videos per timed run")
    parser.add_argument("--folders", type=int, default=6, help="JPEG frame folders per timed run (0: none)")
    parser.add_argument("--memory-videos", type=int, default=200, help="videos of the memory run (0: none)")
    parser.add_argument("--memory-seconds", type=float, default=1,
                        help="length of the memory run's clips (short: decoding runs ahead of the model)")
    parser.add_argument("--questions", type=int, default=6, help="questions per video in the timed runs")
    parser.add_argument("--workers", default="auto", help="decode workers of the pipelined runs (auto: "
                        "one per core but one)")
    parser.add_argument("--max-workers", type=int, default=None, help="largest worker count of the throughput "
                        "table (default: the cores)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the model (CPU)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is one), cpu, cuda, ...")
    parser.add_argument("--kind", default="qwen2_5_vl", help="tiny checkpoint family (size=bench)")
    parser.add_argument("--seconds", type=float, default=10, help="length of the generated clips")
    parser.add_argument("--unique", type=int, default=2, help="distinct clips generated (then hard-linked)")
    parser.add_argument("--gil-seconds", type=float, default=2, help="per GIL measurement (0: skip)")
    args = parser.parse_args()
    logger.remove()  # the adapters log per call; the tables are the output
    scoring.tqdm = _no_bar  # nor the scoring's progress bars
    torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    workers = default_workers() if args.workers == "auto" else int(args.workers)
    cores = cores_per_rank()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s), {cores} cores, device {device}; "
          f"{args.kind} size=bench, {MAX_FRAMES} frames; pipelined runs: {workers} worker(s)")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        clips = []
        for i in range(args.unique):
            clips.append(root / "clips" / f"clip{i}.mp4")
            clips[-1].parent.mkdir(exist_ok=True)
            write_clip(clips[-1], args.seconds, seed=i)
        folders = []
        for i in range(min(args.unique, 2) if args.folders else 0):
            folders.append(root / "folders" / f"folder{i}")
            write_jpeg_folder(folders[-1], min(args.seconds, 5), seed=10 + i)
        print(f"generated {len(clips)} clips ({WIDTH}x{HEIGHT}, {args.seconds:g} s, {FPS} fps, H.264 with B-frames, "
              f"{np.mean([c.stat().st_size for c in clips]) / 1e6:.1f} MB each) and {len(folders)} JPEG folders "
              f"in {time.perf_counter() - start:.0f} s")
        checkpoint = build_tiny(args.kind, root / "model", size="bench")
        model = VisdepVLM(pretrained=str(checkpoint), device=device, dtype="float32", max_frames=MAX_FRAMES,
                          batch_size=8)
        videos = linked_copies(clips, args.videos, root / "videos")
        if args.gil_seconds:
            gil_table(model, clips[0], args.gil_seconds)
        counts = sorted({1, 2, 4, 8, 16, cores - 1, cores} & set(range(1, (args.max_workers or cores) + 1)))
        throughput(model, linked_copies(clips, max(8, 3 * counts[-1]), root / "throughput"), counts, args.seconds)
        ok &= bench_set(f"720p H.264 clips, {args.seconds:g} s", model, videos, clips, args.questions, workers)
        if args.folders:
            frame_folders = linked_copies(folders, args.folders, root / "frame_folders")
            ok &= bench_set("MM-AU-style 720p JPEG folders", model, frame_folders, folders, args.questions, workers)
        if args.memory_videos:
            short = root / "clips" / "short.mp4"
            write_clip(short, args.memory_seconds, seed=99)
            memory_run(model, linked_copies([short], args.memory_videos, root / "memory"), workers)
    if not ok:
        message = "pipelined samples differ from the serial ones"
        if device.startswith("cuda"):
            print(f"note: {message} (CUDA kernels may choose differently between runs)")
        else:
            raise SystemExit(message)


if __name__ == "__main__":
    main()
