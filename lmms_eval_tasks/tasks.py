"""Everything the task YAMLs reference: documents, prompt, choices, visuals, results.

One implementation for all tasks. Every task's documents come from `docs_blind` / `docs_video`, which open the
question source its data file names (`source_of_documents`: a built-in benchmark, a spec, an upstream task's twin;
`lmms_eval_tasks.loaders.QuestionSource`). Blind and video tasks of a benchmark share documents, prompt, choices and
ids: they differ in `doc_to_visual`,
in the video task checking up front that every video exists, and in the `mode` written into each sample's
`visdep` record. Records a benchmark's files hold but that cannot be used, and (video tasks) questions whose video
cannot be used, stop the run naming them all, or with the switch (`lmms_eval_tasks.unusable`) are left out and
recorded in the results file (`evaluation.Evaluation.record_dropped`).

Scoring (the model's `scoring=` argument, else `VISDEP_SCORING`, default `letter`; one per evaluation:
`evaluation.Evaluation.scoring`):
- `letter`: the choices are the option letters, scored as the first assistant token (paper B.2);
- `option`: the choices are the option texts.
Either way each sample's `visdep` record (`lmms_eval_tasks.record`, versioned) holds `option_logprobs`: K
log-probabilities (the negated losses a model returns), from which p_k = softmax(option_logprobs).
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from pathlib import Path

from loguru import logger

from lmms_eval_tasks.evaluation import current
from lmms_eval_tasks.loaders import BENCHMARKS, QuestionSource, open_source, resolve_video, skip_unusable
from lmms_eval_tasks.record import new_record
from lmms_eval_tasks.records import LETTERS, BenchmarkDataError, Question
from lmms_eval_tasks.spec_data import register_spec
from lmms_eval_tasks.task_yaml import FULL_SPLIT, category_metric
from lmms_eval_tasks.unusable import SHOWN, SKIP_ENV, Unusable, UnusableRecordsError, write_unusable
from lmms_eval_tasks.videos import describe_video_problems, unusable_questions, video_problems

INSTRUCTION = "Answer with the option's letter from the given choices directly."
MACRO_AVERAGED = ("mlvu",)  # benchmarks whose official score is M-Avg, the mean of per-category accuracies


# --------------------------------------------------------------------------- prompt and choices
def build_prompt(question: str, options: list[str]) -> str:
    """The one prompt of both modes (paper B.2): question, lettered options, instruction."""
    lines = [question] + [f"{LETTERS[k]}. {opt}" for k, opt in enumerate(options)] + [INSTRUCTION]
    return "\n".join(lines)


def scoring_mode() -> str:
    """The current evaluation's scoring mode (letter or option)."""
    return current().scoring_mode()


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
_reported: set[str] = set()


def _fail(error: Exception) -> Exception:
    """Log `error` once (lmms-eval retries dataset loading five times, each raising it again) and return it."""
    if str(error) not in _reported:
        _reported.add(str(error))
        logger.error(f"visdep: {error}")
    return error


def _task_name(name: str, mode: str, dataset) -> str:
    """A subset task's data file is the split named by its suffix (`export.write_subset_tasks`)."""
    split = str(getattr(dataset, "split", None) or FULL_SPLIT)
    return f"{name}_{mode}" if split == FULL_SPLIT else f"{name}_{mode}_{split}"


def _usable(source: QuestionSource) -> tuple[list[Question], list[Unusable]]:
    """The benchmark's usable questions and the records left out, or the error naming every unusable record (the
    full list beside lmms-eval's output where the error names only the first few)."""
    name = source.name
    try:
        data = source.read()
        return data.usable(skip_unusable(name)), list(data.unusable)
    except UnusableRecordsError as e:
        out = current().output_path
        if len(e.unusable) > SHOWN and out is not None:
            listed = write_unusable(out / f"visdep_unusable_{name}.jsonl", e.unusable)
            e = UnusableRecordsError(f"{e}\nAll {len(e.unusable):,} are listed in {listed}", e.benchmark, e.unusable)
        raise _fail(e) from None
    except BenchmarkDataError as e:
        raise _fail(BenchmarkDataError(f"cannot load benchmark {name!r}: {e}")) from None


def _in_subset(questions: list[Question], dropped: list[Unusable], subset) -> tuple[list[Question], list[Unusable]]:
    """Subset tasks (grounded / debiased exports) point `data_files` at a jsonl of question ids; the full tasks at
    a placeholder with no `question_id` column."""
    if subset is None or "question_id" not in subset.column_names:
        return questions, dropped
    wanted = {str(q) for q in subset["question_id"]}
    unknown = wanted - {q.question_id for q in questions} - {u.question_id for u in dropped}
    if unknown:
        raise BenchmarkDataError(f"{len(unknown)} question id(s) of the subset are not in the benchmark, e.g. "
                                 f"{sorted(unknown)[:3]}")
    return [q for q in questions if q.question_id in wanted], [u for u in dropped if u.question_id in wanted]


