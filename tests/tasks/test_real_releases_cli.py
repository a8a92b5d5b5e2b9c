"""The MLVU release as its authors publish it (../shared/benchmarks/mlvu, skipped when absent), through the real
command lines: `lmms-eval --model dummy --tasks mlvu_blind` stops with one error naming the ten records it cannot
use, and with VISDEP_SKIP_UNUSABLE=1 runs the other 2,165 with every answer as the release gives it, listing the ten
in the results file; a spec over the release (`visdep spec init`) does the same by its key `skip_unusable`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmms_eval_tasks import discovery
from tests.helpers.lmms_cli import REPO, lmms_eval_env, read_results, read_samples, run_lmms_eval
from visdep_metrics.cli.main import main

pytestmark = pytest.mark.slow
NOT_AMONG, TWO = "the answer is not among the candidates", "the answer is the text of two or more candidates"
UNUSABLE = {  # (file, record): reason, as BENCHMARK_FORMATS.md lists the release's quirks
    ("1_plotQA", 335): TWO, ("1_plotQA", 387): TWO, ("1_plotQA", 493): TWO, ("6_anomaly_reco", 66): TWO,
    ("7_topic_reasoning", 163): TWO, ("2_needle", 34): NOT_AMONG, ("2_needle", 338): NOT_AMONG,
    ("3_ego", 119): NOT_AMONG, ("3_ego", 313): NOT_AMONG, ("7_topic_reasoning", 26): NOT_AMONG}


def _release_answer(data: Path, question_id: str) -> str:
    stem, index = question_id.rsplit("/", 1)
    return json.loads((data / f"{stem}.json").read_text())[int(index)]["answer"].strip()


def _options_shown(sample: dict) -> list[str]:
    """The option texts of the prompt lmms-eval logged: the K lines before the instruction, 'A. ...'."""
    k = sample["visdep"]["n_options"]
    return [line[3:] for line in sample["input"].splitlines()[-1 - k:-1]]


@pytest.fixture(scope="module")
def mlvu_runs(shared_benchmarks, tmp_path_factory):
    data = shared_benchmarks / "mlvu" / "data"
    root = tmp_path_factory.mktemp("mlvu_release")
    env = {"MLVU_ANNOTATIONS": str(data)}
    runs = {"without_switch": lmms_eval_env(env), "with_switch": lmms_eval_env(env, VISDEP_SKIP_UNUSABLE="1")}
    return data, {name: (root / name, run_lmms_eval(["--model", "dummy", "--tasks", "mlvu_blind"], run_env,
                                                    root / name).returncode) for name, run_env in runs.items()}


def test_without_the_switch_one_error_counts_and_names_the_ten(mlvu_runs):
    data, runs = mlvu_runs
    out, status = runs["without_switch"]
    log = (out / "cli.log").read_text()
    assert status != 0 and not read_samples(out, "mlvu_blind")
    assert (f"10 of the 2,175 records of mlvu (MLVU_ANNOTATIONS={data}) cannot be used: 5 {TWO}; 5 {NOT_AMONG}"
            in log)
    for (stem, index), reason in UNUSABLE.items():
        assert f"{data / stem}.json record {index} ({stem}/{index}): {reason}: answer " in log
    assert "Set VISDEP_SKIP_UNUSABLE=1" in log


def test_with_the_switch_the_other_2165_run_and_the_ten_are_listed(mlvu_runs):
    data, runs = mlvu_runs
    out, status = runs["with_switch"]
    samples = read_samples(out, "mlvu_blind")
    assert status == 0 and len(samples) == 2165, (out / "cli.log").read_text()[-3000:]
    for sample in samples:
        record = sample["visdep"]
        shown = _options_shown(sample)
        assert shown[record["answer_index"]] == _release_answer(data, record["question_id"]), record["question_id"]
    dropped = read_results(out)["visdep"]["dropped"]["mlvu_blind"]
    assert {(d["question_id"], d["where"], d["reason"]) for d in dropped} == {
        (f"{stem}/{index}", f"{data / stem}.json record {index}", reason) for (stem, index), reason in UNUSABLE.items()}


def test_a_spec_over_the_release_one_error_then_its_key_runs_the_rest(shared_benchmarks, tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.setattr(discovery, "lmms_eval_task_names", lambda: frozenset())  # lmms-eval's index: test_spec_cli
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    monkeypatch.delenv("VISDEP_SKIP_MISSING_VIDEOS", raising=False)
    raw = yaml.safe_load((REPO / "configs/specs/mlvu_release.yaml").read_text())
    spec = tmp_path / "mlvu_release.yaml"
    spec.write_text(yaml.safe_dump({**raw, "root_default": str(shared_benchmarks / "mlvu")}))
    assert main(["spec", "init", str(spec), "--no-videos"]) == 2
    error = capsys.readouterr().err
    assert "10 of the 2,175 records of mlvu_release" in error
    assert error.count("key 'fields.answer'") >= 10 and not (tmp_path / "mlvu_release_blind.yaml").exists()
    listed = [json.loads(line) for line in (tmp_path / "mlvu_release_unusable_records.jsonl").read_text().splitlines()]
    assert {d["question_id"] for d in listed} == {f"{stem}/{index}" for stem, index in UNUSABLE}

    spec.write_text(yaml.safe_dump({**raw, "root_default": str(shared_benchmarks / "mlvu"), "skip_unusable": True}))
    assert main(["spec", "init", str(spec), "--no-videos"]) == 0
    out = tmp_path / "run"
    proc = run_lmms_eval(["--model", "dummy", "--include_path", str(tmp_path), "--tasks", "mlvu_release_blind"],
                         lmms_eval_env({}), out)
    samples = read_samples(out, "mlvu_release_blind")
    assert proc.returncode == 0 and len(samples) == 2165, (out / "cli.log").read_text()[-3000:]
    data = shared_benchmarks / "mlvu" / "data"
    assert all(_options_shown(s)[s["visdep"]["answer_index"]] == _release_answer(data, s["visdep"]["question_id"])
               for s in samples)
    dropped = read_results(out)["visdep"]["dropped"]["mlvu_release_blind"]
    assert {d["question_id"] for d in dropped} == {f"{stem}/{index}" for stem, index in UNUSABLE}
