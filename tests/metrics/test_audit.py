"""The audit on hand-written lmms-eval folders: paper table 1 rows, T/V/S in questions.csv, filters, exports,
the `visdep tst` join, the report and its files."""

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers.hand_example import ANSWER, L1, L2, V1_BLIND, V1_VIDEO, h_norm
from tests.helpers.runs import records_from_correct, visdep_record, write_run
from visdep_metrics.audit import plots
from visdep_metrics.audit.compute import run_audit
from visdep_metrics.audit.nonvisual import StressTestError
from visdep_metrics.audit.report import write_audit
from visdep_metrics.cli.main import main


def first_correct(n, n_correct):
    return (np.arange(n) < n_correct).astype(int)


@pytest.fixture(scope="module")
def paper_rows(tmp_path_factory):
    """InternVL 3.5 8B and Llama 3.1 8B rows of the paper's table 1, as runs with those accuracies."""
    root = tmp_path_factory.mktemp("paper_rows")
    internvl = {}
    for bench, n, k, blind, video in (("mmau", 2453, [5] * 2453, 1480, 1248),
                                      ("accidentbench", 10000, [2] * 96 + [4] * 9904, 3043, 3776),
                                      ("vru_accident", 6000, [4] * 6000, 2577, 3771)):
        internvl[f"{bench}_blind"] = records_from_correct(bench, "blind", first_correct(n, blind), k)
        internvl[f"{bench}_video"] = records_from_correct(bench, "video", first_correct(n, video), k)
    write_run(root, "OpenGVLab/InternVL3_5-8B-HF", internvl)
    write_run(root, "meta-llama/Llama-3.1-8B",
              {"mmau_blind": records_from_correct("mmau", "blind", first_correct(2453, 1143), [5] * 2453)},
              model_type="visdep_llm")
    return run_audit([root])


@pytest.mark.parametrize("model, bench, acc_b, acc_v, bg, vg", [
    ("OpenGVLab/InternVL3_5-8B-HF", "mmau", 60.33, 50.88, 40.33, -9.46),  # 50.88 - 60.33 = -9.45 from rounded values
    ("OpenGVLab/InternVL3_5-8B-HF", "accidentbench", 30.43, 37.76, 5.19, 7.33),
    ("OpenGVLab/InternVL3_5-8B-HF", "vru_accident", 42.95, 62.85, 17.95, 19.90),
    ("meta-llama/Llama-3.1-8B", "mmau", 46.60, None, 26.60, None),
])
def test_paper_table1_rows_from_constructed_runs(paper_rows, model, bench, acc_b, acc_v, bg, vg):
    s = paper_rows.summary
    row = s[(s["model"] == model) & (s["benchmark"] == bench) & (s["subset"] == "full") & (s["category"] == "all")]
    row = row.iloc[0]
    assert round(row["acc_blind"], 2) == acc_b and round(row["blind_gap"], 2) == bg
    if acc_v is None:  # text-only: blind columns only
        assert np.isnan(row["acc_video"]) and np.isnan(row["visual_gain"]) and np.isnan(row["visual_gain_lo"])
        assert row["role"] == "panel_llm"
    else:
        assert round(row["acc_video"], 2) == acc_v and round(row["visual_gain"], 2) == vg
        assert row["visual_gain_lo"] < row["visual_gain"] < row["visual_gain_hi"]
    assert row["acc_blind_lo"] < row["acc_blind"] < row["acc_blind_hi"]
    # BG's interval is Acc_B's shifted by chance when K is constant
    if bench != "accidentbench":
        assert row["blind_gap_lo"] == pytest.approx(row["acc_blind_lo"] - row["chance"])


def test_chance_of_varying_option_counts(paper_rows):
    s = paper_rows.summary
    assert s.loc[s["benchmark"] == "accidentbench", "chance"].iloc[0] == pytest.approx(25.24)


def toy_records(mode, probabilities, shift=-2.0):
    return [visdep_record(f"cap-{i}", "mmau", mode, ANSWER[i], list(np.log(p) + shift))
            for i, p in enumerate(probabilities)]


