"""Reading lmms-eval output trees: identity, pairing, replacement, stringified values, and refused inputs."""

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers.runs import log_probabilities, records_from_correct, visdep_record, write_run
from visdep_metrics.audit.pairing import load_runs, plan_runs, read_benchmark, read_task_run, reference_file
from visdep_metrics.audit.runs import model_identity
from visdep_metrics.audit.samples import RunDataError
from visdep_metrics.cli.main import main


def mmau(mode, n=6, prefix="cap", correct=None):
    correct = [1] * n if correct is None else correct
    return records_from_correct("mmau", mode, correct, [5] * n, prefix=prefix)


def test_model_identity_from_pretrained_or_model_type():
    config = {"model": "visdep_vlm", "model_args": "pretrained=Qwen/Qwen2.5-VL-7B-Instruct,max_frames=16"}
    assert model_identity(config) == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert model_identity({"model": "hf", "model_args": {"pretrained": "/models/x", "dtype": "bf16"}}) == "/models/x"
    assert model_identity({"model": "dummy", "model_args": ""}) == "dummy"


def test_any_nesting_pairs_blind_and_video_of_each_model(tmp_path):
    write_run(tmp_path / "a" / "b", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video")})
    write_run(tmp_path / "c", "org/llm", {"mmau_blind": mmau("blind", correct=[1, 0, 1, 0, 1, 0])},
              model_type="visdep_llm", subfolder="x/y/z")
    runs = load_runs([tmp_path])
    bench = runs.benchmarks["mmau"]
    assert bench.models == ["org/llm", "org/vlm"]
    assert bench.has_video.tolist() == [False, True]
    assert runs.vision_models == {"org/vlm"}
    assert bench.correct_blind[0].tolist() == [1, 0, 1, 0, 1, 0]
    assert np.isnan(bench.correct_video[0]).all() and bench.correct_video[1].tolist() == [1.0] * 6


def test_samples_in_rank_order_are_aligned_by_question_id(tmp_path):
    video = mmau("video", correct=[1, 0, 0, 0, 0, 0])
    folder = write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": video})
    path = next(folder.glob("*_samples_mmau_video.jsonl"))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[::2] + lines[1::2]) + "\n")  # rank 0's docs, then rank 1's
    bench = load_runs([tmp_path]).benchmarks["mmau"]
    assert bench.questions["question_id"].tolist() == [f"cap-{i}" for i in range(6)]
    assert bench.correct_video[0].tolist() == [1, 0, 0, 0, 0, 0]


def test_stringified_values_read_like_numbers(tmp_path):
    write_run(tmp_path / "plain", "org/vlm", {"mmau_blind": mmau("blind")})
    folder = write_run(tmp_path / "strings", "org/vlm", {"mmau_blind": mmau("blind")}, date="20260101_120000")
    path = next(folder.glob("*_samples_*.jsonl"))
    lines = []
    for line in path.read_text().splitlines():
        sample = json.loads(line)
        record = sample["visdep"]
        record["option_logprobs"] = [str(x) for x in record["option_logprobs"]]
        record["n_options"], record["answer_index"] = str(record["n_options"]), str(record["answer_index"])
        sample["visdep"] = json.dumps(record)  # the whole record written as a string
        lines.append(json.dumps(sample))
    path.write_text("\n".join(lines) + "\n")
    plain = load_runs([tmp_path / "plain"]).benchmarks["mmau"]
    strings = load_runs([tmp_path / "strings"]).benchmarks["mmau"]
    assert strings.questions.equals(plain.questions)
    assert np.array_equal(strings.entropy_blind, plain.entropy_blind)


def test_later_run_replaces_earlier_and_both_are_named(tmp_path):
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind", correct=[0] * 6)}, date="20260101_100000")
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind")}, date="20260102_100000")
    runs = load_runs([tmp_path])
    assert runs.benchmarks["mmau"].correct_blind.tolist() == [[1.0] * 6]
    (old, new), = runs.replaced
    assert old.samples_path.name.startswith("20260101") and new.samples_path.name.startswith("20260102")
    assert [f.samples_path for f in runs.used] == [new.samples_path]


