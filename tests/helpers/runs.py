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


def sample_line(doc_id: int, record: dict) -> dict:
    logprobs = record["option_logprobs"]
    finite = all(math.isfinite(x) for x in logprobs)
    pred = int(np.argmax(logprobs)) if finite else -1
    return {"doc_id": doc_id, "target": str(record["answer_index"]),
            "filtered_resps": [f"({-x}, False)" for x in logprobs], "token_counts": [None] * len(logprobs),
            "doc_hash": "0" * 64, "acc": float(pred == record["answer_index"]), "visdep": record,
            "input": f"question {record['question_id']}\nA. ...\nAnswer with the option's letter from the given "
                     f"choices directly."}


def write_run(root: Path, model: str | None, tasks: dict[str, list[dict]], date: str = "20260101_120000",
              model_type: str = "visdep_vlm", extra_args: str = "max_frames=16", subfolder: str | None = None,
              visdep: dict | None = None) -> Path:
    """Write one lmms-eval run: `<root>/<subfolder>/<date>_results.json` and a samples file per task.

    tasks: task name -> visdep records in doc order. `model` None writes a run without `pretrained=`
    (like lmms-eval's dummy). `visdep`: the results file's visdep section ({"model": ..., "dropped": ...}), which
    runs written before visdep recorded it lack. Returns the folder written."""
    folder = Path(root) / (subfolder if subfolder is not None else (model or model_type).replace("/", "__"))
    folder.mkdir(parents=True, exist_ok=True)
    model_args = ",".join(a for a in (f"pretrained={model}" if model else "", extra_args) if a)
    results = {
        "results": {t: {"alias": t, "acc,none": 0.0} for t in tasks},
        "configs": {t: {"task": t, "tag": f"visdep_{'video' if '_video' in t else 'blind'}"} for t in tasks},
        "config": {"model": model_type, "model_args": model_args, "batch_size": 1},
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
        logprobs = [-3.0] * k
        logprobs[pred] = -0.2
        out.append(visdep_record(f"{prefix}-{i}", benchmark, mode, answer, logprobs,
                                 category=None if categories is None else categories[i],
                                 video=None if videos is None else videos[i],
                                 prompt_id=None if prompts is None else prompts[i]))
    return out
