"""Intervals resample videos, not questions: questions about one video are not independent.

Constructed runs: 200 videos x 6 questions whose correctness is shared within each video. Resampling questions
as if independent gives the width of 1,200 independent questions (about 5.7 points); resampling videos gives the
width of the 200 videos' worth of evidence (about 13.9). Expected widths come from the normal approximation
2 * 1.96 * sqrt(p (1 - p) / n), not from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.runs import records_from_correct, write_run
from visdep_metrics.audit.compute import run_audit

N_VIDEOS, PER_VIDEO = 200, 6


def normal_width(p: float, n: int) -> float:
    """Width in points of the 95% normal interval of a proportion p over n independent units."""
    return 100 * 2 * 1.959964 * math.sqrt(p * (1 - p) / n)


def acc_blind_width(root, correct, videos) -> float:
    k = [4] * len(correct)
    write_run(root, "org/vlm", {
        "vru_accident_blind": records_from_correct("vru_accident", "blind", correct, k, videos=videos),
        "vru_accident_video": records_from_correct("vru_accident", "video", correct, k, videos=videos)})
    summary = run_audit([root]).summary
    row = summary[(summary["subset"] == "full") & (summary["category"] == "all")].iloc[0]
    assert row["acc_blind"] == pytest.approx(100 * np.mean(correct))
    return row["acc_blind_hi"] - row["acc_blind_lo"]


@pytest.fixture(scope="module")
def widths(tmp_path_factory) -> dict[str, float]:
    rng = np.random.default_rng(0)
    per_video = rng.permutation(np.r_[np.ones(N_VIDEOS // 2), np.zeros(N_VIDEOS // 2)]).astype(int)  # p = 1/2
    video_of = np.repeat(np.arange(N_VIDEOS), PER_VIDEO)
    names = [f"VRU_videos/DoTA/VRU_{v}.mp4" for v in range(N_VIDEOS)]
    independent = rng.permutation(np.r_[np.ones(600), np.zeros(600)]).astype(int)
    root = tmp_path_factory.mktemp("clusters")
    found = {
        "clustered": acc_blind_width(root / "clustered", per_video[video_of], [names[v] for v in video_of]),
        "200 independent": acc_blind_width(root / "200", per_video, names),
        "1200 independent": acc_blind_width(root / "1200", independent, [f"v{i}.mp4" for i in range(1200)]),
        # records without `video` (runs from before it was recorded): questions are resampled, as before
        "clustered, no video": acc_blind_width(root / "novideo", per_video[video_of], None),
    }
    print("\n95% interval widths of Acc_blind (points): "
          + ", ".join(f"{name} {width:.2f}" for name, width in found.items())
          + f"; normal approximation: 200 units {normal_width(0.5, 200):.2f}, 1200 units {normal_width(0.5, 1200):.2f}")
    return found


def test_clustered_questions_get_the_width_of_their_videos(widths):
    assert widths["clustered"] == pytest.approx(widths["200 independent"], rel=0.15)
    assert widths["200 independent"] == pytest.approx(normal_width(0.5, N_VIDEOS), rel=0.15)
    assert widths["clustered"] > 2 * widths["clustered, no video"]


def test_independent_questions_keep_the_question_bootstrap_width(widths):
    assert widths["1200 independent"] == pytest.approx(normal_width(0.5, N_VIDEOS * PER_VIDEO), rel=0.15)
    # what the audit gave before it resampled videos: the width of 1,200 independent questions
    assert widths["clustered, no video"] == pytest.approx(widths["1200 independent"], rel=0.15)


def test_report_says_what_was_resampled_and_why_an_interval_is_missing(tmp_path):
    from visdep_metrics.audit.report import write_audit

    # two categories; "location" has one question, "weather" all its questions on one video
    videos = ["a.mp4", "a.mp4", "b.mp4", "c.mp4", "c.mp4"]
    categories = ["road type", "road type", "location", "weather", "weather"]
    k = [4] * 5
    write_run(tmp_path / "runs", "org/vlm", {
        f"vru_accident_{mode}": records_from_correct("vru_accident", mode, [1, 0, 1, 1, 0], k, categories,
                                                     videos=videos) for mode in ("blind", "video")})
    audit = run_audit([tmp_path / "runs"])
    s = audit.summary.set_index("category")
    assert s.loc["all", "n_videos"] == 3 and s.loc["all", "resampled"] == "videos"
    assert np.isnan(s.loc["all", "n_prompts"])  # the records name no prompt
    assert s.loc["location", "interval_note"] == "one question: no spread to estimate"
    assert s.loc["weather", "interval_note"].startswith("all 2 questions are about one video")
    # five questions on three videos are too few independent answers for any interval: withheld, with the count
    assert np.isnan(s.loc["all", "acc_blind_lo"]) and s.loc["all", "interval_note"] == ""
    assert s.loc["all", "acc_blind_note"].endswith("independent answers: too few for an interval")
    report = (write_audit(audit, tmp_path / "audit") / "report.md").read_text()
    assert "| VRU-Accident | 5 | 3 | – | videos |" in report
    assert "the samples name no blind prompt" in report
    assert "100.00 (no interval: one question: no spread to estimate)" in report
    assert "independent answers: too few for an interval)" in report
    assert "[–, –]" not in report


def test_one_shared_prompt_enters_its_category_and_the_row_says_so(tmp_path):
    # 400 questions on 400 videos in two categories of 200: in "road type" 40 questions share one prompt and are all
    # answered right, the rest have prompts of their own and are answered independently; "location" shares none
    rng = np.random.default_rng(5)
    categories = ["road type"] * 200 + ["location"] * 200
    prompts = [f"{'shared' if q < 40 else f'own-{q}'}" for q in range(400)]
    correct = np.r_[np.ones(40), rng.random(360) < 0.5].astype(int)
    videos = [f"v{q}.mp4" for q in range(400)]

    def audit(root, with_prompts):
        write_run(root, "org/vlm", {f"vru_accident_{mode}": records_from_correct(
            "vru_accident", mode, correct, [4] * 400, categories, videos=videos,
            prompts=prompts if with_prompts else None) for mode in ("blind", "video")})
        return run_audit([root]).summary.set_index("category")

    shared, alone = audit(tmp_path / "shared", True), audit(tmp_path / "alone", False)
    assert shared.loc["road type", "resampled"] == "prompts (blind), videos and prompts (with video)"
    assert shared.loc["location", "resampled"] == "questions (blind), videos (with video); no prompt shared"
    assert alone.loc["road type", "resampled"] == "videos"
    # ν_prompt = (40² + 160) / 200 = 8.8 for road type: its one shared prompt widens its interval, location's not
    width = {name: s["acc_blind_hi"] - s["acc_blind_lo"] for name, s in (("shared", shared), ("alone", alone))}
    assert width["shared"]["road type"] > 1.5 * width["alone"]["road type"]
    assert width["shared"]["location"] == pytest.approx(width["alone"]["location"])
    assert shared.loc["road type", "deff_blind"] > 3 and alone.loc["road type", "deff_blind"] == pytest.approx(1.0)
