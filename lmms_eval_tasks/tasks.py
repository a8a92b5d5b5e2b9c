"""Everything the task YAMLs reference: documents, prompt, choices, visuals, results.

One implementation for all eight tasks; each YAML names its benchmark through the function it
picks (`mmau_docs_video`, ...; a benchmark of a spec: `spec_docs_video`, which reads the spec its data
file names). Blind and video tasks of a benchmark share documents, prompt,
choices and ids: they differ in `doc_to_visual`, in the video task checking up front that every
video exists, and in the `mode` written into each sample's `visdep` record.

Scoring (`VISDEP_SCORING`, default `letter`):
- `letter`: the choices are the option letters, scored as the first assistant token (paper B.2);
- `option`: the choices are the option texts.
Either way each sample records `option_logprobs`: K log-probabilities (the negated losses a
model returns), from which p_k = softmax(option_logprobs).
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import re

from loguru import logger
from tqdm import tqdm

from lmms_eval_tasks.loaders import (
    BENCHMARKS,
    LETTERS,
    BenchmarkDataError,
    get_benchmark,
    load_benchmark,
    video_root,
)
from lmms_eval_tasks.videos import VideoReadError, probe_video, resolve_video

INSTRUCTION = "Answer with the option's letter from the given choices directly."
SCORING_ENV = "VISDEP_SCORING"
SCORING_MODES = ("letter", "option")
SKIP_MISSING_ENV = "VISDEP_SKIP_MISSING_VIDEOS"
MACRO_AVERAGED = ("mlvu",)  # benchmarks whose official score is M-Avg, the mean of per-category accuracies


# --------------------------------------------------------------------------- prompt and choices
def build_prompt(question: str, options: list[str]) -> str:
    """The one prompt of both modes (paper B.2): question, lettered options, instruction."""
    lines = [question] + [f"{LETTERS[k]}. {opt}" for k, opt in enumerate(options)] + [INSTRUCTION]
    return "\n".join(lines)


def scoring_mode() -> str:
    mode = os.environ.get(SCORING_ENV, "letter").strip().lower() or "letter"
    if mode not in SCORING_MODES:
        raise ValueError(f"{SCORING_ENV}={mode!r}: expected one of {', '.join(SCORING_MODES)}")
    return mode


def doc_to_text(doc: dict) -> str:
    return build_prompt(doc["question"], doc["options"])


def prompt_id(doc: dict) -> str:
    """The identity of a question's blind prompt (question and lettered options as presented): the first 16 hex
    digits of its sha256. Questions about different videos that read the same share it, and a model's blind answer
    to them is one answer: the audit resamples prompts as well as videos."""
    return hashlib.sha256(doc_to_text(doc).encode("utf-8")).hexdigest()[:16]


def doc_to_choice(doc: dict) -> list[str]:
    if scoring_mode() == "letter":
        return list(LETTERS[: len(doc["options"])])
    return list(doc["options"])


def doc_to_target(doc: dict) -> int:
    return int(doc["answer_index"])


# --------------------------------------------------------------------------- documents
def _dataset(records: list[dict], subset):
    """Records as a `datasets.Dataset`, restricted to the ids of `subset` when it lists some.

    Subset tasks (grounded / debiased exports) point `data_files` at a jsonl of question ids; the
    full tasks point at a placeholder with no `question_id` column."""
    import datasets

    if subset is not None and "question_id" in subset.column_names:
        wanted = [str(q) for q in subset["question_id"]]
        known = {r["question_id"] for r in records}
        unknown = [q for q in wanted if q not in known]
        if unknown:
            raise BenchmarkDataError(
                f"{len(unknown)} question id(s) of the subset are not in the benchmark, e.g. {unknown[:3]}")
        keep = set(wanted)
        records = [r for r in records if r["question_id"] in keep]
    # Arrow needs one type per column: category may be None for a whole benchmark.
    rows = [{**r, "category": r["category"] or ""} for r in records]
    return datasets.Dataset.from_list(rows)


_reported: set[str] = set()


def _load(name: str) -> list[dict]:
    try:
        return load_benchmark(name)
    except BenchmarkDataError as e:
        # lmms-eval retries dataset loading 5 times; say it once, clearly, before the traceback.
        if str(e) not in _reported:
            _reported.add(str(e))
            logger.error(f"visdep: cannot load benchmark {name!r}: {e}")
        raise


def unusable_videos(name: str, records: list[dict]) -> dict[str, str]:
    """{video as the annotation names it: why it cannot be used} over the distinct videos of `records`: not
    found, an empty or unreadable file, a folder without frames (each opened, its header read)."""
    problems = {}
    videos = sorted({r["video"] for r in records})
    for rel in tqdm(videos, desc=f"visdep: checking the {name} videos", unit="video", disable=len(videos) < 500):
        try:
            probe_video(resolve_video(name, rel))
        except VideoReadError as e:
            problems[rel] = str(e)
    return problems


def _unusable_report(name: str, records: list[dict], problems: dict[str, str]) -> str:
    n_videos = len({r["video"] for r in records})
    n_questions = sum(r["video"] in problems for r in records)
    missing = sum(why.startswith("not found") for why in problems.values())
    shown = "\n".join(f"  {rel}: {why}" for rel, why in list(problems.items())[:10])
    more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
    spec = get_benchmark(name).spec
    origin = f"\n  (the videos are fields.video of {spec}, under {video_root(name)})" if spec is not None else ""
    return (f"{len(problems)} of {n_videos} videos of {name} cannot be used ({missing} not found, "
            f"{len(problems) - missing} unreadable), asked about in {n_questions} questions:\n{shown}{more}{origin}")


def _video_docs(name: str, dataset):
    """Video documents: the blind documents, after checking that every video exists and opens.

    An unusable video is an error naming it; with VISDEP_SKIP_MISSING_VIDEOS=1 those questions are
    dropped and listed instead (never scored without the video)."""
    records = _load(name)
    problems = unusable_videos(name, records)
    if problems:
        report = _unusable_report(name, records, problems)
        if os.environ.get(SKIP_MISSING_ENV, "") not in ("1", "true", "yes"):
            if report not in _reported:
                _reported.add(report)
                logger.error(f"visdep: {report}\nSet {SKIP_MISSING_ENV}=1 to skip these questions instead.")
            raise FileNotFoundError(f"{report}\nSet {SKIP_MISSING_ENV}=1 to skip these questions instead.")
        dropped = [r["question_id"] for r in records if r["video"] in problems]
        records = [r for r in records if r["video"] not in problems]
        if not records:
            raise FileNotFoundError(f"no video of {name} can be used: {report}")
        logger.warning(f"visdep: skipping {len(dropped)} questions whose video cannot be used ({SKIP_MISSING_ENV}=1): "
                       f"{report}\nskipped: {', '.join(dropped[:20])}{' ...' if len(dropped) > 20 else ''}")
    return _dataset(records, dataset)


def _blind_docs(name: str, dataset):
    return _dataset(_load(name), dataset)


def _spec_benchmark(dataset) -> str:
    """Register the spec the task's data file names (this process may not have seen it) and return its name."""
    from lmms_eval_tasks.spec import register_spec, spec_of_documents

    return register_spec(spec_of_documents(dataset)).name


