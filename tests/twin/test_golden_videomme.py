"""Golden: the twin of lmms-eval's own `videomme` task, built by `visdep twin` from the real Video-MME annotations
laid out as the upstream task reads them (a copy of the lmms-eval/Video-MME dataset repository), is the built-in
`videomme` pair question by question: all 2,700 questions, same stem, options, gold and video, hence the same blind
prompt; and a video run finds each video where the built-in finds it."""

from __future__ import annotations

import json
import shutil

import datasets
import numpy as np
import pandas as pd
import pytest

from lmms_eval_tasks import tasks
from lmms_eval_tasks.layouts import write_mp4
from lmms_eval_tasks.loaders import get_benchmark
from lmms_eval_tasks.records import RecordError
from visdep_metrics.cli.main import main


def _documents(line: dict, mode: str = "blind") -> list[dict]:
    """The documents of a task whose data file holds `line`, opened in the test's evaluation (which then knows
    the source, as the evaluation that ran the task would)."""
    return getattr(tasks, f"docs_{mode}")(datasets.Dataset.from_list([line], split="test")).to_list()


@pytest.mark.slow
def test_the_videomme_twin_is_the_built_in_videomme_pair(shared_benchmarks, tmp_path, monkeypatch, offline_hf_home,
                                                          capsys):
    records = json.loads((shared_benchmarks / "videomme" / "datasets" / "videomme" / "videomme.json").read_text())
    assert len(records) == 2700
    # the hub repository's layout: <repo>/videomme/test-00000-of-00001.parquet
    parquet = tmp_path / "Video-MME" / "videomme" / "test-00000-of-00001.parquet"
    parquet.parent.mkdir(parents=True)
    pd.DataFrame(records).to_parquet(parquet)

    assert main(["twin", "videomme", "--data", str(tmp_path / "Video-MME"), "--out", str(tmp_path / "twins")]) == 0
    assert capsys.readouterr().out.startswith("videomme: 2,700 questions (generic), dropped: none -> "
                                              "videomme_visdep_blind.yaml, videomme_visdep_video.yaml\n")
    manifest = json.loads((tmp_path / "twins" / "videomme_twin.json").read_text())
    assert manifest["questions"] == 2700 and manifest["dropped"] == {} and manifest["adapter"] == "generic"

    monkeypatch.setenv("VIDEOMME_ANNOTATIONS", str(parquet))
    built_in = _documents({"benchmark": "videomme"})
    twin = _documents({"twin": str(tmp_path / "twins" / "videomme_twin.jsonl")})
    assert len(built_in) == len(twin) == 2700
    fields = ("question_id", "question", "options", "answer_index", "video")
    assert [{k: d[k] for k in fields} for d in twin] == [{k: d[k] for k in fields} for d in built_in]
    assert [tasks.doc_to_text(d) for d in twin] == [tasks.doc_to_text(d) for d in built_in]
    assert {d["benchmark"] for d in twin} == {"videomme_visdep"}

    # videos: where lmms-eval's task unpacks them ($HF_HOME/videomme/data), an .mp4, an .MP4 and an .mkv; one absent.
    # HF_HOME is the worker's for the session (upstream utils.py read it at import): the folder other tests placed
    # videos in is set aside for this test and put back after it, so that neither sees the other's files.
    frames = np.full((4, 16, 16, 3), 60, np.uint8)
    ids = sorted({r["videoID"] for r in records})[:4]
    folder = offline_hf_home / "videomme" / "data"
    aside = tmp_path / "videomme_data_of_other_tests"
    if folder.exists():
        shutil.move(folder, aside)
    try:
        for video_id, suffix in zip(ids, (".mp4", ".MP4", ".mkv"), strict=False):
            write_mp4(folder / f"{video_id}{suffix}", frames)
        source, twin_source = get_benchmark("videomme"), get_benchmark("videomme_visdep")
        for doc in (d for d in twin if d["video"] in {f"data/{i}.mp4" for i in ids}):
            found = source.video_path(doc["video"])
            if doc["video"] == f"data/{ids[3]}.mp4":
                assert not found.exists()
                with pytest.raises(RecordError, match="upstream doc_to_visual exits"):
                    twin_source.video_path(doc["video"], doc["question_id"])
            else:
                assert found.is_file() and twin_source.video_path(doc["video"], doc["question_id"]) == found
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if aside.exists():
            shutil.move(aside, folder)
