"""Writers of lmms-eval output folders in the 0.7.3 format, for the audit's tests.

A sample line is what lmms-eval writes for a visdep task: doc_id, target (a string), filtered_resps
(stringified `(loss, is_greedy)` pairs), acc, the `visdep` record and input.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def visdep_record(question_id, benchmark, mode, answer_index, logprobs, category=None, source="CAP",
                  scoring="letter", video=None, prompt_id=None) -> dict:
    """A visdep record; without `video` (`prompt_id`) it is one written before the tasks recorded the question's
    video (its blind prompt's identity)."""
    record = {"question_id": question_id, "benchmark": benchmark, "mode": mode, "category": category,
              "source": source, "n_options": len(logprobs), "answer_index": int(answer_index),
              "option_logprobs": [float(x) for x in logprobs], "scoring": scoring}
    if video is not None:
        record["video"] = video
    if prompt_id is not None:
        record["prompt_id"] = prompt_id
    return record


def log_probabilities(scores) -> list[float]:
    """Scores turned into letter log-probabilities a model could return: log-softmax, less 0.1 (the letters' total
    probability 0.9: a model gives some to other tokens). The audit normalises across options, so it reads the same
    probabilities from these as from the scores."""
    scores = np.asarray(scores, dtype=np.float64)
    return list(scores - np.logaddexp.reduce(scores) - 0.1)


def sample_line(doc_id: int, record: dict) -> dict:
    logprobs = record["option_logprobs"]
    finite = all(math.isfinite(x) for x in logprobs)
    pred = int(np.argmax(logprobs)) if finite else -1
    return {"doc_id": doc_id, "target": str(record["answer_index"]),
            "filtered_resps": [f"({-x}, False)" for x in logprobs], "token_counts": [None] * len(logprobs),
            "doc_hash": "0" * 64, "acc": float(pred == record["answer_index"]), "visdep": record,
            "input": f"question {record['question_id']}\nA. ...\nAnswer with the option's letter from the given "
                     f"choices directly."}


def _accuracy(records: list[dict]) -> float:
    """The task's `acc,none`, as lmms-eval averages the lines' `acc`."""
    return float(np.mean([sample_line(i, r)["acc"] for i, r in enumerate(records)])) if records else 0.0


def write_run(root: Path, model: str | None, tasks: dict[str, list[dict]], date: str = "20260101_120000",
              model_type: str = "visdep_vlm", extra_args: str = "max_frames=16", subfolder: str | None = None,
              visdep: dict | None = None, timezone: str | None = "UTC") -> Path:
    """Write one lmms-eval run: `<root>/<subfolder>/<date>_results.json` and a samples file per task.

    tasks: task name -> visdep records in doc order. `model` None writes a run without `pretrained=`
    (like lmms-eval's dummy). `visdep`: the results file's visdep section ({"model": ..., "dropped": ...}), which
    runs written before visdep recorded it lack. `timezone`: lmms-eval's --timezone, which its CLI records in
    config.resolved_cli_args (None: a results file without it, dated by its modification time). Returns the folder
    written."""
    folder = Path(root) / (subfolder if subfolder is not None else (model or model_type).replace("/", "__"))
    folder.mkdir(parents=True, exist_ok=True)
    model_args = ",".join(a for a in (f"pretrained={model}" if model else "", extra_args) if a)
    results = {
        "results": {t: {"alias": t, "acc,none": _accuracy(records)} for t, records in tasks.items()},
        "configs": {t: {"task": t, "tag": f"visdep_{'video' if '_video' in t else 'blind'}"} for t in tasks},
        "config": {"model": model_type, "model_args": model_args, "batch_size": 1,
                   **({"resolved_cli_args": {"timezone": timezone}} if timezone else {})},
        "n-samples": {t: {"original": len(records), "effective": len(records)} for t, records in tasks.items()},
        "date": date, "lmms_eval_version": "0.7.3",
    }
    if visdep is not None:
        results["visdep"] = visdep
    (folder / f"{date}_results.json").write_text(json.dumps(results, indent=2))
    for task, records in tasks.items():
        with open(folder / f"{date}_samples_{task}.jsonl", "w") as f:
            for doc_id, record in enumerate(records):
                f.write(json.dumps(sample_line(doc_id, record)) + "\n")
    return folder


def records_from_correct(benchmark: str, mode: str, correct, n_options, categories=None, prefix="q",
                         videos=None, prompts=None) -> list[dict]:
    """Records whose argmax is the answer exactly where `correct` is 1 (answer_index = i % K)."""
    out = []
    for i, (c, k) in enumerate(zip(correct, n_options, strict=True)):
        answer = i % k
        pred = answer if c else (answer + 1) % k
        logprobs = [-4.0] * k  # log-probabilities of distinct letters: their probabilities add up to less than 1
        logprobs[pred] = -0.2
        out.append(visdep_record(f"{prefix}-{i}", benchmark, mode, answer, logprobs,
                                 category=None if categories is None else categories[i],
                                 video=None if videos is None else videos[i],
                                 prompt_id=None if prompts is None else prompts[i]))
    return out


def write_panel_runs(root: Path, panel: dict, n: int = 12, seed: int = 0) -> Path:
    """MM-AU-like runs of every model a panel names (its text LLMs and inspector LLMs blind only, its VLMs and
    held-out models blind and video), with random correctness; returns `root`."""
    rng = np.random.default_rng(seed)
    text = list(dict.fromkeys([*panel.get("text_llms", []), *(panel.get("inspector_llms") or [])]))
    for model in text:
        write_run(root, model, {"mmau_blind": records_from_correct("mmau", "blind", rng.integers(0, 2, n), [5] * n)},
                  model_type="visdep_llm")
    for model in [*panel.get("vlms", []), *panel.get("held_out", [])]:
        write_run(root, model, {f"mmau_{mode}": records_from_correct("mmau", mode, rng.integers(0, 2, n), [5] * n)
                                for mode in ("blind", "video")})
    return root


def dummy_as_log_probabilities(folder: Path) -> None:
    """lmms-eval's dummy model gives every option a loglikelihood of 0.0, which no distribution over the letters
    gives (the audit refuses it): rewrite each as log(1/K). The audit normalises over the options, so the option
    probabilities, the answers and the run's accuracy stay what they were."""
    for path in Path(folder).rglob("*_samples_*.jsonl"):
        samples = [json.loads(line) for line in path.read_text().splitlines()]
        for sample in samples:
            record = sample["visdep"]
            assert record["option_logprobs"] == [0.0] * record["n_options"], path
            record["option_logprobs"] = [-math.log(record["n_options"])] * record["n_options"]
            sample["filtered_resps"] = [f"({-x}, False)" for x in record["option_logprobs"]]
        path.write_text("".join(json.dumps(s) + "\n" for s in samples))
