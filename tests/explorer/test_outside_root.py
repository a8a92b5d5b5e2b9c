"""The explorer opens no video outside its benchmark's root: samples records whose video is an absolute path, climbs
out through '..', or is a link inside the root pointing out get no contact sheet, their frames are never decoded,
and nothing of them reaches OUT; the audit finishes, naming each in the log. Before, `frames._video_path` joined
whatever the record said to the root and decoded it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from tests.explorer.conftest import BENCHMARK, write_small_runs
from tests.explorer.test_page import blob, decoded


def test_videos_out_of_the_root_reach_nothing_in_out(fixture_env, tmp_path, monkeypatch):
    import model_adapters.frames
    from lmms_eval_tasks.loaders import load_benchmark
    from visdep_metrics.cli.main import main
    from visdep_metrics.explorer.frames import _sheet_name

    root = tmp_path / "vru"
    shutil.copytree(fixture_env["VRU_ACCIDENT_ROOT"], root)
    questions = load_benchmark(BENCHMARK, root)
    secret = tmp_path / "secret"
    secret.mkdir()
    private = secret / "private.mp4"
    shutil.copy(root / questions[0].video, private)  # a real video, so only the rule can keep it out
    link = Path(questions[0].video).parent / "link_out.mp4"
    (root / link).symlink_to(private)
    outside = {"absolute": str(private), "dotdot": "../secret/private.mp4", "link": link.as_posix(),
               "mm-au style absolute folder": "/nonexistent/CAP-DATA/1/2/000001/images"}
    hostile = {questions[i].question_id: video for i, video in enumerate(outside.values())}
    questions = [dataclasses.replace(q, video=hostile.get(q.question_id, q.video)) for q in questions]
    write_small_runs(tmp_path / "runs", questions)
    panel = tmp_path / "panel.yaml"
    panel.write_text("text_llms: [org/llm-a, org/llm-b]\nvlms: [org/vlm-a, org/vlm-b]\nheld_out: [org/vlm-held]\n")

    decoded_paths = []
    real = model_adapters.frames.read_frames
    monkeypatch.setattr(model_adapters.frames, "read_frames",
                        lambda path, *a, **k: decoded_paths.append(Path(path)) or real(path, *a, **k))
    out = tmp_path / "audit"
    assert main(["audit", str(tmp_path / "runs"), "--panel", str(panel), "--out", str(out),
                 "--video-root", f"{BENCHMARK}={root}"]) == 0

    assert decoded_paths and all(p.resolve().is_relative_to(root.resolve()) for p in decoded_paths)
    assert private.resolve() not in {p.resolve() for p in decoded_paths}
    data = blob(out / "explorer.html")
    names, codes = data["questions"]["sheet"]
    sheet_of = {qid: names[c] if c >= 0 else None
                for qid, c in zip(data["questions"]["question_id"], decoded(codes, "i4"), strict=True)}
    assert all(sheet_of[qid] is None for qid in hostile)
    inside = {q.video for q in questions if q.question_id not in hostile}
    assert all(sheet_of[q.question_id] is not None for q in questions if q.question_id not in hostile)
    sheets = sorted(p.name for p in (out / "frames").iterdir())
    assert len(sheets) == len(inside) == len({sheet_of[q.question_id] for q in questions
                                              if q.question_id not in hostile})
    assert _sheet_name(private, 4) not in sheets
    assert data["frames"]["note"].endswith(f"{len(hostile)} of {len(inside) + len(hostile)} videos not available")