@pytest.fixture
def toy_runs(tmp_path):
    """The three-model toy panel of test_diagnostics (L1, L2 text-only; V1 a VLM) as lmms-eval folders."""
    root = tmp_path / "runs"
    write_run(root, "org/L1", {"mmau_blind": toy_records("blind", L1)}, model_type="visdep_llm")
    write_run(root, "org/L2", {"mmau_blind": toy_records("blind", L2)}, model_type="visdep_llm")
    write_run(root, "org/V1", {"mmau_blind": toy_records("blind", V1_BLIND),
                               "mmau_video": toy_records("video", V1_VIDEO)})
    return root


def test_toy_panel_scores_filters_and_exports(toy_runs, tmp_path):
    out = tmp_path / "audit"
    assert main(["audit", str(toy_runs), "--out", str(out)]) == 0
    q = pd.read_csv(out / "questions.csv")
    t_hand = [(1 - h_norm(L1[0])) / 2, (1 - h_norm(L1[1])) / 2, (2 - h_norm(L1[2]) - h_norm(L2[2])) / 2]
    v_hand = [(0.9 - 0.6) / (1 - 1 / 2), 0.0, (0.3 - 0.9) / (1 - 1 / 3)]
    assert q["question_id"].tolist() == ["cap-0", "cap-1", "cap-2"]
    assert q["T"].to_numpy() == pytest.approx(t_hand)
    assert q["V"].to_numpy() == pytest.approx(v_hand, abs=1e-12)
    assert q["S"].to_numpy() == pytest.approx(np.array(t_hand) - np.array(v_hand))
    assert q["grounded"].tolist() == [True, False, False]
    assert q["inspector_hits"].tolist() == [1, 1, 2]
    assert q["kept_llm_inspector"].tolist() == [True, True, False]
    assert q["kept_b_clean"].tolist() == [False, False, False]  # V1 answers all three correctly blind
    f = pd.read_csv(out / "filters.csv").set_index(["filter", "model"])
    assert f.loc[("s_score", "org/V1"), "n_kept"] == 1
    assert f.loc[("s_score", "org/V1"), "acc_video"] == 100.0  # V1 with video is right on cap-0
    assert f.loc[("llm_inspector", "org/V1"), "n_kept"] == 2
    assert f.loc[("b_clean", "org/V1"), "n_kept"] == 0 and np.isnan(f.loc[("b_clean", "org/V1"), "acc_video"])
    assert (out / "tasks" / "mmau_grounded_ids.jsonl").read_text() == '{"question_id": "cap-0", "benchmark": "mmau"}\n'
    assert {p.name for p in (out / "tasks").glob("*.yaml")} == {"mmau_blind_grounded.yaml", "mmau_video_grounded.yaml"}
    s = pd.read_csv(out / "summary.csv")
    assert set(s["subset"]) == {"full", "grounded"}
    for column in ("model", "benchmark", "n", "chance", "acc_blind", "acc_video", "blind_gap", "visual_gain",
                   "acc_blind_lo", "acc_blind_hi", "visual_gain_lo", "visual_gain_hi"):
        assert column in s.columns
    sweep = pd.read_csv(out / "sweep.csv")
    assert set(sweep["signal"]) == {"T", "-V", "S"}
    at = sweep[(sweep["signal"] == "S") & (sweep["tau"] == 0.1) & (sweep["model"] == "org/V1")].iloc[0]
    assert at["n_kept"] == 1 and at["acc_video"] == 100.0