def test_non_visdep_tasks_are_skipped(tmp_path):
    folder = write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind")})
    results = next(folder.glob("*_results.json"))
    data = json.loads(results.read_text())
    data["configs"]["videomme"] = {"task": "videomme", "tag": "videomme_group"}
    results.write_text(json.dumps(data))
    (folder / f"{data['date']}_samples_videomme.jsonl").write_text('{"doc_id": 0, "target": "A"}\n')
    runs = load_runs([tmp_path])
    assert [p.name for p, _ in runs.skipped] == [f"{data['date']}_samples_videomme.jsonl"]


# --------------------------------------------------------------------------- refused inputs
def audit_cli(tmp_path, capsys, *run_dirs):
    out = tmp_path / "audit"
    code = main(["audit", *map(str, run_dirs), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert not out.exists(), "nothing may be written when the input is refused"
    return err


def test_empty_folder(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    assert "no lmms-eval results" in audit_cli(tmp_path, capsys, tmp_path / "runs")


def test_truncated_jsonl_line(tmp_path, capsys):
    folder = write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind")})
    path = next(folder.glob("*_samples_*.jsonl"))
    path.write_text(path.read_text()[:-40])
    err = audit_cli(tmp_path, capsys, tmp_path / "runs")
    assert f"{path}:6: not valid JSON" in err and "truncated" in err


def test_blind_runs_of_different_question_sets(tmp_path, capsys):
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video")})
    write_run(tmp_path / "runs", "org/llm", {"mmau_blind": mmau("blind", n=5)}, model_type="visdep_llm")
    err = audit_cli(tmp_path, capsys, tmp_path / "runs")
    assert "cover different questions" in err and "has 6" in err and "has 5" in err and "'cap-5'" in err


def test_video_run_that_dropped_questions_is_audited_on_the_questions_both_modes_have(tmp_path, capsys):
    # VISDEP_SKIP_MISSING_VIDEOS=1 drops questions whose video is missing from the video task only
    runs = tmp_path / "runs"
    video = [r for r in mmau("video", correct=[1, 0, 1, 0, 1, 0]) if r["question_id"] not in ("cap-1", "cap-4")]
    write_run(runs, "org/vlm", {"mmau_blind": mmau("blind", correct=[0] * 6), "mmau_video": video})
    write_run(runs, "org/llm", {"mmau_blind": mmau("blind", correct=[1, 1, 0, 0, 0, 0])}, model_type="visdep_llm")
    bench = load_runs([runs]).benchmarks["mmau"]
    assert bench.questions["question_id"].tolist() == ["cap-0", "cap-2", "cap-3", "cap-5"]
    assert bench.missing_in_video["question_id"].tolist() == ["cap-1", "cap-4"]
    assert bench.correct_blind.tolist() == [[1, 0, 0, 0], [0, 0, 0, 0]]  # org/llm, org/vlm
    assert bench.correct_video[1].tolist() == [1, 1, 0, 0]
    out = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "2 question(s) are left out of every metric because a video run lacks them" in report
    manifest = json.loads((out / "audit.json").read_text())
    assert [d["question_id"] for d in manifest["dropped_questions"]["mmau"]] == ["cap-1", "cap-4"]


def test_samples_file_shorter_than_its_results_file_says(tmp_path, capsys):
    folder = write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video")})
    results_path = next(folder.glob("*_results.json"))
    assert json.loads(results_path.read_text())["n-samples"]["mmau_video"] == {"original": 6, "effective": 6}
    load_runs([tmp_path / "runs"])  # complete
    path = next(folder.glob("*_samples_mmau_video.jsonl"))
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:4]))  # cut short between lines
    err = audit_cli(tmp_path, capsys, tmp_path / "runs")
    assert f"{path}: 4 sample line(s), but {results_path.name} beside it says lmms-eval evaluated 6" in err


