"""Video prefixes prepared ahead of the model (`model_adapters.prefetch`): in order, within the window, errors from
the worker that met them; through `visdep_vlm`, the same values as preparing each prefix in the scoring loop, bit
for bit, and no video decoded for a stored batch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks.layouts import write_frame_folder, write_mp4
from model_adapters.frames import VideoReadError
from model_adapters.pipeline import DistinctQuestion
from model_adapters.prefetch import Prefetch, PreparedInOrder, nbytes
from model_adapters.scoring import score_questions
from tests.helpers.adapters import make_adapter
from tests.helpers.videos import write_h264
from visdep_metrics.demo.tiny import VLM_KINDS

MAX_FRAMES = 8


# --------------------------------------------------------------------------- the window, without a model
def test_taken_in_order_whatever_order_they_finish_in():
    """Later prefixes finish first (shorter sleeps); `take()` still hands them over in order."""
    prepares = [lambda i=i: time.sleep(0.02 * (6 - i)) or i for i in range(6)]
    for prefetch in (None, Prefetch(0, 1, 1), Prefetch(3, 4, 10**9)):
        with PreparedInOrder(prepares, prefetch) as prepared:
            assert [prepared.take() for _ in range(6)] == list(range(6))
            with pytest.raises(IndexError):
                prepared.take()


def test_no_more_than_max_videos_ahead():
    started: list[tuple[int, int]] = []  # (index, prefixes taken when it started)
    prepared = None

    def prepare(i):
        started.append((i, prepared.taken))
        return i

    prepared = PreparedInOrder([lambda i=i: prepare(i) for i in range(12)], Prefetch(4, 3, 10**9))
    with prepared:
        for i in range(12):
            assert prepared.take() == i
            time.sleep(0.02)  # the model's turn: the workers run ahead as far as the window lets them
    assert sorted(i for i, _ in started) == list(range(12))
    assert max(i - taken for i, taken in started) == 2  # at most 3 prepared or in preparation, the next included


def test_no_more_than_max_bytes_held():
    """1,000-byte prefixes within a 2,500-byte budget: two at a time; the first alone, until its size is known."""
    size, first_running = 1000, threading.Event()
    release_first = threading.Event()
    started: list[tuple[int, int]] = []
    prepared = None

    def prepare(i):
        started.append((i, prepared.taken))
        if i == 0:
            first_running.set()
            release_first.wait(5)
        return np.zeros(size, dtype=np.uint8)

    prepared = PreparedInOrder([lambda i=i: prepare(i) for i in range(10)], Prefetch(4, 8, 2500))
    with prepared:  # entering starts the workers
        first_running.wait(5)
        time.sleep(0.1)
        assert [i for i, _ in started] == [0], "nothing else starts before the first prefix's size is known"
        release_first.set()
        for _ in range(10):
            assert prepared.take().nbytes == size
            time.sleep(0.02)
    assert prepared.peak_bytes <= 2500
    assert max(i - taken for i, taken in started) <= 1


def test_a_prefix_larger_than_the_budget_is_still_prepared():
    prepares = [lambda: np.zeros(5000, dtype=np.uint8)] * 4
    with PreparedInOrder(prepares, Prefetch(2, 4, 1000)) as prepared:
        assert [prepared.take().nbytes for _ in range(4)] == [5000] * 4


def test_an_error_is_raised_where_its_prefix_is_taken_from_the_worker_that_met_it():
    threads: dict[int, str] = {}

    def prepare(i):
        threads[i] = threading.current_thread().name
        if i == 2:
            raise VideoReadError("cannot read video /videos/broken_clip.mp4: Invalid data")
        return i

    with PreparedInOrder([lambda i=i: prepare(i) for i in range(5)], Prefetch(2, 4, 10**9)) as prepared:
        assert [prepared.take(), prepared.take()] == [0, 1]
        with pytest.raises(VideoReadError, match="broken_clip.mp4"):
            prepared.take()
    assert threads[2].startswith("visdep-prepare")


def test_without_workers_each_prefix_is_prepared_by_take():
    threads = []
    prepares = [lambda: threads.append(threading.get_ident()) or time.sleep(0.05)] * 2
    with PreparedInOrder(prepares, Prefetch(0, 2, 10**9)) as prepared:
        prepared.take()
        prepared.take()
    assert threads == [threading.get_ident()] * 2 and prepared.waited >= 0.1


def test_ranks_of_one_machine_share_its_cores(monkeypatch):
    """Default workers: one per core but one, the cores divided among torchrun's ranks on the machine; decoder
    threads per worker: the cores the model's loop leaves, shared among the workers."""
    from model_adapters import prefetch

    monkeypatch.setattr(prefetch.os, "sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert (prefetch.cores_per_rank(), prefetch.default_workers()) == (16, 15)
    assert [prefetch.decoder_threads_for(w) for w in (0, 1, 4, 15, 16)] == [0, 15, 3, 1, 1]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert (prefetch.cores_per_rank(), prefetch.default_workers()) == (4, 3)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert (prefetch.cores_per_rank(), prefetch.default_workers()) == (1, 1)


def test_prefetch_defaults_and_bounds():
    assert Prefetch.of(3) == Prefetch(3, 6, 768 * 2**20)
    assert Prefetch.of(0, max_mb=1).max_videos == 2 and Prefetch.of(0, max_mb=1).max_bytes == 2**20
    assert Prefetch.of().workers >= 1
    assert Prefetch.of("auto") == Prefetch.of(None) and Prefetch.of("2", "3", "1.5") == Prefetch(2, 3, 3 * 2**19)
    with pytest.raises(ValueError, match="prefetch_videos"):
        Prefetch.of(2, max_videos=0)
    with pytest.raises(ValueError, match="decode_workers must be an integer or auto.*'two'"):
        Prefetch.of("two")
    with pytest.raises(ValueError, match="decode_workers must be >= 0"):
        Prefetch.of(-1)
    import torch

    assert nbytes({"a": torch.zeros(3, 4), "b": [np.zeros(5, np.uint8)], "c": 7}) == 48 + 5


# --------------------------------------------------------------------------- through visdep_vlm
@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list[Path]:
    """Nine videos: five MPEG-4, two H.264 with B-frames, two frame folders (jpg, png), of varied sizes."""
    root = tmp_path_factory.mktemp("videos")
    rng = np.random.default_rng(0)
    out = []
    for i in range(5):
        path = root / f"mpeg4_{i}.mp4"
        write_mp4(path, rng.integers(0, 256, (12 + 3 * i, 48 + 16 * (i % 2), 64, 3), dtype=np.uint8))
        out.append(path)
    for i in range(2):
        path = root / f"h264_{i}.mp4"
        write_h264(path, 40 + 10 * i, side=64, seed=i)
        out.append(path)
    for i, suffix in enumerate((".jpg", ".png")):
        folder = root / f"frames_{i}"
        write_frame_folder(folder, rng.integers(0, 256, (10, 40, 56, 3), dtype=np.uint8), suffix, 6)
        out.append(folder)
    return out


OPTIONS = ["a car turns left", "a cyclist crosses", "the light is red", "nothing happens"]


def requests(videos: list[Path]) -> list[DistinctQuestion]:
    """One to three questions per video, letter and option continuations mixed."""
    out = []
    for v, video in enumerate(videos):
        for q in range(1 + v % 3):
            context = (f"Question {q} about clip {v}: what happens?\n"
                       + "\n".join(f"{'ABCD'[k]}. {o}" for k, o in enumerate(OPTIONS)) + "\nAnswer with the letter.")
            continuations = list("ABCD") if q % 2 == 0 else OPTIONS
            out.append(DistinctQuestion("t", len(out), context, [str(video)], f"clip {v} question {q}", continuations))
    return out


def score(adapter, reqs, **kwargs):
    questions = adapter.engine.questions(adapter.present(reqs))
    return score_questions(adapter.model, questions, adapter.batch_size, adapter.device, progress=False, **kwargs)


@pytest.mark.parametrize("kind", VLM_KINDS)
def test_prefetched_scores_equal_the_serial_ones_bit_for_bit(tiny_models, videos, kind):
    """float32 on one machine: the values with three workers preparing up to two videos ahead are the values of
    preparing each video in the scoring loop, `==`, not within a tolerance."""
    serial = make_adapter(kind, tiny_models[kind], batch_size=2, max_frames=MAX_FRAMES, decode_workers=0)
    ahead = make_adapter(kind, tiny_models[kind], batch_size=2, max_frames=MAX_FRAMES, decode_workers=3,
                         prefetch_videos=2)
    threads = set()
    prepare = ahead.engine._prepare_prefix
    ahead.engine._prepare_prefix = lambda *a: threads.add(threading.current_thread().name) or prepare(*a)
    expected = score(serial, requests(videos))
    got = score(ahead, requests(videos))
    assert got == expected
    assert threads and all(t.startswith("visdep-prepare") for t in threads)
    assert dict(ahead.engine.frames.decodes) == {str(v): 1 for v in videos}
    assert all(np.isfinite(loss) for result in got for loss, _ in result)


def test_stored_batches_need_no_video(tiny_models, videos):
    """A resumed run: the batches `done` says are stored are not scored and their videos are not decoded; the
    others get the values of a full run."""
    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], batch_size=2, max_frames=MAX_FRAMES,
                           decode_workers=2)
    reqs = requests(videos)
    full = score(adapter, reqs)
    stored_videos = {str(videos[1]), str(videos[5]), str(videos[7])}
    adapter.engine.frames = type(adapter.engine.frames)(MAX_FRAMES, decoder_threads=1)
    resumed = score(adapter, reqs, done=lambda part: all(reqs[i].visuals[0] in stored_videos for i in part))
    assert set(adapter.engine.frames.decodes) == {str(v) for v in videos} - stored_videos
    for r, a, b in zip(reqs, full, resumed, strict=True):
        assert b is None if r.visuals[0] in stored_videos else a == b