def test_report_and_outputs(toy_tree, tmp_path):
    panel = tmp_path / "panel.yaml"
    panel.write_text("text_llms: [org/llm-a, org/llm-b]\nvlms: [org/vlm-a, org/vlm-b]\nheld_out: [org/vlm-heldout]\n"
                     "tau: 0.3\n")
    audit = run_audit([toy_tree], panel_path=panel)
    assert audit.tau == 0.3
    assert audit.roles == {"org/llm-a": "panel_llm", "org/llm-b": "panel_llm", "org/vlm-a": "panel_vlm",
                           "org/vlm-b": "panel_vlm", "org/vlm-heldout": "held_out"}
    out = write_audit(audit, tmp_path / "audit")
    report = (out / "report.md").read_text()
    for heading in ("## Global diagnosis", "Average VLM", "## Filtering strategies",
                    "**MM-AU, vlm-heldout** (held out)", "## Before and after filtering", "Filtered (G) Acc_V",
                    "## Threshold sweeps", "## Files used"):
        assert heading in report
    # Table 1's Average VLM row is the mean over the three VLMs, here computed from the samples files themselves
    accuracy = {}
    for model in ("org/vlm-a", "org/vlm-b", "org/vlm-heldout"):
        for mode in ("blind", "video"):
            (path,) = (toy_tree / model.replace("/", "__")).glob(f"*_samples_mmau_{mode}.jsonl")
            records = [json.loads(line)["visdep"] for line in path.read_text().splitlines()]
            accuracy[model, mode] = 100 * np.mean([np.argmax(r["option_logprobs"]) == r["answer_index"]
                                                   for r in records])
    acc_b = np.mean([accuracy[m, "blind"] for m, _ in accuracy if _ == "blind"])
    acc_v = np.mean([accuracy[m, "video"] for m, _ in accuracy if _ == "video"])
    assert f"| Average VLM | {acc_b:.2f} | {acc_v:.2f} | {acc_b - 20:.2f} | {acc_v - acc_b:.2f} |" in report
    for name in ("diagnostic_space.png", "sweeps.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    legend = plots.diagnostic_space(audit).axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["MM-AU", "its grounded subset"]
    manifest = json.loads((out / "audit.json").read_text())
    assert len(manifest["files_used"]) == 8 and manifest["tau"] == 0.3
    # writing again into an earlier audit output replaces it
    write_audit(audit, out)
    assert (out / "report.md").read_text() == report


def test_plots_that_fail_to_draw_fail_the_audit_and_write_nothing(toy_tree, tmp_path, monkeypatch):
    def broken(figure_audit):
        raise RuntimeError("no ink")

    audit = run_audit([toy_tree])
    monkeypatch.setattr(plots, "sweep_figure", broken)
    with pytest.raises(RuntimeError, match="no ink"):
        write_audit(audit, tmp_path / "audit")
    assert [p.name for p in tmp_path.iterdir()] == [toy_tree.name]  # neither OUT nor its staging folder


def test_grounded_subset_joined_with_tst_scores(toy_runs, tmp_path):
    tst = tmp_path / "tst_mmau"
    tst.mkdir()
    pd.DataFrame({"question_id": ["cap-2", "cap-0", "cap-1"], "category": ["", "", ""], "n_options": [3, 2, 4],
                  "s": [0.9, 0.7, 0.2], "s_minus_chance": [0.57, 0.2, -0.05], "fold": [0, 1, 2],
                  "correct": [1, 1, 0]}).to_csv(tst / "s_x.csv", index=False)
    (tst / "summary.json").write_text(json.dumps({"benchmark": "mmau", "accuracy": 2 / 3, "chance": 0.36}))
    out = tmp_path / "audit"
    assert main(["audit", str(toy_runs), "--out", str(out), "--tst", str(tst)]) == 0
    q = pd.read_csv(out / "questions.csv")
    assert q["s_tst"].tolist() == [0.7, 0.2, 0.9]
    report = (out / "report.md").read_text()
    # non-visual solvability: full = mean(correct) = 2/3; grounded subset {cap-0} = 1
    assert "| MM-AU | full | 3 | 66.67 |" in report
    assert "| MM-AU | grounded | 1 | 100.00 |" in report


def test_tst_folders_that_do_not_fit(toy_runs, tmp_path):
    tst = tmp_path / "tst"
    tst.mkdir()
    (tst / "summary.json").write_text(json.dumps({"benchmark": "mmau", "accuracy": 0.5, "chance": 0.2}))
    pd.DataFrame({"question_id": ["cap-0", "cap-9"], "category": ["", ""], "n_options": [2, 4], "s": [0.1, 0.2],
                  "s_minus_chance": [0, 0], "fold": [0, 1], "correct": [1, 0]}).to_csv(tst / "s_x.csv", index=False)
    with pytest.raises(StressTestError, match=r"2 audited question\(s\) have no score.*1 scored question\(s\) were "
                                              r"not audited \(e.g. \['cap-9'\]\)"):
        run_audit([toy_runs], tst_dirs=[tst])
    (tst / "s_x.csv").write_text("question_id,s\ncap-0,0.1\n")
    with pytest.raises(StressTestError, match="missing column"):
        run_audit([toy_runs], tst_dirs=[tst])


def test_categories_get_their_own_rows(tmp_path):
    cats = ["location", "road type"] * 20
    correct = [1, 0, 1, 1] * 10
    write_run(tmp_path, "org/vlm", {
        "vru_accident_blind": records_from_correct("vru_accident", "blind", correct, [4] * 40, cats),
        "vru_accident_video": records_from_correct("vru_accident", "video", [1] * 40, [4] * 40, cats)})
    s = run_audit([tmp_path]).summary
    rows = s[s["subset"] == "full"].set_index("category")
    assert rows.loc["all", "n"] == 40 and rows.loc["location", "n"] == 20
    assert rows.loc["location", "acc_blind"] == 100.0 and rows.loc["road type", "acc_blind"] == 50.0
    assert rows.loc["road type", "visual_gain"] == 50.0


def test_report_names_the_files_used_and_replaced(tmp_path):
    runs = tmp_path / "runs"
    wrong, right = (records_from_correct("mmau", "blind", [c] * 6, [5] * 6) for c in (0, 1))
    old = write_run(runs / "monday", "org/vlm", {"mmau_blind": wrong}, date="20260101_100000")
    new = write_run(runs / "tuesday", "org/vlm", {"mmau_blind": right}, date="20260102_100000")
    out = write_audit(run_audit([runs]), tmp_path / "audit")
    report = (out / "report.md").read_text()
    old_file, new_file = next(old.glob("*_samples_*")), next(new.glob("*_samples_*"))
    assert f"| org/vlm | mmau_blind | 20260102_100000 | {new_file} |" in report
    assert f"- {old_file} → {new_file}" in report
    assert json.loads((out / "audit.json").read_text())["replaced"] == [{"replaced": str(old_file),
                                                                          "by": str(new_file)}]
    assert pd.read_csv(out / "summary.csv")["acc_blind"].tolist() == [100.0]


def test_benchmarks_audited_side_by_side_equal_each_audited_alone(tmp_path):
    import warnings

    rng = np.random.default_rng(11)
    sizes = {"mmau": (60, [5]), "vru_accident": (48, [4]), "accidentbench": (50, [2, 4, 6])}
    for bench, (n, ks) in sizes.items():
        k = rng.choice(ks, n).tolist()
        for model in ("org/vlm-a", "org/vlm-b"):
            write_run(tmp_path / "all", model, {
                f"{bench}_{mode}": records_from_correct(bench, mode, rng.integers(0, 2, n), k)
                for mode in ("blind", "video")}, subfolder=f"{model.replace('/', '__')}_{bench}")
    filters = list(warnings.filters)
    together = run_audit([tmp_path / "all"]).summary
    assert warnings.filters == filters
    alone = pd.concat([run_audit(sorted((tmp_path / "all").glob(f"*_{bench}"))).summary
                       for bench in ("mmau", "vru_accident", "accidentbench")], ignore_index=True)
    assert together["benchmark"].unique().tolist() == ["mmau", "vru_accident", "accidentbench"]
    pd.testing.assert_frame_equal(together, alone)


def test_provenance_umask_and_panel_notes(toy_tree, tmp_path):
    import hashlib
    import os

    panel = tmp_path / "panel.yaml"
    # an inspector LLM that has runs only on another benchmark: the filter says it left it out
    write_run(tmp_path / "other", "org/inspector", {"vru_accident_blind": records_from_correct(
        "vru_accident", "blind", [1, 0], [4, 4])}, model_type="visdep_llm")
    panel.write_text("text_llms: [org/llm-a, org/llm-b]\nvlms: [org/vlm-a, org/vlm-b]\n"
                     "inspector_llms: [org/llm-a, org/inspector]\n")
    old = os.umask(0o027)
    try:
        out = write_audit(run_audit([toy_tree, tmp_path / "other"], panel_path=panel),
                          tmp_path / "audit")
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777) == 0o750  # as mkdir under this umask makes it, not mkdtemp's 0700
    manifest = json.loads((out / "audit.json").read_text())
    for path in [*toy_tree.rglob("*.json*"), panel]:
        assert manifest["input_sha256"][str(path)] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert {"python", "visdep", "lmms-eval", "numpy", "scipy", "pandas"} <= set(manifest["versions"])
    assert "mmau: LLM-Inspector leaves out ['org/inspector'] (panel inspector_llms): no run of it here" in \
        manifest["notes"]


