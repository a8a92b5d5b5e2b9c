"""`visdep_llm`: any Hugging Face causal LM (Llama 3.1, Mistral, Qwen2.5, DeepSeek, GGUF files), text only.

    lmms-eval --model visdep_llm --model_args pretrained=meta-llama/Llama-3.1-8B-Instruct \\
        --tasks visdep_blind --log_samples --output_path runs/

The task's prompt goes in one user turn of the model's chat template when it has one (then the
template supplies BOS). A base model without a chat template is asked as lm-evaluation-harness asks
base models: the prompt, then "\nAnswer:", with the tokenizer's own special tokens (BOS where it adds
one); the options are scored with a leading space (" A").
"""

from __future__ import annotations

from collections.abc import Sequence

from model_adapters.base import ANSWER_CUE, ScoringAdapter, answer_strings, continuation_tokens
from model_adapters.pipeline import Batches, DistinctQuestion, Presented, Scores
from model_adapters.scoring import Question, score_questions


def chat_prompt(tokenizer, context: str) -> tuple[str, bool]:
    """(text the options are scored after, whether the tokenizer must add its special tokens):
    one user turn of the chat template when there is one (it writes BOS itself), else the context and
    the answer cue "\nAnswer:"."""
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": context}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), False
    return context + ANSWER_CUE, True


def present_text(tokenizer, questions: Sequence[DistinctQuestion], adapter_name: str = "visdep_llm",
                 ) -> list[Presented]:
    """What a text-only model is shown of each question (`pipeline.Presented`), for any engine."""
    out = []
    for q in questions:
        if q.visuals:
            raise ValueError(f"{q.qid}: {adapter_name} is text-only but task {q.task!r} gives it {list(q.visuals)!r}; "
                             "run the blind task")
        prompt, special = chat_prompt(tokenizer, q.context)
        scored = answer_strings(prompt, q.continuations)
        context, options = continuation_tokens(tokenizer, prompt, scored, special, q.qid)
        out.append(Presented(q.qid, prompt, tuple(q.continuations), tuple(scored), tuple(context),
                             tuple(map(tuple, options)), None, special))
    return out


class VisdepLLM(ScoringAdapter):
    adapter_name = "visdep_llm"

    def load_model(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained, **self.processor_kwargs)
        return AutoModelForCausalLM.from_pretrained(self.pretrained, **self.model_kwargs)

    def present(self, questions: Sequence[DistinctQuestion]) -> list[Presented]:
        return present_text(self.tokenizer, questions, self.adapter_name)

    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        """The Hugging Face engine: the scoring core on the presented tokens."""
        return score_questions(self._model, [Question(q.qid, None, list(q.context), [list(o) for o in q.options])
                                             for q in questions], self.batch_size_per_device, self._device,
                               progress=self.rank == 0, on_scored=batches.scored, done=batches.skip)