def test_an_unreadable_video_fails_naming_it(tiny_models, videos, tmp_path):
    """The broken video (its question scored last: the longest prompt) is met by a worker; the questions before
    it are scored and handed to `on_scored`, then the error names the file."""
    broken = tmp_path / "broken_clip.mp4"
    broken.write_bytes(b"not a video" * 500)
    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], batch_size=2, max_frames=MAX_FRAMES,
                           decode_workers=2)
    threads = {}
    prepare = adapter.engine._prepare_prefix

    def recorded(video, text):
        threads[video] = threading.current_thread().name
        return prepare(video, text)

    adapter.engine._prepare_prefix = recorded
    reqs = requests(videos[:4]) + [DistinctQuestion("t", 99, "A much longer question than the others, so it is "
                                                   "scored last: " * 4 + "\nA. yes\nB. no", [str(broken)], "broken",
                                                   ["A", "B"])]
    scored = []
    with pytest.raises(VideoReadError, match="broken_clip.mp4"):
        score(adapter, reqs, on_scored=lambda indices, _: scored.extend(indices))
    assert sorted(scored) == list(range(len(reqs) - 1))
    assert threads[str(broken)].startswith("visdep-prepare")


def test_progress_and_log_say_videos_per_second_and_waiting(tiny_models, videos, capsys):
    from loguru import logger

    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], batch_size=2, max_frames=MAX_FRAMES,
                           decode_workers=1)
    lines = []
    sink = logger.add(lines.append, format="{message}")
    try:
        questions = adapter.engine.questions(adapter.present(requests(videos[:3])))
        score_questions(adapter.model, questions, 2, adapter.device, progress=True)
    finally:
        logger.remove(sink)
    bar = capsys.readouterr().err
    assert "videos/s, waited" in bar and "for frames" in bar
    [line] = [m for m in lines if "videos/s" in m]
    assert line.startswith("visdep scoring: 3 videos, decode workers 1:") and "% for frames" in line and "MiB" in line


def test_bad_pipeline_arguments_are_errors_naming_them(tiny_models):
    with pytest.raises(ValueError, match="visdep_vlm: decode_workers must be an integer or auto"):
        make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], decode_workers="many")
    with pytest.raises(ValueError, match="visdep_vlm: prefetch_mb must be > 0"):
        make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], prefetch_mb=0)
