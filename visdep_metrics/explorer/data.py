"""The explorer's data: one JSON blob built from the audit's own tables (questions, summary, headline, sweep) and
what its reading of the runs kept (each model's option probabilities, `BenchmarkResults.percent`), with the question
texts and options from the prompts lmms-eval logged.

Per-question columns travel as base64 typed arrays: S as float64, so that the page's τ keeps exactly the questions
`questions.csv` keeps; T, V and s(x) as float32 (shown to three decimals); one byte per option probability, in
hundredths, the precision the page prints. Texts (questions, options, categories, videos) travel as a table of
distinct values and an index per row: benchmarks repeat them many times over. The page decodes them once.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd

from lmms_eval_tasks.records import LETTERS
from visdep_metrics.audit.compute import Audit
from visdep_metrics.audit.intervals import ALL, METRICS
from visdep_metrics.audit.samples import PERCENT_ABSENT as ABSENT
from visdep_metrics.audit.samples import read_prompts
from visdep_metrics.audit.tables import name, ordered
from visdep_metrics.parallel import forked_map

TERM_SCALE = 10_000  # a panel model's term, to four decimals (int16)
TERM_ABSENT = -32768


def encode(values: np.ndarray, dtype: str) -> str:
    """Little-endian bytes of `values` as `dtype`, in base64 (the page decodes them into a typed array)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()


def split_prompt(prompt: str | None, k: int) -> tuple[str, list[str]]:
    """(question, options) of the prompt the tasks write: the question, K lines "A. option", the instruction; the
    whole prompt as the question where it is not of that shape."""
    if not prompt:
        return "", []
    lines = prompt.split("\n")
    for start in range(len(lines) - k, -1, -1):
        block = lines[start:start + k]
        if all(line.startswith(f"{LETTERS[j]}. ") for j, line in enumerate(block)):
            return "\n".join(lines[:start]).strip(), [line[3:] for line in block]
    return prompt, []


def _number(value) -> float | None:
    return None if pd.isna(value) else round(float(value), 4)


def _decision(column: pd.Series | None, n: int) -> str:
    """A filter's keep/remove decisions as int8: 1 kept, 0 removed, -1 not computed."""
    if column is None:
        return encode(np.full(n, -1), "i1")
    values = pd.array(column, dtype="boolean")
    return encode(np.where(values.isna(), -1, values.fillna(False).astype(int)), "i1")


def _points(audit: Audit, model_index: dict[str, int]) -> list[dict]:
    """The diagnostic space: per benchmark and subset, every model with a video run and the mean (model -1)."""
    keep = ["benchmark", "subset", "n", "chance", *METRICS, *(f"{m}_{b}" for m in METRICS for b in ("lo", "hi"))]
    rows = []
    summary = audit.summary
    if not summary.empty:
        for row in summary[(summary["category"] == ALL) & summary["acc_video"].notna()].to_dict("records"):
            rows.append({**{c: row[c] for c in keep}, "model": model_index[row["model"]]})
    if not audit.headline.empty:
        for row in audit.headline[audit.headline["category"] == ALL].to_dict("records"):
            rows.append({**{c: row[c] for c in keep}, "model": -1})
    return [{k: _number(v) if k not in ("benchmark", "subset", "model") else v for k, v in row.items()}
            for row in rows]


def _sweeps(audit: Audit, model_index: dict[str, int]) -> list[dict]:
    if audit.sweep.empty:
        return []
    found = []
    for (benchmark, signal, model), rows in audit.sweep.groupby(["benchmark", "signal", "model"], sort=False):
        rows = rows.sort_values("tau")
        found.append({"benchmark": benchmark, "signal": signal, "model": model_index[model],
                      "tau": rows["tau"].round(6).tolist(), "n_kept": rows["n_kept"].astype(int).tolist(),
                      **{m: [_number(v) for v in rows[m]] for m in ("blind_gap", "visual_gain")}})
    return found


def _prompts(path: Path) -> dict[str, str | None]:
    return read_prompts(path, None)


