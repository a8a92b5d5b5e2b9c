"""Bench (run by hand, seconds): can an interval of a proportion meet #27's rule at all? Exact binomial sums.

#27's rule (docs/statistics.md) asks each tail of a 95% interval (wholly below the truth, wholly above it) to be at
most 2.5% + 2 SE and its coverage at most 97% + 2 SE. On n independent answers the tails of a non-randomised
interval are sums of binomial probabilities, so they can be computed exactly: this prints, for Wilson's interval (the
product's, `visdep_metrics.stats.wilson`), Jeffreys' and Clopper–Pearson's, the (n, p) of a grid where they lie
outside the rule judged at S simulated benchmarks (default 8,000), with their exact tails.

    python bench/bench_exact_tails.py [--simulations 8000]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import scipy.special
import scipy.stats

from visdep_metrics.stats import wilson

SIZES = (10, 15, 20, 26, 30, 40, 60, 100, 200, 500)
ACCURACIES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.92, 0.97)


def beta_interval(k: np.ndarray, n: int, jeffreys: bool) -> tuple[np.ndarray, np.ndarray]:
    """Jeffreys' (Beta(k + ½, n − k + ½) quantiles) or Clopper–Pearson's interval of k right answers of n."""
    low_a, low_b = (k + 0.5, n - k + 0.5) if jeffreys else (k, n - k + 1)
    high_a, high_b = (k + 0.5, n - k + 0.5) if jeffreys else (k + 1, n - k)
    low = np.where(k > 0, scipy.special.betaincinv(np.maximum(low_a, 1e-12), low_b, 0.025), 0.0)
    high = np.where(k < n, scipy.special.betaincinv(high_a, np.maximum(high_b, 1e-12), 0.975), 1.0)
    return low, high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", type=int, default=8000)
    s = parser.parse_args().simulations
    tail_max = 2.5 + 200 * np.sqrt(0.025 * 0.975 / s)
    coverage_max = 97 + 200 * np.sqrt(0.95 * 0.05 / s)
    kinds = {"Wilson": lambda k, n: wilson(k / n, np.full(len(k), float(n)), 0.95),
             "Jeffreys": lambda k, n: beta_interval(k, n, True),
             "Clopper-Pearson": lambda k, n: beta_interval(k, n, False)}
    print(f"the rule at S = {s}: each tail at most {tail_max:.2f}%, coverage at most {coverage_max:.2f}%")
    for kind, interval in kinds.items():
        outside = []
        for n in SIZES:
            k = np.arange(n + 1)
            low, high = interval(k, n)
            for p in ACCURACIES:
                mass = scipy.stats.binom.pmf(k, n, p)
                below, above = 100 * mass[high < p].sum(), 100 * mass[low > p].sum()
                if below > tail_max or above > tail_max or 100 - below - above > coverage_max:
                    outside.append(f"n {n}, p {p}: {below:.2f} / {above:.2f}")
        print(f"\n{kind}: {len(outside)} of {len(SIZES) * len(ACCURACIES)} outside (below / above the truth, %):")
        print("  " + "; ".join(outside))
    return 0


if __name__ == "__main__":
    sys.exit(main())