def test_different_answers_or_option_counts(tmp_path, capsys):
    video = mmau("video")
    video[2]["answer_index"] = (video[2]["answer_index"] + 1) % 5
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": video})
    assert "disagree on answer_index for 1 question(s) ('cap-2': 2 vs 3)" in audit_cli(tmp_path, capsys,
                                                                                       tmp_path / "runs")
    video = mmau("video")
    video[0] = visdep_record("cap-0", "mmau", "video", 0, [-1.0, -2.0, -3.0, -4.0])
    write_run(tmp_path / "runs2", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": video})
    assert "disagree on n_options" in audit_cli(tmp_path, capsys, tmp_path / "runs2")


def test_sample_without_visdep_record(tmp_path, capsys):
    folder = write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind")})
    path = next(folder.glob("*_samples_*.jsonl"))
    lines = path.read_text().splitlines()
    sample = json.loads(lines[3])
    del sample["visdep"]
    lines[3] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")
    assert f"{path}:4: sample (doc_id 3) has no 'visdep' record" in audit_cli(tmp_path, capsys, tmp_path / "runs")


def test_nan_log_probabilities(tmp_path, capsys):
    blind = mmau("blind")
    blind[1]["option_logprobs"][2] = float("nan")  # json writes NaN, as lmms-eval's json.dumps would
    folder = write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": blind})
    path = next(folder.glob("*_samples_*.jsonl"))
    err = audit_cli(tmp_path, capsys, tmp_path / "runs")
    assert f"{path}:2: question 'cap-1': non-finite option log-probabilities" in err


def test_other_refusals(tmp_path):
    write_run(tmp_path / "video_only", "org/vlm", {"mmau_video": mmau("video")})
    with pytest.raises(RunDataError, match="has a video run of mmau .* but no blind run"):
        load_runs([tmp_path / "video_only"])
    mixed = mmau("video")
    for r in mixed:
        r["scoring"] = "option"
    write_run(tmp_path / "scoring", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mixed})
    # the scoring mode is a setting: the option-scored video run has no blind run of its own settings
    with pytest.raises(RunDataError, match=r"org/vlm \[scoring=option\] has a video run of mmau .* no blind run "
                                           r"with the same settings; blind runs of that checkpoint have other "
                                           r"settings: \['org/vlm \[scoring=letter\]'\]"):
        load_runs([tmp_path / "scoring"])
    write_run(tmp_path / "variants", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_blind_grounded": mmau("blind")})
    with pytest.raises(RunDataError, match="two blind runs of mmau from different tasks"):
        load_runs([tmp_path / "variants"])
    folder = write_run(tmp_path / "orphan", "org/vlm", {"mmau_blind": mmau("blind")})
    next(folder.glob("*_results.json")).unlink()
    with pytest.raises(RunDataError, match="no matching"):
        load_runs([tmp_path / "orphan"])
    folder = write_run(tmp_path / "duplicate", "org/vlm", {"mmau_blind": mmau("blind")})
    path = next(folder.glob("*_samples_*.jsonl"))
    path.write_text(path.read_text() * 2)
    with pytest.raises(RunDataError, match="appear more than once"):
        load_runs([tmp_path / "duplicate"])


def test_out_folder_that_is_not_an_audit_is_left_alone(tmp_path, capsys):
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind")})
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["audit", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "holds what visdep audit did not write there (notes.txt)" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# --------------------------------------------------------------------------- benchmarks in worker processes
def varied_tree(root):
    """Three models on AccidentBench-like questions (K varies, categories) and on MM-AU, one file stringified (read
    carefully)."""
    rng = np.random.default_rng(3)
    ks = rng.integers(2, 7, 40)
    answers = rng.integers(0, ks)
    categories = [["spatial", "temporal", None][i % 3] for i in range(40)]

    def records(mode):
        return [visdep_record(f"ab-{i}", "accidentbench", mode, answers[i],
                              log_probabilities(rng.normal(-2, 1, k)),
                              category=categories[i], video=f"v{i // 4}.mp4", prompt_id=f"p{i % 7}")
                for i, k in enumerate(ks)]

    for model in ("org/a", "org/b", "org/c"):
        write_run(root, model, {"accidentbench_blind": records("blind"), "accidentbench_video": records("video"),
                                "mmau_blind": mmau("blind", correct=rng.integers(0, 2, 6).tolist()),
                                "mmau_video": mmau("video", correct=rng.integers(0, 2, 6).tolist())})
    path = next((root / "org__c").glob("*_samples_accidentbench_video.jsonl"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**s, "visdep": json.dumps(s["visdep"])}) + "\n" for s in lines))
    return root