def _without_unusable_videos(name: str, questions: list[Question]) -> tuple[list[Question], list[Unusable]]:
    """Every video is checked (it exists and opens) before the run: an unusable one is an error naming it, or with
    the switch its questions are left out (never scored without the video)."""
    problems = video_problems(name, questions)
    if not problems:
        return questions, []
    report = describe_video_problems(name, questions, problems)
    if not skip_unusable(name):
        raise _fail(FileNotFoundError(f"{report}\nSet {SKIP_ENV}=1 to skip these questions instead."))
    kept = [q for q in questions if q.video not in problems]
    if not kept:
        raise FileNotFoundError(f"no video of {name} can be used: {report}")
    dropped = unusable_questions(name, questions, problems)
    ids = [u.question_id for u in dropped]
    logger.warning(f"visdep: skipping {len(dropped)} questions whose video cannot be used ({SKIP_ENV}): {report}\n"
                   f"skipped: {', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''}")
    return kept, dropped


def _documents(mode: str, dataset):
    """The task's documents as a `datasets.Dataset`: the usable questions of the source its data file names
    (restricted to a subset's ids), after checking the videos in video mode; what is left out is recorded for the
    results file."""
    import datasets

    try:
        source = source_of_documents(dataset)
    except BenchmarkDataError as e:
        raise _fail(e) from None
    name = source.name
    questions, dropped = _in_subset(*_usable(source), dataset)
    if mode == "video":
        questions, video_dropped = _without_unusable_videos(name, questions)
        dropped += video_dropped
    current().record_dropped(_task_name(name, mode, dataset), [u.entry() for u in dropped])
    return datasets.Dataset.from_list([q.document() for q in questions])


# What a task's data file says to name its source, checked in this order (each line of a subset's id list says it
# too): `Benchmark.reference` and `lmms_eval_tasks.twin.TwinSource.reference`.
SOURCE_KEYS = ("twin", "spec", "benchmark")


def _open(key: str, value: str) -> QuestionSource:
    if key == "benchmark":
        if value not in BENCHMARKS:
            raise BenchmarkDataError(f"the task's data file names the benchmark {value!r}, which visdep does not "
                                     f"have; built-in: {', '.join(BENCHMARKS)}")
        return BENCHMARKS[value]
    if not Path(value).is_file():
        rerun = "visdep spec init SPEC" if key == "spec" else "visdep twin TASK --out DIR"
        raise BenchmarkDataError(f"the task's data file names the {key} {value}, which does not exist (moved?): "
                                 f"rerun `{rerun}` where it is now")
    if key == "spec":
        return register_spec(value)
    from lmms_eval_tasks.twin import open_twin

    return open_source(open_twin(value))


def source_of_documents(dataset) -> QuestionSource:
    """The question source a task's data file names (the full task's one line, or every line of a subset's id
    list), opened and known by its name to this process (`doc_to_visual_video` finds it so)."""
    columns = [] if dataset is None else [k for k in SOURCE_KEYS if k in dataset.column_names]
    if not columns or not len(dataset):
        raise BenchmarkDataError("the task's data file names no question source (a benchmark, spec or twin): "
                                 "rewrite the task (visdep spec init, visdep twin) or export it again")
    key = columns[0]
    values = set(dataset[key])
    if len(values) != 1 or None in values:
        raise BenchmarkDataError(f"the task's data file names several {key}s: {sorted(map(str, values))}")
    return _open(key, str(next(iter(values))))


def docs_blind(dataset):
    """`process_docs` of every blind task: the documents of the source its data file names."""
    return _documents("blind", dataset)


def docs_video(dataset):
    """`process_docs` of every video task."""
    return _documents("video", dataset)


# --------------------------------------------------------------------------- visuals
def doc_to_visual_blind(doc: dict) -> list:
    return []


def doc_to_visual_video(doc: dict) -> list[str]:
    """[absolute path]: an mp4 (what lmms-eval's own video models take) or an MM-AU frame folder.
    Frame sampling is the model adapter's job."""
    path = resolve_video(doc["benchmark"], doc["video"], doc["question_id"])
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
        "visdep": new_record(
            question_id=doc["question_id"], benchmark=doc["benchmark"], mode=mode, category=doc["category"] or None,
            source=doc["source"], video=doc["video"], prompt_id=prompt_id(doc), n_options=k,
            answer_index=int(doc["answer_index"]), option_logprobs=logprobs, scoring=scoring_mode(),
            # what the model scored after its prompt; the task's own choices where the model did not say
            continuations=[given if seen is None else seen for seen, given in zip(scored, doc_to_choice(doc),
                                                                                   strict=True)]),
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

