"""`visdep tst` (test-set stress test, TsT-RF) and `visdep ibp` (Iterative Bias Pruning)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmms_eval_tasks.errors import OptionError, VisdepError
from lmms_eval_tasks.loaders import BENCHMARKS, load_benchmark
from lmms_eval_tasks.spec_data import register_specs
from lmms_eval_tasks.twin import open_twins
from visdep_metrics.cli.options import (
    add_spec_argument,
    add_stress_test_options,
    add_twin_argument,
    benchmark_from_arguments,
    tst_config,
)


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
    add_twin_argument(p)
    p.add_argument("--root", default=None, help="benchmark root (default: its *_ROOT environment variable)")
    p.add_argument("--out", required=True, help="output folder: new, empty, or an earlier output of the same command "
                                                "(checked before anything runs)")
    add_stress_test_options(p)


def _load(args) -> list:
    """The questions of --benchmark (or of the one --spec); an unknown or missing benchmark is an input error."""
    args.benchmark = benchmark_from_arguments(args.benchmark, register_specs(args.spec) + open_twins(args.twin))
    return load_benchmark(args.benchmark, args.root)


def _inputs(args) -> list:
    """What OUT may not hold: the specs, the benchmark root, TsT-LLM's checkpoint."""
    return [*args.spec, *args.twin, *(path for path in (args.root, getattr(args, "model", None)) if path)]


def _tst(args) -> int:
    from visdep_metrics.outdir import check_out_dir, staged
    from visdep_metrics.tst.stress_test import format_summary, run_tst, write_tst

    check_out_dir(args.out, "tst", _inputs(args))  # before the cross-validation runs
    records = _load(args)
    try:
        result = _run_llm(args, records) if args.method == "llm" else run_tst(records, tst_config(args),
                                                                                args.benchmark)
    except VisdepError as e:  # e.g. fewer videos than folds: name the benchmark
        raise VisdepError(f"{args.benchmark}: {e}") from e
    with staged(args.out, "tst", _inputs(args)) as target:
        paths = target.final(write_tst(result, target.folder))
    print(format_summary(result.summary))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _run_llm(args, records):
    from visdep_metrics.tst.llm import LlmTstConfig, run_tst_llm

    if not args.model or not Path(args.model).is_dir():
        raise OptionError(f"--model {args.model}: --method llm needs a causal LM checkpoint folder")
    config = LlmTstConfig(model=args.model, gguf_file=args.gguf_file, folds=args.folds, seed=args.seed,
                          epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size,
                          lora_r=args.lora_r, lora_alpha=args.lora_alpha, device=args.device)
    return run_tst_llm(records, config, args.benchmark)


def _ibp(args) -> int:
    from visdep_metrics.outdir import check_out_dir, staged
    from visdep_metrics.tst.ibp import iterative_bias_pruning, resolve_budget, write_ibp

    check_out_dir(args.out, "ibp", _inputs(args))  # before the pruning runs
    records = _load(args)
    config = tst_config(args)
    try:
        budget = resolve_budget(args.budget, len(records))
        result = iterative_bias_pruning(records, budget, args.batch_size, args.threshold, config, args.benchmark)
    except VisdepError as e:
        raise VisdepError(f"{args.benchmark}: {e}") from e
    with staged(args.out, "ibp", _inputs(args)) as target:
        write_ibp(result, target.folder, args.benchmark, [r.question_id for r in records], budget, args.batch_size,
                  args.threshold, config)
    print(result.trace.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"stopped: {result.stop_reason}; removed {len(result.removed)}, kept {len(result.kept_ids)}; "
          f"debiased tasks in {args.out}/tasks")
    return 0
