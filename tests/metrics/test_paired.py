"""Tango's score interval for paired binary answers (`visdep_metrics.paired`, the temporal ladder's FG and OG), against
references computed apart from it: the score statistic from the constrained maximum likelihood found numerically (not
the closed form), the interval's tails by exact enumeration of every outcome of n independent pairs, and the design
effect's handling against the same answers with every question copied within its video."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.special
import scipy.stats

from visdep_metrics.paired import PAIRED, tango_bounds, tango_statistic
from visdep_metrics.stats import T, crossed_intervals

Z = scipy.stats.norm.ppf(0.975)


def brute_statistic(delta: float, b: float, c: float, n: float) -> float:
    """Tango's Z(Δ) with p_c maximising the trinomial likelihood b log p_b + c log p_c + (n − b − c) log(1 − p_b − p_c)
    under p_b − p_c = Δ, found by a bounded scalar search (no closed form)."""
    lo, hi = max(0.0, -delta), min(1.0, (1 - delta) / 2)

    def minus_log_likelihood(p_c: float) -> float:
        p_b, rest = p_c + delta, 1 - 2 * p_c - delta
        return -sum(k * np.log(max(p, 1e-300)) for k, p in ((b, p_b), (c, p_c), (n - b - c, rest)) if k > 0)

    p_c = scipy.optimize.minimize_scalar(minus_log_likelihood, bounds=(lo, hi), method="bounded",
                                         options={"xatol": 1e-12}).x
    return (b - c - n * delta) / np.sqrt(n * (2 * p_c + delta * (1 - delta)))


CASES = [(40, 20, 160), (4, 0, 60), (9, 1, 60), (3, 5, 21), (1, 7, 21), (24, 6, 373)]


@pytest.mark.parametrize("b, c, n", CASES)
def test_the_statistic_is_the_score_of_the_constrained_likelihood(b, c, n):
    for delta in (-0.6, -0.2, 0.0, 0.02, 0.1, 0.35, 0.7):
        assert tango_statistic(delta, b, c, n) == pytest.approx(brute_statistic(delta, b, c, n), rel=1e-5, abs=1e-6)
    # at the estimate the statistic is 0 and at 0 it is McNemar's
    assert tango_statistic((b - c) / n, b, c, n) == pytest.approx(0.0, abs=1e-9)
    assert tango_statistic(0.0, b, c, n) == pytest.approx((b - c) / np.sqrt(b + c))


@pytest.mark.parametrize("b, c, n", CASES)
def test_the_bounds_invert_the_score_test(b, c, n):
    """Each bound is where the numerically found Z(Δ) crosses ∓z: inside just within it, outside just beyond."""
    low, high = (float(v) for v in tango_bounds(b, c, n, Z))
    assert low < (b - c) / n < high
    grid = np.linspace(-0.99, 0.99, 41)
    brute = np.array([brute_statistic(d, b, c, n) for d in grid])
    assert (np.diff(brute) < 0).all()  # decreasing in Δ: the bisection's premise
    assert brute_statistic(low, b, c, n) == pytest.approx(Z, abs=1e-5)
    assert brute_statistic(high, b, c, n) == pytest.approx(-Z, abs=1e-5)
    assert brute_statistic(low + 1e-4, b, c, n) < Z < brute_statistic(low - 1e-4, b, c, n)
    assert brute_statistic(high - 1e-4, b, c, n) > -Z > brute_statistic(high + 1e-4, b, c, n)


def exact_tails(n: int, p_b: float, p_c: float, bounds) -> tuple[float, float]:
    """P(interval wholly below p_b − p_c), P(wholly above) over every outcome (b, c) of n independent pairs."""
    b, c = (v.ravel().astype(float) for v in np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"))
    b, c = b[b + c <= n], c[b + c <= n]
    mass = scipy.stats.multinomial.pmf(np.stack([b, c, n - b - c], axis=1), n, [p_b, p_c, 1 - p_b - p_c])
    low, high = bounds(b, c, n)
    truth = p_b - p_c
    return float(mass[high < truth].sum()), float(mass[low > truth].sum())


def symmetric_t(b, c, n):
    """The t interval of the mean of d ∈ {−1, 0, 1} on independent pairs (the audit's before #55's fix)."""
    d = (b - c) / n
    half = scipy.special.stdtrit(n - 1, 0.975) * np.sqrt(((b + c) / n - d**2) / (n - 1))
    return d - half, d + half


@pytest.mark.parametrize("n, p_b, p_c", [(60, 0.064, 0.010), (60, 0.175, 0.025), (373, 0.064, 0.010),
                                         (60, 0.108, 0.049), (100, 0.02, 0.02)])
def test_each_exact_tail_within_the_rule_where_the_symmetric_t_is_not(n, p_b, p_c):
    """The validation generator's ceiling (OG: 6.4% of pairs right with the video only, 1.0% with shuffled frames
    only; FG: 17.5% and 2.5%) on independent pairs, by exact enumeration: each tail of Tango's interval within 2.5% +
    0.7 (the rule's 2 SE at 2,000 benchmarks), where the symmetric t lies wholly below the truth in up to 9.7%."""
    below, above = exact_tails(n, p_b, p_c, lambda b, c, m: tango_bounds(b, c, m, Z))
    assert below <= 0.032 and above <= 0.032, (below, above)
    t_below, t_above = exact_tails(n, p_b, p_c, symmetric_t)
    if p_b > 2 * p_c:  # skewed: the t's upper bound falls short
        assert t_below > 0.031 and t_below > below + 0.005, (t_below, below)
    if (n, p_b, p_c) == (60, 0.064, 0.010):
        assert t_below > 0.09 and below < 0.02


def _answers(rng, n: int, p_b: float, p_c: float) -> np.ndarray:
    """(2, n) binary answers whose difference is +1 with probability p_b and −1 with p_c."""
    u = rng.random(n)
    first = (u < p_b) | (u > 1 - 0.8)  # right in both for the top 20%
    second = ((u >= p_b) & (u < p_b + p_c)) | (u > 1 - 0.8)
    return np.stack([first, second]).astype(float)


def test_crossed_intervals_uses_tango_and_counts_copies_as_one_answer():
    """Through `crossed_intervals(paired=True)`: on questions of their own the interval is Tango's on the counts (the
    t's df aside); with every question copied 4 times within its own video, the copies count once (the design effect
    ≈ 4) and the interval is nearly the same."""
    rng = np.random.default_rng(3)
    x = _answers(rng, 200, 0.07, 0.01)
    contrast = np.array([[1.0, -1.0]])
    alone = crossed_intervals(x, contrasts=contrast, proportion=False, paired=True)
    b, c = float((x[0] > x[1]).sum()), float((x[0] < x[1]).sum())
    reference = tango_bounds(b, c, 200, Z)
    assert alone.method[0, 0] == PAIRED and alone.deff[0, 0] == pytest.approx(1.0)
    assert alone.low[0, 0] == pytest.approx(float(reference[0]), abs=2e-3)
    assert alone.high[0, 0] == pytest.approx(float(reference[1]), abs=2e-3)
    assert alone.high[0, 0] - (b - c) / 200 > (b - c) / 200 - alone.low[0, 0]  # skewed toward the rarer side
    copied = crossed_intervals(np.repeat(x, 4, axis=1), videos=np.repeat(np.arange(200), 4), contrasts=contrast,
                               proportion=False, paired=True)
    assert copied.deff[0, 0] == pytest.approx(4.0, rel=0.02)
    assert copied.low[0, 0] == pytest.approx(alone.low[0, 0], abs=2e-3)
    assert copied.high[0, 0] == pytest.approx(alone.high[0, 0], abs=2e-3)
    t = crossed_intervals(x, contrasts=contrast, proportion=False)
    assert t.method[0, 0] == T and t.high[0, 0] < alone.high[0, 0]


def test_swapping_the_rows_mirrors_the_interval_and_p_agrees_with_it():
    rng = np.random.default_rng(5)
    for _ in range(30):
        x = _answers(rng, 120, rng.uniform(0.01, 0.15), rng.uniform(0.0, 0.05))
        if (x[0] != x[1]).sum() < 3:
            continue
        ab, ba = (crossed_intervals(x, contrasts=np.array([w]), proportion=False, paired=True)
                  for w in ([1.0, -1.0], [-1.0, 1.0]))
        assert ab.low[0, 0] == pytest.approx(-ba.high[0, 0], abs=1e-9)
        assert ab.p_value[0, 0] == pytest.approx(ba.p_value[0, 0])
        excludes = ab.low[0, 0] > 0 or ab.high[0, 0] < 0
        assert (ab.p_value[0, 0] < 0.05) == excludes


def test_a_paired_output_must_be_a_difference_of_two_binary_rows():
    x = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [0.5, 1.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="binary answer vectors"):
        crossed_intervals(x, contrasts=np.array([[1.0, 0.0, -1.0]]), proportion=False, paired=True)
    with pytest.raises(ValueError, match="binary answer vectors"):
        crossed_intervals(x, contrasts=np.array([[1.0, 1.0, 0.0]]), proportion=False, paired=True)
    with pytest.raises(ValueError, match="paired and a proportion"):
        crossed_intervals(x[:2], contrasts=np.array([[1.0, -1.0]]), proportion=True, paired=True)
    with pytest.raises(ValueError, match="b, c"):
        tango_bounds(5, 6, 10, Z)