def test_sweep_spans_the_whole_range_of_each_signal(toy_runs):
    # K = 2, 4, 3: V(q) can reach K/(K-1) = 2, so S = T - V spans [-2, 3] and -V [-2, 2]
    sweep = run_audit([toy_runs]).sweep
    ranges = sweep.groupby("signal")["tau"].agg(["min", "max"])
    assert ranges.loc["S"].tolist() == [-2.0, 3.0]
    assert ranges.loc["-V"].tolist() == [-2.0, 2.0]
    assert ranges.loc["T"].tolist() == [0.0, 1.0]


def test_highest_s_questions_come_with_the_prompt_lmms_eval_logged(toy_runs, tmp_path):
    expected = {q: f"question {q}\nA. ...\nAnswer with the option's letter from the given choices directly."
                for q in ("cap-0", "cap-1", "cap-2")}  # what conftest.sample_line logs as `input`
    top = run_audit([toy_runs]).top_shortcuts
    # S by hand (test_toy_panel_scores_filters_and_exports): cap-2 highest, then cap-1, then cap-0
    assert top["question_id"].tolist() == ["cap-2", "cap-1", "cap-0"] and top["rank"].tolist() == [1, 2, 3]
    assert top["prompt"].tolist() == [expected[q] for q in top["question_id"]]
    # lines in rank order, with blank and whitespace-only lines between them: the prompts still match
    (path,) = (toy_runs / "org__L1").glob("*_samples_mmau_blind.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[2], "", lines[0], "   ", lines[1]]) + "\n")
    top = run_audit([toy_runs]).top_shortcuts
    assert top["prompt"].tolist() == [expected[q] for q in top["question_id"]]
    report = (write_audit(run_audit([toy_runs]), tmp_path / "audit") / "report.md").read_text()
    assert "## The 20 highest-S questions" in report and "   > question cap-2\n   > A. ..." in report


def test_verdicts_say_no_more_than_the_intervals_show(tmp_path):
    # MM-AU (K = 5): blind exactly at chance, the video lifts: no text shortcut detected, but not "needs the video";
    # VRU-Accident (K = 4): blind far below chance, the video lifts: needs the video
    n = 200
    videos = [f"v{q // 2}.mp4" for q in range(n)]
    runs = tmp_path / "runs"
    for model in ("org/vlm-a", "org/vlm-b"):
        write_run(runs, model, {
            "mmau_blind": records_from_correct("mmau", "blind", np.arange(n) % 5 == 0, [5] * n, videos=videos),
            "mmau_video": records_from_correct("mmau", "video", np.arange(n) % 5 != 4, [5] * n, videos=videos),
            "vru_accident_blind": records_from_correct("vru_accident", "blind", np.arange(n) % 20 == 0, [4] * n,
                                                       videos=videos),
            "vru_accident_video": records_from_correct("vru_accident", "video", np.arange(n) % 5 != 4, [4] * n,
                                                       videos=videos)})
    report = (write_audit(run_audit([runs]), tmp_path / "audit") / "report.md").read_text()
    mmau, vru = (next(line for line in report.splitlines() if line.startswith(f"- **{b}**"))
                 for b in ("MM-AU", "VRU-Accident"))
    assert "no text shortcut detected at this size: Blind Gap +0.0 points [" in mmau
    assert "independent blind answers" in mmau and "needs the video" not in mmau
    assert "Verdict: the video adds accuracy, and no text shortcut was detected at this size." in mmau
    assert "Blind Gap -20.0 points [" in vru and "Verdict: needs the video" in vru


def test_textual_evidence_is_chosen_by_name(toy_runs, tmp_path, monkeypatch, capsys):
    from visdep_metrics.audit.diagnostics import TEXTUAL_EVIDENCE

    monkeypatch.setitem(TEXTUAL_EVIDENCE, "half", lambda correct, entropy, p_answer, k: np.full(len(k), 0.5))
    out = tmp_path / "audit"
    assert main(["audit", str(toy_runs), "--out", str(out), "--textual-evidence", "half"]) == 0
    assert pd.read_csv(out / "questions.csv")["T"].tolist() == [0.5, 0.5, 0.5]
    assert json.loads((out / "audit.json").read_text())["textual_evidence"] == "half"
    assert "T(q): `half`" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["audit", str(toy_runs), "--out", str(tmp_path / "other"), "--textual-evidence", "nope"]) == 2
    assert "--textual-evidence 'nope': unknown; known: paper" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_questions_the_tasks_left_out_are_listed_by_reason(tmp_path):
    dropped = {"mmau_blind": [
        {"question_id": "cap-7", "where": "mm_au/test.json record 7", "reason": "the answer is not among the options"},
        {"question_id": "cap-9", "where": "mm_au/test.json record 9", "reason": "the answer is not among the options"},
        {"question_id": None, "where": "mm_au/test.json record 12", "reason": "the question text is empty"}]}
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": records_from_correct("mmau", "blind", [1, 0], [5, 5])},
              visdep={"model": None, "dropped": dropped})
    out = write_audit(run_audit([tmp_path / "runs"]), tmp_path / "audit")
    by_reason = json.loads((out / "audit.json").read_text())["dropped_by_tasks"]["mmau_blind"]
    assert [e["question_id"] for e in by_reason["the answer is not among the options"]] == ["cap-7", "cap-9"]
    assert by_reason["the question text is empty"] == [dropped["mmau_blind"][2]]
    report = (out / "report.md").read_text()
    assert "| mmau_blind | the answer is not among the options | 2 | cap-7, cap-9 |" in report
    assert "| mmau_blind | the question text is empty | 1 | mm_au/test.json record 12 |" in report


