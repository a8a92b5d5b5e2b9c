"""`visdep tst` (test-set stress test, TsT-RF) and `visdep ibp` (Iterative Bias Pruning)."""

from __future__ import annotations

import argparse
import sys

from loguru import logger

from lmms_eval_tasks.loaders import BENCHMARKS, BenchmarkDataError, load_benchmark
from lmms_eval_tasks.spec import add_spec_argument, benchmark_from_arguments, register_specs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tst", help="train-on-the-test-set stress test: k-fold random forest on the benchmark's text "
                                   "only; writes OUT/s_x.csv and OUT/summary.json")
    _add_common(p)
    p.add_argument("--method", choices=["rf", "llm"], default="rf",
                   help="rf: random forest on hand-made features (default); llm: LoRA fine-tuning of --model per fold")
    llm = p.add_argument_group("TsT-LLM (--method llm; defaults = the paper's GPU setting)")
    llm.add_argument("--model", help="causal LM checkpoint folder")
    llm.add_argument("--gguf-file", default=None, help="a .gguf file inside --model")
    llm.add_argument("--epochs", type=int, default=3)
    llm.add_argument("--learning-rate", type=float, default=5e-5)
    llm.add_argument("--batch-size", type=int, default=32)
    llm.add_argument("--lora-r", type=int, default=128)
    llm.add_argument("--lora-alpha", type=int, default=256)
    llm.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.set_defaults(func=_tst)

    p = sub.add_parser("ibp", help="Iterative Bias Pruning: repeatedly remove the highest-s(x) batch and re-run the "
                                   "stress test; writes kept/removed ids, the trace and <bench>_*_debiased tasks")
    _add_common(p)
    p.add_argument("--budget", type=float, required=True,
                   help="most questions to remove: a whole number, or a fraction of the benchmark in (0, 1)")
    p.add_argument("--batch-size", type=int, required=True, help="questions removed per iteration")
    p.add_argument("--threshold", type=float, default=None,
                   help="stop once max s(x) <= threshold, and never remove a question with s(x) <= threshold")
    p.set_defaults(func=_ibp)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmark", help=f"one of {', '.join(BENCHMARKS)}, or the name of a --spec benchmark "
                                       f"(default: the benchmark of the one --spec)")
    add_spec_argument(p)
    p.add_argument("--root", default=None, help="benchmark root (default: its *_ROOT environment variable)")
    p.add_argument("--out", required=True, help="output folder: new, empty, or an earlier output of the same command "
                                                "(checked before anything runs)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--seed", type=int, default=42, help="seed of folds, forests and tie-breaking (default 42)")
    p.add_argument("--n-estimators", type=int, default=200, help="trees per forest (default 200)")
    p.add_argument("--min-samples-leaf", type=int, default=3, help="forest leaf size (default 3)")
    p.add_argument("--n-jobs", type=int, default=1, help="cores per forest (default 1; -1 = all)")


def _config(args):
    from visdep_metrics.tst.stress_test import TstConfig

    return TstConfig(folds=args.folds, seed=args.seed, n_estimators=args.n_estimators,
                     min_samples_leaf=args.min_samples_leaf, n_jobs=args.n_jobs)


def _load(args) -> list[dict] | None:
    try:
        args.benchmark = benchmark_from_arguments(args.benchmark, register_specs(args.spec))
        return load_benchmark(args.benchmark, args.root)
    except BenchmarkDataError as e:
        logger.error(str(e))
        return None
    except KeyError as e:  # no or an unknown --benchmark
        logger.error(e.args[0])
        return None


def _out_ok(out: str, marker: str, command: str) -> bool:
    """Checked before the cross-validation runs: OUT must be new, empty, or an earlier output of `command`."""
    from visdep_metrics.outdir import OutputDirError, check_out_dir

    try:
        check_out_dir(out, marker, command)
    except OutputDirError as e:
        logger.error(str(e))
        print(f"visdep {command}: error: {e}", file=sys.stderr)
        return False
    return True


def _tst(args) -> int:
    from visdep_metrics.tst.stress_test import format_summary, run_tst, write_tst

    if not _out_ok(args.out, "summary.json", "tst"):
        return 2
    records = _load(args)
    if records is None:
        return 2
    try:
        if args.method == "llm":
            result = _run_llm(args, records)
        else:
            result = run_tst(records, _config(args), args.benchmark)
    except ValueError as e:  # e.g. fewer videos than folds
        logger.error(f"{args.benchmark}: {e}")
        return 2
    paths = write_tst(result, args.out)
    print(format_summary(result.summary))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run_llm(args, records):
    from visdep_metrics.tst.llm import LlmTstConfig, run_tst_llm

    if not args.model:
        raise ValueError("--method llm needs --model (a causal LM checkpoint folder)")
    config = LlmTstConfig(model=args.model, gguf_file=args.gguf_file, folds=args.folds, seed=args.seed,
                          epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size,
                          lora_r=args.lora_r, lora_alpha=args.lora_alpha, device=args.device)
    return run_tst_llm(records, config, args.benchmark)


def _ibp(args) -> int:
    from visdep_metrics.tst.ibp import iterative_bias_pruning, resolve_budget, write_ibp

    if not _out_ok(args.out, "ibp.json", "ibp"):
        return 2
    records = _load(args)
    if records is None:
        return 2
    config = _config(args)
    try:
        budget = resolve_budget(args.budget, len(records))
        result = iterative_bias_pruning(records, budget, args.batch_size, args.threshold, config, args.benchmark)
    except ValueError as e:
        logger.error(f"{args.benchmark}: {e}")
        return 2
    write_ibp(result, args.out, args.benchmark, [r["question_id"] for r in records], budget, args.batch_size,
              args.threshold, config)
    print(result.trace.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"stopped: {result.stop_reason}; removed {len(result.removed)}, kept {len(result.kept_ids)}; "
          f"debiased tasks in {args.out}/tasks")
    return 0
