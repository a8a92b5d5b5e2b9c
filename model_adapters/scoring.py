"""The scoring core shared by `visdep_vlm` and `visdep_llm`: exact option log-likelihoods, prefix once.

A question is a token sequence in three parts, each run once and reused through its key/value cache:

    prefix (shared by the questions of one video)  ->  tail (the question's own prompt text)  ->  continuations

1. prefix: the chat-templated prompt up to the end of the video (system turn, user header, frames),
   run once per video at batch 1; empty for text-only prompts. Its inputs are prepared (video decoded,
   processor run) ahead of the model by worker threads (`model_adapters.prefetch`) and moved to the
   device in order.
2. tails: the rest of each question's prompt (question, options, instruction, assistant header),
   up to `batch_size` questions of one prefix per forward, right-padded, on copies of the prefix cache.
   The logits at each tail's last token predict every option's first token.
3. continuations: an option of n tokens needs n - 1 more positions (the logits of its last token are
   never used), up to `batch_size` options per forward on copies of their question's cache. A
   one-token option (letter scoring) needs no forward at all.

A prefix that serves a single question (one question per video) is run together with its tail in
one forward: nothing would be reused, and a second forward and a cache copy would only cost.

Padding sits at the end of a row and is masked for later rows, and position ids are explicit, so
every scored token sees exactly the tokens before it in its own sequence: the result equals one
full forward per option up to float rounding.

For option tokens c_1..c_n after context x:  loss = -sum_j log p(c_j | x, c_<j),
is_greedy = all_j argmax p(. | x, c_<j) == c_j  (logits at position t predict the token at t + 1).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

import torch
from loguru import logger
from tqdm import tqdm

from model_adapters.pipeline import OutOfMemory, ScoringError
from model_adapters.prefetch import Prefetch, PreparedInOrder
from model_adapters.transformers_api import cache_argument, cache_of


@dataclass(frozen=True)
class Prefix:
    """The shared start of some questions, built in two steps. `prepare()`: the CPU part (decode the video,
    run the processor) -> host-side inputs; it may run ahead of the model on a worker thread.
    `to_model(prepared)`: the device part, in order on the model's thread -> (model inputs at batch 1
    including `input_ids` and `position_ids`, position of the first token after the prefix).
    `prefetch`: how far ahead prefixes may be prepared (None: each when the model reaches it)."""

    key: Hashable
    prepare: Callable[[], object]
    to_model: Callable[[object], tuple[dict, int]]
    prefetch: Prefetch | None = None


@dataclass
class Question:
    qid: str  # named in errors
    prefix: Prefix | None
    tail: list[int]  # context tokens after the prefix
    continuations: list[list[int]]  # tokens of each option


@dataclass
class _Branch:
    """A cache and the state a next forward continues from, one row per sequence."""

    cache: object | None  # transformers Cache, or None before any token
    mask: torch.Tensor  # (rows, cached length): 0 for padding
    next_position: torch.Tensor  # (rows,)


def fork_cache(cache, rows: torch.Tensor):
    """A cache holding the given batch rows of `cache`; `cache` itself is left as it was.

    Cache layers grow by `torch.cat` into new tensors, so copies of the layer objects may share
    the old tensors safely."""
    forked = copy.copy(cache)
    forked.layers = [copy.copy(layer) for layer in cache.layers]
    forked.batch_select_indices(rows)
    return forked


def _pad(rows: Sequence[Sequence[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _extend(model, branch: _Branch, rows: torch.Tensor, tokens: Sequence[Sequence[int]], logits_to_keep=0):
    """Run right-padded `tokens` after the given rows of `branch`; return (logits, new branch)."""
    device = branch.mask.device
    ids, new_mask = _pad(tokens, device)
    width = ids.shape[1]
    cache = None if branch.cache is None else fork_cache(branch.cache, rows)
    mask = torch.cat([branch.mask[rows], new_mask], dim=1)
    start = branch.next_position[rows]
    positions = start[:, None] + torch.arange(width, device=device)[None]
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(cache), use_cache=True,
                logits_to_keep=logits_to_keep)
    lengths = new_mask.sum(dim=1)
    return out.logits, _Branch(cache_of(out), mask, start + lengths)


def _prefix_branch(model, built: tuple[dict, int] | None, device) -> _Branch:
    """The branch after a prefix (`built`: its model inputs and next position), or an empty one for none."""
    if built is None:
        return _Branch(None, torch.zeros(1, 0, dtype=torch.long, device=device),
                       torch.zeros(1, dtype=torch.long, device=device))
    inputs, next_position = built
    length = inputs["input_ids"].shape[1]
    # Only the cache is needed: the tails' logits predict the options.
    out = model(**inputs, use_cache=True, logits_to_keep=1)
    return _Branch(cache_of(out), torch.ones(1, length, dtype=torch.long, device=device),
                   torch.tensor([next_position], device=device))


def _chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _check(questions: Sequence[Question]) -> None:
    for q in questions:
        if not q.tail:
            raise ScoringError(f"question {q.qid}: no prompt text after the shared prefix")
        if not q.continuations or any(not c for c in q.continuations):
            raise ScoringError(f"question {q.qid}: an option has no tokens after the context")


def _tails(model, prefix_branch: _Branch, questions: Sequence[Question]) -> tuple[torch.Tensor, _Branch]:
    """Step 2 for questions sharing `prefix_branch`: (log-probs of each option's first token (B, vocab),
    the branch the options continue from)."""
    device = prefix_branch.mask.device
    last = [len(q.tail) - 1 for q in questions]
    keep = sorted(set(last))  # only the logits at each row's last real token
    logits, branch = _extend(model, prefix_branch, torch.zeros(len(questions), dtype=torch.long, device=device),
                             [q.tail for q in questions], logits_to_keep=torch.tensor(keep, device=device))
    column = [keep.index(i) for i in last]
    return torch.log_softmax(logits[torch.arange(len(questions)), column].float(), dim=-1), branch


def _prefix_and_tail(model, question: Question, built: tuple[dict, int], device) -> tuple[torch.Tensor, _Branch]:
    """Steps 1 and 2 in one forward, for a prefix that serves a single question (nothing to share)."""
    inputs, next_position = built
    tail = torch.tensor([question.tail], device=device)
    n = tail.shape[1]
    positions = inputs["position_ids"]
    tail_positions = (next_position + torch.arange(n, device=device)).expand(*positions.shape[:-1], n)
    fused = dict(inputs, input_ids=torch.cat([inputs["input_ids"], tail], dim=1),
                 attention_mask=torch.ones(1, inputs["input_ids"].shape[1] + n, dtype=torch.long, device=device),
                 position_ids=torch.cat([positions, tail_positions], dim=-1))
    if "mm_token_type_ids" in inputs:  # text after the video
        fused["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(tail)], dim=1)
    out = model(**fused, use_cache=True, logits_to_keep=1)
    branch = _Branch(cache_of(out), fused["attention_mask"], torch.tensor([next_position + n], device=device))
    return torch.log_softmax(out.logits[:, -1].float(), dim=-1), branch


def _options(model, questions: Sequence[Question], first: torch.Tensor, branch: _Branch, batch_size: int):
    """Step 3 and the sums: (loss, is_greedy) for every option of `questions` (rows of `branch`)."""
    device = branch.mask.device
    rows = [(b, k) for b, q in enumerate(questions) for k, c in enumerate(q.continuations) if len(c) > 1]
    later: dict[tuple[int, int], torch.Tensor] = {}
    for part in _chunks(rows, batch_size):
        index = torch.tensor([b for b, _ in part], device=device)
        out, _ = _extend(model, branch, index, [questions[b].continuations[k][:-1] for b, k in part])
        logprobs = torch.log_softmax(out.float(), dim=-1)
        for i, (b, k) in enumerate(part):
            later[b, k] = logprobs[i, : len(questions[b].continuations[k]) - 1]

    results = []
    for b, q in enumerate(questions):
        scores = []
        for k, tokens in enumerate(q.continuations):
            target = torch.tensor(tokens, device=device)
            dist = first[b][None] if len(tokens) == 1 else torch.cat([first[b][None], later[b, k]])
            token_logprobs = dist.gather(-1, target[:, None])[:, 0]
            total = float(token_logprobs.sum())
            if not math.isfinite(total):
                hint = "" if model.dtype == torch.float32 else "; try dtype=float32"
                raise ScoringError(f"question {q.qid}: log-likelihood of option {k} is {total} (not finite){hint}")
            scores.append((-total, bool((dist.argmax(dim=-1) == target).all())))
        results.append(scores)
    return results


def _is_oom(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def score_questions(model, questions: Sequence[Question], batch_size: int, device, progress: bool = True,
                    on_scored: Callable[[list[int], list[list[tuple[float, bool]]]], None] | None = None,
                    done: Callable[[list[int]], bool] | None = None,
                    ) -> list[list[tuple[float, bool]] | None]:
    """(loss, is_greedy) per option of every question, in the order given.

    Questions with the same prefix key share one prefix forward; they are scored `batch_size` at a time.
    `on_scored(indices, results)` is called after every batch with the questions it scored (the durable store
    writes them there, so a kill loses at most the batch in flight). A batch for which `done(indices)` is true
    is not scored and its results stay None (a resumed run: the store has them); a prefix none of whose
    batches is scored is not prepared (its video is not decoded). The batches are the same whatever is done,
    so the questions scored get the very values an uninterrupted run gives them: float sums depend on which
    questions share a forward. Prefixes are prepared ahead as their `prefetch` says, and taken in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    groups: dict[Hashable, list[int]] = {}
    for i in sorted(range(len(questions)), key=lambda i: len(questions[i].tail)):  # similar lengths, less padding
        groups.setdefault(None if questions[i].prefix is None else questions[i].prefix.key, []).append(i)
    plan = [(members, [part for part in map(list, _chunks(members, batch_size)) if done is None or not done(part)])
            for members in groups.values()]
    prefixes = [questions[members[0]].prefix for members, todo in plan
                if todo and questions[members[0]].prefix is not None]
    prefetch = next((p.prefetch for p in prefixes if p.prefetch is not None), None)
    results: list[list[tuple[float, bool]] | None] = [None] * len(questions)
    bar = tqdm(total=len(questions), desc="visdep scoring", unit="question", disable=not progress)
    with torch.inference_mode(), PreparedInOrder([p.prepare for p in prefixes], prefetch) as prepared:
        for members, todo in plan:
            bar.update(len(members) - sum(map(len, todo)))
            if not todo:  # neither the prefix nor the video is needed
                continue
            current = questions[members[0]]
            try:
                group = [questions[i] for i in members]
                _check(group)
                built = None if current.prefix is None else current.prefix.to_model(prepared.take())
                if current.prefix is not None and len(members) == 1:
                    first, branch = _prefix_and_tail(model, current, built, device)
                    results[members[0]] = _options(model, group, first, branch, batch_size)[0]
                    if on_scored is not None:
                        on_scored(members, [results[members[0]]])
                    bar.update(1)
                else:
                    prefix_branch = _prefix_branch(model, built, device)
                    for part in todo:
                        current = questions[part[0]]
                        chunk = [questions[i] for i in part]
                        first, branch = _tails(model, prefix_branch, chunk)
                        for i, scores in zip(part, _options(model, chunk, first, branch, batch_size), strict=True):
                            results[i] = scores
                        if on_scored is not None:
                            on_scored(part, [results[i] for i in part])
                        bar.update(len(part))
                if current.prefix is not None:  # a video done
                    bar.set_postfix_str(prepared.summary())
            except Exception as e:
                if not _is_oom(e):
                    raise
                hint = (f"batch_size={batch_size // 2}" if batch_size > 1
                        else "fewer frames (max_frames), dtype=bfloat16, or device_map=auto over several GPUs")
                raise OutOfMemory(f"out of memory scoring question {current.qid} with batch_size={batch_size} "
                                  f"on {device}: try {hint}") from e
    bar.close()
    if prefixes:
        logger.info(f"visdep scoring: {prepared.report()}")
    return results