def test_benchmarks_audited_in_worker_processes_equal_those_audited_here(tmp_path, monkeypatch):
    from visdep_metrics import parallel
    from visdep_metrics.audit.compute import run_audit

    root = varied_tree(tmp_path / "runs")
    here = run_audit([root])
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 0)
    if parallel.process_count(2, 1) < 2:
        pytest.skip("one usable core: the audit does not fork")
    forked = run_audit([root])
    for name in ("summary", "questions", "filters", "sweep", "headline"):
        pd.testing.assert_frame_equal(getattr(forked, name), getattr(here, name), obj=name)
    bench = forked.runs.benchmarks["accidentbench"]
    assert bench.questions["category"].tolist()[:2] == ["spatial", "temporal"]
    assert bench.questions["category"].isna().tolist()[:3] == [False, False, True]
    for name in ("correct_blind", "p_answer_blind", "entropy_blind", "correct_video", "p_answer_video"):
        np.testing.assert_array_equal(getattr(bench, name), getattr(here.runs.benchmarks["accidentbench"], name))
    assert forked.runs.sha256 == here.runs.sha256


def test_an_error_in_a_worker_process_names_the_file_and_line(tmp_path, monkeypatch):
    from visdep_metrics import parallel
    from visdep_metrics.audit.compute import run_audit

    root = varied_tree(tmp_path / "runs")
    path = next((root / "org__b").glob("*_samples_accidentbench_blind.jsonl"))
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace('"option_logprobs": [', '"option_logprobs": [NaN, ', 1)
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 0)
    with pytest.raises(RunDataError, match=f"{path}:8: question 'ab-7': non-finite option log-probabilities"):
        run_audit([root])


# --------------------------------------------------------------------------- models told apart by settings
def test_frame_budgets_of_one_checkpoint_are_two_models_with_short_labels(tmp_path):
    for frames, correct in ((4, [1, 0, 0, 0, 0, 0]), (8, [1, 1, 1, 0, 0, 0])):
        write_run(tmp_path, "/ckpts/tiny_qwen",
                  {"mmau_blind": mmau("blind"), "mmau_video": mmau("video", correct=correct)},
                  extra_args=f"max_frames={frames},device=cpu,batch_size=8", subfolder=f"f{frames}")
    # settings that do not change scores (device, batch_size) do not split a model
    write_run(tmp_path, "/ckpts/other/tiny_qwen", {"mmau_blind": mmau("blind")}, model_type="visdep_llm",
              extra_args="device=cuda:0", subfolder="llm")
    runs = load_runs([tmp_path])
    bench = runs.benchmarks["mmau"]
    assert bench.models == ["/ckpts/other/tiny_qwen", "/ckpts/tiny_qwen [max_frames=4]",
                            "/ckpts/tiny_qwen [max_frames=8]"]
    assert bench.correct_video[1:].sum(axis=1).tolist() == [1, 3]
    labels = {m: runs.label(m) for m in bench.models}
    # two checkpoints share the last path part: their labels take one more
    assert labels == {"/ckpts/other/tiny_qwen": "other/tiny_qwen",
                      "/ckpts/tiny_qwen [max_frames=4]": "ckpts/tiny_qwen [max_frames=4]",
                      "/ckpts/tiny_qwen [max_frames=8]": "ckpts/tiny_qwen [max_frames=8]"}
    aliased = load_runs([tmp_path], labels={"/ckpts/tiny_qwen [max_frames=8]": "q8", "other/tiny_qwen": "llm"})
    assert aliased.label("/ckpts/tiny_qwen [max_frames=8]") == "q8"
    assert aliased.label("/ckpts/other/tiny_qwen") == "llm"
    with pytest.raises(RunDataError, match=r"--label '/ckpts/tiny_qwen' names 2 models"):
        load_runs([tmp_path], labels={"/ckpts/tiny_qwen": "q"})


def test_a_blind_run_is_never_paired_with_a_video_run_of_other_settings(tmp_path):
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind")}, extra_args="max_frames=8,dtype=float32",
              subfolder="blind")
    write_run(tmp_path, "org/vlm", {"mmau_video": mmau("video")}, extra_args="max_frames=8,dtype=bfloat16",
              subfolder="video")
    with pytest.raises(RunDataError, match=r"org/vlm \[dtype=bfloat16\] has a video run of mmau .* no blind run with "
                                           r"the same settings; blind runs of that checkpoint have other settings: "
                                           r"\['org/vlm \[dtype=float32\]'\]"):
        load_runs([tmp_path])


