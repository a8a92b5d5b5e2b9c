"""Bench (run by hand): a validation of the audit's intervals, apart from the development bench (bench_coverage.py).

bench_coverage.py's model is the exchangeable, additive probit model the design effect assumes, every truth there is
0 and its two models are exchangeable; the intervals' rules were set by what failed on it, so it is a development set.
This generator was written and committed before its first run and is not tuned on: each change to the intervals is
run on it once, and docs/statistics.md prints its table beside the development one. Its dependence is its own:

- **ICCs that differ by prompt**: each prompt's effect has its own scale, drawn once per design (0.3, 1 or 2 with
  probabilities 0.4, 0.4, 0.2);
- **heavy-tailed cluster effects**: a prompt's effect on blind answers and a video's on video answers are Student t
  with 3 degrees of freedom (scaled to unit variance);
- **video × prompt interaction**: with the video, a prompt's effect enters with a slope of its video's own (0.2, 0.7
  or 1.2), not additively;
- **non-exchangeable models**: the two models weigh what they share differently (model B leans less on the prompt,
  more on the video, and has heavier-tailed takes of its own), also where their accuracies are equal;
- **non-zero truths**: per setting, model A's and B's blind and video accuracies, so VG and Δ range from −20 to +30
  points.

Each question's answer by model m in mode (blind, video) is right where its latent index exceeds a threshold set per
question so that its marginal accuracy is the setting's target exactly (the latent is one t₃ term plus normal ones,
so P(latent > c) = E_T[Φ((c_T − c) / σ)] is one integral, solved by root finding): the truth of every accuracy is the
target, of VG and Δ their differences. Blind (model m): s_p (0.8 T_p + 0.6 Z_p) β_m + w_{p,m} + e. Video:
γ_m a_v + δ_m λ_v s_p Z_p + b_{v,m} + e', a_v t₃, λ_v the video's slope, Z_p the normal part of the prompt's effect
(what its blind and video answers share).

Cells are judged by #27's rule (bench_coverage.within_the_rule): each tail (intervals wholly below, wholly above the
truth) at most 2.5% + 2 SE and the coverage at most 97% + 2 SE over the intervals given, with the one exception for a
tail impossible by calculation (bench_coverage.impossible_tails, with the setting's truths).

    python bench/bench_validation.py [--benchmarks ../shared/benchmarks] [--simulations 2000] [--seed 0]
                                     [--settings ...] [--groups WORD ...] [--lists vru_accident mmau]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special
import scipy.stats
from bench_coverage import (
    BLIND,
    BLIND_PARTS,
    CONTRASTS,
    PROPORTION,
    QUANTITIES,
    ROBUST,
    cell_text,
    chance_lines,
    impossible_tails,
    kept,
    parse,
)

from visdep_metrics.stats import crossed_intervals

# setting -> model A's blind and video accuracy, model B's blind and video accuracy
SETTINGS = {
    "null at 0.92, models unalike": (0.92, 0.92, 0.92, 0.92),
    "VG +30, ΔAcc_V +10": (0.25, 0.55, 0.25, 0.45),
    "VG −20, ΔAcc_B +20": (0.70, 0.50, 0.50, 0.50),
    "VG +30 to 0.92, ΔAcc_V +20": (0.62, 0.92, 0.62, 0.72),
}
PROMPT_SCALES, PROMPT_SCALE_P = np.array([0.3, 1.0, 2.0]), np.array([0.4, 0.4, 0.2])
SLOPES = np.array([0.2, 0.7, 1.2])
T_DF = 3
T_SD = np.sqrt(T_DF / (T_DF - 2))  # a t₃ over this has unit variance
# per model (A, B): blind (β on the prompt's effect, sd of its own take w, heavy own take?, sd of e);
# video (γ on the video's effect, δ on the prompt's, sd of its own take b, sd of e')
BLIND_MODEL = ((1.0, 0.5, False, 0.3), (0.5, 1.0, True, 0.6))
VIDEO_MODEL = ((1.0, 1.0, 0.5, 0.5), (1.3, 0.3, 0.3, 0.7))


def groups_of(name: str, design: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The validation's groups: the hard ones (small groups, few dominant prompts) and the whole lists. Other
    videos and questions than the development bench's small groups; its grounded-like subset keeps whole videos."""
    n = len(design["video"])
    if name == "mmau":
        return {"MM-AU, all": np.ones(n, bool), "MM-AU, questions 1000-1059": (np.arange(n) >= 1000)
                & (np.arange(n) < 1060)}
    kept_videos = rng.random(design["video"].max() + 1) < 0.4
    location = design["category"] == "location"
    return {"VRU, all": np.ones(n, bool), "VRU, location": location,
            "VRU, 40% of videos × location": kept_videos[design["video"]] & location,
            "VRU, videos 100-109 (60 questions)": (design["video"] >= 100) & (design["video"] < 110)}


