"""The eight tasks through the real `lmms-eval` command line (lmms-eval's `dummy` model).

lmms-eval alone exits 0 even when evaluation failed; with visdep installed a failed evaluation exits 1.
Every test reads the files the run wrote and checks the exit status."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmms_eval_tasks.loaders import TRAFFIC_BENCHMARKS, load_benchmark
from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval
from visdep_metrics.demo.fixtures import write_fixtures

pytestmark = pytest.mark.slow
ENV_NAMES = {"mmau": "MMAU_ROOT", "vru_accident": "VRU_ACCIDENT_ROOT", "trafficqa": "TRAFFICQA_ROOT",
             "accidentbench": "ACCIDENTBENCH_ROOT"}


@pytest.fixture(scope="module")
def full_run(fixture_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    proc = run_lmms_eval(["--model", "dummy", "--tasks", "visdep_blind,visdep_video"], lmms_eval_env(fixture_env), out)
    assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
    return out


@pytest.mark.parametrize("bench", list(TRAFFIC_BENCHMARKS))
def test_blind_and_video_tasks_share_documents(full_run, fixture_env, bench):
    expected = load_benchmark(bench, fixture_env[ENV_NAMES[bench]])
    blind = sorted(read_samples(full_run, f"{bench}_blind"), key=lambda s: s["doc_id"])
    video = sorted(read_samples(full_run, f"{bench}_video"), key=lambda s: s["doc_id"])
    assert len(blind) == len(video) == len(expected), (full_run / "cli.log").read_text()[-2000:]
    assert [s["visdep"]["question_id"] for s in blind] == [r.question_id for r in expected]
    assert [s["visdep"]["question_id"] for s in video] == [r.question_id for r in expected]
    assert [s["input"] for s in blind] == [s["input"] for s in video]
    for s, r in zip(video, expected, strict=True):
        rec = s["visdep"]
        assert rec["mode"] == "video" and rec["benchmark"] == bench and rec["scoring"] == "letter"
        assert rec["n_options"] == len(r.options) == len(rec["option_logprobs"]) == len(s["filtered_resps"])
        assert rec["answer_index"] == r.answer_index and rec["category"] == r.category
        assert s["input"].splitlines()[1].startswith("A. ")
    assert {s["visdep"]["mode"] for s in blind} == {"blind"}


def test_results_report_accuracy_overall_and_per_category(full_run):
    results = read_results(full_run)["results"]
    assert set(results) >= {f"{b}_{m}" for b in TRAFFIC_BENCHMARKS for m in ("blind", "video")}
    # dummy returns the same loss for every option: the first option is predicted
    for bench in TRAFFIC_BENCHMARKS:
        samples = read_samples(full_run, f"{bench}_video")
        expected = sum(s["visdep"]["answer_index"] == 0 for s in samples) / len(samples)
        assert results[f"{bench}_video"]["acc,none"] == pytest.approx(expected)
    vru = results["vru_accident_blind"]
    assert {"acc_weather_and_light,none", "acc_location,none", "acc_road_type,none", "acc_accident_type,none",
            "acc_accident_reason,none", "acc_prevention_method,none"} <= set(vru)
    assert "acc_attribution,none" in results["trafficqa_video"]
    assert "acc_spatial_reasoning,none" in results["accidentbench_blind"]


def test_the_audit_reads_what_lmms_eval_wrote_by_its_fast_path(full_run):
    # the line-by-line reader would read these too, but ~4x slower: the typed decoder must accept them as written
    from visdep_metrics.audit.samples import _read_fast

    paths = sorted(full_run.rglob("*_samples_*.jsonl"))
    assert len(paths) == 2 * len(TRAFFIC_BENCHMARKS)
    for path in paths:
        columns = _read_fast(path.read_bytes())
        assert len(columns.text["question_id"]) == len(read_samples(full_run, path.stem.split("_samples_", 1)[1]))


@pytest.fixture(scope="module")
def scenario_runs(tmp_path_factory) -> dict[str, tuple[Path, dict, int]]:
    """{scenario: (OUT, benchmark roots, exit status)}: runs of the `dummy` model on broken or partial downloads."""
    root = tmp_path_factory.mktemp("scenarios")
    without_videos = write_fixtures(root / "no_videos", videos=False)
    broken = write_fixtures(root / "broken")
    (Path(broken["VRU_ACCIDENT_ROOT"]) / "VRU_videos/DoTA/VRU_2.mp4").write_bytes(b"")  # empty: opens nothing
    partial = write_fixtures(root / "partial")
    (Path(partial["VRU_ACCIDENT_ROOT"]) / "VRU_videos/DoTA/VRU_2.mp4").unlink()
    (Path(partial["VRU_ACCIDENT_ROOT"]) / "VRU_videos/CAP_DATA/VRU_1.mp4").write_bytes(b"not a video" * 10)
    scenarios = {
        "blind_without_videos": ("visdep_blind", without_videos, {}),
        "unset_root": ("mmau_blind", {}, {}),
        "bad_root": ("mmau_blind", {"MMAU_ROOT": str(root / "no_such_download")}, {}),
        "missing_videos": ("mmau_video", without_videos, {}),
        "unreadable_video": ("vru_accident_video", broken, {}),
        "skip_unusable": ("vru_accident_video", partial,
                          {"VISDEP_SKIP_MISSING_VIDEOS": "1", "VISDEP_SCORING": "option"}),
    }
    runs = {}
    for name, (task, env, extra) in scenarios.items():
        out = root / name
        runs[name] = (out, env, run_lmms_eval(["--model", "dummy", "--tasks", task], lmms_eval_env(env, **extra),
                                              out).returncode)
    return runs


def test_blind_tasks_need_no_video(scenario_runs):
    out, _, status = scenario_runs["blind_without_videos"]
    counts = {b: len(read_samples(out, f"{b}_blind")) for b in TRAFFIC_BENCHMARKS}
    assert counts == {"mmau": 10, "vru_accident": 48, "trafficqa": 8, "accidentbench": 16}, \
        (out / "cli.log").read_text()[-3000:]
    assert status == 0


def test_unset_root_fails_the_process(scenario_runs):
    out, _, status = scenario_runs["unset_root"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "mmau_blind")
    assert "MMAU_ROOT is not set. Point it at the MM-AU download" in log
    assert "the evaluation failed; lmms-eval exits with status 1" in log


def test_bad_root_is_one_clear_error(scenario_runs, tmp_path):
    out, env, status = scenario_runs["bad_root"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "mmau_blind")
    assert f"MMAU_ROOT={env['MMAU_ROOT']}: not a directory. Expected the MM-AU download" in log


def test_missing_videos_fail_the_run_naming_them(scenario_runs):
    out, env, status = scenario_runs["missing_videos"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "mmau_video")
    assert "10 of 10 videos of mmau cannot be used (10 not found, 0 unreadable), asked about in 10 questions" in log
    folder = "CAP-DATA/1-10/1/001000/images"
    assert f"{folder}: not found: {Path(env['MMAU_ROOT']) / folder}" in log
    assert "Set VISDEP_SKIP_UNUSABLE=1 to skip these questions instead." in log


def test_an_empty_video_fails_before_the_run_counting_videos(scenario_runs):
    """VRU-Accident asks six questions per video: the report counts videos, and an empty mp4 is caught when
    the videos are checked, not halfway through the run."""
    out, env, status = scenario_runs["unreadable_video"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "vru_accident_video")
    assert "1 of 8 videos of vru_accident cannot be used (0 not found, 1 unreadable), asked about in 6 questions" in log
    video = "VRU_videos/DoTA/VRU_2.mp4"
    assert f"{video}: cannot open {Path(env['VRU_ACCIDENT_ROOT']) / video}" in log


def test_skipping_unusable_videos_is_opt_in_and_listed(scenario_runs):
    """The switch by its older name, VISDEP_SKIP_MISSING_VIDEOS=1 (VISDEP_SKIP_UNUSABLE=1 is the same switch)."""
    out, env, status = scenario_runs["skip_unusable"]
    samples = read_samples(out, "vru_accident_video")
    ids = {s["visdep"]["question_id"] for s in samples}
    assert status == 0 and len(samples) == 36, (out / "cli.log").read_text()[-3000:]
    assert not any(i.startswith(("DoTA/VRU_2/", "CAP_DATA/VRU_1/")) for i in ids)
    assert {s["visdep"]["scoring"] for s in samples} == {"option"}
    log = (out / "cli.log").read_text()
    assert "skipping 12 questions whose video cannot be used" in log
    assert "2 of 8 videos of vru_accident cannot be used (1 not found, 1 unreadable)" in log
    assert "DoTA/VRU_2/location" in log
    # the results file beside the samples lists each question left out, where its video is and why
    root = Path(env["VRU_ACCIDENT_ROOT"])
    dropped = read_results(out)["visdep"]["dropped"]["vru_accident_video"]
    assert sorted((d["question_id"].split("/")[0], d["where"], d["reason"]) for d in dropped) == sorted(
        [("CAP_DATA", str(root / "VRU_videos/CAP_DATA/VRU_1.mp4"), "the video cannot be opened")] * 6
        + [("DoTA", str(root / "VRU_videos/DoTA/VRU_2.mp4"), "the video is not found")] * 6)


def test_include_path_fallback_and_discovery_hook(tmp_path):
    """The hook rides on lmms-eval 0.7.x internals: this guards it against the installed version."""
    import importlib.metadata

    from lmms_eval_tasks.discovery import TASKS_DIR, tasks_path

    version = importlib.metadata.version("lmms-eval")
    assert version.startswith("0.7."), f"discovery hook tested on lmms-eval 0.7.x, found {version}"
    import lmms_eval.models  # noqa: F401  (loads the entry points, which patch TaskManager)
    from lmms_eval.tasks import TaskManager

    assert getattr(TaskManager.initialize_tasks, "_visdep_patched", False)
    names = {f"{b}_{m}" for b in TRAFFIC_BENCHMARKS for m in ("blind", "video")}
    assert names | {"visdep_blind", "visdep_video"} <= set(TaskManager().all_tasks)
    # the documented fallback, without the hook: lmms-eval's own indexing of --include_path
    unpatched = TaskManager.initialize_tasks._visdep_original
    index = unpatched(TaskManager.__new__(TaskManager), include_path=[tasks_path()], include_defaults=False)
    assert names <= set(index)
    assert Path(tasks_path()) == TASKS_DIR


def test_in_process_runs_exit_write_and_log_as_the_command_line_does(fixture_env, tmp_path):
    """The exit-status contract through a real `python -m lmms_eval` process, and the in-process harness the other
    tests use (tests/helpers/lmms_inproc.py) against it: the same status, the same error line for a failed run, the
    same samples for one that succeeds."""
    runs = {"failed": (["--model", "dummy", "--tasks", "mmau_blind"], lmms_eval_env({})),
            "passed": (["--model", "dummy", "--tasks", "mmau_blind"], lmms_eval_env(fixture_env))}
    seen = {}
    for name, (args, env) in runs.items():
        for process in (True, False):
            out = tmp_path / f"{name}_{'process' if process else 'in_process'}"
            proc = run_lmms_eval(args, env, out, process=process)
            seen[name, process] = (proc.returncode, (out / "cli.log").read_text(), read_samples(out, "mmau_blind"))
    for process in (True, False):
        status, log, samples = seen["failed", process]
        assert status == 1 and not samples, log[-3000:]
        assert "MMAU_ROOT is not set" in log and "the evaluation failed; lmms-eval exits with status 1" in log
        status, log, samples = seen["passed", process]
        assert status == 0 and len(samples) == 10, log[-3000:]
    assert seen["passed", True][2] == seen["passed", False][2]