def test_unknown_record_fields_are_ignored_and_the_video_is_read(tmp_path):
    records = mmau("blind")
    for i, r in enumerate(records):
        r["continuations"] = [" A", " B", " C", " D", " E"]  # a field the reader does not know
        r["video"] = f"CAP-DATA/1-10/1/{i // 2:03d}"
        r["prompt_id"] = f"{i % 4:016x}"
    write_run(tmp_path, "org/vlm", {"mmau_blind": records})
    bench = load_runs([tmp_path]).benchmarks["mmau"]
    assert bench.questions["video"].tolist() == [f"CAP-DATA/1-10/1/{i // 2:03d}" for i in range(6)]
    assert bench.videos is not None and len(set(bench.videos)) == 3
    assert bench.prompts.tolist() == [f"{i % 4:016x}" for i in range(6)]


def test_runs_that_disagree_on_a_question_video(tmp_path, capsys):
    blind, video = mmau("blind"), mmau("video")
    for i, (b, v) in enumerate(zip(blind, video, strict=True)):
        b["video"] = v["video"] = f"v{i}.mp4"
    video[3]["video"] = "other.mp4"
    write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": blind, "mmau_video": video})
    assert "disagree on video for 1 question(s) ('cap-3': 'v3.mp4' vs 'other.mp4')" in audit_cli(
        tmp_path, capsys, tmp_path / "runs")


def test_a_panel_must_name_which_frame_budget_it_means(tmp_path):
    from visdep_metrics.audit.compute import run_audit
    from visdep_metrics.audit.panels import PanelError

    for frames in (4, 8):
        write_run(tmp_path / "runs", "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video")},
                  extra_args=f"max_frames={frames}", subfolder=f"f{frames}")
    write_run(tmp_path / "runs", "org/llm", {"mmau_blind": mmau("blind")}, model_type="visdep_llm")
    panel = tmp_path / "panel.yaml"
    panel.write_text("text_llms: [org/llm]\nvlms: [org/vlm]\n")
    with pytest.raises(PanelError, match=r"panel entry 'org/vlm' names 2 models .*'org/vlm \[max_frames=4\]', "
                                         r"'org/vlm \[max_frames=8\]'"):
        run_audit([tmp_path / "runs"], panel_path=panel)
    panel.write_text("text_llms: [org/llm]\nvlms: ['org/vlm [max_frames=8]']\n")
    audit = run_audit([tmp_path / "runs"], panel_path=panel)
    assert audit.panel.vlms == ("org/vlm [max_frames=8]",) and audit.roles["org/vlm [max_frames=4]"] == "vlm"


def test_defaults_written_out_are_the_same_model_and_a_frame_budget_is_another(tmp_path):
    # the adapter's defaults (max_frames=16, dtype=auto) filled in: a run that leaves them out and one that writes
    # them out are one model; max_frames=8 is another
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind")}, extra_args="", subfolder="blind_default")
    write_run(tmp_path, "org/vlm", {"mmau_video": mmau("video")}, extra_args="max_frames=16.0,dtype=AUTO",
              subfolder="video_written_out")
    runs = load_runs([tmp_path])
    assert runs.benchmarks["mmau"].models == ["org/vlm"] and runs.benchmarks["mmau"].has_video.tolist() == [True]
    assert dict(runs.model_info["org/vlm"].settings)["max_frames"] == "16"
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video", correct=[0] * 6)},
              extra_args="max_frames=8", subfolder="eight")
    runs = load_runs([tmp_path])
    assert runs.benchmarks["mmau"].models == ["org/vlm [max_frames=16]", "org/vlm [max_frames=8]"]
    assert [runs.model_info[m].max_frames for m in runs.benchmarks["mmau"].models] == [16, 8]


def model_section(pretrained, checkpoint, settings=None):
    """results["visdep"] as visdep's adapters write it."""
    return {"model": {"adapter": "visdep_vlm", "pretrained": pretrained, "settings": settings or {"max_frames": "16"},
                      "checkpoint": {"identity": checkpoint, "source": f"/ckpts/{pretrained}"}}, "dropped": {}}