def exceedance(c: float, scale: float, sigma: float) -> float:
    """P(scale · T / T_SD + N(0, sigma²) > c), T Student t₃: one integral over T."""
    if scale == 0:
        return float(scipy.stats.norm.sf(c / sigma))
    density = scipy.stats.t(T_DF).pdf

    def integrand(t: float) -> float:
        return density(t) * scipy.special.ndtr((scale * t / T_SD - c) / sigma)

    return float(scipy.integrate.quad(integrand, -np.inf, np.inf, limit=200, epsabs=1e-12)[0])


def threshold(target: float, scale: float, sigma: float) -> float:
    """c with P(latent > c) = target (exceedance above)."""
    spread = 50 * (scale + sigma)
    return float(scipy.optimize.brentq(lambda c: exceedance(c, scale, sigma) - target, -spread, spread,
                                       xtol=1e-12))


def latent_parts(design: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The design's fixed constants, drawn once: each prompt's scale and each video's slope."""
    return {"scale": rng.choice(PROMPT_SCALES, design["prompt"].max() + 1, p=PROMPT_SCALE_P),
            "slope": rng.choice(SLOPES, design["video"].max() + 1)}


def thresholds(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], targets: tuple[float, ...]) -> np.ndarray:
    """(4, n): each question's threshold for blind A, blind B, video A, video B, its marginal accuracy the target
    (targets: a setting's, A's blind and video, then B's)."""
    scale, slope = parts["scale"][design["prompt"]], parts["slope"][design["video"]]
    targets = rows_of(targets)
    cuts = np.zeros((4, len(scale)))
    for m, (beta, w, heavy_w, e) in enumerate(BLIND_MODEL):
        for s in np.unique(scale):
            # the prompt's t₃ part, s β 0.8 T_p; its normal part s β 0.6 Z_p, e, and w where the model's take is normal
            if heavy_w:
                cuts[m, scale == s] = two_t_threshold(targets[m], s * beta * 0.8, w, np.hypot(s * beta * 0.6, e))
            else:
                cuts[m, scale == s] = threshold(targets[m], s * beta * 0.8,
                                                np.sqrt((s * beta * 0.6) ** 2 + w**2 + e**2))
    for m, (gamma, delta, b, e) in enumerate(VIDEO_MODEL):
        for s in np.unique(scale):
            for k in np.unique(slope):
                where = (scale == s) & (slope == k)
                if where.any():  # the video's t₃ part γ a_v; the rest normal
                    cuts[2 + m, where] = threshold(targets[2 + m], gamma,
                                                   np.sqrt((delta * k * s * 0.6) ** 2 + b**2 + e**2))
    return cuts


def rows_of(targets: tuple[float, ...]) -> tuple[float, ...]:
    """A setting's accuracies (A blind, A video, B blind, B video) in the order of the answer rows (blind A, blind B,
    video A, video B)."""
    return targets[0], targets[2], targets[1], targets[3]


