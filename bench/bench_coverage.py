"""Bench (run by hand): do the audit's intervals cover, and its p-values hold their level, on the real question lists?

Draws simulated benchmarks from a crossed random-effects model written here, independently of the product, on the
real VRU-Accident and MM-AU question lists (their videos and blind prompts, read through the product's loaders), and
computes every interval with the product's `visdep_metrics.stats.crossed_intervals`, called as the audit calls it
(`visdep_metrics/audit/intervals.py`: accuracies as proportions, BG as Acc_B less the known chance, VG and model
differences as differences). Prints, per group and accuracy, the share of simulated benchmarks whose 95% interval
covers the true value (and the share where the interval was withheld), and the type I error of the paired
comparisons, raw per test and family-wise after Holm's adjustment over each benchmark's family. The temporal ladder's
Frame Gain and Order Gain of model A (below) get a table of their own, and a family of their own.

The model. Two models A and B of equal skill answer every question blind and with the video. Blind: right where
u_p + w_{p,m} + e_{q,m} > c, with u_p a prompt's difficulty (shared by both models), w_{p,m} a model's own take on
the prompt and e a small per-question term (the copies of a prompt get one blind prediction; only their answers
differ). With the video: right where a_v + 0.6 u_p + b_{v,m} + e'_{q,m} > c', a_v a video's difficulty, b_{v,m} a
model's own take on it. All effects normal; c and c' put every question's marginal accuracy at the target, so the
true Acc_B = Acc_V = target, VG = 0, every A − B difference = 0, BG = target − chance.

The temporal ladder (#55): model A also answers with its video's single middle frame and with its sampled frames
shuffled. These are conditions of model A, not other models: each answer is right where a_v + 0.6 u_p + κ b_{v,A} +
c_{v} + e''_{q} > c', with the video's difficulty a_v and the prompt's part 0.6 u_p those of A's video answers, a share
κ of A's own take on the video b_{v,A} (κ = 0.6 with one frame, 0.8 with shuffled frames: shuffling keeps more of what
the model sees), a per-video term of the condition's own c_v (sd 0.4 and 0.3, so that κ b + c has b's sd, 0.5) and a
per-question term of its own (sd 0.7, as e'). The latent's sd is then that of A's video answers, so c' is theirs and
every question's accuracy is the target in each condition: the true Frame Gain FG = Acc_V − Acc_single and Order Gain
OG = Acc_V − Acc_shuffled are 0. A's own per-video parts with the video (b) and in a condition (κ b + c) are normal
with equal variances, so the two answers are exchangeable, as models A and B are: the development bench's
differences all have the symmetric case the prompts' sign flips are exact for. FG's and OG's intervals are those of
the audit's paired difference of two video rows (as ΔAcc_V: +1 on A's video row, −1 on the condition's, a difference,
neither robust nor blind), so what the two rows share (a_v, u_p, part of b_{v,A}) cancels in it. The conditions'
own terms come from a generator of their own (`conditions_rng`, seeded from --seed), so the other rows, and every
cell but FG's and OG's, draw what they drew before the ladder was added. FG and OG cells are judged as every other
(#27's rule per cell; the beyond-chance count, `chance_lines`, over every tail of the table, FG's and OG's included).

    python bench/bench_coverage.py [--benchmarks ../shared/benchmarks] [--simulations 4000] [--seed 0]
                                   [--accuracies 0.25 0.5 0.92] [--groups location ...] [--lists vru_accident mmau]

Each cell is judged by #27's rule (`within_the_rule`, docs/statistics.md), on the S' benchmarks where the interval was
given: the share of intervals wholly below the truth (L) and the share wholly above it (U) each at most 2.5% + 2 SE,
SE = √(0.025 · 0.975 / S'), and the coverage at most 97% + 2 √(0.95 · 0.05 / S'). The one exception: where a tail is
impossible by calculation (at the most extreme outcome, every answer of the group right, or every one wrong, neither the
product's interval nor Wilson's on the true design effect excludes the truth), the coverage may reach 98.5% provided
the other tail is at least 1.5%. Each cell prints its coverage and its tails, L / U; `--groups` keeps the groups whose
name contains one of the words (to rerun a few cells); for each cell outside the rule the bench says where its misses
lie, and for an accuracy how often every answer of the group was right and what the oracle does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.stats

from lmms_eval_tasks.loaders import load_benchmark
from lmms_eval_tasks.tasks import prompt_id
from visdep_metrics.stats import crossed_intervals, holm

REPO = Path(__file__).resolve().parents[1]
ACCURACIES = (0.25, 0.5, 0.92)
# sd of the effects: blind (u_p, w_pm, e), video (a_v, share of u_p, b_vm, e')
BLIND_SD = (1.0, 0.7, 0.3)
VIDEO_SD = (0.8, 0.6, 0.5, 0.7)
# model A's conditions of the temporal ladder (single middle frame, shuffled frames): the share κ of A's own take on
# the video b_{v,A}, the sd of the condition's own per-video term c_v and of its per-question term (module docstring)
CONDITION_SD = ((0.6, 0.4, 0.7), (0.8, 0.3, 0.7))
QUANTITIES = ("Acc_B", "Acc_V", "BG", "VG", "ΔAcc_B", "ΔAcc_V", "ΔVG", "FG", "OG", "ΔAcc_B score", "ΔAcc_V score")
TEMPORAL = ("FG", "OG")  # printed in a table of their own
# ΔAcc_B and ΔAcc_V by Tango's paired score interval instead of the audit's t or wild bootstrap, on the same draws:
# a table of their own beside the audit's ΔAcc_B and ΔAcc_V, not counted in the main table (the audit does not use
# them; #55's question whether it should)
SCORED = ("ΔAcc_B score", "ΔAcc_V score")
# the generator of the conditions' draws, apart from the other rows' (module docstring)
CONDITIONS_STREAM = 55


def question_list(root: Path, name: str, folder: str) -> dict[str, np.ndarray]:
    questions = load_benchmark(name, root / folder)
    return {"video": np.unique([q.video for q in questions], return_inverse=True)[1].ravel(),
            "prompt": np.unique([prompt_id(q.document()) for q in questions], return_inverse=True)[1].ravel(),
            "category": np.array([str(q.category) for q in questions]),
            "k": np.array([len(q.options) for q in questions])}


def groups_of(name: str, design: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The groups the bench reports: a benchmark's whole list, VRU's three categories with the most shared prompts,
    a grounded subset (it keeps or drops whole prompts: half of them, drawn once) alone and crossed with "location",
    and 10 videos' 60 questions."""
    n = len(design["video"])
    if name == "mmau":
        return {"MM-AU, all": np.ones(n, bool), "MM-AU, 60 questions": np.arange(n) < 60}
    kept_prompts = rng.random(design["prompt"].max() + 1) < 0.5
    grounded = kept_prompts[design["prompt"]]
    location = design["category"] == "location"
    return {"VRU, all": np.ones(n, bool), "VRU, location": location,
            "VRU, accident type": design["category"] == "accident type",
            "VRU, road type": design["category"] == "road type", "VRU, grounded": grounded,
            "VRU, grounded × location": grounded & location,
            "VRU, 10 videos (60 questions)": design["video"] < 10}


