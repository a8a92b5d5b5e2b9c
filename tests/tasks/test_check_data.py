"""`visdep check-data`: benchmarks whose variable is unset are skipped, counts are compared with the official ones."""

from __future__ import annotations

from tests.helpers.lmms_cli import BENCHMARK_ENV_VARS
from visdep_metrics.cli.data import count_warnings
from visdep_metrics.cli.main import main


def test_unset_variables_are_skipped_not_errors(monkeypatch, capsys):
    for name in BENCHMARK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    assert main(["check-data"]) == 0
    out = capsys.readouterr().out
    assert "mmau: skipped (MMAU_ROOT is not set)" in out and "ERROR" not in out
    assert "no benchmark checked" in out


def test_shortfalls_against_the_official_counts(fixture_env, monkeypatch, capsys):
    for name in BENCHMARK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MMAU_ROOT", fixture_env["MMAU_ROOT"])  # the synthetic MM-AU: 6 CAP + 4 DADA questions
    monkeypatch.setenv("ACCIDENTBENCH_ROOT", fixture_env["ACCIDENTBENCH_ROOT"])
    assert main(["check-data"]) == 0
    out = capsys.readouterr().out
    assert ("WARNING: 10 records, but the official test set has 2,453 (CAP 1,953 + DADA 500): 2,443 missing"
            in out)
    assert "WARNING: source DADA: 4 questions of the official 500" in out
    assert "vru_accident: skipped (VRU_ACCIDENT_ROOT is not set)" in out
    assert "no official count to compare with" in out  # AccidentBench's land domain


def test_full_counts_give_no_warning():
    sources = ["CAP_DATA"] * 1722 + ["DADA_2000"] * 1338 + ["DoTA"] * 600 + ["MANUAL_DATA"] * 2340
    assert count_warnings("vru_accident", sources) == []
    assert count_warnings("vru_accident", sources[6:]) == [
        "5,994 records, but the official test set has 6,000 (CAP_DATA 1,722 + DADA_2000 1,338 + DoTA 600 + "
        "MANUAL_DATA 2,340): 6 missing (a partial download or an older release?)",
        "source CAP_DATA: 1,716 questions of the official 1,722"]
    # records read but unusable are not missing from the download
    assert count_warnings("mlvu", [None] * 2165, n_unusable=10) == []
    assert count_warnings("trafficqa", ["perspective-1"] * 6075) == []
    assert count_warnings("accidentbench", []) == []