def test_hashes_of_unchanged_files_are_kept_and_changed_files_hashed_again(toy_runs, tmp_path, monkeypatch):
    import hashlib
    import os

    from visdep_metrics import provenance

    monkeypatch.setenv("VISDEP_HASH_CACHE", str(tmp_path / "cache.json"))
    (path,) = (toy_runs / "org__V1").glob("*_samples_mmau_video.jsonl")
    assert run_audit([toy_runs]).provenance["input_sha256"][str(path)] == \
        hashlib.sha256(path.read_bytes()).hexdigest()
    assert not json.loads((tmp_path / "cache.json").read_text())  # files written just now may change unseen: racy
    monkeypatch.setattr(provenance, "RACY_SECONDS", 0.0)
    run_audit([toy_runs])
    cache = json.loads((tmp_path / "cache.json").read_text())
    assert cache[str(path.resolve())][:-1] == provenance.file_state(os.stat(path))
    # a kept hash is used while the file's state is unchanged: a planted one shows it
    cache[str(path.resolve())][-1] = "f" * 64
    (tmp_path / "cache.json").write_text(json.dumps(cache))
    assert run_audit([toy_runs]).provenance["input_sha256"][str(path)] == "f" * 64
    with open(path, "a") as f:  # any write changes the state
        f.write("\n")
    assert run_audit([toy_runs]).provenance["input_sha256"][str(path)] == \
        hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setenv("VISDEP_HASH_CACHE", "off")
    (tmp_path / "cache.json").unlink()
    run_audit([toy_runs])
    assert not (tmp_path / "cache.json").exists()
