"""The demo report's sentences: each states what the tables hold, and none is written where its case does not arise
(fast: hand-made tables, no model)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from visdep_metrics.demo.report import (
    grounded_section,
    ladder_section,
    panel_section,
    sweep_section,
    temporal_section,
    wrong_removals_section,
)
from visdep_metrics.demo.truth import evidence_contributions

PLANTED = pd.DataFrame({"question_id": list("abcdef"), "video": ["v1", "v1", "v2", "v2", "v3", "v3"],
                        "category": ["accident reason", "driver name", "driver name", "vehicle colour",
                                     "vehicle colour", "accident reason"],
                        "planted_type": ["text_only", "neither", "neither", "video_only", "both", "neither"]})
# two text models: "Guesser" is sure and right on the open questions b, c; "Reader" only on the text-solvable a, e
CORRECT = np.array([[0, 1, 1, 0, 0, 0], [1, 0, 0, 0, 1, 0]], dtype=float)
ENTROPY = np.array([[0.1, 0.1, 0.1, 0.1, 0.1, 0.1], [0.3, 0.9, 0.9, 0.9, 0.3, 0.9]])
MODELS = ["Guesser, text panel, untrained", "Reader, text panel"]


def _questions(s: np.ndarray) -> pd.DataFrame:
    t = (CORRECT * (1 - ENTROPY)).mean(axis=0)
    return pd.DataFrame({"T": t, "V": t - s, "S": s, "n_options": 4}, index=PLANTED["question_id"])


def _filters(n_wrong: dict[str, int]) -> pd.DataFrame:
    return pd.DataFrame({"filter": list(n_wrong), "n_removed_not_text_solvable": list(n_wrong.values())})


def test_the_wrong_removals_are_explained_by_the_model_that_drives_them():
    s = np.array([0.5, 0.45, 0.45, -0.5, 0.5, 0.0])  # removed at 0.1: a, b, c, e; wrongly: b, c
    wrong = s > 0.1
    wrong[[0, 4]] = False
    contributions = evidence_contributions(CORRECT, ENTROPY, MODELS, wrong,
                                           (PLANTED["planted_type"] == "neither").to_numpy())
    text = "\n".join(wrong_removals_section(PLANTED, _questions(s), contributions,
                                            _filters({"S (chance_normalised) <= 0.1": 1}), 0.1))
    assert "2 questions: 2 planted `neither`" in text
    # Guesser: (0.9 + 0.9) / 2 / 2 = 0.45 of a mean T of 0.45; right on 2 of 2, on the open questions 2 of 3
    assert ("comes mostly from Guesser, text panel, untrained 0.450 (100%; right blind on 2 of 2 with mean "
            "confidence 1 − H = 0.90; on the `neither` questions right on 67%, chance 25%") in text
    assert "Reader, text panel 0" not in text.split("comes mostly from")[1]
    assert "S <= 0.1 removes 2; S (chance_normalised) <= 0.1 removes 1." in text


def test_no_explanation_where_nothing_is_removed_wrongly():
    s = np.array([0.5, 0.0, 0.0, -0.5, 0.5, 0.0])
    contributions = evidence_contributions(CORRECT, ENTROPY, MODELS, np.zeros(6, dtype=bool),
                                           (PLANTED["planted_type"] == "neither").to_numpy())
    lines = wrong_removals_section(PLANTED, _questions(s), contributions, _filters({}), 0.1)
    assert lines == ["", "S > 0.1 removes no question that the text does not give away."]


def test_the_grounded_sentence_counts_the_vlms_whose_visual_gain_rises():
    rows = [("A, V panel", "vision", "full", 6, 40.0, 60.0, 15.0, 20.0),
            ("A, V panel", "vision", "grounded", 3, 20.0, 70.0, -5.0, 50.0),
            ("B, held out", "held_out", "full", 6, 40.0, 50.0, 15.0, 10.0),
            ("B, held out", "held_out", "grounded", 3, 40.0, 45.0, 15.0, 5.0),
            ("C, text panel", "text", "full", 6, 50.0, np.nan, 25.0, np.nan),
            ("C, text panel", "text", "grounded", 3, 30.0, np.nan, 5.0, np.nan)]
    subsets = pd.DataFrame(rows, columns=["model", "role", "subset", "n", "acc_blind", "acc_video", "blind_gap",
                                          "visual_gain"])
    text = "\n".join(grounded_section(subsets))
    assert ("The grounded subset keeps 3 of 6 questions. VG is higher there than on the full set for 1 of 2 VLMs "
            "(B, held out: 10.0 → 5.0 points). Their mean Blind Gap falls from 15.0 to 5.0.") in text
    assert "C, text panel" not in text
    everything = subsets.assign(n=6)
    assert grounded_section(everything)[-1] == "The grounded subset keeps 6 of 6 questions."


def test_the_sweep_says_where_precision_and_recall_reach_the_mark():
    taus = np.round(np.arange(-0.5, 1.01, 0.05), 2)
    precision = np.where((taus >= 0.2) & (taus <= 0.3) | (taus == 0.5), 0.9, 0.5)
    sweeps = pd.concat([pd.DataFrame({"tau": taus, "precision": precision, "recall": 0.85, "signal": "S"}),
                        pd.DataFrame({"tau": taus, "precision": 0.5, "recall": 0.5, "signal": "S (x)"}),
                        pd.DataFrame({"tau": taus, "precision": 1.0, "recall": 1.0, "signal": "TsT-RF s(x) - 1/K"})])
    text = "\n".join(sweep_section(sweeps))
    assert "| S | 0.2 to 0.3, 0.5 |" in text and "| S (x) | none |" in text
    assert "| S | 0.50 / 0.85 | 0.50 / 0.85 | 0.90 / 0.85 |" in text
    assert "TsT" not in text


def test_the_panel_sentence_names_who_decides_from_the_models_table():
    models = pd.DataFrame({"label": ["Qwen2, text panel", "SmolLM2-135M, text panel, untrained", "Qwen2.5-VL, V panel",
                                     "InternVL, held out"], "role": ["text", "text", "vision", "held_out"],
                           "trained": [True, False, True, True]})
    subsets = pd.DataFrame({"model": models["label"], "subset": "full", "acc_blind": [50.0, 25.0, 60.0, 55.0],
                            "acc_video": [np.nan, np.nan, 70.0, 65.0]})
    lines = panel_section(models, subsets)
    assert lines[-1] == ("T(q) is computed from Qwen2 and SmolLM2-135M; V(q) from Qwen2.5-VL; InternVL takes part in "
                         "no decision.")
    assert "| SmolLM2-135M, text panel, untrained | untrained | 25.0 | – |" in lines
    assert "| InternVL, held out | a training stream of its own | 55.0 | 65.0 |" in lines
    no_held_out = panel_section(models[models["role"] != "held_out"], subsets)
    assert no_held_out[-1] == "T(q) is computed from Qwen2 and SmolLM2-135M; V(q) from Qwen2.5-VL."


LADDER_MODELS = pd.DataFrame({"label": ["Reader, V panel", "Blur, held out"], "pretrained": ["/c/r", "/c/b"],
                              "steps": [1200, 1200], "role": ["vision", "held_out"]})


def _ladder(category: str, model: str, single: float, shuffled: float, video: float, og_lo: float) -> dict:
    return {"model": model, "subset": "full", "category": category, "n": 20, "acc_blind": 25.0, "acc_single": single,
            "acc_shuffled": shuffled, "acc_video": video, "frame_gain": video - single, "frame_gain_lo": 1.0,
            "frame_gain_hi": 2.0, "order_gain": video - shuffled, "order_gain_lo": og_lo, "order_gain_hi": 3.0}


def _truth(model: str, reads: bool, video: float, fg_ok: bool = True) -> dict:
    return {"model": model, "category": "vehicle direction", "decided_by": "the order", "n": 20, "acc_blind": 25.0,
            "acc_single": 25.0, "acc_shuffled": 40.0 if reads else video, "acc_video": video, "frame_gain": 1.5,
            "frame_gain_lo": 1.0, "frame_gain_hi": 2.0, "order_gain": 2.0, "order_gain_lo": 1.0,
            "order_gain_hi": 3.0, "reads_order": reads, "reads_above": 50.0,
            "implied_frame_gain": "> 0" if reads else "0", "implied_order_gain": "> 0" if reads else "0",
            "frame_gain_agrees": fg_ok, "order_gain_agrees": True}


def test_the_ladder_says_which_vlms_read_the_order_from_the_tables():
    ladder = pd.DataFrame([_ladder("all", "/c/r", 50.0, 55.0, 60.0, 1.0), _ladder("vehicle direction", "/c/r", 25.0,
                                                                                  40.0, 90.0, 30.0),
                           _ladder("all", "/c/b", 40.0, 40.0, 40.0, -1.0),
                           _ladder("vehicle direction", "/c/b", 25.0, 20.0, 20.0, -5.0)])
    truth = pd.DataFrame([_truth("Reader, V panel", True, 90.0), _truth("Blur, held out", False, 20.0, fg_ok=False)])
    text = "\n".join(ladder_section(ladder, truth, LADDER_MODELS))
    assert "| Reader, V panel | vehicle direction | 20 | 25.0 | 25.0 | 40.0 | 90.0 | +65.0 [+1.0, +2.0] | " \
           "+50.0 [+30.0, +3.0] |" in text
    assert text.index("| Reader, V panel | all |") < text.index("| Blur, held out | all |")  # models.csv's order
    assert ("Reader, V panel (1,200 steps; 90.0 with the frames in order, 40.0 shuffled, 25.0 with one frame) reads "
            "the order.") in text
    assert ("Blur, held out (1,200 steps; 20.0 with the frames in order, 20.0 shuffled, 25.0 with one frame) did not "
            "learn it in its training.") in text
    assert "above 50% (the lower bound" in text and "test_ladder.py" not in text
    assert "1 of 2 rows agree with the truth. Where not: Blur, held out, vehicle direction: FG +1.5 [+1.0, +2.0] " \
           "against 0." in text
    # where no VLM reads the order, the report says so and points at the constructed runs
    nobody = "\n".join(ladder_section(ladder, truth.assign(reads_order=False), LADDER_MODELS))
    assert "No tiny VLM learnt the order" in nobody and "tests/metrics/test_ladder.py" in nobody
    assert "reads the order." not in nobody


def test_the_temporal_subset_sentence_states_its_precision_and_recall():
    temporal = pd.DataFrame({"subset": ["temporal subset", "V_order >= 0.1"], "target": "order", "n_chosen": [12, 0],
                             "n_target": [20, 20], "chosen_by_type": ["order 10; neither 2", np.nan],
                             "precision": [10 / 12, np.nan], "precision_lo": [0.55, np.nan],
                             "precision_hi": [0.97, np.nan], "recall": [0.5, 0.0], "recall_lo": [0.3, 0.0],
                             "recall_hi": [0.7, 0.17]})
    text = "\n".join(temporal_section(temporal, "temporal subset"))
    assert "| temporal subset | 12 | 0.83 [0.55, 0.97] | 0.50 [0.30, 0.70] | order 10; neither 2 |" in text
    assert "| V_order >= 0.1 | 0 | – | 0.00 [0.00, 0.17] | – |" in text
    assert ("holds 12 questions; of the 20 planted order questions it finds 10, precision 0.83 [0.55, 0.97], recall "
            "0.50 [0.30, 0.70].") in text
    panel = "\n".join(temporal_section(temporal, "temporal subset", {"A, V panel": True, "B, V panel": False}))
    assert ("V_order(q) is the mean over the V panel's VLMs (A, V panel and B, V panel), of which 1 reads the order "
            "(A, V panel).") in panel
    nobody = "\n".join(temporal_section(temporal, "temporal subset", {"A, V panel": False}))
    assert "of which 0 read the order." in nobody