def spec_docs_blind(dataset):
    """Documents of a benchmark described by a spec (`visdep spec init` writes the YAMLs that name this)."""
    return _blind_docs(_spec_benchmark(dataset), dataset)


def spec_docs_video(dataset):
    return _video_docs(_spec_benchmark(dataset), dataset)


def mmau_docs_blind(dataset):
    return _blind_docs("mmau", dataset)


def mmau_docs_video(dataset):
    return _video_docs("mmau", dataset)


def vru_accident_docs_blind(dataset):
    return _blind_docs("vru_accident", dataset)


def vru_accident_docs_video(dataset):
    return _video_docs("vru_accident", dataset)


def trafficqa_docs_blind(dataset):
    return _blind_docs("trafficqa", dataset)


def trafficqa_docs_video(dataset):
    return _video_docs("trafficqa", dataset)


def accidentbench_docs_blind(dataset):
    return _blind_docs("accidentbench", dataset)


def accidentbench_docs_video(dataset):
    return _video_docs("accidentbench", dataset)


def videomme_docs_blind(dataset):
    return _blind_docs("videomme", dataset)


def videomme_docs_video(dataset):
    return _video_docs("videomme", dataset)


def longvideobench_docs_blind(dataset):
    return _blind_docs("longvideobench", dataset)


def longvideobench_docs_video(dataset):
    return _video_docs("longvideobench", dataset)


def mlvu_docs_blind(dataset):
    return _blind_docs("mlvu", dataset)


def mlvu_docs_video(dataset):
    return _video_docs("mlvu", dataset)


# --------------------------------------------------------------------------- visuals
def doc_to_visual_blind(doc: dict) -> list:
    return []


