"""Bench (run by hand, seconds): can an interval of a proportion meet #27's rule at all? Exact binomial sums.

#27's rule (docs/statistics.md) asks each tail of a 95% interval (wholly below the truth, wholly above it) to be at
most 2.5% + 2 SE and its coverage at most 97% + 2 SE, or up to 98.5% where one tail is impossible (at the most
extreme count the interval does not exclude the truth) and the other is at least 1.5%. On n independent answers the
tails of a non-randomised interval are sums of binomial probabilities, so they can be computed exactly: this prints,
for Clopper–Pearson's interval (the product's, `visdep_metrics.stats.clopper_pearson`), Wilson's and Jeffreys', the
(n, p) of a grid where they lie outside the rule judged at S simulated benchmarks (default 8,000), with their exact
tails; and the (n, p) where no interval can meet it. An interval whose bounds rise with the count k misses below
the truth exactly for k ≤ some k₀ and above it for k ≥ some k₁, so its tails can only be the binomial's lower and
upper cumulative sums: where no pair of them meets the rule, no such interval does, whatever its formula.

    python bench/bench_exact_tails.py [--simulations 8000]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import scipy.special
import scipy.stats
from bench_coverage import wilson

from visdep_metrics.stats import clopper_pearson

SIZES = (10, 15, 20, 26, 30, 40, 60, 100, 200, 500)
ACCURACIES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.92, 0.97)


def jeffreys(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Jeffreys' interval of k right answers of n: Beta(k + ½, n − k + ½) quantiles, 0 and 1 at the extremes."""
    low = np.where(k > 0, scipy.special.betaincinv(k + 0.5, n - k + 0.5, 0.025), 0.0)
    high = np.where(k < n, scipy.special.betaincinv(k + 0.5, n - k + 0.5, 0.975), 1.0)
    return low, high


def within(below: float, above: float, tail_max: float, coverage_max: float) -> bool:
    """#27's rule on exact tails (%); a tail of exactly 0 is the impossible one of the exception."""
    if below > tail_max or above > tail_max:
        return False
    coverage = 100 - below - above
    return coverage <= coverage_max or (min(below, above) == 0 and max(below, above) >= 1.5 and coverage <= 98.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", type=int, default=8000)
    s = parser.parse_args().simulations
    tail_max = 2.5 + 200 * np.sqrt(0.025 * 0.975 / s)
    coverage_max = 97 + 200 * np.sqrt(0.95 * 0.05 / s)
    kinds = {"Clopper-Pearson": lambda k, n: clopper_pearson(k / n, np.full(len(k), float(n)), 0.95),
             "Wilson": lambda k, n: wilson(k / n, n), "Jeffreys": jeffreys}
    print(f"the rule at S = {s}: each tail at most {tail_max:.2f}%, coverage at most {coverage_max:.2f}% "
          f"(98.5% with one tail impossible and the other at least 1.5%)")
    outside = {kind: [] for kind in kinds}
    impossible = []
    for n in SIZES:
        k = np.arange(n + 1)
        for p in ACCURACIES:
            mass = scipy.stats.binom.pmf(k, n, p)
            for kind, interval in kinds.items():
                low, high = interval(k, n)
                below, above = 100 * mass[high < p].sum(), 100 * mass[low > p].sum()
                if not within(below, above, tail_max, coverage_max):
                    outside[kind].append(f"n {n}, p {p}: {below:.2f} / {above:.2f}")
            lower = 100 * np.concatenate([[0.0], np.cumsum(mass)])
            upper = 100 * np.concatenate([[0.0], np.cumsum(mass[::-1])])
            if not any(within(b, a, tail_max, coverage_max)
                       for b in lower[lower <= tail_max] for a in upper[upper <= tail_max]):
                impossible.append(f"n {n}, p {p}")
    cells = len(SIZES) * len(ACCURACIES)
    for kind, found in outside.items():
        print(f"\n{kind}: {len(found)} of {cells} outside (below / above the truth, %):\n  " + "; ".join(found))
    print(f"\nno interval whose bounds rise with the count can meet the rule at {len(impossible)} of {cells}:\n  "
          + "; ".join(impossible))
    return 0


if __name__ == "__main__":
    sys.exit(main())