def _answers(audit: Audit, questions: pd.DataFrame, offsets: np.ndarray, model_index: dict[str, int]) -> dict:
    """Per model and mode: option probabilities (uint8 hundredths, ABSENT where no run) and the option picked (int8,
    -1 where no run), as the audit's reading of the runs kept them (`BenchmarkResults.percent`)."""
    n_cells = int(offsets[-1])
    k = questions["n_options"].to_numpy()
    found: dict[str, dict] = {}
    for bench in audit.runs.benchmarks.values():
        rows = _rows_of(questions, bench)
        inside = np.arange(int(bench.questions["n_options"].max()))[None, :] < k[rows][:, None]
        kr = k[rows]
        cells = np.repeat(offsets[rows], kr) + np.arange(int(kr.sum())) - np.repeat(np.cumsum(kr) - kr, kr)
        for model, modes in bench.percent.items():
            for mode, (percent, picked) in modes.items():
                entry = found.setdefault(str(model_index[model]), {}).setdefault(mode, {
                    "p": np.full(n_cells, ABSENT, dtype=np.uint8), "pick": np.full(len(questions), -1, np.int8)})
                entry["p"][cells] = percent[inside]
                entry["pick"][rows] = picked
    return {m: {mode: {"p": encode(v["p"], "u1"), "pick": encode(v["pick"], "i1")} for mode, v in modes.items()}
            for m, modes in found.items()}


def _rows_of(questions: pd.DataFrame, bench) -> np.ndarray:
    """The rows of `questions` that hold the benchmark's, in its order (the audit concatenates them so)."""
    rows = np.flatnonzero((questions["benchmark"] == bench.benchmark).to_numpy())
    if not np.array_equal(questions["question_id"].to_numpy()[rows], bench.questions["question_id"].to_numpy()):
        raise RuntimeError(f"{bench.benchmark}: the audit's questions are not in the order its runs were read")
    return rows


