"""The audit's command line as a careless or hostile user meets it: it never deletes what it did not write, never
drops a run silently, refuses values that cannot be what they claim, and says in one line (exit 2) what is wrong.

Every test goes through `visdep_metrics.cli.main.main` and compares the file tree before and after."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmms_eval_tasks.errors import OptionError, VisdepError
from tests.helpers.runs import records_from_correct, write_panel_runs, write_run
from visdep_metrics.cli.main import main
from visdep_metrics.outdir import FILE_LIST


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` (hidden ones too) -> sha256 of its bytes."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_audit_refused(root: Path, capsys, runs: Path, out: Path, fragment: str) -> None:
    """`visdep audit runs --out out` exits 2 with one error line holding `fragment`, and nothing under root changed."""
    before = tree(root)
    assert audit(runs, out=out) == 2
    refused(capsys, fragment)
    assert tree(root) == before


def mmau(mode, correct, prefix="cap"):
    return records_from_correct("mmau", mode, correct, [5] * len(correct), prefix=prefix)


def two_models(root: Path) -> Path:
    write_run(root, "org/llm", {"mmau_blind": mmau("blind", [1, 0, 1, 0, 1, 1])}, model_type="visdep_llm")
    write_run(root, "org/vlm", {"mmau_blind": mmau("blind", [0, 0, 1, 0, 1, 0]),
                                "mmau_video": mmau("video", [1, 1, 1, 0, 1, 0])})
    return root


def audit(*args, out: Path) -> int:
    return main(["audit", *map(str, args), "--out", str(out)])


def refused(capsys, *fragments: str) -> str:
    """The one error line of the last command; each fragment must be in it."""
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith("visdep "), err
    for fragment in fragments:
        assert fragment in line, line
    return line


# --------------------------------------------------------------------------- OUT: only what visdep wrote
def test_an_out_holding_an_input_is_refused_and_the_input_kept(tmp_path, capsys):
    runs = two_models(tmp_path / "runs")
    ckpt = two_models(tmp_path / "audit" / "runs-ckpt")  # the case: runs kept inside the audit folder
    before = tree(tmp_path)
    assert audit(runs, ckpt, out=tmp_path / "audit") == 2
    refused(capsys, f"--out {tmp_path / 'audit'}: holds the input {ckpt}")
    assert tree(tmp_path) == before


def test_an_out_holding_the_working_folder_is_refused(tmp_path, capsys, monkeypatch):
    runs = two_models(tmp_path / "runs")
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    before = tree(tmp_path)
    assert audit(runs, out=Path(".")) == 2
    refused(capsys, "holds the working folder")
    assert audit(runs, out=tmp_path / "work" / "..") == 2  # a folder above the working folder (and the runs)
    refused(capsys, "holds the input")
    assert tree(tmp_path) == before


def test_an_earlier_audit_is_replaced_but_a_file_the_user_added_or_edited_stops_it(tmp_path, capsys):
    runs = two_models(tmp_path / "runs")
    out = tmp_path / "audit"
    assert audit(runs, out=out) == 0
    listed = json.loads((out / FILE_LIST).read_text())
    assert listed["command"] == "audit" and set(listed["files"]) == set(tree(out)) - {FILE_LIST}
    assert {"report.md", "audit.json", "questions.csv"} <= set(listed["files"])
    assert audit(runs, out=out) == 0  # an unchanged earlier audit is replaced

    (out / "my_notes.txt").write_text("mine")
    assert_audit_refused(tmp_path, capsys, runs, out, "did not write there (my_notes.txt)")

    (out / "my_notes.txt").unlink()
    (out / "report.md").write_text("my edits")
    assert_audit_refused(tmp_path, capsys, runs, out, "report.md (changed since visdep audit wrote it)")


def test_an_out_written_by_another_command_or_without_a_file_list_is_refused(tmp_path, capsys):
    runs = two_models(tmp_path / "runs")
    out = tmp_path / "audit"
    out.mkdir()
    (out / "audit.json").write_text("{}")  # looks like an audit, lists nothing
    assert_audit_refused(tmp_path, capsys, runs, out, "did not write there (audit.json)")
    (out / "audit.json").unlink()
    (out / FILE_LIST).write_text(json.dumps({"command": "tst", "files": {}}))
    assert_audit_refused(tmp_path, capsys, runs, out, "written by visdep tst, not audit")


def test_sigterm_while_writing_leaves_no_output_and_no_staging_folder(tmp_path, monkeypatch):
    from visdep_metrics.audit import report

    runs = two_models(tmp_path / "runs")
    before = tree(tmp_path)

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(report, "draw_plots", killed)
    with pytest.raises(SystemExit) as stopped:
        audit(runs, out=tmp_path / "audit")
    assert stopped.value.code == 128 + signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # neither OUT nor a hidden .audit.writing-*
    assert tree(tmp_path) == before
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_staging_folders_of_a_dead_process_are_cleaned_and_an_out_set_aside_is_put_back(tmp_path):
    runs = two_models(tmp_path / "runs")
    dead = 2**22 + 12345  # above Linux's pid_max default: no such process
    stale = tmp_path / f".audit.writing-{dead}-abc"
    stale.mkdir()
    (stale / "report.md").write_text("half written")
    aside = tmp_path / f".other.previous-{dead}-abc"
    (aside / "other").mkdir(parents=True)
    (aside / "other" / "kept.txt").write_text("an earlier output, set aside before the process died")
    assert audit(runs, out=tmp_path / "audit") == 0
    assert not stale.exists()
    assert audit(runs, out=tmp_path / "other") == 2  # "other" was put back first, and holds no file list
    assert (tmp_path / "other" / "kept.txt").read_text().startswith("an earlier output")
    assert not aside.exists()


RACER = """
import sys
from pathlib import Path
from visdep_metrics.outdir import staged
out, tag, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(n):
    with staged(out, "race") as stage:
        (stage.folder / "who.txt").write_text(f"{tag} {i}")
        (stage.folder / "sub").mkdir()
        (stage.folder / "sub" / "more.txt").write_text(tag * 1000)
