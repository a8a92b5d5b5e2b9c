"""Video-MME, LongVideoBench and MLVU dev as blind/video pairs, through the real `lmms-eval` command line.

The fixtures are each dataset's Hugging Face records (parquet files laid out as in the dataset
repositories) and generated videos where lmms-eval's own tasks unpack them under `HF_HOME`. What each
sample should say (K, the answer) is derived here from the parquet files with pandas, not through the
visdep loaders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval
from tests.helpers.runs import dummy_as_log_probabilities
from visdep_metrics.demo.fixtures import write_general_fixtures

pytestmark = pytest.mark.slow
GENERAL = ("videomme", "longvideobench", "mlvu")
PARQUET = {"videomme": "videomme/test-00000-of-00001.parquet",
           "longvideobench": "validation-00000-of-00001.parquet", "mlvu": "mlvu/test-00000-of-00001.parquet"}


def expected(env: dict[str, str], bench: str) -> dict[str, tuple[int, int]]:
    """{question_id: (K, answer index)} read straight from the fixture's parquet file."""
    rows = pd.read_parquet(Path(env[f"{bench.upper()}_ANNOTATIONS"]) / PARQUET[bench]).to_dict("records")
    if bench == "videomme":
        return {r["question_id"]: (len(r["options"]), "ABCD".index(r["answer"])) for r in rows}
    if bench == "longvideobench":
        return {r["id"]: (sum(r[f"option{k}"] != "N/A" for k in range(5)), int(r["correct_choice"])) for r in rows}
    return {r["question_id"]: (len(r["candidates"]), "ABCD".index(r["answer"])) for r in rows
            if r["candidates"] is not None}


@pytest.fixture(scope="module")
def general_runs(tmp_path_factory, tiny_models):
    """{name: (OUT, env, exit status)}: the dummy model on both modes of all three; the blind tasks offline
    with no video anywhere; a video task whose videos are missing; a tiny Qwen2.5-VL on two video tasks."""
    root = tmp_path_factory.mktemp("general")
    full = write_general_fixtures(root / "full")
    bare = write_general_fixtures(root / "bare", videos=False)
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    qwen = f"pretrained={tiny_models['qwen2_5_vl']},device=cpu,dtype=float32,max_frames=8"
    # a subset exported as an audit exports its grounded subset, run like any task
    from lmms_eval_tasks.export import write_subset_tasks

    subset = root / "subset_tasks"
    write_subset_tasks(subset, "longvideobench", sorted(expected(full, "longvideobench"))[:3], "grounded")
    runs = {
        "dummy": (["--model", "dummy", "--tasks", "visdep_general"], full),
        "blind_offline_no_videos": (["--model", "dummy", "--tasks", "visdep_general_blind"], bare),
        "video_missing": (["--model", "dummy", "--tasks", "videomme_video"], bare),
        "qwen": (["--model", "visdep_vlm", "--model_args", qwen, "--tasks", "videomme_video,longvideobench_video",
                  "--batch_size", "2"], full),
        "grounded_export": (["--model", "dummy", "--include_path", str(subset), "--tasks",
                             "longvideobench_blind_grounded,longvideobench_video_grounded"], full),
    }
    return {name: (root / name, env, run_lmms_eval(args, lmms_eval_env(env, **offline), root / name).returncode)
            for name, (args, env) in runs.items()}


@pytest.mark.parametrize("bench", GENERAL)
def test_blind_and_video_records_carry_k_and_the_answer(general_runs, bench):
    out, env, status = general_runs["dummy"]
    assert status == 0, (out / "cli.log").read_text()[-3000:]
    want = expected(env, bench)
    for mode in ("blind", "video"):
        rows = read_samples(out, f"{bench}_{mode}")
        got = {r["visdep"]["question_id"]: (r["visdep"]["n_options"], r["visdep"]["answer_index"]) for r in rows}
        assert got == want, f"{bench}_{mode}"
        for r in rows:
            assert r["visdep"]["mode"] == mode and r["visdep"]["video"] and len(r["visdep"]["option_logprobs"]) == \
                r["visdep"]["n_options"]
            lines = r["input"].splitlines()
            assert lines[-1] == "Answer with the option's letter from the given choices directly."
            assert [line[:3] for line in lines[-1 - r["visdep"]["n_options"]:-1]] == \
                [f"{c}. " for c in "ABCDE"[: r["visdep"]["n_options"]]]
    if bench == "longvideobench":
        assert sorted({k for k, _ in want.values()}) == [4, 5], "the N/A padding must leave K = 4 and K = 5"
    if bench == "mlvu":
        rows = read_samples(out, "mlvu_blind")
        assert not any("(A)" in r["input"] for r in rows), "the options are listed once, lettered A., B., ..."