def _texts(audit: Audit, questions: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Each question's text and options, from the prompts lmms-eval logged in one blind samples file per
    benchmark (read in forked processes where they are large, as the audit reads the runs)."""
    blind = {b.benchmark: next((f for f in b.files if f.mode == "blind"), None) for b in audit.runs.benchmarks.values()}
    blind = {b: f for b, f in blind.items() if f is not None}
    read = forked_map(_prompts, [f.samples_path for f in blind.values()],
                      [f.samples_path.stat().st_size for f in blind.values()], "explorer: prompts")
    texts, options = [""] * len(questions), [[] for _ in range(len(questions))]
    k = questions["n_options"].to_numpy()
    for bench, prompts in zip(blind, read, strict=True):
        rows = np.flatnonzero((questions["benchmark"] == bench).to_numpy())
        for row, qid in zip(rows, questions["question_id"].to_numpy()[rows], strict=True):
            texts[row], options[row] = split_prompt(prompts.get(qid), int(k[row]))
    return texts, options


def strings(values) -> tuple[list[str], str]:
    """A column of texts as a table of its distinct values and one int32 index per row (-1: none): benchmarks
    repeat their questions, options, categories and videos many times over."""
    codes, uniques = pd.factorize(pd.Series(list(values), dtype=object), use_na_sentinel=True)
    return [str(u) for u in uniques], encode(codes, "i4")


def _terms(audit: Audit, questions: pd.DataFrame, model_index: dict[str, int]) -> dict:
    """Each panel model's term of T ([correct] · (1 − H_norm), the paper's) and of V ((P(y*|video) − P(y*|blind))
    / (1 − 1/K)), per question, to four decimals."""
    terms: dict[str, dict[str, np.ndarray]] = {"T": {}, "V": {}}
    used = audit.panel_used.set_index(["benchmark", "panel"])["models"]
    for bench in audit.runs.benchmarks.values():
        rows = np.flatnonzero((questions["benchmark"] == bench.benchmark).to_numpy())
        k = bench.questions["n_options"].to_numpy()
        for signal in ("T", "V"):
            for model in used.get((bench.benchmark, signal), ()):
                i = bench.models.index(model)
                value = (bench.correct_blind[i] * (1 - bench.entropy_blind[i]) if signal == "T" else
                         (bench.p_answer_video[i] - bench.p_answer_blind[i]) / (1 - 1 / k))
                column = terms[signal].setdefault(str(model_index[model]), np.full(len(questions), TERM_ABSENT,
                                                                                   dtype=np.int16))
                column[rows] = np.rint(value * TERM_SCALE)
    return {signal: {m: encode(v, "i2") for m, v in columns.items()} for signal, columns in terms.items()}


def explorer_data(audit: Audit, sheets: dict[tuple[str, str], str], max_frames: int | None,
                  frames_note: str) -> dict:
    """The page's blob; `sheets`: (benchmark, video) -> contact sheet file name, relative to the page."""
    questions = audit.questions.reset_index(drop=True)
    n = len(questions)
    models = sorted({m for bench in audit.runs.benchmarks.values() for m in bench.models})
    model_index = {m: i for i, m in enumerate(models)}
    roles = audit.roles
    video_models = {f.model for f in audit.runs.used if f.mode == "video"}
    benchmarks = ordered(questions["benchmark"].unique())
    bench_index = {b: i for i, b in enumerate(benchmarks)}
    k = questions["n_options"].to_numpy().astype(int)
    offsets = np.concatenate([[0], np.cumsum(k)])
    texts, options = _texts(audit, questions)
    used = audit.panel_used.set_index(["benchmark", "panel"])["models"]
    headline = audit.headline[audit.headline["category"] == ALL] if not audit.headline.empty else audit.headline

    def indices(benchmark: str, panel: str) -> list[int]:
        return [model_index[m] for m in used.get((benchmark, panel), ())]

    per_benchmark = []
    for b in benchmarks:
        rows = headline[headline["benchmark"] == b] if not headline.empty else headline
        mean_of = rows["models"].iloc[0].split("; ") if len(rows) else []
        per_benchmark.append({"name": b, "title": name(b), "T": indices(b, "T"), "V": indices(b, "V"),
                              "mean_of": [model_index[m] for m in mean_of if m in model_index],
                              "n": int((questions["benchmark"] == b).sum())})

    def column(name_: str) -> pd.Series | None:
        return questions[name_] if name_ in questions else None

    def floats(name_: str, dtype: str) -> str:
        """S as float64: the page keeps at τ exactly what questions.csv keeps; T, V, s(x) are only shown."""
        values = column(name_)
        return encode(np.full(n, np.nan) if values is None else values.to_numpy(dtype=float), dtype)

    ladder_of = {model: (ladder.video, rung) for ladder in audit.settings.ladders
                 for rung, model in ladder.rungs().items()}
    return {
        "tau": audit.tau, "tau_order": audit.settings.tau_order,
        "confidence": round(100 * audit.settings.confidence_level),
        "textual_evidence": audit.settings.textual_evidence,
        "benchmarks": per_benchmark,
        # a frame condition names its ladder's full-video model and its rung: the page shows it among that model's rows
        "models": [{"name": m, "label": audit.label(m), "role": roles.get(m, ""), "video": m in video_models,
                    **({"ladder_of": model_index[ladder_of[m][0]], "rung": ladder_of[m][1]}
                       if m in ladder_of and ladder_of[m][0] in model_index else {})}
                   for m in models],
        "points": _points(audit, model_index), "sweeps": _sweeps(audit, model_index),
        "frames": {"max_frames": max_frames, "note": frames_note},
        "questions": {
            "n": n, "benchmark": encode(questions["benchmark"].map(bench_index).to_numpy(), "u1"),
            "question_id": questions["question_id"].astype(str).tolist(),
            **{name: strings(values) for name, values in (
                ("category", questions["category"]), ("video", questions["video"]), ("question", texts),
                ("options", [o for row in options for o in row]),
                ("sheet", [sheets.get((b, v)) for b, v in zip(questions["benchmark"], questions["video"],
                                                              strict=True)]))},
            "n_options_shown": encode([len(row) for row in options], "u1"),
            "k": encode(k, "u1"), "answer": encode(questions["answer_index"].to_numpy(), "u1"),
            "offsets": encode(offsets, "i4"),
            "T": floats("T", "f4"), "V": floats("V", "f4"), "S": floats("S", "f8"), "s_tst": floats("s_tst", "f4"),
            "has_s_tst": "s_tst" in questions,
            "V_frame": floats("V_frame", "f4"), "V_order": floats("V_order", "f4"),
            "has_ladder": "V_order" in questions,
            "temporal": _decision(column("temporal"), n),
            "grounded": _decision(column("grounded"), n),
            "kept_llm_inspector": _decision(column("kept_llm_inspector"), n),
            "kept_b_clean": _decision(column("kept_b_clean"), n),
        },
        "answers": _answers(audit, questions, offsets, model_index),
        "terms": _terms(audit, questions, model_index),
    }