def simulate(design: dict[str, np.ndarray], accuracy: float, rng: np.random.Generator,
             conditions: np.random.Generator) -> np.ndarray:
    """One simulated benchmark: (6, n) correctness, rows blind A, blind B, video A, video B, A with the single middle
    frame, A with shuffled frames. rng draws the first four rows (as before the conditions were added), `conditions`
    the conditions' own terms."""
    video, prompt = design["video"], design["prompt"]
    n, n_videos, n_prompts = len(video), video.max() + 1, prompt.max() + 1
    u = rng.normal(0, BLIND_SD[0], n_prompts)
    a = rng.normal(0, VIDEO_SD[0], n_videos)
    blind_sd = np.sqrt(sum(s**2 for s in BLIND_SD))
    video_sd = np.sqrt(VIDEO_SD[0] ** 2 + (VIDEO_SD[1] * BLIND_SD[0]) ** 2 + VIDEO_SD[2] ** 2 + VIDEO_SD[3] ** 2)
    cut = -scipy.stats.norm.ppf(accuracy) * video_sd
    rows, takes = [], []
    for _ in range(2):
        latent = u[prompt] + rng.normal(0, BLIND_SD[1], n_prompts)[prompt] + rng.normal(0, BLIND_SD[2], n)
        rows.append(latent > -scipy.stats.norm.ppf(accuracy) * blind_sd)
    for _ in range(2):
        takes.append(rng.normal(0, VIDEO_SD[2], n_videos))  # b_{v,m}
        latent = a[video] + VIDEO_SD[1] * u[prompt] + takes[-1][video] + rng.normal(0, VIDEO_SD[3], n)
        rows.append(latent > cut)
    for share, own, noise in CONDITION_SD:  # κ b_{v,A} + c_v has b's sd, so the threshold is A's video one
        assert np.isclose(share**2 * VIDEO_SD[2] ** 2 + own**2, VIDEO_SD[2] ** 2) and noise == VIDEO_SD[3]
        latent = (a[video] + VIDEO_SD[1] * u[prompt] + share * takes[0][video]
                  + conditions.normal(0, own, n_videos)[video] + conditions.normal(0, noise, n))
        rows.append(latent > cut)
    return np.stack(rows).astype(float)


