"""A path from data is opened only where it lies under its root once symlinks are resolved (`roots.under_root`):
a video at an absolute path, one reached through '..', and one through a link inside the root that points out are
refused by every benchmark's `video_path`, the tasks, the video check, the spec loader and the adapters' reading of
a frame folder; the same links inside the root, or a root that is itself a link, are used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from lmms_eval_tasks.layouts import write_mp4
from lmms_eval_tasks.loaders import BENCHMARKS, get_benchmark
from lmms_eval_tasks.roots import OUTSIDE_ROOT, OutsideRootError, under_root


@pytest.fixture
def tree(tmp_path) -> dict[str, Path]:
    """root/ with a video, a frame folder and links in and out; secret/ beside it with a video and a frame."""
    import numpy as np

    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "videos").mkdir(parents=True)
    secret.mkdir()
    frames = np.full((4, 16, 16, 3), 200, dtype=np.uint8)
    write_mp4(root / "videos" / "inside.mp4", frames)
    write_mp4(secret / "private.mp4", frames)
    (root / "videos" / "out.mp4").symlink_to(secret / "private.mp4")  # a link inside the root, pointing out
    (root / "videos" / "in.mp4").symlink_to(root / "videos" / "inside.mp4")  # a link that stays inside
    (root / "linked_out").symlink_to(secret, target_is_directory=True)  # a folder that links out
    (root / "loop").symlink_to(root / "loop")
    return {"root": root, "secret": secret, "private": secret / "private.mp4"}


def hostile_forms(tree: dict[str, Path]) -> dict[str, str]:
    """The three ways a record's video can point out of the root."""
    return {"absolute": str(tree["private"]), "dotdot": "../secret/private.mp4", "link": "videos/out.mp4",
            "linked folder": "linked_out/private.mp4"}


def test_under_root_refuses_each_way_out_and_keeps_what_stays_in(tree):
    root = tree["root"]
    for form, video in hostile_forms(tree).items():
        with pytest.raises(OutsideRootError) as caught:
            under_root(root, video)
        assert caught.value.reason == OUTSIDE_ROOT and video in str(caught.value), form
    with pytest.raises(OutsideRootError, match="cannot be resolved"):
        under_root(root, "loop/x.mp4")
    assert under_root(root, "videos/inside.mp4") == root / "videos/inside.mp4"
    assert under_root(root, "videos/in.mp4") == root / "videos/in.mp4"  # a link that stays inside
    assert under_root(root, "videos/../videos/inside.mp4") == root / "videos/../videos/inside.mp4"
    assert under_root(root, "videos/not-there.mp4") == root / "videos/not-there.mp4"  # missing is not outside
    linked_root = tree["root"].parent / "linked_root"
    linked_root.symlink_to(root, target_is_directory=True)  # a root that is itself a link: used
    assert under_root(linked_root, "videos/inside.mp4") == linked_root / "videos/inside.mp4"
    with pytest.raises(OutsideRootError):
        under_root(linked_root, "videos/out.mp4")


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_refuses_a_video_out_of_its_root(name, tree):
    bench = get_benchmark(name)
    for video in [*hostile_forms(tree).values(), "/nonexistent/CAP-DATA/1/2/000001/images",
                  "../DADA-DATA/1/001/images"]:
        with pytest.raises(OutsideRootError) as caught:  # not NotImplementedError from a glob of an absolute pattern
            bench.video_path(video, root=tree["root"])
        assert repr(video) in caught.value.detail
    assert bench.video_path("videos/inside.mp4", root=tree["root"]).resolve() == (tree["root"] / "videos/inside.mp4")