def two_t_threshold(target: float, first: float, second: float, sigma: float) -> float:
    """c with P(first T₁ / T_SD + second T₂ / T_SD + N(0, sigma²) > c) = target, T₁, T₂ independent t₃: a double
    integral over their quantiles by Gauss–Legendre (the integrand is bounded, so its error is small: the bench's
    check of the thresholds, `--check`, measures it)."""
    nodes, weights = np.polynomial.legendre.leggauss(600)
    t = scipy.stats.t(T_DF).ppf((nodes + 1) / 2) / T_SD
    both = (first * t[:, None] + second * t[None, :]).ravel()
    mass = (weights[:, None] * weights[None, :]).ravel() / 4

    def tail(c: float) -> float:
        return float(mass @ scipy.special.ndtr((both - c) / sigma))

    spread = 50 * (first + second + sigma)
    return float(scipy.optimize.brentq(lambda c: tail(c) - target, -spread, spread, xtol=1e-12))


def simulate(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], cuts: np.ndarray,
             rng: np.random.Generator) -> np.ndarray:
    """One simulated benchmark: (4, n) correctness, rows blind A, blind B, video A, video B."""
    video, prompt = design["video"], design["prompt"]
    n, n_videos, n_prompts = len(video), video.max() + 1, prompt.max() + 1
    scale, slope = parts["scale"][prompt], parts["slope"][video]
    t_p = rng.standard_t(T_DF, n_prompts)[prompt] / T_SD
    z_p = rng.normal(0, 1, n_prompts)[prompt]
    a_v = rng.standard_t(T_DF, n_videos)[video] / T_SD
    rows = []
    for beta, w, heavy_w, e in BLIND_MODEL:
        own = (rng.standard_t(T_DF, n_prompts) / T_SD if heavy_w else rng.normal(0, 1, n_prompts))[prompt] * w
        rows.append(scale * beta * (0.8 * t_p + 0.6 * z_p) + own + rng.normal(0, e, n))
    for gamma, delta, b, e in VIDEO_MODEL:
        rows.append(gamma * a_v + delta * slope * scale * 0.6 * z_p + rng.normal(0, b, n_videos)[video]
                    + rng.normal(0, e, n))
    return (np.stack(rows) > cuts).astype(float)


def run_setting(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], groups: dict[str, np.ndarray],
                targets: tuple[float, ...], simulations: int, rng: np.random.Generator) -> dict:
    """Per group and quantity (QUANTITIES): covered, withheld, below and above counts."""
    members = np.stack(list(groups.values()))
    cuts = thresholds(design, parts, targets)
    a_blind, a_video, b_blind, b_video = targets
    # Acc_B, Acc_V, BG (Acc_B's interval less the known chance: judged as Acc_B's), VG, ΔAcc_B, ΔAcc_V, ΔVG
    truth = np.array([a_blind, a_video, a_blind, a_video - a_blind, a_blind - b_blind, a_video - b_video,
                      (a_video - a_blind) - (b_video - b_blind)])
    order = [0, 1, 0, 2, 3, 4, 5]
    counts = {key: np.zeros((len(members), len(QUANTITIES))) for key in ("covered", "withheld", "below", "above")}
    estimates = np.zeros((simulations, len(members), 2))
    for s in range(simulations):
        correct = simulate(design, parts, cuts, rng)
        found = crossed_intervals(correct, members, design["video"], design["prompt"], 0.95, CONTRASTS, PROPORTION,
                                  ROBUST, BLIND, BLIND_PARTS)
        low, high = found.low[:, order], found.high[:, order]
        counts["covered"] += (low <= truth) & (truth <= high)
        counts["withheld"] += np.isnan(low)
        counts["below"] += high < truth
        counts["above"] += low > truth
        estimates[s] = (correct[[0, 2]] @ members.T / members.sum(axis=1)).T
    counts["estimates"], counts["n"] = estimates, members.sum(axis=1)
    return counts


