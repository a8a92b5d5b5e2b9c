"""`visdep demo --out` where nothing can be written: one line naming the folder, exit 2, before any model runs."""

from __future__ import annotations

from visdep_metrics.cli.main import main


def test_an_unwritable_out_is_one_line_naming_it(tmp_path, capsys):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a folder\n")
    assert main(["demo", "--out", str(in_the_way / "demo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(in_the_way / "demo") in err[0] and "cannot write there" in err[0], err
    assert in_the_way.read_text() == "not a folder\n"
