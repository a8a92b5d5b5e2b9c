"""Where the time of `visdep tst` goes: features (option table + per-fold statistics) versus forests.

Target: the features cost a small fraction of the forests (ratio < 0.25), i.e. the vectorised statistics
are not the bottleneck; the forests scale with --n-estimators. Runs on the real annotation files in
../shared/benchmarks when present, else on synthetic fixtures (`write_fixtures(scale=...)`).

    python bench/bench_tst.py [--n-estimators 200] [--scale 100]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier

from lmms_eval_tasks.loaders import load_benchmark
from visdep_metrics.tst.features import stat_keys
from visdep_metrics.tst.stress_test import TstConfig, cross_validation_setup, fold_design

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"


def sources(scale: int) -> dict[str, Path]:
    if SHARED.is_dir():
        return {"mmau": SHARED / "mm_au", "vru_accident": SHARED / "vru_accident"}
    from visdep_metrics.demo.fixtures import write_fixtures

    env = write_fixtures(tempfile.mkdtemp(prefix="bench_tst_"), videos=False, scale=scale)
    return {"mmau": Path(env["MMAU_ROOT"]), "vru_accident": Path(env["VRU_ACCIDENT_ROOT"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-estimators", type=int, default=200)
    parser.add_argument("--scale", type=int, default=100, help="fixture scale when ../shared is absent")
    args = parser.parse_args()
    config = TstConfig(n_estimators=args.n_estimators)
    print(f"{'benchmark':<14} {'questions':>9} {'features s':>10} {'forests s':>9} {'ratio':>6} {'q/s':>7}")
    for name, root in sources(args.scale).items():
        records = load_benchmark(name, root)
        start = time.perf_counter()
        table, folds, _ = cross_validation_setup(records, config)
        keys = stat_keys(table)
        designs = [fold_design(table, folds, f, config, keys) for f in range(config.folds)]
        features = time.perf_counter() - start
        start = time.perf_counter()
        for f, d in enumerate(designs):
            forest = RandomForestClassifier(n_estimators=config.n_estimators, min_samples_leaf=config.min_samples_leaf,
                                            n_jobs=config.n_jobs, random_state=config.seed + f)
            forest.fit(d.X_train, d.y_train).predict_proba(d.X_test)
        forests = time.perf_counter() - start
        ratio = features / forests
        print(f"{name:<14} {len(records):>9} {features:>10.2f} {forests:>9.2f} {ratio:>6.3f} "
              f"{len(records) / (features + forests):>7.0f}  {'OK' if ratio < 0.25 else 'SLOW FEATURES'}")
        assert np.isfinite(ratio)


if __name__ == "__main__":
    main()