def test_the_tasks_and_the_video_check_refuse_them(tree, monkeypatch):
    from lmms_eval_tasks.records import Question
    from lmms_eval_tasks.tasks import doc_to_visual_video
    from lmms_eval_tasks.videos import describe_video_problems, unusable_questions, video_problems

    monkeypatch.setenv("VRU_ACCIDENT_ROOT", str(tree["root"]))
    questions = [Question(question_id=form, benchmark="vru_accident", video=video, question="Which?",
                          options=("a", "b"), answer_index=0)
                 for form, video in {**hostile_forms(tree), "fine": "videos/inside.mp4"}.items()]
    for q in questions[:-1]:
        with pytest.raises(OutsideRootError):
            doc_to_visual_video(q.document())
    assert doc_to_visual_video(questions[-1].document()) == [str(tree["root"] / "videos/inside.mp4")]
    problems = video_problems("vru_accident", questions)
    assert set(problems) == {q.video for q in questions[:-1]}
    assert {reason for reason, _ in problems.values()} == {OUTSIDE_ROOT}
    unusable = unusable_questions("vru_accident", questions, problems)
    assert sorted(u.question_id for u in unusable) == sorted(hostile_forms(tree))
    assert "4 not under the root" in describe_video_problems("vru_accident", questions, problems)


def test_a_frame_that_links_out_of_its_folder_is_not_read(tree):
    """The adapters' frame reading: a frame folder whose frames are files, and one frame a link out."""
    import numpy as np
    from PIL import Image

    from lmms_eval_tasks.videos import VideoReadError
    from model_adapters.frames import read_frames

    folder = tree["root"] / "frames" / "images"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), 50 * i, dtype=np.uint8)).save(folder / f"{i:06d}.jpg")
    frames, _ = read_frames(folder, 4)
    assert len(frames) == 3
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tree["secret"] / "private.jpg")
    (folder / "000003.jpg").symlink_to(tree["secret"] / "private.jpg")
    with pytest.raises(VideoReadError, match="not under its frame folder"):
        read_frames(folder, 4)


def test_the_spec_loader_makes_such_records_unusable(tree, tmp_path):
    from lmms_eval_tasks.loaders import read_benchmark
    from lmms_eval_tasks.spec_data import register_spec

    videos = {**hostile_forms(tree), "fine": "videos/inside.mp4", "fine link": "videos/in.mp4"}
    records = [{"id": form, "q": "Which?", "o": ["a", "b"], "a": 0, "clip": video} for form, video in videos.items()]
    (tree["root"] / "questions.json").write_text(json.dumps(records))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "roots_test", "root_default": str(tree["root"]),
                                    "annotations": "questions.json", "answer_is": "index",
                                    "fields": {"question_id": "{id}", "question": "{q}", "options": "{o}",
                                               "answer": "{a}", "video": "{clip}"}}))
    data = read_benchmark(register_spec(spec).name)
    assert sorted(q.question_id for q in data.questions) == ["fine", "fine link"]
    refused = {u.question_id: u for u in data.unusable}
    assert set(refused) == set(hostile_forms(tree))
    assert {u.reason for u in refused.values()} == {"key 'fields.video': not a path under the root"}
    assert "leads to" in refused["link"].detail and str(tree["private"]) in refused["link"].detail
    assert os.path.exists(tree["private"])  # the secret is there: refused for where it is, not for being absent


def test_a_relative_root_is_taken_from_the_working_folder_once(fixture_env, monkeypatch):
    """`VRU_ACCIDENT_ROOT=fx/vru_accident`, the commonest way to set it, names the folder under the working one:
    before, the video's path joined the relative root twice (fx/vru_accident/fx/vru_accident/...) and no video was
    found; so did a relative `--video-root` (`video_path(..., root=...)`)."""
    from lmms_eval_tasks.loaders import load_benchmark, resolve_video

    root = Path(fixture_env["VRU_ACCIDENT_ROOT"])
    monkeypatch.chdir(root.parent.parent)
    relative = root.relative_to(root.parent.parent)
    monkeypatch.setenv("VRU_ACCIDENT_ROOT", str(relative))
    question = load_benchmark("vru_accident")[0]
    found = resolve_video("vru_accident", question.video, question.question_id)
    assert found.is_file() and found == root / question.video
    assert get_benchmark("vru_accident").video_path(question.video, root=relative) == root / question.video
