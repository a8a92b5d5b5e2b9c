"""Frame sampling: mp4 through PyAV, frame folders by frame number, the cache and its decode counter."""

from __future__ import annotations

import av
import numpy as np
import pytest
from PIL import Image

from model_adapters.frames import FrameSource, VideoReadError, read_frames, sample_indices
from tests.helpers.videos import write_h264
from visdep_metrics.demo.fixtures import write_mp4


def coloured_frames(n: int, size: int = 32) -> np.ndarray:
    """Frame t is a flat grey of level 10 * t, so a decoded frame tells which frame it was."""
    return np.stack([np.full((size, size, 3), 10 * t, dtype=np.uint8) for t in range(n)])


def frame_ids(frames: np.ndarray) -> list[int]:
    return [int(round(f.mean() / 10)) for f in frames]


def test_sample_indices_are_uniform_and_include_both_ends():
    assert sample_indices(5, 16).tolist() == [0, 1, 2, 3, 4]
    assert sample_indices(100, 5).tolist() == [0, 25, 50, 74, 99]  # round(i * 99 / 4)
    assert sample_indices(17, 1).tolist() == [0]
    with pytest.raises(ValueError):
        sample_indices(0, 4)


def test_mp4_is_sampled_uniformly_with_its_timing(tmp_path):
    path = tmp_path / "clip.mp4"
    write_mp4(path, coloured_frames(20), fps=8)
    frames, metadata = read_frames(path, 5)
    assert frames.shape == (5, 32, 32, 3) and frames.dtype == np.uint8 and frames.flags.c_contiguous
    # mpeg4 is lossy: grey levels come back within a few units; round(i * 19 / 4), halves to even
    assert frame_ids(frames) == [0, 5, 10, 14, 19] == sample_indices(20, 5).tolist()
    assert (metadata.fps, metadata.total_num_frames, metadata.frames_indices) == (8.0, 20, [0, 5, 10, 14, 19])
    assert metadata.duration == 2.5 and metadata.sampled_fps == 5 / 20 * 8
    with av.open(str(path)) as container:
        everything = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    np.testing.assert_array_equal(frames, everything[sample_indices(20, 5)])


def test_short_video_keeps_every_frame(tmp_path):
    path = tmp_path / "short.mp4"
    write_mp4(path, coloured_frames(3))
    frames, metadata = read_frames(path, 16)
    assert frame_ids(frames) == [0, 1, 2] == metadata.frames_indices


def test_frame_folder_is_ordered_by_frame_number(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for t in range(12):  # 1.png .. 12.png: name order would put 10, 11, 12 before 2
        Image.fromarray(coloured_frames(12)[t]).save(folder / f"{t + 1}.png")
    (folder / "notes.txt").write_text("not a frame")
    frames, metadata = read_frames(folder, 12)
    assert frame_ids(frames) == list(range(12)) and frames.flags.c_contiguous
    frames, metadata = read_frames(folder, 4)
    assert frame_ids(frames) == [0, 4, 7, 11] == metadata.frames_indices  # round(i * 11 / 3)
    # frame folders have no rate: MM-AU's are timed at 30 fps unless told otherwise
    assert (metadata.fps, metadata.total_num_frames) == (30.0, 12)
    assert read_frames(folder, 4, frame_folder_fps=10)[1].fps == 10.0


def test_unreadable_videos_name_the_file(tmp_path):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"this is not a video" * 100)
    with pytest.raises(VideoReadError, match="broken.mp4"):
        read_frames(broken, 4)
    with pytest.raises(VideoReadError, match="missing.mp4"):
        read_frames(tmp_path / "missing.mp4", 4)
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    with pytest.raises(VideoReadError, match="empty_folder"):
        read_frames(empty, 4)


def test_frame_source_decodes_each_video_once(tmp_path):
    paths = [tmp_path / f"v{i}.mp4" for i in range(3)]
    for p in paths:
        write_mp4(p, coloured_frames(6))
    source = FrameSource(max_frames=4, cache_size=2)
    first = source(paths[0])
    assert source(paths[0]) is first and first[1].frames_indices == [0, 2, 3, 5]
    source(paths[1])
    assert source.decodes == {str(paths[0]): 1, str(paths[1]): 1}
    source(paths[2])  # evicts paths[0], the least recently used
    source(paths[0])
    assert source.decodes[str(paths[0])] == 2


