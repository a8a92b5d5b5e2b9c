"""`visdep`: every command reports bad input one way, `visdep <command>: error: <message>` on stderr, exit 2."""

import pytest

from tests.helpers.runs import records_from_correct, write_run
from visdep_metrics.cli.main import main


@pytest.mark.parametrize("argv, command, message", [
    (["audit", "{tmp}/no_such_folder", "--out", "{tmp}/audit"], "audit", "no_such_folder: not a folder"),
    (["audit", "{tmp}/runs", "--out", "{tmp}/audit", "--panel", "{tmp}/no_panel.yaml"], "audit",
     "no_panel.yaml: not found"),
    (["tst", "--benchmark", "nope", "--out", "{tmp}/tst"], "tst", "unknown benchmark 'nope'"),
    (["tst", "--out", "{tmp}/tst"], "tst", "name the benchmark: --benchmark NAME"),
    (["ibp", "--benchmark", "mmau", "--root", "{tmp}/no_download", "--out", "{tmp}/ibp", "--budget", "3",
      "--batch-size", "1"], "ibp", "no_download"),
    (["tst", "--benchmark", "mmau", "--out", "{tmp}/precious"], "tst", "holds what visdep tst did not write there"),
])
def test_input_errors_are_reported_in_one_line(tmp_path, capsys, argv, command, message):
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": records_from_correct("mmau", "blind", [1, 0], [5, 5])})
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"visdep {command}: error: ") and message in err[-1]
    assert not (tmp_path / "audit").exists() and not (tmp_path / "tst").exists()
    assert [p.name for p in (tmp_path / "precious").iterdir()] == ["notes.txt"]


def test_a_nested_command_is_named_in_full(tmp_path, capsys):
    assert main(["spec", "init", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("visdep spec init: error: ")


def test_only_the_process_own_command_freezes_its_objects_at_the_end(tmp_path, monkeypatch):
    # the `visdep` script (argv None) freezes what is alive as it returns, so the interpreter's shutdown skips it;
    # main([...]) from a caller that goes on (the tests, a notebook) must leave the collector as it was
    import gc

    before = gc.get_freeze_count()
    assert main(["audit", str(tmp_path / "no_such_folder"), "--out", str(tmp_path / "audit")]) == 2
    assert gc.get_freeze_count() == before
    monkeypatch.setattr("sys.argv", ["visdep", "audit", str(tmp_path / "no_such_folder"), "--out",
                                     str(tmp_path / "audit")])
    try:
        assert main() == 2
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
