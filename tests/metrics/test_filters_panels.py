"""Filters, threshold sweeps and panel files."""

from pathlib import Path

import numpy as np
import pytest

from visdep_metrics.audit.diagnostics import subset_diagnostics
from visdep_metrics.audit.filters import b_clean_keep, llm_inspector_keep, shortcut_keep, threshold_sweep
from visdep_metrics.audit.panels import PanelError, check_panel, inferred_panel, load_panel

REPO = Path(__file__).resolve().parents[2]


def test_baseline_filters_by_hand():
    llm_correct = np.array([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 0]])
    assert llm_inspector_keep(llm_correct, max_hits=1).tolist() == [False, True, True, True]
    assert llm_inspector_keep(llm_correct, max_hits=0).tolist() == [False, False, True, False]
    assert b_clean_keep(np.array([[0, 1, 0], [0, 0, 1]])).tolist() == [True, False, False]
    assert shortcut_keep(np.array([0.1, 0.2, -1.0, np.nan]), 0.1).tolist() == [True, False, True, False]


def test_sweep_equals_filtering_at_each_tau():
    rng = np.random.default_rng(0)
    n = 200
    signal = rng.normal(0, 0.5, n)
    signal[:5] = np.nan
    k = rng.choice([2, 4, 5], n)
    cb = (rng.random((3, n)) < 0.5).astype(float)
    cv = (rng.random((3, n)) < 0.6).astype(float)
    cv[2] = np.nan  # a text-only model
    taus = np.array([-2.0, -0.3, 0.0, 0.1, 0.45, 3.0])
    sweep = threshold_sweep(signal, taus, cb, cv, k)
    for i, tau in enumerate(taus):
        keep = shortcut_keep(signal, tau)
        assert sweep["n_kept"][i] == keep.sum()
        if not keep.any():
            assert np.isnan(sweep["blind_gap"][i]).all()
            continue
        d = subset_diagnostics(keep, cb, cv, k)
        for name in ("acc_blind", "acc_video", "blind_gap", "visual_gain"):
            np.testing.assert_allclose(sweep[name][i], d[name], equal_nan=True)
    assert sweep["n_kept"][-1] == n - 5  # questions without a score are never kept


def test_paper_panel_file():
    panel = load_panel(REPO / "configs" / "panels" / "paper.yaml")
    assert panel.text_llms == ("Qwen/Qwen2.5-14B", "meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.1")
    assert panel.vlms == ("Qwen/Qwen2.5-VL-7B-Instruct", "OpenGVLab/InternVL3_5-8B-HF")
    assert panel.held_out == ("llava-hf/llava-onevision-qwen2-7b-ov-hf",)
    assert panel.inspector == panel.text_llms + ("deepseek-ai/deepseek-llm-7b-chat",)
    assert (panel.tau, panel.inspector_max_hits) == (0.1, 1)
    assert panel.role("llava-hf/llava-onevision-qwen2-7b-ov-hf", set()) == "held_out"


def test_inferred_panel_and_roles():
    panel = inferred_panel(["a", "b", "c"], vision_models={"b"})
    assert panel.text_llms == ("a", "c") and panel.vlms == ("b",) and panel.held_out == ()
    assert [panel.role(m, {"b"}) for m in "abc"] == ["panel_llm", "panel_vlm", "panel_llm"]


@pytest.mark.parametrize("text, message", [
    ("text_llms: [a]\nvlm: [b]\n", "unknown key"),
    ("text_llms: [a]\nvlms: [b]\nheld_out: [b]\n", "also sit in a panel"),
    ("text_llms: a\n", "must be a list"),
    ("text_llms: [a, a]\n", "twice"),
    ("held_out: [c]\n", "neither text_llms nor vlms"),
    ("text_llms: [a]\ntau: high\n", r"tau must lie in \[0, 1\)"),
    ("text_llms: [a]\n: [\n", "not valid YAML"),
])
def test_bad_panel_files(tmp_path, text, message):
    path = tmp_path / "panel.yaml"
    path.write_text(text)
    with pytest.raises(PanelError, match=message):
        load_panel(path)


def test_panel_must_fit_the_runs(tmp_path):
    path = tmp_path / "panel.yaml"
    path.write_text("text_llms: [a]\nvlms: [b]\n")
    panel = load_panel(path)
    with pytest.raises(PanelError, match=r"no runs of \['b'\]; models found: \['a', 'c'\]"):
        check_panel(panel, ["a", "c"], {"c"})
    with pytest.raises(PanelError, match=r"vlms \['b'\] have only blind runs"):
        check_panel(panel, ["a", "b"], set())