@pytest.mark.parametrize("suffix,container_format", [(".mp4", None), (".mkv", "matroska")])
def test_seeking_gives_the_frames_decoding_in_order_gives(tmp_path, monkeypatch, suffix, container_format):
    """Far-apart samples are reached by seeking to the keyframe before each: the same frames as decoding every
    frame in order, and the same timing. Matroska states no frame count: it is taken from the duration."""
    from model_adapters import frames as frames_module

    path = tmp_path / f"long{suffix}"
    write_h264(path, 600, gop=30, container_format=container_format)
    monkeypatch.setattr(frames_module, "SEEK_GAP_FRAMES", 10**9)
    in_order, in_order_meta = read_frames(path, 16)
    calls = []
    original = frames_module._decode_by_seeking
    monkeypatch.setattr(frames_module, "_decode_by_seeking", lambda *a: calls.append(1) or original(*a))
    monkeypatch.setattr(frames_module, "SEEK_GAP_FRAMES", 30)
    seeked, seeked_meta = read_frames(path, 16)
    assert calls, "the seeking path must have run"
    assert seeked_meta.frames_indices == in_order_meta.frames_indices == sample_indices(600, 16).tolist()
    assert (seeked_meta.total_num_frames, seeked_meta.fps) == (in_order_meta.total_num_frames, 30.0) == (600, 30.0)
    np.testing.assert_array_equal(seeked, in_order)
    assert len({f.tobytes() for f in seeked}) == 16


@pytest.mark.parametrize("codec", ["h264", "mpeg4"])
def test_decoder_threads_return_the_same_frames(tmp_path, monkeypatch, codec):
    """FFmpeg's frame and slice threads (decoder_threads 0: FFmpeg's choice; 2; 4) give, frame by frame, the frames
    one thread gives: every frame decoded in order, and 16 far-apart frames reached by seeking. H.264 with B-frames
    (most downloaded videos) and MPEG-4 Part 2 (the synthetic benchmarks' videos)."""
    from model_adapters import frames as frames_module

    path, n = tmp_path / f"{codec}.mp4", 240
    if codec == "h264":
        write_h264(path, n, gop=24, side=96)
    else:
        write_mp4(path, np.random.default_rng(0).integers(0, 256, (n, 96, 96, 3), dtype=np.uint8), fps=30)
    every = read_frames(path, n, decoder_threads=1)[0]
    assert every.shape == (n, 96, 96, 3) and len({f.tobytes() for f in every}) == n
    for threads in (0, 2, 4):
        np.testing.assert_array_equal(read_frames(path, n, decoder_threads=threads)[0], every)
    monkeypatch.setattr(frames_module, "SEEK_GAP_FRAMES", 8)  # 16 samples of 240 frames are 16 apart: seek to each
    for threads in (1, 0, 2, 4):
        np.testing.assert_array_equal(read_frames(path, 16, decoder_threads=threads)[0], every[sample_indices(n, 16)])


def test_frame_source_cache_is_bounded_by_bytes(tmp_path):
    paths = [tmp_path / f"v{i}.mp4" for i in range(3)]
    for p in paths:
        write_mp4(p, coloured_frames(4))  # 4 frames of 32 x 32 x 3: 12,288 bytes a video
    source = FrameSource(max_frames=4, cache_bytes=2 * 12_288)
    for p in paths:
        source(p)
    source(paths[1])
    source(paths[2])
    assert source.decodes == {str(p): 1 for p in paths}  # the last two stayed
    source(paths[0])
    assert source.decodes[str(paths[0])] == 2
    too_big = FrameSource(max_frames=4, cache_bytes=1000)
    assert frame_ids(too_big(paths[0])[0]) == [0, 1, 2, 3]  # returned, not kept
    too_big(paths[0])
    assert too_big.decodes[str(paths[0])] == 2


