"""Iterative Bias Pruning (IBP, Brown et al. 2025, arXiv:2511.04655, section 4.1 and appendix B.3).

Starting from the whole benchmark, repeat:
1. run the test-set stress test (`visdep_metrics.tst.stress_test.run_tst`) on the remaining questions, giving s(x);
2. stop when the removal budget is spent, or when max_x s(x) <= threshold;
3. otherwise remove the batch of the (at most `batch_size`, at most the budget left) highest-s questions
   (with a threshold: only questions whose s exceeds it), ties in s broken by benchmark order.
Scores are recomputed after every batch because removing questions changes what the remaining
set's statistics make learnable. The last stress test measures the kept set.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from loguru import logger

from lmms_eval_tasks.errors import OptionError
from lmms_eval_tasks.records import Question
from visdep_metrics.provenance import package_versions
from visdep_metrics.tst.stress_test import (
    TstConfig,
    TstResult,
    question_order_sha256,
    run_tst,
    write_tst,
)

TRACE_COLUMNS = ["iteration", "n_questions", "n_removed_total", "accuracy", "chance", "accuracy_minus_chance",
                 "mean_s", "max_s"]


@dataclass
class IbpResult:
    kept_ids: list[str]          # in benchmark order
    removed: pd.DataFrame        # question_id, category, iteration, s (at removal), in removal order
    trace: pd.DataFrame          # TRACE_COLUMNS, one row per stress test (row 0 = the full benchmark)
    final: TstResult             # the stress test of the kept questions
    stop_reason: str


def resolve_budget(budget: float, n_questions: int) -> int:
    """A budget in (0, 1) is a fraction of the benchmark, a whole number >= 1 a count of questions."""
    if 0 < budget < 1:
        return int(np.floor(budget * n_questions))
    if budget >= 1 and float(budget).is_integer():
        return int(budget)
    raise OptionError(f"--budget {budget!r}: give a fraction in (0, 1) or a whole number of questions >= 1")


def iterative_bias_pruning(records: Sequence[Question], budget: int, batch_size: int, threshold: float | None = None,
                           config: TstConfig | None = None, benchmark: str | None = None,
                           progress: bool = True) -> IbpResult:
    """Prune at most `budget` questions in batches of `batch_size` (see the module docstring)."""
    config = config or TstConfig()
    records = list(records)
    if budget < 0 or budget >= len(records):
        raise OptionError(f"--budget {budget}: must be in 0..{len(records) - 1} (the benchmark has {len(records)} "
                         "questions)")
    if batch_size < 1:
        raise OptionError(f"--batch-size {batch_size}: must be at least 1")
    remaining = records
    removed: list[dict] = []
    trace = []
    iteration = 0
    while True:
        result = run_tst(remaining, config, benchmark, progress=progress)
        s = result.s_x["s"].to_numpy()
        summary = result.summary
        trace.append({"iteration": iteration, "n_questions": len(remaining), "n_removed_total": len(removed),
                      "accuracy": summary["accuracy"], "chance": summary["chance"],
                      "accuracy_minus_chance": summary["accuracy_minus_chance"], "mean_s": float(s.mean()),
                      "max_s": float(s.max())})
        logger.info(f"IBP iteration {iteration}: {len(remaining)} questions, TsT accuracy "
                    f"{100 * summary['accuracy']:.1f}% (chance {100 * summary['chance']:.1f}%), max s {s.max():.3f}")
        left = budget - len(removed)
        if left <= 0:
            stop = "budget spent"
            break
        if threshold is not None and s.max() <= threshold:
            stop = f"max s <= threshold {threshold}"
            break
        order = np.argsort(-s, kind="stable")
        if threshold is not None:
            order = order[s[order] > threshold]
        batch = order[:min(batch_size, left)]
        next_remaining = _without(remaining, batch)
        if len({r.video for r in next_remaining}) < config.folds:  # the next stress test could not split them
            stop = f"fewer than {config.folds} videos would remain"
            break
        removed += [{"question_id": remaining[i].question_id, "category": remaining[i].category,
                     "iteration": iteration, "s": float(s[i])} for i in batch]
        remaining = next_remaining
        iteration += 1
    logger.info(f"IBP stopped ({stop}): removed {len(removed)}, kept {len(remaining)}")
    return IbpResult([r.question_id for r in remaining],
                     pd.DataFrame(removed, columns=["question_id", "category", "iteration", "s"]),
                     pd.DataFrame(trace, columns=TRACE_COLUMNS), result, stop)


def _without(records: list[Question], positions: np.ndarray) -> list[Question]:
    drop = set(positions.tolist())
    return [r for i, r in enumerate(records) if i not in drop]


def write_ibp(result: IbpResult, out: str | Path, benchmark: str, all_ids: Sequence[str], budget: int,
              batch_size: int, threshold: float | None, config: TstConfig) -> list[Path]:
    """OUT/{trace.csv, removed.csv, removed_ids.txt, kept_ids.txt, ibp.json}, OUT/final/{s_x.csv, summary.json}
    (the stress test of the kept set) and OUT/tasks/<benchmark>_{blind,video}_debiased.yaml."""
    from lmms_eval_tasks.export import write_subset_tasks

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("trace.csv", "removed.csv", "removed_ids.txt", "kept_ids.txt",
                                           "ibp.json")}
    result.trace.to_csv(paths["trace.csv"], index=False)
    result.removed.to_csv(paths["removed.csv"], index=False)
    paths["removed_ids.txt"].write_text("".join(f"{q}\n" for q in result.removed["question_id"]))
    paths["kept_ids.txt"].write_text("".join(f"{q}\n" for q in result.kept_ids))
    first, last = result.trace.iloc[0], result.trace.iloc[-1]
    description = (f"Iterative Bias Pruning (TsT-RF, {config.folds} folds, seed {config.seed}): removed "
                   f"{len(result.removed)} of {len(all_ids)} questions; TsT accuracy {100 * first['accuracy']:.1f}% -> "
                   f"{100 * last['accuracy']:.1f}% (chance {100 * last['chance']:.1f}%).")
    task_paths = write_subset_tasks(out / "tasks", benchmark, result.kept_ids, "debiased", description)
    summary = {
        "benchmark": benchmark, "budget": budget, "batch_size": batch_size, "threshold": threshold,
        "stop_reason": result.stop_reason, "iterations": int(len(result.trace) - 1),
        "n_questions": len(all_ids), "n_removed": int(len(result.removed)), "n_kept": len(result.kept_ids),
        "accuracy_before": float(first["accuracy"]), "chance_before": float(first["chance"]),
        "accuracy_after": float(last["accuracy"]), "chance_after": float(last["chance"]),
        "removed_per_category": {str(k): int(v) for k, v in
                                 result.removed["category"].fillna("(none)").value_counts().sort_index().items()},
        "tst": asdict(config), "versions": package_versions(),
        "question_order_sha256": question_order_sha256(list(all_ids)),
        "kept_order_sha256": question_order_sha256(result.kept_ids),
    }
    paths["ibp.json"].write_text(json.dumps(summary, indent=2) + "\n")
    return [*paths.values(), *write_tst(result.final, out / "final"), *task_paths]