def doc_to_visual_video(doc: dict) -> list[str]:
    """[absolute path]: an mp4 (what lmms-eval's own video models take) or an MM-AU frame folder.
    Frame sampling is the model adapter's job."""
    path = resolve_video(doc["benchmark"], doc["video"])
    if not path.exists():
        raise FileNotFoundError(f"video of question {doc['question_id']!r} not found: {path}")
    return [str(path)]


# --------------------------------------------------------------------------- results
_SCORED = re.compile(r",\s*(?:True|False)\s*,\s*(?P<scored>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\s*\)?\s*$")


def parse_response(resp) -> tuple[float, str | None]:
    """(loss of one option, the string the model scored after its prompt, or None when not told) from what
    lmms-eval hands `process_results`.

    lmms-eval 0.7.3 stringifies every response: '(1.25, False)' from any model, '(1.25, False, " A")' from
    the visdep adapters, which add the string they scored; a model may also return the tuple itself or a
    bare float."""
    value = resp
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, tuple):
        if not value:
            raise ValueError(f"empty response {resp!r}")
        scored = value[2] if len(value) > 2 and isinstance(value[2], str) else None
        return float(value[0]), scored
    if isinstance(value, str):
        head = value.strip().lstrip("([").split(",")[0].strip()
        try:
            loss = float(head)  # float() also reads 'nan', 'inf', '-inf'
        except ValueError:
            raise ValueError(f"cannot read a log-likelihood from response {resp!r}") from None
        match = _SCORED.search(value)
        return loss, (ast.literal_eval(match.group("scored")) if match else None)
    if isinstance(value, list):
        raise ValueError(f"cannot read a log-likelihood from response {resp!r}")
    return float(value), None


def category_metric(category: str) -> str:
    """`acc_<category>`, the per-category accuracy metric name (lowercase, underscores)."""
    return "acc_" + re.sub(r"[^0-9a-z]+", "_", category.lower()).strip("_")


def _process_results(doc: dict, results: list, mode: str) -> dict:
    k = len(doc["options"])
    if len(results) != k:
        raise ValueError(f"question {doc['question_id']!r}: {len(results)} responses for {k} options")
    losses, scored = zip(*(parse_response(r) for r in results), strict=True)
    # lmms-eval's convention: a response is a loss, -sum log p(continuation | context).
    logprobs = [-x for x in losses]
    bad = [x for x in logprobs if not math.isfinite(x)]
    if bad:
        raise ValueError(f"question {doc['question_id']!r} ({mode}): non-finite log-likelihoods {logprobs}")
    pred = max(range(k), key=lambda i: logprobs[i])  # first of ties, like numpy.argmax
    correct = float(pred == int(doc["answer_index"]))
    out = {
        "acc": correct,
        "visdep": {
            "question_id": doc["question_id"],
            "benchmark": doc["benchmark"],
            "mode": mode,
            "category": doc["category"] or None,
            "source": doc["source"],
            "video": doc["video"],
            "prompt_id": prompt_id(doc),
            "n_options": k,
            "answer_index": int(doc["answer_index"]),
            "option_logprobs": logprobs,
            "scoring": scoring_mode(),
            # what the model scored after its prompt; the task's own choices where the model did not say
            "continuations": [given if seen is None else seen for seen, given in zip(scored, doc_to_choice(doc),
                                                                                     strict=True)],
        },
    }
    facets = doc.get("facets")
    if facets:  # general VideoQA: accuracy by each of the benchmark's own category dimensions
        for facet, value in facets.items():
            out[category_metric(f"{facet} {value}")] = correct
        if doc["benchmark"] in MACRO_AVERAGED:
            out["m_avg"] = {"category": doc["category"], "correct": correct}
    elif doc["category"]:
        out[category_metric(doc["category"])] = correct
    return out


def macro_average_accuracy(items: list[dict]) -> float:
    """M-Avg (MLVU's official score): the mean over categories of each category's accuracy,
    mean_c (1/n_c) * sum_{q in c} correct_q, so every task type weighs the same whatever its size."""
    by_category: dict[str, list[float]] = {}
    for item in items:
        by_category.setdefault(item["category"], []).append(item["correct"])
    return sum(sum(v) / len(v) for v in by_category.values()) / len(by_category)


def process_results_blind(doc: dict, results: list) -> dict:
    return _process_results(doc, results, "blind")


def process_results_video(doc: dict, results: list) -> dict:
    return _process_results(doc, results, "video")


def task_names() -> list[str]:
    return [f"{b}_{m}" for b in BENCHMARKS for m in ("blind", "video")]
