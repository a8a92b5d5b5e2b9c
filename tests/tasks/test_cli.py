"""The eight tasks through the real `lmms-eval` command line (lmms-eval's `dummy` model).

The CLI exits 0 even when evaluation failed, so every test reads the files it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmms_eval_tasks.fixtures import write_fixtures
from lmms_eval_tasks.loaders import BENCHMARKS, load_benchmark
from tests.conftest import lmms_eval_env, read_results, read_samples, run_lmms_eval

pytestmark = pytest.mark.slow
ENV_NAMES = {"mmau": "MMAU_ROOT", "vru_accident": "VRU_ACCIDENT_ROOT", "trafficqa": "TRAFFICQA_ROOT",
             "accidentbench": "ACCIDENTBENCH_ROOT"}


@pytest.fixture(scope="module")
def full_run(fixture_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    run_lmms_eval(["--model", "dummy", "--tasks", "visdep_blind,visdep_video"], lmms_eval_env(fixture_env), out)
    return out


@pytest.mark.parametrize("bench", list(BENCHMARKS))
def test_blind_and_video_tasks_share_documents(full_run, fixture_env, bench):
    expected = load_benchmark(bench, fixture_env[ENV_NAMES[bench]])
    blind = sorted(read_samples(full_run, f"{bench}_blind"), key=lambda s: s["doc_id"])
    video = sorted(read_samples(full_run, f"{bench}_video"), key=lambda s: s["doc_id"])
    assert len(blind) == len(video) == len(expected), (full_run / "cli.log").read_text()[-2000:]
    assert [s["visdep"]["question_id"] for s in blind] == [r["question_id"] for r in expected]
    assert [s["visdep"]["question_id"] for s in video] == [r["question_id"] for r in expected]
    assert [s["input"] for s in blind] == [s["input"] for s in video]
    for s, r in zip(video, expected, strict=True):
        rec = s["visdep"]
        assert rec["mode"] == "video" and rec["benchmark"] == bench and rec["scoring"] == "letter"
        assert rec["n_options"] == len(r["options"]) == len(rec["option_logprobs"]) == len(s["filtered_resps"])
        assert rec["answer_index"] == r["answer_index"] and rec["category"] == r["category"]
        assert s["input"].splitlines()[1].startswith("A. ")
    assert {s["visdep"]["mode"] for s in blind} == {"blind"}


def test_results_report_accuracy_overall_and_per_category(full_run):
    results = read_results(full_run)["results"]
    assert set(results) >= {f"{b}_{m}" for b in BENCHMARKS for m in ("blind", "video")}
    # dummy returns the same loss for every option: the first option is predicted
    for bench in BENCHMARKS:
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
    from visdep_metrics.audit.runs import _read_fast

    paths = sorted(full_run.rglob("*_samples_*.jsonl"))
    assert len(paths) == 2 * len(BENCHMARKS)
    for path in paths:
        columns = _read_fast(path)
        assert len(columns.question_id) == len(read_samples(full_run, path.stem.split("_samples_", 1)[1]))


def test_blind_tasks_need_no_video(tmp_path):
    env = write_fixtures(tmp_path / "data", videos=False)
    out = tmp_path / "out"
    run_lmms_eval(["--model", "dummy", "--tasks", "visdep_blind"], lmms_eval_env(env), out)
    counts = {b: len(read_samples(out, f"{b}_blind")) for b in BENCHMARKS}
    assert counts == {"mmau": 10, "vru_accident": 48, "trafficqa": 8, "accidentbench": 16}, \
        (out / "cli.log").read_text()[-3000:]


def test_missing_video_is_an_error_naming_the_file(tmp_path):
    env = write_fixtures(tmp_path / "data", videos=False)
    out = tmp_path / "out"
    run_lmms_eval(["--model", "dummy", "--tasks", "mmau_video"], lmms_eval_env(env), out)
    log = (out / "cli.log").read_text()
    assert not read_samples(out, "mmau_video")
    assert "10 video(s) of mmau not found" in log
    assert "cap-7800: " + str(Path(env["MMAU_ROOT"]) / "CAP-DATA/1-10/1/001000/images") in log
    assert "VISDEP_SKIP_MISSING_VIDEOS=1" in log


def test_skipping_missing_videos_is_opt_in_and_listed(tmp_path):
    env = write_fixtures(tmp_path / "data")
    (Path(env["VRU_ACCIDENT_ROOT"]) / "VRU_videos/DoTA/VRU_2.mp4").unlink()
    out = tmp_path / "out"
    run_lmms_eval(["--model", "dummy", "--tasks", "vru_accident_video"],
                  lmms_eval_env(env, VISDEP_SKIP_MISSING_VIDEOS="1", VISDEP_SCORING="option"), out)
    samples = read_samples(out, "vru_accident_video")
    ids = {s["visdep"]["question_id"] for s in samples}
    assert len(samples) == 42 and not any(i.startswith("DoTA/VRU_2/") for i in ids)
    assert {s["visdep"]["scoring"] for s in samples} == {"option"}
    log = (out / "cli.log").read_text()
    assert "skipping questions whose video is missing" in log and "DoTA/VRU_2/location" in log


def test_bad_root_is_one_clear_error(tmp_path):
    out = tmp_path / "out"
    run_lmms_eval(["--model", "dummy", "--tasks", "mmau_blind"],
                  lmms_eval_env({"MMAU_ROOT": str(tmp_path / "no_such_download")}), out)
    log = (out / "cli.log").read_text()
    assert not read_samples(out, "mmau_blind")
    assert f"MMAU_ROOT={tmp_path / 'no_such_download'}: not a directory. Expected the MM-AU download" in log


def test_include_path_fallback_and_discovery_hook(tmp_path):
    """The hook rides on lmms-eval 0.7.x internals: this guards it against the installed version."""
    import importlib.metadata

    from lmms_eval_tasks.discovery import TASKS_DIR, tasks_path

    version = importlib.metadata.version("lmms-eval")
    assert version.startswith("0.7."), f"discovery hook tested on lmms-eval 0.7.x, found {version}"
    import lmms_eval.models  # noqa: F401  (loads the entry points, which patch TaskManager)
    from lmms_eval.tasks import TaskManager

    assert getattr(TaskManager.initialize_tasks, "_visdep_patched", False)
    names = {f"{b}_{m}" for b in BENCHMARKS for m in ("blind", "video")}
    assert names | {"visdep_blind", "visdep_video"} <= set(TaskManager().all_tasks)
    # the documented fallback, without the hook: lmms-eval's own indexing of --include_path
    unpatched = TaskManager.initialize_tasks._visdep_original
    index = unpatched(TaskManager.__new__(TaskManager), include_path=[tasks_path()], include_defaults=False)
    assert names <= set(index)
    assert Path(tasks_path()) == TASKS_DIR