def impossible(design: dict[str, np.ndarray], members: np.ndarray, counts: dict,
               targets: tuple[float, ...]) -> np.ndarray:
    """(groups, 2): Acc_B's and Acc_V's tail impossible by calculation, with each its own truth (model A's)."""
    found = np.full((len(members), 2), "", dtype=object)
    for a, truth in enumerate((targets[0], targets[1])):
        found[:, a] = impossible_tails(design, members, counts, truth)[:, a]
    return found


def check_truths(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], draws: int,
                 rng: np.random.Generator) -> list[str]:
    """Monte Carlo check of the thresholds: answers drawn with every question its own prompt and video (so the
    draws are independent, each question's marginal its own), `draws` per question, against each setting's targets."""
    n = len(design["video"])
    alone = {"video": np.arange(n), "prompt": np.arange(n)}
    parts_alone = {"scale": parts["scale"][design["prompt"]], "slope": parts["slope"][design["video"]]}
    lines = []
    for setting, targets in SETTINGS.items():
        cuts = thresholds(design, parts, targets)
        mean = np.mean([simulate(alone, parts_alone, cuts, rng).mean(axis=1) for _ in range(draws)], axis=0)
        rows = np.array(rows_of(targets))
        se = np.sqrt(rows * (1 - rows) / (draws * n))
        lines.append(f"{setting}: drawn accuracies (blind A, blind B, video A, video B) {np.round(mean, 4).tolist()} "
                     f"against {rows.tolist()}, z = {np.round((mean - rows) / se, 1).tolist()}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=None,
                        help="keep the settings whose name contains one of these words (default all)")
    parser.add_argument("--check", type=int, default=0, metavar="DRAWS",
                        help="only check the thresholds: DRAWS independent answers per question and setting")
    args, lists = parse(parser, 2000)
    if lists is None:
        return 2
    rng = np.random.default_rng(args.seed)
    s = args.simulations
    settings = {k: v for k, v in SETTINGS.items() if not args.settings or any(w in k for w in args.settings)}
    print(f"{s} simulated benchmarks per cell; Monte Carlo SE of a 2.5% tail {100 * np.sqrt(0.025 * 0.975 / s):.2f} "
          f"points, of a 95% coverage {100 * np.sqrt(0.95 * 0.05 / s):.2f} (over the intervals given: withheld ones "
          f"raise both)")
    table = ["| group | n | setting | " + " | ".join(QUANTITIES) + " |", "|" + "---|" * (len(QUANTITIES) + 3)]
    within, cells, started, judged = 0, 0, time.perf_counter(), []
    for name, design in lists.items():
        groups = kept(groups_of(name, design, rng), args.groups)
        if not groups:
            continue
        parts = latent_parts(design, rng)
        if args.check:
            print(f"{name}:\n" + "\n".join(check_truths(design, parts, args.check, rng)))
            continue
        members = np.stack(list(groups.values()))
        for setting, targets in settings.items():
            counts = run_setting(design, parts, groups, targets, s, rng)
            tails = impossible(design, members, counts, targets)
            for g, (group, keep) in enumerate(groups.items()):
                texts = [cell_text(counts, g, j, s, tails[g, (0, 1, 0)[j]] if j < 3 else "")
                         for j in range(len(QUANTITIES))]
                within += sum(meets for _, meets in texts)
                cells += len(texts)
                judged += [(f"{group}, {setting}, {q}", counts["below"][g, j], counts["above"][g, j],
                           s - counts["withheld"][g, j]) for j, q in enumerate(QUANTITIES)
                          if q != "BG" and counts["withheld"][g, j] < s]
                table.append(f"| {group} | {int(keep.sum())} | {setting} | " + " | ".join(t for t, _ in texts) + " |")
            print(f"  {name}, {setting} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print("\nValidation: coverage of the 95% intervals (%; in brackets the shares wholly below / above the truth; in "
          "bold: outside #27's rule; †: a tail impossible by calculation):\n")
    print("\n".join(table))
    print(f"\n{within} of {cells} cells within the rule")
    if judged:
        print("\n" + "\n".join(chance_lines(judged)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
