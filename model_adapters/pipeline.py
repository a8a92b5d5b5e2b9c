"""The steps of a visdep adapter's `loglikelihood`, each with a plain return value:

    lmms-eval requests --group_requests--> distinct questions --adapter.present--> what the model is shown
        --engine.score (through the durable store, `scored_through_store`)--> values --> results in request order

1. `group_requests`: lmms-eval's `multiple_choice` sends the K options of a document as K requests with the same
   context and visual; padding copies of data-parallel ranks repeat a real request. Requests are grouped by (task,
   split, doc_id, context), and documents whose prompt, options and video read the same (blind questions of
   different documents often do) become one distinct question, scored once.
2. `present` (`presentation.present_text`, `present_video`, through the engine's chat template and tokenizer): per
   distinct question the templated prompt, the strings scored after it, their token ids and the video
   (`Presented`). It does not depend on how the engine computes.
3. `score` (the engine, `model_adapters.engines`): (loss, is_greedy) per option of every presented question. The
   Hugging Face engine is `scoring.score_questions` on the presented questions' tokens and video prefixes. An
   engine forms its own batches and reports through `Batches`: it asks `skip(indices)` before it scores a batch (a
   resumed run: all of it is stored) and hands each scored batch to `scored(indices, results)`.
4. `scored_through_store`: the durable store (`model_adapters.durable`) wrapped around the engine from outside, as
   lm-evaluation-harness's `CachingLM` wraps an LM: it keys each presented question (`durable.question_key`), lets
   the engine skip batches all of whose questions are stored and writes every batch the engine scores before the
   next one starts. The engine is given every question, stored or not, so that its batches are formed as in an
   uninterrupted run (float sums depend on which questions share a forward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lmms_eval_tasks.errors import VisdepError
from model_adapters import durable, identity


class ScoringError(VisdepError, RuntimeError):
    """Scoring could not produce a finite log-likelihood; the message names the question (what a user fixes: the
    checkpoint, its template or the prompt, so a VisdepError)."""


class OutOfMemory(VisdepError, RuntimeError):
    """The model did not fit; the message says which smaller setting to try."""


Scores = list[tuple[float, bool]]  # (loss, is_greedy) per option, in the order of the question's continuations
Value = tuple[float, bool, str]  # (loss, is_greedy, string scored): what a request gets


@dataclass(frozen=True)
class DistinctQuestion:
    """One distinct question as the task asked it: its (first) document, prompt text, visuals and the distinct
    continuations asked for it, in the order first asked."""

    task: str
    doc_id: int
    context: str
    visuals: Sequence[str]
    qid: str  # named in errors
    continuations: Sequence[str]


@dataclass(frozen=True)
class Grouped:
    """Requests grouped: the distinct questions, the distinct question of each document (task, split, doc_id,
    context), and each request's (distinct question, continuation) in input order."""

    questions: list[DistinctQuestion]
    documents: list[int]
    targets: list[tuple[int, str]]


@dataclass(frozen=True)
class Presented:
    """A distinct question as the model is shown it, whatever the engine: `prompt` is the templated text the options
    are scored after; `scored[k]` the string scored after it for `continuations[k]`; `context` the prompt's token ids
    and `options[k]` those of `scored[k]` after it (tokenised jointly, `presentation.split_continuations`); `video` the
    video's path (frames and timing: the adapter's `frames.FrameSource`), None for a blind question;
    `add_special_tokens`: whether the tokenizer added its own (a base model's BOS) to `context`."""

    qid: str
    prompt: str
    continuations: tuple[str, ...]
    scored: tuple[str, ...]
    context: tuple[int, ...]
    options: tuple[tuple[int, ...], ...]
    video: str | None = None
    add_special_tokens: bool = False


@dataclass(frozen=True)
class Batches:
    """How an engine meets the code around it: `skip(indices)` true means the batch need not be scored (its results
    stay None); `scored(indices, results)` is called after each batch scored. Either may be None (not asked)."""

    skip: Callable[[list[int]], bool] | None = None
    scored: Callable[[list[int], list[Scores]], None] | None = None



