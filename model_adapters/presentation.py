"""What a model is shown of a question, whatever engine scores it (step 2 of `model_adapters.pipeline`).

A text-only model (`present_text`) gets the task's prompt in one user turn of its chat template when it has one
(then the template supplies BOS); a base model without a chat template is asked as lm-evaluation-harness asks base
models: the prompt, then "\\nAnswer:", with the tokenizer's own special tokens (BOS where it adds one). A
vision-language model (`present_video`) gets one user turn holding the video first, then the text (the project's
prompt contract); blind questions send the same messages without the video. Each option is scored after the
template's assistant header, with a leading space where the prompt does not end in whitespace (" A").

The chat template and the tokenizer are the engine's (`engines.Templates`): a checkpoint's own through transformers
(`TokenizerTemplates`), or a server's.
"""

from __future__ import annotations

from collections.abc import Sequence

from lmms_eval_tasks.errors import VisdepError
from model_adapters.engines import Templates
from model_adapters.pipeline import DistinctQuestion, Presented, ScoringError

ANSWER_CUE = "\nAnswer:"


class TokenizerTemplates:
    """`engines.Templates` of a transformers tokenizer or processor (the processor's chat template, its tokenizer)."""

    def __init__(self, tokenizer_or_processor) -> None:
        self.source = tokenizer_or_processor
        self.tokenizer = getattr(tokenizer_or_processor, "tokenizer", tokenizer_or_processor)

    def render(self, conversations: Sequence[list[dict]]) -> list[str | None]:
        if not getattr(self.source, "chat_template", None):
            return [None] * len(conversations)
        return [self.source.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                for messages in conversations]

    def tokenize(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]]


def answer_strings(prompt: str, continuations: Sequence[str]) -> list[str]:
    """The strings scored after `prompt`: each continuation with a leading space where the prompt does not end
    in whitespace (a base model's "...\\nAnswer:", or a chat template whose generation prompt ends in
    "Assistant:"), as lm-evaluation-harness scores base models on MMLU (" A", not "A")."""
    if not prompt or prompt[-1].isspace():
        return list(continuations)
    return [c if c[:1].isspace() else " " + c for c in continuations]


def split_continuations(encoded: Sequence[Sequence[int]], prompt: str, continuations: Sequence[str], qid: str,
                        ) -> tuple[list[int], list[list[int]]]:
    """Context tokens and each continuation's tokens from `encoded` = [tok(prompt), tok(prompt + c) for each c]:
    tok(prompt + c) minus the first len(tok(prompt)).

    Tokenising jointly keeps merges inside the continuation as the model would see them (lm-eval's rule).
    The rule needs tok(prompt + c) to start with tok(prompt); a tokenizer that merges across the boundary
    would make the shared context differ from what the model sees for that option, so that is an error."""
    context = list(encoded[0])
    for c, ids in zip(continuations, encoded[1:], strict=True):
        if list(ids[:len(context)]) != context:
            raise ScoringError(f"question {qid}: the tokenizer merges the end of the prompt {prompt[-20:]!r} with the "
                               f"option {c!r}; the option's tokens cannot be separated from the context")
    return context, [list(ids[len(context):]) for ids in encoded[1:]]


def chat_prompt(templates: Templates, context: str) -> tuple[str, bool]:
    """(text the options are scored after, whether the tokenizer must add its special tokens): one user turn of the
    chat template when there is one (it writes BOS itself), else the context and the answer cue "\\nAnswer:"."""
    [prompt] = templates.render([[{"role": "user", "content": context}]])
    return (prompt, False) if prompt is not None else (context + ANSWER_CUE, True)


def _presented(templates: Templates, questions: Sequence[DistinctQuestion], prompts: Sequence[str],
               special: Sequence[bool], videos: Sequence[str | None]) -> list[Presented]:
    """The questions presented after their prompts: every question's texts tokenised in one call per value of
    `special` (an engine may run them at once), then split into context and options."""
    scored = [answer_strings(prompt, q.continuations) for q, prompt in zip(questions, prompts, strict=True)]
    encoded: list[list[list[int]]] = [[] for _ in questions]
    for flag in sorted(set(special)):
        members = [i for i, s in enumerate(special) if s == flag]
        texts = [[prompts[i]] + [prompts[i] + c for c in scored[i]] for i in members]
        flat = iter(templates.tokenize([t for group in texts for t in group], flag))
        for i, group in zip(members, texts, strict=True):
            encoded[i] = [next(flat) for _ in group]
    out = []
    for q, prompt, strings, ids, flag, video in zip(questions, prompts, scored, encoded, special, videos, strict=True):
        context, options = split_continuations(ids, prompt, strings, q.qid)
        out.append(Presented(q.qid, prompt, tuple(q.continuations), tuple(strings), tuple(context),
                             tuple(map(tuple, options)), video, flag))
    return out


def present_text(templates: Templates, questions: Sequence[DistinctQuestion], adapter: str) -> list[Presented]:
    """What a text-only model is shown of each question (`pipeline.Presented`)."""
    for q in questions:
        if q.visuals:
            raise VisdepError(f"{q.qid}: {adapter} scores a text-only model but task {q.task!r} gives it "
                              f"{list(q.visuals)!r}; run the blind task")
    rendered = templates.render([[{"role": "user", "content": q.context}] for q in questions])
    prompts = [q.context + ANSWER_CUE if p is None else p for q, p in zip(questions, rendered, strict=True)]
    return _presented(templates, questions, prompts, [p is None for p in rendered], [None] * len(questions))


def user_message(context: str, with_video: bool) -> list[dict]:
    """The one user turn: the video first, then the text (the project's prompt contract)."""
    content = ([{"type": "video"}] if with_video else []) + [{"type": "text", "text": context}]
    return [{"role": "user", "content": content}]


def present_video(templates: Templates, questions: Sequence[DistinctQuestion], adapter: str) -> list[Presented]:
    """What a vision-language model is shown of each question (`pipeline.Presented`): the chat template over
    `user_message`, the video's path (its frames and timing: `frames.FrameSource`)."""
    for q in questions:
        if len(q.visuals) > 1 or any(not isinstance(v, str) for v in q.visuals):
            raise VisdepError(f"{q.qid}: {adapter} takes one video path per question, got {list(q.visuals)!r}")
    videos = [q.visuals[0] if q.visuals else None for q in questions]
    prompts = templates.render([user_message(q.context, v is not None) for q, v in zip(questions, videos, strict=True)])
    if any(p is None for p in prompts):
        raise VisdepError(f"{adapter}: the model has no chat template, which a vision-language model needs")
    return _presented(templates, questions, prompts, [False] * len(questions), videos)