"""


def test_two_processes_replacing_one_out_in_a_tight_loop_never_trip_over_each_other(tmp_path):
    """Before OUT's checks and renames were taken one process at a time, about one iteration in ten raised a bare
    FileNotFoundError or ENOTEMPTY, or refused OUT as "changed since visdep race wrote it"."""
    import subprocess
    import sys

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{Path(__file__).resolve().parents[2]}{os.pathsep}"
                                       f"{os.environ.get('PYTHONPATH', '')}"}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(out), tag, "60"], stderr=subprocess.PIPE, text=True,
                               env=env) for tag in "ab"]
    errors = [r.communicate(timeout=300)[1] for r in racers]
    assert [r.returncode for r in racers] == [0, 0], errors
    assert all("Traceback" not in e for e in errors), errors
    listed = json.loads((out / FILE_LIST).read_text())
    assert listed["command"] == "race" and sorted(listed["files"]) == ["sub/more.txt", "who.txt"]
    tag, last = (out / "who.txt").read_text().split()
    assert last == "59" and (out / "sub" / "more.txt").read_text() == tag * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left


@pytest.fixture
def vru_root(tmp_path):
    from tests.helpers.shortcut_vru import write_shortcut_vru

    return write_shortcut_vru(tmp_path / "vru", 3, 0.5, seed=1)


def test_ibp_replaces_its_own_earlier_output_whole_and_refuses_other_files(tmp_path, vru_root, capsys):
    from visdep_metrics.demo.fixtures import write_fixtures

    env = write_fixtures(tmp_path / "fixtures", videos=False)
    out = tmp_path / "ibp"
    common = ["--n-estimators", "5", "--folds", "2", "--budget", "2", "--batch-size", "1", "--out", str(out)]
    assert main(["ibp", "--benchmark", "mmau", "--root", env["MMAU_ROOT"], *common]) == 0
    assert {p.name.split("_")[0] for p in (out / "tasks").iterdir()} == {"mmau"}
    assert main(["ibp", "--benchmark", "vru_accident", "--root", str(vru_root), *common]) == 0
    # the earlier benchmark's tasks are gone: lmms-eval --include_path OUT/tasks finds only this one's
    tasks = sorted(p.name for p in (out / "tasks").iterdir())
    assert all(name.startswith("vru_accident_") for name in tasks) and "vru_accident_blind_debiased.yaml" in tasks
    (out / "tasks" / "mine.yaml").write_text("task: mine\n")
    before = tree(tmp_path)
    assert main(["ibp", "--benchmark", "vru_accident", "--root", str(vru_root), *common]) == 2
    refused(capsys, "visdep ibp: error:", "tasks/mine.yaml")
    assert tree(tmp_path) == before
    assert main(["tst", "--benchmark", "vru_accident", "--root", str(vru_root), "--n-estimators", "5", "--out",
                 str(tmp_path / "vru"), "--folds", "2"]) == 2  # OUT holding the benchmark's root
    refused(capsys, "holds the input")
    assert tree(tmp_path) == before


# --------------------------------------------------------------------------- run discovery
def test_symlinked_run_folders_are_followed_once_and_each_model_folder_logged(tmp_path):
    from loguru import logger

    runs = tmp_path / "runs"
    write_run(runs, "org/llm", {"mmau_blind": mmau("blind", [1, 0, 1, 0, 1, 1])}, model_type="visdep_llm")
    scratch = tmp_path / "scratch"
    write_run(scratch, "org/vlm", {"mmau_blind": mmau("blind", [0, 0, 1, 0, 1, 0]),
                                   "mmau_video": mmau("video", [1, 1, 1, 0, 1, 0])})
    write_run(scratch, "org/vlm2", {"mmau_blind": mmau("blind", [1, 0, 1, 0, 1, 0]),
                                    "mmau_video": mmau("video", [1, 1, 1, 1, 1, 0])})
    (runs / "on_scratch").symlink_to(scratch, target_is_directory=True)
    (scratch / "loop").symlink_to(runs, target_is_directory=True)  # a cycle through both links
    (runs / "again").symlink_to(scratch, target_is_directory=True)  # the same folder reached twice
    messages = []
    sink = logger.add(messages.append, format="{message}", level="INFO")
    try:
        assert audit(runs, out=tmp_path / "audit") == 0
    finally:
        logger.remove(sink)
    manifest = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert sorted({f["model"] for f in manifest["files_used"]}) == ["org/llm", "org/vlm", "org/vlm2"]
    assert len(manifest["files_used"]) == 5  # each samples file once, though reachable through three paths
    panel_used = pd.read_csv(tmp_path / "audit" / "summary.csv")
    assert {"org/vlm", "org/vlm2"} <= set(panel_used["model"])
    logged = "".join(map(str, messages))
    assert "model org/vlm: runs in " in logged and "model org/llm: runs in " in logged


def test_runs_left_out_are_notes_in_the_report(tmp_path):
    runs = two_models(tmp_path / "runs")
    folder = write_run(runs, "org/llm", {"mmau_blind": mmau("blind", [0] * 6)}, model_type="visdep_llm",
                       date="20250101_000000", subfolder="old")  # an earlier run of the same model and task
    results = next(folder.glob("*_results.json"))
    data = json.loads(results.read_text())
    data["configs"]["videomme"] = {"task": "videomme", "tag": "videomme_group"}
    results.write_text(json.dumps(data))
    (folder / f"{results.name.split('_results')[0]}_samples_videomme.jsonl").write_text("{}\n")
    assert audit(runs, out=tmp_path / "audit") == 0
    notes = json.loads((tmp_path / "audit" / "audit.json").read_text())["notes"]
    assert any("left out" in n and "videomme.jsonl" in n and "not a visdep task" in n for n in notes)
    assert any("1 earlier run(s) left out" in n and str(folder) in n for n in notes)
    report = (tmp_path / "audit" / "report.md").read_text()
    assert "not a visdep task" in report


# --------------------------------------------------------------------------- the latest run
def test_the_latest_run_is_chosen_by_time_with_its_timezone(tmp_path):
    runs = tmp_path / "runs"
    # 18:00 in Singapore (lmms-eval's default zone) is 10:00 UTC: the rerun at 11:00 UTC is the later one
    write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [0] * 6)}, date="20260101_180000",
              timezone="Asia/Singapore", subfolder="first")
    write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [1] * 6)}, date="20260101_110000", timezone="UTC",
              subfolder="rerun")
    assert audit(runs, out=tmp_path / "audit") == 0
    (used,) = json.loads((tmp_path / "audit" / "audit.json").read_text())["files_used"]
    assert "/rerun/" in used["samples"]


def test_without_a_timezone_the_latest_run_is_the_last_modified(tmp_path):
    runs = tmp_path / "runs"
    late = write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [0] * 6)}, date="20260102_000000", timezone=None,
                     subfolder="late_date")
    early = write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [1] * 6)}, date="20260101_000000",
                      timezone=None, subfolder="modified_later")
    for folder, when in ((late, 1_700_000_000), (early, 1_700_003_600)):
        for path in folder.iterdir():
            os.utime(path, (when, when))
    assert audit(runs, out=tmp_path / "audit") == 0
    (used,) = json.loads((tmp_path / "audit" / "audit.json").read_text())["files_used"]
    assert "/modified_later/" in used["samples"]


def test_two_runs_written_at_the_same_time_are_an_error_naming_both(tmp_path, capsys):
    runs = tmp_path / "runs"
    a = write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [0] * 6)}, subfolder="a")
    b = write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [1] * 6)}, subfolder="b")
    before = tree(tmp_path)
    assert audit(runs, out=tmp_path / "audit") == 2
    refused(capsys, str(next(a.glob("*_samples_*"))), str(next(b.glob("*_samples_*"))), "neither is the latest")
    assert tree(tmp_path) == before


# --------------------------------------------------------------------------- values that cannot be what they claim
def rewrite_logprobs(folder: Path, task: str, change) -> None:
    path = next(folder.glob(f"*_samples_{task}.jsonl"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line["visdep"]["option_logprobs"] = change(line["visdep"]["option_logprobs"])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("change, message", [
    (lambda lps: [float(2.718281828459045 ** x) for x in lps], "is above 0"),  # probabilities in their place
    (lambda lps: [-x for x in lps], "is above 0"),  # negated log-likelihoods
    (lambda lps: [-0.9162907318741551] * len(lps), "add up to 2 > 1"),  # each 0.4: more than certainty
])
def test_values_that_are_no_log_probabilities_are_refused(tmp_path, capsys, change, message):
    runs = two_models(tmp_path / "runs")
    rewrite_logprobs(runs / "org__llm", "mmau_blind", change)
    before = tree(tmp_path)
    assert audit(runs, out=tmp_path / "audit") == 2
    refused(capsys, f"{runs / 'org__llm'}", "_samples_mmau_blind.jsonl: record 1 (question 'cap-0')", message)
    assert tree(tmp_path) == before


def test_option_scoring_may_sum_above_one_but_never_a_positive_log_probability(tmp_path, capsys):
    # option texts may repeat or extend each other: their probabilities need not add up to at most 1
    runs = tmp_path / "runs"
    records = mmau("blind", [1, 0, 1, 0, 1, 1])
    for r in records:
        r["scoring"], r["option_logprobs"] = "option", [-0.1 if x > -1 else -0.5 for x in r["option_logprobs"]]
    write_run(runs, "org/llm", {"mmau_blind": records}, model_type="visdep_llm")
    assert audit(runs, out=tmp_path / "audit") == 0


def test_samples_copied_from_another_run_are_refused_by_its_own_accuracy(tmp_path, capsys):
    runs = tmp_path / "runs"
    v1 = write_run(runs, "org/v1", {"mmau_video": mmau("video", [1] * 6)})
    v2 = write_run(runs, "org/v2", {"mmau_video": mmau("video", [1, 1, 1, 1, 0, 0])})
    (v2_samples,) = v2.glob("*_samples_*")
    v2_samples.write_bytes(next(v1.glob("*_samples_*")).read_bytes())
    before = tree(tmp_path)
    assert audit(runs, out=tmp_path / "audit") == 2
    refused(capsys, str(v2_samples), "accuracy 100.0%", "says lmms-eval measured 66.7%", "not this run's")
    assert tree(tmp_path) == before


def test_a_list_shaped_dropped_section_is_an_input_error(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [1] * 6)}, visdep={"dropped": [{"question_id": "x"}]})
    assert audit(runs, out=tmp_path / "audit") == 2
    refused(capsys, "_results.json: visdep.dropped must map each task")


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("option, value, message", [
    ("--tau", "nan", "--tau nan: must lie in [0, 1)"),
    ("--tau", "-1", "--tau -1.0: must lie in [0, 1)"),
    ("--tau", "2", "--tau 2.0: must lie in [0, 1)"),
    ("--tau", "1", "--tau 1.0: must lie in [0, 1)"),
    ("--tau", "inf", "--tau inf: must lie in [0, 1)"),
    ("--max-hits", "-1", "--max-hits -1: must be a whole number >= 0"),
    ("--textual-evidence", "nope", "--textual-evidence 'nope': unknown"),
])
def test_options_out_of_range_are_refused_before_anything_is_read(tmp_path, capsys, option, value, message):
    runs = two_models(tmp_path / "runs")
    before = tree(tmp_path)
    assert main(["audit", str(runs), "--out", str(tmp_path / "audit"), option, value]) == 2
    refused(capsys, "visdep audit: error: ", message)
    assert tree(tmp_path) == before


def test_a_panel_tau_out_of_range_is_refused(tmp_path, capsys):
    runs = two_models(tmp_path / "runs")
    panel = tmp_path / "panel.yaml"
    panel.write_text(yaml.safe_dump({"text_llms": ["org/llm"], "vlms": ["org/vlm"], "tau": 1.5}))
    assert audit(runs, "--panel", panel, out=tmp_path / "audit") == 2
    refused(capsys, f"{panel}: tau must lie in [0, 1)")


@pytest.mark.parametrize("argv, message", [
    (["--folds", "1"], "--folds 1: must be at least 2"),
    (["--n-estimators", "0"], "--n-estimators 0: must be at least 1"),
    (["--min-samples-leaf", "0"], "--min-samples-leaf 0: must be at least 1"),
    (["--n-jobs", "0"], "--n-jobs 0: give a number of cores"),
])
def test_stress_test_options_out_of_range_are_refused(tmp_path, vru_root, capsys, argv, message):
    assert main(["tst", "--benchmark", "vru_accident", "--root", str(vru_root), "--out", str(tmp_path / "tst"),
                 *argv]) == 2
    refused(capsys, "visdep tst: error: ", message)
    assert not (tmp_path / "tst").exists()


def test_panel_by_name(tmp_path):
    from lmms_eval_tasks.shipped import config_file

    paper = yaml.safe_load(config_file("paper", "panels").read_text())
    runs = write_panel_runs(tmp_path / "runs", paper)
    assert main(["audit", str(runs), "--panel", "paper", "--out", str(tmp_path / "audit")]) == 0
    manifest = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert manifest["panel"]["text_llms"] == paper["text_llms"] and manifest["panel"]["vlms"] == paper["vlms"]
    assert manifest["panel"]["source"].endswith("panels/paper.yaml")


def test_an_unknown_shipped_name_lists_the_shipped_ones(tmp_path, capsys):
    runs = two_models(tmp_path / "runs")
    assert audit(runs, "--panel", "papr", out=tmp_path / "audit") == 2
    refused(capsys, "--panel papr: no such file, and visdep ships no panel of that name (shipped: paper)")


# --------------------------------------------------------------------------- bugs keep their traceback
def test_a_bug_is_not_reported_as_bad_input(tmp_path, monkeypatch):
    from visdep_metrics.audit import compute

    runs = two_models(tmp_path / "runs")

    def broken(*args, **kwargs):
        raise ValueError("a bug, not the user's input")

    monkeypatch.setattr(compute, "summary_rows", broken)
    with pytest.raises(ValueError, match="a bug"):
        audit(runs, out=tmp_path / "audit")
    assert not (tmp_path / "audit").exists()
    assert issubclass(OptionError, VisdepError)


# --------------------------------------------------------------------------- check-data and benchmark files
SPEC = """name: my_bench
root_default: {root}
annotations: questions.csv
n_options: 3
fields:
  question_id: '{{id}}'
  question: '{{question}}'
  options: ['{{A}}', '{{B}}', '{{C}}']
  answer: '{{answer}}'
  video: 'clips/{{id}}.mp4'