def test_frame_source_serves_threads_at_once(tmp_path):
    """Eight threads asking for four videos (each twice) get each video's frames; none is decoded twice when the
    first decode of each finishes before its second request."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [tmp_path / f"v{i}.mp4" for i in range(4)]
    for i, p in enumerate(paths):
        write_mp4(p, coloured_frames(6)[i:])
    source = FrameSource(max_frames=16)
    with ThreadPoolExecutor(8) as pool:
        first = list(pool.map(source, paths))
        second = list(pool.map(source, paths))
    assert [frame_ids(f) for f, _ in first] == [list(range(i, 6)) for i in range(4)]
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert source.decodes == {str(p): 1 for p in paths}


def test_middle_is_one_frame_and_far_frames_are_reached_by_seeking(tmp_path, monkeypatch):
    """`frames=middle` decodes the middle frame alone: (n - 1) // 2, by seeking where it lies far from the start (an
    hour-long video does not decode half of itself), the frame decoding in order gives."""
    from model_adapters import frames as frames_module

    path = tmp_path / "v.mp4"
    write_h264(path, 61, fps=10)
    every, _ = read_frames(path, 61)
    middle, metadata = read_frames(path, 16, sampling="middle")
    assert metadata.frames_indices == [30] and middle.shape[0] == 1
    np.testing.assert_array_equal(middle[0], every[30])
    monkeypatch.setattr(frames_module, "SEEK_GAP_FRAMES", 10)
    seeks = []
    monkeypatch.setattr(frames_module, "_decode_by_seeking",
                        lambda *a, _real=frames_module._decode_by_seeking: seeks.append(a[2]) or _real(*a))
    again, _ = read_frames(path, 16, sampling="middle")
    assert [list(w) for w in seeks] == [[30]]
    np.testing.assert_array_equal(again, middle)


def test_frame_permutations():
    from model_adapters.frames import frame_permutation

    assert frame_permutation(5, "original", 1).tolist() == [0, 1, 2, 3, 4]
    assert frame_permutation(5, "reversed", 1).tolist() == [4, 3, 2, 1, 0]
    drawn = [tuple(frame_permutation(4, "shuffled", seed)) for seed in range(200)]
    assert (0, 1, 2, 3) not in drawn and len(set(drawn)) == 23  # every permutation of 4 but the identity
    assert frame_permutation(2, "shuffled", 7).tolist() == [1, 0]
    assert frame_permutation(1, "shuffled", 7).tolist() == [0]
    assert frame_permutation(16, "shuffled", 3).tolist() == frame_permutation(16, "shuffled", 3).tolist()
    with pytest.raises(ValueError, match="frame_order must be one of original, shuffled, reversed"):
        frame_permutation(4, "backwards", 0)


def test_a_copy_of_a_video_is_shuffled_alike_and_another_video_otherwise(tmp_path):
    """The shuffle is seeded by the content: a copy (another path, another mtime) sees the same order."""
    import shutil

    write_mp4(tmp_path / "a.mp4", np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8), fps=8)
    write_mp4(tmp_path / "b.mp4", np.random.default_rng(1).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8), fps=8)
    shutil.copy(tmp_path / "a.mp4", tmp_path / "copy.mp4")
    ordered, timing = FrameSource(16)(tmp_path / "a.mp4")
    shown = {name: FrameSource(16, frame_order="shuffled")(tmp_path / name) for name in ("a.mp4", "copy.mp4", "b.mp4")}
    order = [next(j for j in range(16) if np.array_equal(f, ordered[j])) for f in shown["a.mp4"][0]]
    assert sorted(order) == list(range(16)) and order != list(range(16))
    np.testing.assert_array_equal(shown["copy.mp4"][0], shown["a.mp4"][0])
    assert shown["a.mp4"][1].frames_indices == timing.frames_indices
    other, _ = FrameSource(16)(tmp_path / "b.mp4")
    assert [next(j for j in range(16) if np.array_equal(f, other[j])) for f in shown["b.mp4"][0]] != order


def test_conditions_are_settings_written_one_way():
    from model_adapters.frames import frame_source
    from model_adapters.registry import score_settings

    plain = score_settings("visdep_vlm", {})
    assert (plain["frames"], plain["frame_order"]) == ("uniform", "original")
    assert score_settings("visdep_vlm", {"frame_order": "Shuffled"})["frame_order"] == "shuffled"
    middle = score_settings("visdep_vlm", {"frames": "middle", "max_frames": "8"})
    assert "max_frames" not in middle and middle == score_settings("visdep_vlm", {"frames": "MIDDLE"})
    assert middle == score_settings("visdep_vlm", {"frames": "middle", "frame_order": "shuffled"})
    with pytest.raises(ValueError, match="visdep_vlm: frames must be one of uniform, middle, got 'first'"):
        frame_source("visdep_vlm", 16, 30, "first", "original")
    with pytest.raises(ValueError, match="visdep_vlm: frame_order must be one of"):
        frame_source("visdep_vlm", 16, 30, "uniform", "random")