def test_accuracy_by_each_benchmarks_own_categories_and_mlvu_m_avg(general_runs):
    out, env, _ = general_runs["dummy"]
    results = read_results(out)["results"]
    # the dummy model gives every option the same loss: the first option is predicted
    assert {"acc_duration_short,none", "acc_domain_knowledge,none", "acc_task_type_counting_problem,none"} \
        <= set(results["videomme_video"])
    assert {"acc_duration_group_600,none", "acc_question_category_t3o,none"} <= set(results["longvideobench_blind"])
    rows = pd.read_parquet(Path(env["MLVU_ANNOTATIONS"]) / PARQUET["mlvu"]).dropna(subset=["candidates"])
    per_type = rows.assign(correct=rows["answer"] == "A").groupby("task_type")["correct"].mean()
    assert results["mlvu_video"]["m_avg,none"] == pytest.approx(per_type.mean())
    assert results["mlvu_video"]["acc,none"] == pytest.approx((rows["answer"] == "A").mean())


def test_blind_tasks_run_offline_without_any_video(general_runs):
    out, env, status = general_runs["blind_offline_no_videos"]
    assert status == 0, (out / "cli.log").read_text()[-3000:]
    for bench in GENERAL:
        assert len(read_samples(out, f"{bench}_blind")) == len(expected(env, bench))
    hf_home = Path(env["HF_HOME"])
    assert not any((hf_home / d).exists() for d in ("videomme", "mlvu", "datasets/longvideobench")), \
        "a blind task must not create or fill a video cache"


def test_video_task_without_its_videos_fails_naming_them(general_runs):
    out, env, status = general_runs["video_missing"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "videomme_video")
    assert "4 of 4 videos of videomme cannot be used (4 not found, 0 unreadable), asked about in 12 questions" in log
    assert f"data/vid000xYz.mp4: not found: {Path(env['HF_HOME']) / 'videomme/data/vid000xYz.mp4'}" in log


def test_a_vlm_scores_general_video_tasks_with_their_timing(general_runs):
    """Matroska (no frame count), upper-case .MP4 and '@' paths reach the model; values are finite."""
    out, env, status = general_runs["qwen"]
    assert status == 0, (out / "cli.log").read_text()[-3000:]
    for bench in ("videomme", "longvideobench"):
        rows = read_samples(out, f"{bench}_video")
        assert {r["visdep"]["question_id"] for r in rows} == set(expected(env, bench))
        assert all(all(lp < 0 for lp in r["visdep"]["option_logprobs"]) for r in rows)
    assert "visdep_vlm rank 0: 18 questions scored; 7 videos, 7 decodes" in (out / "cli.log").read_text()


def test_tst_reads_the_same_records(general_runs, tmp_path):
    from visdep_metrics.cli.main import main

    _, env, _ = general_runs["dummy"]
    out = tmp_path / "tst"
    assert main(["tst", "--benchmark", "videomme", "--root", env["VIDEOMME_ANNOTATIONS"], "--out", str(out),
                 "--folds", "2", "--n-estimators", "20"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmark"] == "videomme" and summary["n_questions"] == 12
    s_x = pd.read_csv(out / "s_x.csv")
    assert set(s_x["question_id"]) == set(expected(env, "videomme"))


def test_the_audit_reports_them_like_the_traffic_benchmarks(general_runs, tmp_path):
    from visdep_metrics.cli.main import main

    out, _, _ = general_runs["dummy"]
    runs = tmp_path / "runs"
    shutil.copytree(out, runs)
    dummy_as_log_probabilities(runs)
    assert main(["audit", str(runs), "--out", str(tmp_path / "audit")]) == 0
    summary = pd.read_csv(tmp_path / "audit" / "summary.csv")
    assert set(summary["benchmark"]) == set(GENERAL)
    report = (tmp_path / "audit" / "report.md").read_text()
    assert all(name in report for name in ("Video-MME", "LongVideoBench", "MLVU"))
    for plot in ("diagnostic_space.png", "sweeps.png"):
        assert (tmp_path / "audit" / plot).stat().st_size > 0


def test_an_exported_subset_runs_as_its_own_tasks(general_runs):
    out, env, status = general_runs["grounded_export"]
    assert status == 0, (out / "cli.log").read_text()[-3000:]
    wanted = set(sorted(expected(env, "longvideobench"))[:3])
    for mode in ("blind", "video"):
        rows = read_samples(out, f"longvideobench_{mode}_grounded")
        assert {r["visdep"]["question_id"] for r in rows} == wanted