def group_requests(requests, task_dict) -> Grouped:
    """Step 1 (module docstring). `task_dict`: lmms-eval's `lm.task_dict` (task -> split -> documents)."""
    by_key: dict[tuple, int] = {}
    documents: list[tuple[str, int, str, tuple[str, ...], str, list[str]]] = []
    targets: list[tuple[int, str]] = []
    for request in requests:
        context, continuation, doc_to_visual, doc_id, task, split = request.args
        key = (task, split, doc_id, context)
        if key not in by_key:
            doc = task_dict[task][split][doc_id]
            qid = f"{task} doc {doc_id}" + (f" ({doc['question_id']})" if "question_id" in doc else "")
            by_key[key] = len(documents)
            documents.append((task, doc_id, context, tuple(doc_to_visual(doc)), qid, []))
        if callable(continuation):  # `loglikelihood` tasks pass a function of the document
            continuation = continuation(task_dict[task][split][doc_id])
        asked = documents[by_key[key]][5]
        if continuation not in asked:
            asked.append(continuation)
        targets.append((by_key[key], continuation))
    distinct: dict[tuple, int] = {}
    questions: list[DistinctQuestion] = []
    of_document = []
    for task, doc_id, context, visuals, qid, asked in documents:
        same = (context, tuple(sorted(asked)), tuple(map(str, visuals)))
        if same not in distinct:
            distinct[same] = len(questions)
            questions.append(DistinctQuestion(task, doc_id, context, visuals, qid, tuple(asked)))
        of_document.append(distinct[same])
    return Grouped(questions, of_document, [(of_document[d], c) for d, c in targets])


def question_keys(questions: Sequence[Presented]) -> list[str]:
    """The durable store's key of each presented question (`durable.question_key`), each video identified once."""
    videos: dict[str, object] = {}
    for q in questions:
        if q.video is not None and q.video not in videos:
            videos[q.video] = identity.video_identity(q.video)
    return [durable.question_key(q.prompt, q.continuations, q.scored, q.context, q.options,
                                 [] if q.video is None else [videos[q.video]]) for q in questions]


def values_of(question: Presented, scores: Scores) -> dict[str, Value]:
    """{continuation: (loss, is_greedy, string scored)} of a question from its engine scores."""
    return {c: (loss, greedy, s) for c, s, (loss, greedy) in zip(question.continuations, question.scored, scores,
                                                                  strict=True)}


def scored_through_store(score: Callable[[Sequence[Presented], Batches], list[Scores | None]],
                         questions: Sequence[Presented], store: durable.ScoreStore | None,
                         keys: Sequence[str]
                         ) -> tuple[list[dict[str, Value]], list[bool]]:
    """Step 4 (module docstring): each question's values, and whether they came from the store. `keys`: the
    questions' `question_keys` (unused without a store)."""
    if store is None:
        return [values_of(q, s) for q, s in zip(questions, score(questions, Batches()), strict=True)], \
            [False] * len(questions)
    stored = {i: found for i, key in enumerate(keys)
              if (found := store.get(key)) is not None and all(c in found for c in questions[i].continuations)}

    def persist(indices: list[int], results: list[Scores]) -> None:
        store.add({keys[i]: values_of(questions[i], scores) for i, scores in zip(indices, results, strict=True)})

    skip = (lambda part: all(i in stored for i in part)) if stored else None
    results = score(questions, Batches(skip=skip, scored=persist))
    # a stored question re-scored in a batch with new ones keeps its stored value (the store writes it once)
    values = [{c: tuple(stored[i][c]) for c in q.continuations} if i in stored else values_of(q, scores)
              for i, (q, scores) in enumerate(zip(questions, results, strict=True))]
    return values, [scores is None for scores in results]


def in_request_order(grouped: Grouped, values: Sequence[dict[str, Value]]) -> list[Value]:
    """Every request's value, in input order (padding copies get their original's)."""
    return [values[question][continuation] for question, continuation in grouped.targets]
