"""`list_upstream`: every video task of the installed lmms-eval with its benchmark and status, and what a video run
gets from `resolve_video` (the upstream `doc_to_visual`, its exits and odd returns caught)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from lmms_eval_tasks.records import RecordError
from lmms_eval_tasks.upstream import list_upstream, resolve_video
from lmms_eval_tasks.upstream.catalog import (
    ADAPTER,
    AUTOMATIC,
    COT,
    IMAGES,
    NO_GOLD,
    NOT_MC,
    asks_for_reasoning,
)
from lmms_eval_tasks.upstream.config import TwinRefused, load_task
from lmms_eval_tasks.upstream.video import _one_path

pytestmark = pytest.mark.slow  # lmms-eval's task index (about 12 s)


@pytest.fixture(scope="module")
def listing():
    """The listing as a full run sees it: after lmms-eval's model registry has run visdep's entry point, which adds
    visdep's own task folder to every TaskManager (the order of a whole suite; a lone test would not see it)."""
    from lmms_eval_tasks.discovery import register_task_path
    from lmms_eval_tasks.upstream.config import task_index

    register_task_path()
    task_index.cache_clear()
    return {s.task: s for s in list_upstream()}


def test_visdep_own_tasks_are_not_upstream_tasks(listing):
    from lmms_eval_tasks.task_yaml import TASKS_DIR
    from lmms_eval_tasks.upstream.config import task_index, tasks_root

    assert "mmau_video" not in listing and "longvideobench_video" not in listing
    paths = [Path(e["yaml_path"]).resolve() for e in task_index().values() if isinstance(e.get("yaml_path"), str)]
    assert paths and all(p.is_relative_to(tasks_root().resolve()) for p in paths)
    assert not any(p.is_relative_to(TASKS_DIR) for p in paths)


def test_every_status_is_automatic_adapter_or_a_refusal_with_its_reason(listing):
    for s in listing.values():
        assert s.status in (AUTOMATIC, ADAPTER) or (s.status.startswith("refused: ") and len(s.status) > 12), s
        assert s.line().count("\t") == 2


@pytest.mark.parametrize(("task", "folder", "status"), [
    ("videomme", "videomme", AUTOMATIC), ("longvideobench_val_v", "longvideobench", AUTOMATIC),
    ("mlvu_dev", "mlvu", AUTOMATIC), ("tomato", "tomato", ADAPTER), ("vsibench", "vsibench", ADAPTER),
    ("mlvu_test", "mlvu", NO_GOLD), ("youcook2_val", "youcook2", NOT_MC),
    ("videomme_w_subtitle", "videomme", "refused: a subtitle variant (its prompt carries the video's speech)"),
])
def test_known_tasks_have_their_status(listing, task, folder, status):
    assert (listing[task].benchmark, listing[task].status) == (folder, status)


def test_image_tasks_are_not_listed(listing):
    """MixEval-X's image tasks set `video: true` (to download their image files) and give the model images; their
    video tasks are listed. SITE's and VSI-Bench's image variants name images in their doc_to_visual; OmniSpatial
    opens images (its utils.py names a video only in an error message)."""
    assert "mmmu_val" not in listing and "videomme" in listing
    image_tasks = ["mix_evals_image2text_mc", "mix_evals_image2text_mc_hard", "mix_evals_image2text_freeform",
                   "mix_evals_image2text_freeform_hard", "site_bench_image", "vsibench_multiimage",
                   "vsibench_debiased_multiimage", "omnispatial_test"]
    assert not [t for t in image_tasks if t in listing]
    assert listing["mix_evals_video2text_mc"].status == AUTOMATIC
    assert listing["site_bench_video_multiimage"].status == IMAGES  # video frames given as images


# Every task the old name rule ('*_cot', '*_cot_*', '*_reasoning') refused, with what its YAML asks of the model
# (read in lmms-eval 0.7.3): the two ordinary subtasks ask for the best option only.
CHAIN_OF_THOUGHT = {
    "mmr_v_cot": True,  # post_prompt "Write your thinking process first, then give the final correct option..."
    "mmvu_val_cot": True,  # doc_to_text_cot's prompt "Answer the given multiple-choice question step by step..."
    "perceptioncomp_reasoning": True,  # "Please perform a detailed reasoning based on the provided video frames..."
    "video_holmes_reasoning": True,  # the same
    "videomme_v2_reasoning": True,  # the same
    "videomathqa_mbin_cot": True,  # post_prompt "First please perform reasoning, and think step by step..."
    "videomathqa_mcq_cot": True,  # the same
    "mvbench_episodic_reasoning": False,  # post_prompt "Only give the best option."
    "mvp_mini_temporal_reasoning": False,  # its default prompts
    "mmvu_val": False,  # "Do not generate any intermediate reasoning process"
    "scivideobench": False,  # holds a post_prompt_cot its doc_to_text never reads
}