def test_the_recorded_model_section_decides_the_settings(tmp_path):
    # model_args say nothing of the frames; the section visdep's adapter recorded says 8
    write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind"), "mmau_video": mmau("video")}, extra_args="",
              visdep=model_section("org/vlm", "a" * 64, {"max_frames": 8, "dtype": "auto"}))
    runs = load_runs([tmp_path])
    settings = dict(runs.model_info["org/vlm"].settings)
    assert settings["max_frames"] == "8" and settings["adapter"] == "visdep_vlm" and settings["scoring"] == "letter"
    assert runs.used[0].checkpoint == "a" * 64
    assert not runs.notes  # every run recorded its checkpoint


def test_a_blind_and_a_video_run_of_different_weights_are_refused_naming_both(tmp_path):
    blind = write_run(tmp_path, "org/vlm", {"mmau_blind": mmau("blind")}, subfolder="before",
                      visdep=model_section("org/vlm", "a" * 64))
    video = write_run(tmp_path, "org/vlm", {"mmau_video": mmau("video")}, subfolder="after",
                      visdep=model_section("org/vlm", "b" * 64))
    with pytest.raises(RunDataError, match="ran different checkpoints") as refused:
        load_runs([tmp_path])
    for folder in (blind, video):
        assert str(next(folder.glob("*_results.json"))) in str(refused.value)
    # the same identity pairs; a run without one pairs too, with a note that it could not be checked
    write_run(tmp_path, "org/vlm", {"mmau_video": mmau("video")}, subfolder="after",
              visdep=model_section("org/vlm", "a" * 64))
    assert load_runs([tmp_path]).benchmarks["mmau"].has_video.tolist() == [True]
    write_run(tmp_path, "org/vlm", {"mmau_video": mmau("video")}, subfolder="after")
    notes = load_runs([tmp_path]).notes
    assert len(notes) == 1 and "1 run(s) record no checkpoint identity" in notes[0]


def test_categories_and_sources_are_those_of_the_first_models_blind_run(tmp_path):
    """Only the run every other is compared with (the first model's blind run) is read with its categories and
    sources; the others are read without them (None), whatever they hold, so their values never reach the audit."""
    def records(mode: str, category: str, source: str) -> list[dict]:
        return [{**r, "category": category, "source": source} for r in mmau(mode)]

    write_run(tmp_path, "org/a", {"mmau_blind": records("blind", "kept", "CAP")})
    write_run(tmp_path, "org/b", {"mmau_blind": records("blind", "other", "DADA"),
                                  "mmau_video": records("video", "video's", "DoTA")})
    plan = plan_runs([tmp_path])
    files = plan.by_benchmark["mmau"]
    reference = reference_file(files)
    assert (reference.model, reference.mode) == ("org/a", "blind")
    read = {(f.model, f.mode): read_task_run(f, descriptive=f is reference).samples for f in files}
    assert read["org/a", "blind"].category.to_pylist() == ["kept"] * 6
    assert all(s.category is None and s.source is None for key, s in read.items() if key != ("org/a", "blind"))
    bench = read_benchmark("mmau", files)
    assert bench.questions["category"].tolist() == ["kept"] * 6 and bench.questions["source"].tolist() == ["CAP"] * 6


@pytest.mark.parametrize("stringified", [False, True], ids=["fast", "careful"])
@pytest.mark.parametrize("field, other", [("mode", "video"), ("benchmark", "vru_accident"), ("scoring", "option")])
def test_a_record_that_differs_from_the_first_in_benchmark_mode_or_scoring_is_refused(tmp_path, capsys, field,
                                                                                       other, stringified):
    """The fast reader decodes every record holding the first one's benchmark, mode and scoring; a later record
    holding another leaves the file to the careful reader, which refuses it naming the file and both values."""
    records = mmau("blind")
    records[4] = {**records[4], field: other}
    folder = write_run(tmp_path, "org/vlm", {"mmau_blind": records})
    if stringified:
        path = next(folder.glob("*_samples_*.jsonl"))
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**s, "visdep": json.dumps(s["visdep"])}) + "\n" for s in lines))
    assert main(["audit", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "samples_mmau_blind.jsonl: one samples file must hold one " + field in error
    assert repr(other) in error and repr(records[0][field]) in error
