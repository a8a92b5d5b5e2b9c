"""#54, the audit's side: run folders, `--tst` folders and panels that hold a FIFO, a link to a device, a 10 MB
model name or a summary nested 100,000 deep. `visdep audit` said nothing for ever, grew without end, or printed a
traceback on 2cae6e3; each is now exit 2 and one line naming the file, within seconds."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.hostile import deadline, deeply_nested, fifo, one_line
from tests.helpers.runs import records_from_correct, write_run
from visdep_metrics.cli.main import main

DATE = "20260101_120000"


def mmau(mode, correct):
    return records_from_correct("mmau", mode, correct, [5] * len(correct),
                                videos=[f"v{i // 2}.mp4" for i in range(len(correct))])


def two_models(runs):
    write_run(runs, "org/llm", {"mmau_blind": mmau("blind", [1, 0, 1, 0, 1, 1, 0, 1])}, model_type="visdep_llm")
    write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", [0, 0, 1, 0, 1, 0, 0, 1]),
                                "mmau_video": mmau("video", [1, 1, 1, 0, 1, 0, 1, 1])})


def audit_refused(capsys, args, match: str) -> str:
    with deadline(60):
        assert main(["audit", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("visdep audit: error: "), err[-3000:]
    one_line(err)
    assert match in err, err
    return err


def replace_with(path, make) -> None:
    path.unlink()
    make(path)


@pytest.mark.parametrize("which", ["org__vlm/{d}_samples_mmau_video.jsonl", "org__vlm/{d}_results.json"])
def test_a_fifo_among_the_runs_is_refused_in_one_line(which, tmp_path, capsys):
    runs = tmp_path / "runs"
    two_models(runs)
    target = runs / which.format(d=DATE)
    replace_with(target, fifo)
    audit_refused(capsys, [str(runs), "--out", str(tmp_path / "out")], f"{target}: a FIFO (named pipe), not a file")
    assert not (tmp_path / "out").exists()


def test_a_samples_file_linked_to_dev_zero_is_refused_not_read(tmp_path, capsys):
    """It grew memory without end (13 GB in 66 s)."""
    runs = tmp_path / "runs"
    two_models(runs)
    target = runs / f"org__vlm/{DATE}_samples_mmau_video.jsonl"
    replace_with(target, lambda p: p.symlink_to("/dev/zero"))
    audit_refused(capsys, [str(runs), "--out", str(tmp_path / "out")], f"{target}: a device, not a file")


def test_a_10_mb_model_name_is_refused_naming_its_length(tmp_path, capsys):
    """It asked for 5.6 GiB (every table's and plot's label)."""
    runs = tmp_path / "runs"
    two_models(runs)
    results = runs / f"org__vlm/{DATE}_results.json"
    data = json.loads(results.read_text())
    data["config"]["model_args"] = "pretrained=" + "m" * 10_000_000 + ",max_frames=16"
    results.write_text(json.dumps(data))
    err = audit_refused(capsys, [str(runs), "--out", str(tmp_path / "out")],
                        f"{results}: the model name is 10,000,000 characters long ('{'m' * 40}'... (9,999,960 more "
                        f"characters)); a model name or path is at most 4,096")
    assert len(err) < 600


def test_a_tst_summary_nested_deep_and_a_fifo_s_x_are_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    two_models(runs)
    tst = tmp_path / "tst"
    tst.mkdir()
    (tst / "s_x.csv").write_text("question_id,n_options,s,correct\n")
    (tst / "summary.json").write_text('{"benchmark": ' + deeply_nested() + "}")
    audit_refused(capsys, [str(runs), "--tst", str(tst), "--out", str(tmp_path / "out")],
                  f"{tst / 'summary.json'}: nested too deeply to read")
    (tst / "summary.json").write_text('{"benchmark": "mmau"}')
    replace_with(tst / "s_x.csv", fifo)
    audit_refused(capsys, [str(runs), "--tst", str(tst), "--out", str(tmp_path / "out")],
                  f"{tst / 's_x.csv'}: a FIFO (named pipe), not a file")


def test_a_panel_that_is_a_fifo_or_a_device_link_is_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    two_models(runs)
    panel = fifo(tmp_path / "panel.yaml")
    audit_refused(capsys, [str(runs), "--panel", str(panel), "--out", str(tmp_path / "out")],
                  f"{panel}: a FIFO (named pipe), not a file")
    os.unlink(panel)
    panel.symlink_to("/dev/zero")
    audit_refused(capsys, [str(runs), "--panel", str(panel), "--out", str(tmp_path / "out")],
                  f"{panel}: a device, not a file")