answer_is: letter
"""


def test_check_data_fails_where_a_benchmark_named_is_not_checked(monkeypatch, capsys):
    monkeypatch.setenv("MMAU_ROOT", "")  # set, but empty
    monkeypatch.delenv("VRU_ACCIDENT_ROOT", raising=False)
    assert main(["check-data", "mmau", "vru_accident"]) == 1
    out = capsys.readouterr().out
    assert "mmau: ERROR not checked (MMAU_ROOT is set but empty)" in out
    assert "vru_accident: ERROR not checked (VRU_ACCIDENT_ROOT is not set)" in out
    assert "none of MMAU_ROOT, VRU_ACCIDENT_ROOT is set" in out
    assert main(["check-data", "mmau_blind"]) == 1  # a task's name, not a benchmark's
    out = capsys.readouterr().out
    assert "mmau_blind: ERROR unknown benchmark 'mmau_blind'" in out and "none of  is set" not in out


def test_a_latin1_annotation_file_names_the_file(tmp_path, capsys):
    (tmp_path / "questions.csv").write_bytes("id,question,A,B,C,answer\n1,caf\xe9?,x,y,z,A\n".encode("latin-1"))
    spec = tmp_path / "my_bench.yaml"
    spec.write_text(SPEC.format(root=tmp_path))
    before = tree(tmp_path)
    assert main(["check-data", "--spec", str(spec)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'questions.csv'}: not UTF-8 text (byte 0xe9 on line 2, at byte 30)" in out
    assert main(["spec", "report", str(spec), "--out", str(tmp_path / "look")]) == 2
    refused(capsys, "visdep spec report: error: ", "questions.csv: not UTF-8 text")
    assert tree(tmp_path) == before


def test_a_missing_root_default_is_named_as_such(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MY_BENCH_ROOT", raising=False)
    spec = tmp_path / "my_bench.yaml"
    spec.write_text(SPEC.format(root=tmp_path / "nowhere"))
    assert main(["spec", "report", str(spec), "--out", str(tmp_path / "look")]) == 2
    line = refused(capsys, f"MY_BENCH_ROOT unset, so the spec's root_default {tmp_path / 'nowhere'}: not a directory")
    assert "MY_BENCH_ROOT=" not in line
    assert not (tmp_path / "look").exists()


def test_spec_report_replaces_its_own_output_and_refuses_an_out_holding_its_spec(tmp_path, capsys):
    rows = "".join(f"{i},question {i}?,red {i},blue,green,{'ABC'[i % 3]}\n" for i in range(30))
    (tmp_path / "questions.csv").write_text("id,question,A,B,C,answer\n" + rows)
    spec = tmp_path / "my_bench.yaml"
    spec.write_text(SPEC.format(root=tmp_path))
    out = tmp_path / "look"
    report = ["spec", "report", str(spec), "--n-estimators", "5", "--folds", "2"]
    assert main([*report, "--out", str(out)]) == 0
    assert main([*report, "--out", str(out)]) == 0
    assert "report.md" in json.loads((out / FILE_LIST).read_text())["files"]
    before = tree(tmp_path)
    assert main([*report, "--out", str(tmp_path)]) == 2
    refused(capsys, "holds the input")
    assert tree(tmp_path) == before


def test_a_shipped_spec_by_name(monkeypatch, capsys):
    monkeypatch.delenv("MMAU_ROOT", raising=False)
    assert main(["check-data", "--spec", "mmau_cap"]) == 1  # found by name; its root is not set here
    assert "mmau_cap: ERROR not checked (MMAU_ROOT is not set)" in capsys.readouterr().out
    assert main(["check-data", "--spec", "mmau_capp"]) == 2
    refused(capsys, "--spec mmau_capp: no such file, and visdep ships no spec of that name (shipped: mlvu_release, "
                    "mmau_cap, vru_accident)")
