"""`visdep twin`: which tasks its arguments name (names, globs, groups and tags of lmms-eval's index), what it
writes and prints, and its errors as one line (the upstream reader is replaced here by what it returns;
test_e2e_twins.py and test_golden_videomme.py run the real one)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import yaml

from lmms_eval_tasks import upstream
from lmms_eval_tasks.errors import OptionError
from lmms_eval_tasks.records import Question
from lmms_eval_tasks.unusable import Unusable
from lmms_eval_tasks.upstream import TwinRefused, UpstreamStatus
from visdep_metrics.cli.main import main
from visdep_metrics.cli.twin import expand_tasks

LISTED = {"mvbench_action": "automatic", "mvbench_scene": "adapter", "mvbench_fine": "refused: media options",
          "videomme": "automatic", "cinepile": "refused: the blind prompt carries the subtitles"}


@pytest.fixture
def index(monkeypatch, tmp_path):
    """lmms-eval's task index as `config.task_index` gives it: a group (its YAML lists tasks and a subgroup), a tag."""
    group, sub = tmp_path / "mvbench.yaml", tmp_path / "mv_sub.yaml"
    group.write_text(yaml.safe_dump({"group": "mvbench", "task": ["mvbench_action", {"task": "mv_sub"}]}))
    sub.write_text(yaml.safe_dump({"group": "mv_sub", "task": ["mvbench_scene", "mvbench_fine"]}))
    entries = {"mvbench": {"type": "group", "task": -1, "yaml_path": str(group)},
               "mv_sub": {"type": "group", "task": -1, "yaml_path": str(sub)},
               "long_video": {"type": "tag", "task": ["videomme", "cinepile", "an_image_task"], "yaml_path": -1}}
    monkeypatch.setattr("lmms_eval_tasks.upstream.config.task_index", lambda: entries)
    return entries


def test_names_globs_groups_and_tags_name_the_tasks_once_each_and_skip_the_refused(index):
    assert expand_tasks(["videomme"], LISTED) == (["videomme"], [])
    assert expand_tasks(["mvbench_*", "mvbench_action"], LISTED) == (["mvbench_action", "mvbench_scene"],
                                                                      ["mvbench_fine"])
    assert expand_tasks(["mvbench"], LISTED) == (["mvbench_action", "mvbench_scene"], ["mvbench_fine"])
    assert expand_tasks(["long_video"], LISTED) == (["videomme"], ["cinepile"])  # the tag's image task is no video
    # a refused task named outright is read, and its refusal is the error; a name lmms-eval lacks likewise
    assert expand_tasks(["cinepile", "no_such_task"], LISTED) == (["cinepile", "no_such_task"], [])
    with pytest.raises(OptionError, match="mmbench_\\*: names no upstream video task"):
        expand_tasks(["mmbench_*"], LISTED)


def _read(task: str, data=None):
    """What `read_upstream` returns for a two-question task with one record dropped, or its refusal."""
    if task == "cinepile":
        raise TwinRefused(task, LISTED[task].removeprefix("refused: "))
    questions = [Question(question_id=f"{task}-{i}", benchmark=task, video=f"v{i}.mp4", question=f"Q{i}?",
                          options=["yes", "no"], answer_index=i) for i in range(2)]
    return types.SimpleNamespace(
        task=task, benchmark=task.split("_")[0], questions=questions, documents=[{"n": i} for i in range(2)],
        unusable=[Unusable(f"{task} document 2", "no lettered option lines in the prompt", "x")], adapter="generic",
        lmms_eval_version="0.7.3", yaml_path=Path(f"/up/{task}.yaml"), yaml_sha256="ab" * 32, split="test",
        origin=str(data), notes={})


@pytest.fixture
def fake_upstream(monkeypatch, index):
    monkeypatch.setattr(upstream, "read_upstream", _read)
    monkeypatch.setattr(upstream, "list_upstream",
                        lambda: [UpstreamStatus(t, t.split("_")[0], s) for t, s in LISTED.items()])


def test_list_prints_task_benchmark_status_tab_separated(fake_upstream, capsys):
    assert main(["twin", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{t}\t{t.split('_')[0]}\t{s}" for t, s in LISTED.items()]


def test_twin_writes_each_task_and_says_how_to_run_them(fake_upstream, tmp_path, capsys):
    out = tmp_path / "twins"
    assert main(["twin", "mvbench", "--out", str(out), "--data", str(tmp_path / "copy")]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [
        "mvbench_action: 2 questions (generic), dropped: 1 no lettered option lines in the prompt -> "
        "mvbench_action_visdep_blind.yaml, mvbench_action_visdep_video.yaml",
        "mvbench_scene: 2 questions (generic), dropped: 1 no lettered option lines in the prompt -> "
        "mvbench_scene_visdep_blind.yaml, mvbench_scene_visdep_video.yaml",
        f"run: lmms-eval --include_path {out.resolve()} --tasks mvbench_action_visdep_blind,"
        "mvbench_action_visdep_video,mvbench_scene_visdep_blind,mvbench_scene_visdep_video ..."]
    assert "mvbench_fine: skipped, refused" in printed.err
    manifest = json.loads((out / "mvbench_scene_twin.json").read_text())
    assert (manifest["read_from"], manifest["yaml_path"], manifest["dropped"]) == (
        str(tmp_path / "copy"), "/up/mvbench_scene.yaml", {"no lettered option lines in the prompt": 1})
    video = yaml.safe_load((out / "mvbench_scene_visdep_video.yaml").read_text().replace("!function ", ""))
    assert video["task"] == "mvbench_scene_visdep_video" and video["process_docs"] == "lmms_eval_tasks.tasks.docs_video"
    assert video["dataset_kwargs"]["data_files"]["test"] == "mvbench_scene_visdep.jsonl"
    assert json.loads((out / "mvbench_scene_visdep.jsonl").read_text()) == {
        "twin": str(out.resolve() / "mvbench_scene_twin.jsonl")}


def test_errors_are_one_line_and_name_the_task(fake_upstream, tmp_path, capsys):
    assert main(["twin", "--out", str(tmp_path)]) == 2
    assert "name the tasks and the folder" in capsys.readouterr().err
    assert main(["twin", "videomme", "cinepile", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "visdep twin: error: cinepile: refused: the blind prompt carries the subtitles\n" in err
    assert err.rstrip().endswith("1 of 2 task(s) not twinned: cinepile") and "Traceback" not in err
    assert (tmp_path / "t" / "videomme_visdep_blind.yaml").is_file()  # the other task is written
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "videomme_visdep_blind.yaml").write_text("task: something_of_mine\n")
    assert main(["twin", "videomme", "--out", str(tmp_path / "mine")]) == 2
    assert "exists and was not written by visdep twin" in capsys.readouterr().err
    assert main(["twin", "videomme", "--out", str(tmp_path / "mine"), "--force"]) == 0
