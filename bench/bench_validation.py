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
  points;
- **the temporal ladder (#55)**: model A also answers with the video's single middle frame and with its frames
  shuffled, conditions of A that share its video's effect, each with a slope of its own (one frame: a slope drawn
  per video, 0.3, 0.7 or 1.0, how much of its video the middle frame shows; shuffled frames: 0.9), its prompt part
  (one frame leans more on it, 1.3 against 1.0) and part of A's own take on the video (0.4 and 0.8 of it), plus a
  per-video term of the condition's own (heavy-tailed, t₃, with one frame) and per-question noise (with shuffled
  frames 0.6 of A's own per-question term with the video and some of its own: the same model on nearly the same
  input). Frame Gain FG = Acc_V − Acc_single and Order Gain OG = Acc_V − Acc_shuffled are non-zero in three of the
  four settings (FG +15, +15, +10; OG +5, +5, +3), 0 in the null.

Each question's answer by model m in mode (blind, video) is right where its latent index exceeds a threshold set per
question so that its marginal accuracy is the setting's target exactly (the latent is one t₃ term plus normal ones,
so P(latent > c) = E_T[Φ((c_T − c) / σ)] is one integral, solved by root finding): the truth of every accuracy is the
target, of VG and Δ their differences. Blind (model m): s_p (0.8 T_p + 0.6 Z_p) β_m + w_{p,m} + e. Video:
γ_m a_v + δ_m λ_v s_p 0.6 Z_p + b_{v,m} + e', a_v t₃, λ_v the video's slope, Z_p the normal part of the prompt's
effect (what its blind and video answers share). Model A with one frame: μ_v a_v + 1.3 λ_v s_p 0.6 Z_p + 0.4 b_{v,A}
+ 0.5 C_v + e₁ (μ_v the video's slope for one frame, C_v t₃, e₁ sd 0.6); with shuffled frames: 0.9 a_v + λ_v s_p
0.6 Z_p + 0.8 b_{v,A} + c_v + 0.6 e'_A + e₂ (c_v sd 0.2, e₂ sd 0.4). FG's and OG's intervals are the audit's paired
difference of two video rows (`bench_coverage.CONTRASTS`: as ΔAcc_V, +1 on A's video row, −1 on the condition's).
The conditions' draws (their per-video slopes and every term of their own) come from a generator of their own
(`bench_coverage.conditions_rng`, seeded from --seed), so every other cell draws what it drew before they were
added.

Cells are judged by #27's rule (bench_coverage.within_the_rule): each tail (intervals wholly below, wholly above the
truth) at most 2.5% + 2 SE and the coverage at most 97% + 2 SE over the intervals given, with the one exception for a
tail impossible by calculation (bench_coverage.impossible_tails, with the setting's truths). FG's and OG's cells are
judged alike, in a table of their own, and their tails join the table's in the beyond-chance count
(bench_coverage.chance_lines: one-sided binomial test of each tail against 2.5%, Holm over the table's tails).

    python bench/bench_validation.py [--benchmarks ../shared/benchmarks] [--simulations 2000] [--seed 0]
                                     [--settings ...] [--groups WORD ...] [--lists vru_accident mmau]
"""

from __future__ import annotations

import argparse
import functools
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
    ORDER,
    PAIRED,
    PROPORTION,
    QUANTITIES,
    ROBUST,
    SCORE_COLUMNS,
    SCORED,
    TEMPORAL,
    cell_text,
    conditions_rng,
    impossible_tails,
    kept,
    parse,
    print_chance,
)

from visdep_metrics.stats import crossed_intervals

# setting -> model A's blind and video accuracy, model B's blind and video accuracy
SETTINGS = {
    "null at 0.92, models unalike": (0.92, 0.92, 0.92, 0.92),
    "VG +30, ΔAcc_V +10": (0.25, 0.55, 0.25, 0.45),
    "VG −20, ΔAcc_B +20": (0.70, 0.50, 0.50, 0.50),
    "VG +30 to 0.92, ΔAcc_V +20": (0.62, 0.92, 0.62, 0.72),
}
# setting -> model A's accuracy with the single middle frame and with shuffled frames (FG, OG: its video accuracy less
# these)
CONDITIONS = {
    "null at 0.92, models unalike": (0.92, 0.92),  # FG 0, OG 0
    "VG +30, ΔAcc_V +10": (0.40, 0.50),  # FG +15, OG +5
    "VG −20, ΔAcc_B +20": (0.40, 0.47),  # FG +10, OG +3
    "VG +30 to 0.92, ΔAcc_V +20": (0.77, 0.87),  # FG +15, OG +5
}
PROMPT_SCALES, PROMPT_SCALE_P = np.array([0.3, 1.0, 2.0]), np.array([0.4, 0.4, 0.2])
SLOPES = np.array([0.2, 0.7, 1.2])
T_DF = 3
T_SD = np.sqrt(T_DF / (T_DF - 2))  # a t₃ over this has unit variance
# per model (A, B): blind (β on the prompt's effect, sd of its own take w, heavy own take?, sd of e);
# video (γ on the video's effect, δ on the prompt's, sd of its own take b, sd of e')
BLIND_MODEL = ((1.0, 0.5, False, 0.3), (0.5, 1.0, True, 0.6))
VIDEO_MODEL = ((1.0, 1.0, 0.5, 0.5), (1.3, 0.3, 0.3, 0.7))
# model A's conditions (module docstring): one frame's slope on the video's effect per video, and its weight on the
# prompt's part, share of A's own take b_{v,A}, sd of its own t₃ per-video term and of its noise; shuffled frames'
# slope, weight on the prompt's part, share of b_{v,A}, sd of its own normal per-video term, share of A's per-question
# term e' with the video, and sd of its own noise
FRAME_SLOPES = np.array([0.3, 0.7, 1.0])
SINGLE_MODEL = (1.3, 0.4, 0.5, 0.6)
SHUFFLED_MODEL = (0.9, 1.0, 0.8, 0.2, 0.6, 0.4)


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


def condition_parts(design: dict[str, np.ndarray], conditions: np.random.Generator) -> dict[str, np.ndarray]:
    """The conditions' fixed constants, drawn once from their own generator: each video's slope for one frame."""
    return {"frame": conditions.choice(FRAME_SLOPES, design["video"].max() + 1)}


def condition_thresholds(design: dict[str, np.ndarray], parts: dict[str, np.ndarray],
                         targets: tuple[float, float]) -> np.ndarray:
    """(2, n): each question's threshold for model A with one frame and with shuffled frames, its marginal accuracy
    the target (targets: a setting's CONDITIONS)."""
    scale, slope, frame = (parts["scale"][design["prompt"]], parts["slope"][design["video"]],
                           parts["frame"][design["video"]])
    b, e = VIDEO_MODEL[0][2], VIDEO_MODEL[0][3]  # sd of A's own take on the video and of its per-question term
    delta, share, own, noise = SINGLE_MODEL
    slope_o, delta_o, share_o, own_o, e_share, noise_o = SHUFFLED_MODEL
    cuts = np.zeros((2, len(scale)))
    for s in np.unique(scale):
        for k in np.unique(slope):
            rest = (s == scale) & (slope == k)
            if not rest.any():
                continue
            for mu in np.unique(frame[rest]):
                where = rest & (frame == mu)  # the video's t₃ part μ a_v and the condition's own t₃ part
                cuts[0, where] = two_t_threshold(targets[0], mu, own,
                                                 np.sqrt((delta * k * s * 0.6) ** 2 + (share * b) ** 2 + noise**2))
            # the video's t₃ part 0.9 a_v; the rest normal
            cuts[1, rest] = threshold(targets[1], slope_o, np.sqrt((delta_o * k * s * 0.6) ** 2 + (share_o * b) ** 2
                                                                   + own_o**2 + (e_share * e) ** 2 + noise_o**2))
    return cuts


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


@functools.cache
def quantile_nodes() -> tuple[np.ndarray, np.ndarray]:
    """`two_t_threshold`'s Gauss–Legendre rule over two t₃ quantiles: each node's t₃ / T_SD, and the 600² nodes'
    masses (computed once: the rule's eigenvalue problem cost 0.6 s a call)."""
    nodes, weights = np.polynomial.legendre.leggauss(600)
    return scipy.stats.t(T_DF).ppf((nodes + 1) / 2) / T_SD, (weights[:, None] * weights[None, :]).ravel() / 4


def two_t_threshold(target: float, first: float, second: float, sigma: float) -> float:
    """c with P(first T₁ / T_SD + second T₂ / T_SD + N(0, sigma²) > c) = target, T₁, T₂ independent t₃: a double
    integral over their quantiles by Gauss–Legendre (the integrand is bounded, so its error is small: the bench's
    check of the thresholds, `--check`, measures it)."""
    t, mass = quantile_nodes()
    both = (first * t[:, None] + second * t[None, :]).ravel()

    def tail(c: float) -> float:
        return float(mass @ scipy.special.ndtr((both - c) / sigma))

    spread = 50 * (first + second + sigma)
    return float(scipy.optimize.brentq(lambda c: tail(c) - target, -spread, spread, xtol=1e-12))


def simulate(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], cuts: np.ndarray, rng: np.random.Generator,
             conditions: np.random.Generator) -> np.ndarray:
    """One simulated benchmark: (6, n) correctness, rows blind A, blind B, video A, video B, A with one frame, A with
    shuffled frames (cuts: `thresholds`, then `condition_thresholds`). rng draws the first four rows as before the
    conditions were added, `conditions` the conditions' own terms."""
    video, prompt = design["video"], design["prompt"]
    n, n_videos, n_prompts = len(video), video.max() + 1, prompt.max() + 1
    scale, slope = parts["scale"][prompt], parts["slope"][video]
    t_p = rng.standard_t(T_DF, n_prompts)[prompt] / T_SD
    z_p = rng.normal(0, 1, n_prompts)[prompt]
    a_v = rng.standard_t(T_DF, n_videos)[video] / T_SD
    rows, takes, noises = [], [], []
    for beta, w, heavy_w, e in BLIND_MODEL:
        own = (rng.standard_t(T_DF, n_prompts) / T_SD if heavy_w else rng.normal(0, 1, n_prompts))[prompt] * w
        rows.append(scale * beta * (0.8 * t_p + 0.6 * z_p) + own + rng.normal(0, e, n))
    for gamma, delta, b, e in VIDEO_MODEL:
        takes.append(rng.normal(0, b, n_videos)[video])  # b_{v,m}
        noises.append(rng.normal(0, e, n))  # e'
        rows.append(gamma * a_v + delta * slope * scale * 0.6 * z_p + takes[-1] + noises[-1])
    delta, share, own, noise = SINGLE_MODEL
    rows.append(parts["frame"][video] * a_v + delta * slope * scale * 0.6 * z_p + share * takes[0]
                + own * conditions.standard_t(T_DF, n_videos)[video] / T_SD + conditions.normal(0, noise, n))
    slope_o, delta_o, share_o, own_o, e_share, noise_o = SHUFFLED_MODEL
    rows.append(slope_o * a_v + delta_o * slope * scale * 0.6 * z_p + share_o * takes[0]
                + conditions.normal(0, own_o, n_videos)[video] + e_share * noises[0] + conditions.normal(0, noise_o, n))
    return (np.stack(rows) > cuts).astype(float)


def run_setting(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], groups: dict[str, np.ndarray],
                targets: tuple[float, ...], ladder: tuple[float, float], simulations: int, rng: np.random.Generator,
                conditions: np.random.Generator) -> dict:
    """Per group and quantity (QUANTITIES): covered, withheld, below and above counts (ladder: the setting's
    CONDITIONS)."""
    members = np.stack(list(groups.values()))
    cuts = np.concatenate([thresholds(design, parts, targets), condition_thresholds(design, parts, ladder)])
    a_blind, a_video, b_blind, b_video = targets
    # Acc_B, Acc_V, BG (Acc_B's interval less the known chance: judged as Acc_B's), VG, ΔAcc_B, ΔAcc_V, ΔVG, FG, OG
    truth = np.array([a_blind, a_video, a_blind, a_video - a_blind, a_blind - b_blind, a_video - b_video,
                      (a_video - a_blind) - (b_video - b_blind), a_video - ladder[0], a_video - ladder[1],
                      a_blind - b_blind, a_video - b_video])
    order = ORDER
    counts = {key: np.zeros((len(members), len(QUANTITIES))) for key in ("covered", "withheld", "below", "above")}
    estimates = np.zeros((simulations, len(members), 2))
    for s in range(simulations):
        correct = simulate(design, parts, cuts, rng, conditions)
        found = crossed_intervals(correct, members, design["video"], design["prompt"], 0.95, CONTRASTS, PROPORTION,
                                  ROBUST, BLIND, BLIND_PARTS, PAIRED)
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


def check_truths(design: dict[str, np.ndarray], parts: dict[str, np.ndarray], draws: int, rng: np.random.Generator,
                 conditions: np.random.Generator) -> list[str]:
    """Monte Carlo check of the thresholds: answers drawn with every question its own prompt and video (so the
    draws are independent, each question's marginal its own), `draws` per question, against each setting's targets."""
    n = len(design["video"])
    alone = {"video": np.arange(n), "prompt": np.arange(n)}
    parts_alone = {"scale": parts["scale"][design["prompt"]], "slope": parts["slope"][design["video"]],
                   "frame": parts["frame"][design["video"]]}
    lines = []
    for setting, targets in SETTINGS.items():
        cuts = np.concatenate([thresholds(design, parts, targets),
                               condition_thresholds(design, parts, CONDITIONS[setting])])
        mean = np.mean([simulate(alone, parts_alone, cuts, rng, conditions).mean(axis=1) for _ in range(draws)],
                       axis=0)
        rows = np.array(rows_of(targets) + CONDITIONS[setting])
        se = np.sqrt(rows * (1 - rows) / (draws * n))
        lines.append(f"{setting}: drawn accuracies (blind A, blind B, video A, video B, A one frame, A shuffled) "
                     f"{np.round(mean, 4).tolist()} against {rows.tolist()}, z = "
                     f"{np.round((mean - rows) / se, 1).tolist()}")
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
    conditions = conditions_rng(args.seed)
    s = args.simulations
    settings = {k: v for k, v in SETTINGS.items() if not args.settings or any(w in k for w in args.settings)}
    print(f"{s} simulated benchmarks per cell; Monte Carlo SE of a 2.5% tail {100 * np.sqrt(0.025 * 0.975 / s):.2f} "
          f"points, of a 95% coverage {100 * np.sqrt(0.95 * 0.05 / s):.2f} (over the intervals given: withheld ones "
          f"raise both)")
    main_columns = [q for q in QUANTITIES if q not in TEMPORAL + SCORED]
    table = ["| group | n | setting | " + " | ".join(main_columns) + " |", "|" + "---|" * (len(main_columns) + 3)]
    ladder = ["| group | n | setting | truth FG / OG | " + " | ".join(TEMPORAL) + " |",
              "|" + "---|" * (len(TEMPORAL) + 4)]
    scored = ["| group | n | setting | " + " | ".join(SCORE_COLUMNS) + " |", "|" + "---|" * (len(SCORE_COLUMNS) + 3)]
    within, cells = {"main": 0, "ladder": 0, "scored": 0}, {"main": 0, "ladder": 0, "scored": 0}
    started, judged = time.perf_counter(), []
    for name, design in lists.items():
        groups = kept(groups_of(name, design, rng), args.groups)
        if not groups:
            continue
        parts = latent_parts(design, rng) | condition_parts(design, conditions)
        if args.check:
            print(f"{name}:\n" + "\n".join(check_truths(design, parts, args.check, rng, conditions)))
            continue
        members = np.stack(list(groups.values()))
        for setting, targets in settings.items():
            counts = run_setting(design, parts, groups, targets, CONDITIONS[setting], s, rng, conditions)
            tails = impossible(design, members, counts, targets)
            gains = " / ".join(f"{100 * (targets[1] - c):+.0f}" if c != targets[1] else "0"
                               for c in CONDITIONS[setting])
            for g, (group, keep) in enumerate(groups.items()):
                texts = [cell_text(counts, g, j, s, tails[g, (0, 1, 0)[j]] if j < 3 else "")
                         for j in range(len(QUANTITIES))]
                for (_, meets), q in zip(texts, QUANTITIES, strict=True):
                    kind = "ladder" if q in TEMPORAL else "scored" if q in SCORED else "main"
                    within[kind] += meets
                    cells[kind] += 1
                judged += [(f"{group}, {setting}, {q}", counts["below"][g, j], counts["above"][g, j],
                           s - counts["withheld"][g, j]) for j, q in enumerate(QUANTITIES)
                          if q != "BG" and counts["withheld"][g, j] < s]
                by = dict(zip(QUANTITIES, (t for t, _ in texts), strict=True))
                table.append(f"| {group} | {int(keep.sum())} | {setting} | "
                             + " | ".join(by[q] for q in main_columns) + " |")
                ladder.append(f"| {group} | {int(keep.sum())} | {setting} | {gains} | "
                              + " | ".join(by[q] for q in TEMPORAL) + " |")
                scored.append(f"| {group} | {int(keep.sum())} | {setting} | "
                              + " | ".join(by[q] for q in SCORE_COLUMNS) + " |")
            print(f"  {name}, {setting} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print("\nValidation: coverage of the 95% intervals (%; in brackets the shares wholly below / above the truth; in "
          "bold: outside #27's rule; †: a tail impossible by calculation):\n")
    print("\n".join(table))
    print("\nThe temporal ladder (#55), model A: FG = Acc_V − Acc_single, OG = Acc_V − Acc_shuffled (truths in points; "
          "coverage %, in brackets the shares below / above the truth):\n")
    print("\n".join(ladder))
    print("\nΔAcc_B and ΔAcc_V by the audit's interval and by Tango's paired score interval on the design effect (the "
          "same draws):\n\n" + "\n".join(scored))
    print(f"\n{within['main']} of {cells['main']} cells within the rule; FG, OG: {within['ladder']} of "
          f"{cells['ladder']}; ΔAcc_B and ΔAcc_V by the paired score: {within['scored']} of {cells['scored']}")
    if judged:
        print_chance(judged)
    return 0


if __name__ == "__main__":
    sys.exit(main())