@pytest.mark.parametrize(("task", "reasons"), list(CHAIN_OF_THOUGHT.items()))
def test_chain_of_thought_is_read_from_what_the_yaml_asks(listing, task, reasons):
    from lmms_eval.utils import load_yaml_config

    from lmms_eval_tasks.upstream.config import find_yaml

    path = find_yaml(task)
    assert asks_for_reasoning(load_yaml_config(str(path), mode="simple"), path) is reasons
    assert (listing[task].status == COT) is reasons


def test_ordinary_subtasks_named_reasoning_are_twinned(listing):
    assert listing["mvbench_episodic_reasoning"].status == AUTOMATIC
    assert listing["mvp_mini_temporal_reasoning"].status == AUTOMATIC


def test_at_least_sixty_multiple_choice_benchmarks_are_twinned(listing):
    """A benchmark is multiple-choice with public gold where one of its video tasks is neither open-ended nor
    without public answers nor an image variant; it is twinned where one of its tasks is automatic or adapter."""
    by_benchmark = collections.defaultdict(list)
    for s in listing.values():
        by_benchmark[s.benchmark].append(s.status)
    multiple_choice = {b for b, statuses in by_benchmark.items()
                       if any(st not in (NOT_MC, NO_GOLD, IMAGES) for st in statuses)}
    twinned = {b for b in multiple_choice if {AUTOMATIC, ADAPTER} & set(by_benchmark[b])}
    assert len(twinned) >= 60, sorted(multiple_choice - twinned)


def test_resolve_video_finds_the_file_where_the_upstream_task_looks(offline_hf_home):
    """(A name no fixture's video has, removed after: HF_HOME is the worker's for the session, and a one-byte stand-in
    left there would be the video of a later test's question.)"""
    video = offline_hf_home / "videomme" / "data" / "visdep-resolve-probe.mp4"
    video.parent.mkdir(parents=True, exist_ok=True)
    video.write_bytes(b"\0")
    try:
        assert resolve_video("videomme", {"videoID": "visdep-resolve-probe"}) == str(video)
    finally:
        video.unlink()


def test_resolve_video_turns_an_upstream_exit_into_a_record_error():
    with pytest.raises(RecordError, match="exits"):  # tasks/videomme/utils.py calls sys.exit
        resolve_video("videomme", {"videoID": "not-there"})


def test_resolve_video_turns_an_upstream_exception_into_a_record_error():
    with pytest.raises(RecordError, match="fails"):  # tasks/vsibench/utils.py raises FileExistsError
        resolve_video("vsibench", {"dataset": "arkitscenes", "scene_name": "nowhere"})


@pytest.mark.parametrize("returned", [[], ["a.mp4", "b.mp4"], [object()], None, "a.mp4"])
def test_only_one_path_is_a_video(returned):
    if returned == "a.mp4":
        assert _one_path(returned) == "a.mp4"
        return
    with pytest.raises(RecordError, match="no single video path"):  # a blind variant's [], frames, several clips
        _one_path(returned)


def test_an_upstream_import_that_needs_a_missing_decoder_still_loads():
    """longvideobench's utils.py imports decord at the top, xmod_bench's soundfile: reading questions needs neither."""
    assert callable(load_task("longvideobench_val_v").config["doc_to_text"])


def test_an_upstream_import_failure_is_a_refusal_not_a_traceback():
    """lmms-eval 0.7.3's videomme_no_visual: its utils.py lost its imports in the 0.6 refactor."""
    with pytest.raises(TwinRefused, match="its utils.py"):
        load_task("videomme_no_visual")


def test_docs_list_is_the_listing(listing):
    """docs/twins.md lists what `visdep twin --list` prints, line for line (regenerate it when the catalog changes)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "twins.md").read_text(encoding="utf-8")
    block = text.split("<!-- the list: visdep twin --list -->", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == [s.line() for s in list_upstream()]
