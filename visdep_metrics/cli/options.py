"""Options several commands share: `--spec` (a benchmark of your own) and the stress test's settings."""

from __future__ import annotations

import argparse

from lmms_eval_tasks.errors import OptionError
from lmms_eval_tasks.loaders import known_benchmarks


def add_spec_argument(parser: argparse.ArgumentParser) -> None:
    """`--spec SPEC`, repeatable: benchmarks described by specs, registered before the command runs."""
    parser.add_argument("--spec", action="append", default=[], metavar="SPEC",
                        help="a benchmark spec YAML (docs/specs.md), or the name of a shipped example (configs/specs: "
                             "mmau_cap, vru_accident, mlvu_release); its benchmark is then known by its name; "
                             "repeatable")


def add_twin_argument(parser: argparse.ArgumentParser) -> None:
    """`--twin DIR`, repeatable: `visdep twin` output folders, whose twins are opened before the command runs."""
    parser.add_argument("--twin", action="append", default=[], metavar="DIR",
                        help="a `visdep twin` output folder: the benchmarks of its twins of upstream lmms-eval tasks "
                             "(<task>_visdep) are then known by name; repeatable")


def benchmark_from_arguments(benchmark: str | None, spec_names: list[str]) -> str:
    """--benchmark, or the benchmark of the one --spec (or --twin) when --benchmark is not given."""
    if benchmark:
        if benchmark not in known_benchmarks():
            raise OptionError(f"unknown benchmark {benchmark!r}; known: {', '.join(known_benchmarks())} (a benchmark "
                              f"of your own: --spec SPEC)")
        return benchmark
    if len(spec_names) == 1:
        return spec_names[0]
    raise OptionError(f"name the benchmark: --benchmark NAME (one of {', '.join(known_benchmarks())}), or one --spec "
                      f"SPEC")


def add_stress_test_options(p: argparse.ArgumentParser) -> None:
    """The stress test's options (`tst_config` reads them): folds, seed and the forests' settings."""
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--seed", type=int, default=42, help="seed of folds, forests and tie-breaking (default 42)")
    p.add_argument("--n-estimators", type=int, default=200, help="trees per forest (default 200)")
    p.add_argument("--min-samples-leaf", type=int, default=3, help="forest leaf size (default 3)")
    p.add_argument("--n-jobs", type=int, default=1, help="cores per forest (default 1; -1 = all)")


def tst_config(args):
    """The TstConfig of the options `add_stress_test_options` added."""
    from visdep_metrics.tst.stress_test import TstConfig

    for option, value, least in (("--folds", args.folds, 2), ("--n-estimators", args.n_estimators, 1),
                                 ("--min-samples-leaf", args.min_samples_leaf, 1)):
        if value < least:
            raise OptionError(f"{option} {value}: must be at least {least}")
    if args.n_jobs == 0 or args.n_jobs < -1:
        raise OptionError(f"--n-jobs {args.n_jobs}: give a number of cores >= 1, or -1 for all")
    return TstConfig(folds=args.folds, seed=args.seed, n_estimators=args.n_estimators,
                     min_samples_leaf=args.min_samples_leaf, n_jobs=args.n_jobs)