# outputs over the rows (blind A, blind B, video A, video B, A single frame, A shuffled), as the audit forms them
# (Acc_B, Acc_V, VG, ΔAcc_B, ΔAcc_V, ΔVG, FG, OG), and whether each is a proportion; then ΔAcc_B and ΔAcc_V again,
# paired (SCORED). FG and OG are the paired difference of two video rows of one model on the same questions, as the
# ladder forms them (visdep_metrics/audit/ladder.py, comparison_rows with paired=True): +1 on A's video row, −1 on the
# condition's, a difference, neither robust nor blind, no blind part, paired (Tango's score interval)
CONTRASTS = np.array([[1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [-1, 0, 1, 0, 0, 0], [1, -1, 0, 0, 0, 0],
                      [0, 0, 1, -1, 0, 0], [-1, 1, 1, -1, 0, 0], [0, 0, 1, 0, -1, 0], [0, 0, 1, 0, 0, -1],
                      [1, -1, 0, 0, 0, 0], [0, 0, 1, -1, 0, 0]], dtype=float)
PROPORTION = np.array([True, True, False, False, False, False, False, False, False, False])
# a model's video answers (ROBUST) and blind answers alone (BLIND), as the audit marks them
ROBUST = np.array([False, True, True, False, False, False, False, False, False, False])
BLIND = np.array([True, False, False, True, False, False, False, False, True, False])
BLIND_PARTS = np.array([-1, -1, 0, -1, -1, -1, -1, -1, -1, -1])  # VG's blind accuracy (Acc_B), as the audit names it
PAIRED = np.array([False, False, False, False, False, False, True, True, True, True])
# the table's columns (QUANTITIES) from the outputs: BG is Acc_B's interval less the known chance
ORDER = [0, 1, 0, 2, 3, 4, 5, 6, 7, 8, 9]
DELTAS = slice(3, 6)  # the outputs of the Δ family (ΔAcc_B, ΔAcc_V, ΔVG)
LADDER = slice(6, 8)  # FG, OG


def run_cell(design: dict[str, np.ndarray], groups: dict[str, np.ndarray], accuracy: float, simulations: int,
             rng: np.random.Generator, conditions: np.random.Generator) -> tuple[dict, dict]:
    """Per group and quantity: (covered, withheld) counts; and the families' raw and Holm-adjusted false rejections:
    the Δ family, FG and OG as a family of their own, and all of them together."""
    members = np.stack(list(groups.values()))
    chance = np.array([np.mean(1.0 / design["k"][keep]) for keep in members])
    truth = np.array([accuracy, accuracy, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    covered = np.zeros((len(members), len(QUANTITIES)))
    withheld, below, above = np.zeros_like(covered), np.zeros_like(covered), np.zeros_like(covered)
    # per benchmark and group, for Acc_B and Acc_V (model A): the accuracy and the interval's lower bound
    estimates, lows = np.zeros((simulations, len(members), 2)), np.zeros((simulations, len(members), 2))
    family = {"raw": 0, "holm": 0, "tests": 0, "ladder raw": 0, "ladder holm": 0, "ladder tests": 0, "all holm": 0}
    for b in range(simulations):
        correct = simulate(design, accuracy, rng, conditions)
        found = crossed_intervals(correct, members, design["video"], design["prompt"], 0.95,
                                  CONTRASTS, PROPORTION, ROBUST, BLIND, BLIND_PARTS, PAIRED)
        low, high = found.low, found.high
        hit = (low <= truth) & (truth <= high)
        given = ~np.isnan(low)
        # columns: Acc_B, Acc_V, BG (Acc_B's interval less chance: covers exactly where Acc_B's does), VG, deltas,
        # FG, OG
        order = ORDER
        covered += hit[:, order]
        withheld += ~given[:, order]
        below += (high < truth)[:, order]
        above += (low > truth)[:, order]
        estimates[b] = (correct[[0, 2]] @ members.T / members.sum(axis=1)).T  # blind A's and video A's accuracy
        lows[b] = low[:, :2]
        p, ladder = found.p_value[:, DELTAS], found.p_value[:, LADDER]
        family["tests"] = int(np.isfinite(p).sum())
        family["raw"] += bool((p < 0.05).any())
        family["holm"] += bool((holm(p) < 0.05).any())
        family["ladder tests"] = int(np.isfinite(ladder).sum())
        family["ladder raw"] += bool((ladder < 0.05).any())
        family["ladder holm"] += bool((holm(ladder) < 0.05).any())
        family["all holm"] += bool((holm(np.concatenate([p, ladder], axis=1)) < 0.05).any())
    del chance  # BG's truth is accuracy - chance and its interval Acc_B's less chance: its coverage is Acc_B's
    return {"covered": covered, "withheld": withheld, "below": below, "above": above, "estimates": estimates,
            "lows": lows, "n": members.sum(axis=1)}, family


def wilson(p: np.ndarray, n: float, z: float = 1.959964) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval (Wilson 1927) of proportions p on n independent answers, written out here."""
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return centre - half, centre + half


def sides_text(group: str, accuracy: float, quantity: str, counts: dict, g: int, j: int, simulations: int) -> str:
    """Where a cell outside its band misses: the interval below the truth or above it. For an accuracy also how often
    every answer of the group (model A's) is right, the interval's lower bound there, and what an oracle does: Wilson's
    interval on N / deff answers with the true deff (the variance of the simulated accuracies over p (1 − p) / N)."""
    given = simulations - counts["withheld"][g, j]
    text = (f"- {group} at {accuracy:.2f}, {quantity}: the interval lies below the truth in "
            f"{100 * counts['below'][g, j] / given:.1f}% of benchmarks, above it in "
            f"{100 * counts['above'][g, j] / given:.1f}% (2.5% each for an equal-tailed 95% interval)")
    a = {"Acc_B": 0, "Acc_V": 1}.get(quantity)
    if a is None:
        return text
    p, n = counts["estimates"][:, g, a], counts["n"][g]
    every = p == 1
    if every.any():
        text += (f"; every answer right in {100 * every.mean():.1f}%, where its lower bound averaged "
                 f"{np.nanmean(counts['lows'][every, g, a]):.3f}")
    deff = p.var() * n / (accuracy * (1 - accuracy))
    low, high = wilson(p, n / deff)
    covers, under, over = (np.mean(x) for x in ((low <= accuracy) & (accuracy <= high), high < accuracy,
                                                 low > accuracy))
    text += (f". The oracle (true deff {deff:.2f}) covers {100 * covers:.1f}%: below {100 * under:.1f}%, above "
             f"{100 * over:.1f}%")
    return text + (f", its lower bound where every answer is right {low[every].max():.3f}" if every.any() else "")


def within_the_rule(below: float, above: float, given: float, impossible: str = "") -> bool:
    """#27's rule (module docstring) for a cell of `given` intervals, `below` of them wholly below the truth and `above`
    wholly above it; impossible: "below" or "above" where that tail is impossible by calculation."""
    tail = 0.025 + 2 * np.sqrt(0.025 * 0.975 / given)
    top = 0.97 + 2 * np.sqrt(0.95 * 0.05 / given)
    low, high = below / given, above / given
    if low > tail or high > tail:
        return False
    other = {"below": high, "above": low}.get(impossible)
    return 1 - low - high <= top or (other is not None and 1 - low - high <= 0.985 and other >= 0.015)


def chance_lines(cells: list[tuple[str, float, float, float]]) -> list[str]:
    """What chance alone does to #27's rule over a table of cells (name, count below the truth, count above it,
    intervals given): how many cells an interval whose tails are each exactly 2.5% would leave outside the rule's
    tail limit (Σ 1 − (1 − q)², q = P(Bin(S', 0.025) > the limit), at each cell's S'), and which tails lie above 2.5%
    beyond chance (one-sided binomial p ≥ the count, Holm over every tail of the table at 0.05)."""
    given = np.array([c[3] for c in cells], dtype=float)
    counts = np.array([(c[1], c[2]) for c in cells], dtype=float)
    limit = np.floor((0.025 + 2 * np.sqrt(0.025 * 0.975 / given)) * given)
    q = scipy.stats.binom.sf(limit, given, 0.025)
    expected = float((1 - (1 - q) ** 2).sum())
    p = scipy.stats.binom.sf(counts - 1, given[:, None], 0.025)
    adjusted = holm(p)
    beyond = [f"{name}: {'below' if side == 0 else 'above'} the truth in {100 * counts[c, side] / given[c]:.1f}% "
              f"(adjusted p {adjusted[c, side]:.2g})"
              for c, (name, *_) in enumerate(cells) for side in (0, 1) if adjusted[c, side] < 0.05]
    return [f"Chance alone: an interval whose tails are each exactly 2.5% would leave on average {expected:.1f} of "
            f"these {len(cells)} cells outside the rule's tail limit (BG aside: its tails are Acc_B's). Tails above "
            f"2.5% beyond chance (one-sided binomial test, Holm over the {2 * len(cells)} tails, 0.05): "
            f"{len(beyond)}" + (":" if beyond else ".")] + [f"- {line}" for line in beyond]


def cell_text(counts: dict, g: int, j: int, simulations: int, impossible: str = "") -> tuple[str, bool]:
    """The cell's coverage, its tails (below / above the truth, %) and the share withheld where at least 1%, and
    whether it is within the rule."""
    withheld = counts["withheld"][g, j]
    given = simulations - withheld
    if given == 0:
        return "withheld", True
    below, above = counts["below"][g, j], counts["above"][g, j]
    meets = within_the_rule(below, above, given, impossible)
    share = f"{100 * counts['covered'][g, j] / given:.1f}"
    text = (share if meets else f"**{share}**") + f" ({100 * below / given:.1f} / {100 * above / given:.1f})"
    if impossible:
        text += "†"
    return text + (f", {100 * withheld / simulations:.0f}% withheld" if withheld >= 0.01 * simulations else ""), meets


def impossible_tails(design: dict[str, np.ndarray], members: np.ndarray, counts: dict, accuracy: float) -> np.ndarray:
    """(groups, 2): for Acc_B and Acc_V, the tail impossible by calculation ("above" or "below", else ""): at every
    answer of the group right (wrong), neither the product's interval nor Wilson's on the true design effect (the
    variance of the simulated accuracies over p (1 − p) / N, the oracle of `sides_text`) lies above (below) the
    truth."""
    found = np.full((len(members), 2), "", dtype=object)
    rows = CONTRASTS.shape[1]
    extremes = {"above": np.ones((rows, members.shape[1])), "below": np.zeros((rows, members.shape[1]))}
    for side, values in extremes.items():
        product = crossed_intervals(values, members, design["video"], design["prompt"], 0.95, CONTRASTS, PROPORTION,
                                    ROBUST, BLIND, paired=PAIRED)
        for g in range(len(members)):
            for a in range(2):
                p, n = counts["estimates"][:, g, a], counts["n"][g]
                deff = max(p.var() * n / (accuracy * (1 - accuracy)), 1e-12)
                low, high = wilson(np.array([1.0 if side == "above" else 0.0]), n / deff)
                if side == "above" and not (product.low[g, a] > accuracy) and not (low[0] > accuracy):
                    found[g, a] = "above"
                if side == "below" and not (product.high[g, a] < accuracy) and not (high[0] < accuracy):
                    found[g, a] = "below"
    return found


SCORE_COLUMNS = ("ΔAcc_B", "ΔAcc_B score", "ΔAcc_V", "ΔAcc_V score")


def print_chance(tails: list[tuple[str, float, float, float]]) -> None:
    """The beyond-chance count (`chance_lines`) of the table (the paired-score Δ columns aside), of the table without
    FG and OG (as judged before #55), and of the table with ΔAcc_B and ΔAcc_V by the paired score instead."""
    judged = [t for t in tails if t[3] > 0]

    def of(names: tuple[str, ...]) -> list[tuple[str, float, float, float]]:
        return [t for t in judged if not t[0].endswith(tuple(f", {q}" for q in names))]

    print("\n" + "\n".join(chance_lines(of(SCORED))))
    print("\nWithout FG and OG (the table as judged before #55):\n" + "\n".join(chance_lines(of(TEMPORAL + SCORED))))
    print("\nWith ΔAcc_B and ΔAcc_V by the paired score interval instead:\n"
          + "\n".join(chance_lines(of(("ΔAcc_B", "ΔAcc_V")))))


def conditions_rng(seed: int) -> np.random.Generator:
    """The generator of the temporal ladder's conditions, seeded from --seed and apart from the one that draws the
    other rows, so that adding the conditions left every other cell's draws as they were."""
    return np.random.default_rng([seed, CONDITIONS_STREAM])


def parse(parser: argparse.ArgumentParser, simulations: int) -> tuple[argparse.Namespace, dict | None]:
    """The arguments this bench and bench_validation.py share added to `parser`, parsed, and the question lists read
    (None, after a one-line message, where --benchmarks holds none)."""
    parser.add_argument("--benchmarks", type=Path, default=REPO.parent / "shared" / "benchmarks",
                        help="folder with vru_accident/ and mm_au/ (default ../shared/benchmarks)")
    parser.add_argument("--simulations", type=int, default=simulations,
                        help=f"simulated benchmarks per cell (default {simulations})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--groups", nargs="+", default=None,
                        help="keep the groups whose name contains one of these words (default all)")
    parser.add_argument("--lists", nargs="+", default=["vru_accident", "mmau"], choices=["vru_accident", "mmau"])
    args = parser.parse_args()
    if not (args.benchmarks / "vru_accident").is_dir() or not (args.benchmarks / "mm_au").is_dir():
        print(f"--benchmarks {args.benchmarks}: no vru_accident/ and mm_au/ there", file=sys.stderr)
        return args, None
    folders = {"vru_accident": "vru_accident", "mmau": "mm_au"}
    return args, {name: question_list(args.benchmarks, name, folders[name]) for name in args.lists}


def kept(groups: dict[str, np.ndarray], words: list[str] | None) -> dict[str, np.ndarray]:
    """The groups whose name contains one of the words (--groups), all where none is given."""
    return {group: keep for group, keep in groups.items() if not words or any(w in group for w in words)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accuracies", type=float, nargs="+", default=list(ACCURACIES))
    args, lists = parse(parser, 4000)
    if lists is None:
        return 2
    rng = np.random.default_rng(args.seed)
    conditions = conditions_rng(args.seed)
    s = args.simulations
    print(f"{s} simulated benchmarks per cell; Monte Carlo SE of a 95% coverage (and of a 5% error rate) "
          f"{100 * np.sqrt(0.95 * 0.05 / s):.2f} points")
    main_columns = [q for q in QUANTITIES if q not in TEMPORAL + SCORED]
    table = ["| group | n | accuracy | " + " | ".join(main_columns) + " |", "|" + "---|" * (len(main_columns) + 3)]
    ladder = ["| group | n | accuracy | " + " | ".join(TEMPORAL) + " |", "|" + "---|" * (len(TEMPORAL) + 3)]
    scored = ["| group | n | accuracy | " + " | ".join(SCORE_COLUMNS) + " |", "|" + "---|" * (len(SCORE_COLUMNS) + 3)]
    families = []
    started = time.perf_counter()
    meeting = {"coverage": [0, 0], "Δ": [0, 0], "FG, OG": [0, 0], "scored": [0, 0]}
    sides, tails = [], []
    for name, design in lists.items():
        groups = kept(groups_of(name, design, rng), args.groups)
        if not groups:
            continue
        for accuracy in args.accuracies:
            counts, family = run_cell(design, groups, accuracy, s, rng, conditions)
            impossible = impossible_tails(design, np.stack(list(groups.values())), counts, accuracy)
            for g, (group, keep) in enumerate(groups.items()):
                # Acc_B, Acc_V, BG (Acc_B's interval less chance) may have a tail impossible by calculation
                cells = [cell_text(counts, g, j, s, impossible[g, (0, 1, 0)[j]] if j < 3 else "")
                         for j in range(len(QUANTITIES))]
                for j, ((_, meets), q) in enumerate(zip(cells, QUANTITIES, strict=True)):
                    kind = ("FG, OG" if q in TEMPORAL else "scored" if q in SCORED else "Δ" if q.startswith("Δ")
                            else "coverage")
                    meeting[kind][0] += meets
                    meeting[kind][1] += 1
                    if not meets:
                        sides.append(sides_text(group, accuracy, q, counts, g, j, s))
                    if q != "BG":
                        tails.append((f"{group} at {accuracy:.2f}, {q}", counts["below"][g, j],
                                      counts["above"][g, j], s - counts["withheld"][g, j]))
                texts = dict(zip(QUANTITIES, (text for text, _ in cells), strict=True))
                table.append(f"| {group} | {int(keep.sum())} | {accuracy:.2f} | "
                             + " | ".join(texts[q] for q in main_columns) + " |")
                ladder.append(f"| {group} | {int(keep.sum())} | {accuracy:.2f} | "
                              + " | ".join(texts[q] for q in TEMPORAL) + " |")
                scored.append(f"| {group} | {int(keep.sum())} | {accuracy:.2f} | "
                              + " | ".join(texts[q] for q in SCORE_COLUMNS) + " |")
            families.append(f"| {'VRU-Accident' if name == 'vru_accident' else 'MM-AU'} | {accuracy:.2f} | "
                            f"{family['tests']} | {100 * family['raw'] / s:.1f} | {100 * family['holm'] / s:.1f} | "
                            f"{family['ladder tests']} | {100 * family['ladder raw'] / s:.1f} | "
                            f"{100 * family['ladder holm'] / s:.1f} | {100 * family['all holm'] / s:.1f} |")
            print(f"  {name} at {accuracy:.2f} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print("\nCoverage of the 95% intervals (%; in brackets the shares wholly below / above the truth; Δ: model A − "
          "model B, so 100 − coverage is the raw type I error of its p < 0.05; in bold: outside #27's rule; †: a tail "
          "impossible by calculation):\n")
    print("\n".join(table))
    print("\nThe temporal ladder (#55), model A: FG = Acc_V − Acc_single, OG = Acc_V − Acc_shuffled, both truly 0 "
          "(coverage %, in brackets the shares below / above the truth; 100 − coverage is the raw type I error):\n")
    print("\n".join(ladder))
    print("\nΔAcc_B and ΔAcc_V by the audit's interval and by Tango's paired score interval on the design effect "
          "(the same draws):\n\n" + "\n".join(scored))
    print(f"\nAcc_B, Acc_V, BG, VG: {meeting['coverage'][0]} of {meeting['coverage'][1]} cells within the rule; "
          f"Δ: {meeting['Δ'][0]} of {meeting['Δ'][1]}; FG, OG: {meeting['FG, OG'][0]} of {meeting['FG, OG'][1]}; "
          f"ΔAcc_B and ΔAcc_V by the paired score: {meeting['scored'][0]} of {meeting['scored'][1]}")
    print_chance(tails)
    if sides:
        print("\nThe cells outside the rule, by side:\n")
        print("\n".join(sides))
    print("\nFamily-wise type I error (%): a family is every Δ p-value of one simulated benchmark's groups; FG and OG "
          "(every truth 0) as a family of their own, and with the Δ p-values in one family\n")
    print("| benchmark | accuracy | tests in the family | any raw p < 0.05 | any Holm-adjusted p < 0.05 | "
          "FG, OG tests | FG, OG: any raw p < 0.05 | FG, OG: any Holm-adjusted | Δ, FG and OG: any Holm-adjusted |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(families))
    return 0


if __name__ == "__main__":
    sys.exit(main())
