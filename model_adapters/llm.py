"""`visdep_llm`: any Hugging Face causal LM (Llama 3.1, Mistral, Qwen2.5, DeepSeek, GGUF files), text only.

    lmms-eval --model visdep_llm --model_args pretrained=meta-llama/Llama-3.1-8B-Instruct \\
        --tasks visdep_blind --log_samples --output_path runs/

The task's prompt goes in one user turn of the model's chat template when it has one (then the
template supplies BOS). A base model without a chat template is asked as lm-evaluation-harness asks
base models: the prompt, then "\nAnswer:", with the tokenizer's own special tokens (BOS where it adds
one); the options are scored with a leading space (" A").
"""

from __future__ import annotations

from model_adapters.base import ANSWER_CUE, ScoringAdapter, answer_strings, continuation_tokens
from model_adapters.scoring import Question


def chat_prompt(tokenizer, context: str) -> tuple[str, bool]:
    """(text the options are scored after, whether the tokenizer must add its special tokens):
    one user turn of the chat template when there is one (it writes BOS itself), else the context and
    the answer cue "\nAnswer:"."""
    if tokenizer.chat_template:
        messages = [{"role": "user", "content": context}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), False
    return context + ANSWER_CUE, True


class VisdepLLM(ScoringAdapter):
    adapter_name = "visdep_llm"

    def load_model(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.pretrained, **self.processor_kwargs)
        return AutoModelForCausalLM.from_pretrained(self.pretrained, **self.model_kwargs)

    def build_questions(self, requests) -> list[Question]:
        questions = []
        for r in requests:
            if r.visuals:
                raise ValueError(f"{r.qid}: visdep_llm is text-only but task {r.task!r} gives it {r.visuals!r}; "
                                 "run the blind task")
            prompt, special = chat_prompt(self.tokenizer, r.context)
            r.prompt, r.scored = prompt, answer_strings(prompt, r.continuations)
            context, continuations = continuation_tokens(self.tokenizer, prompt, r.scored, special, r.qid)
            questions.append(Question(r.qid, None, context, continuations))
        return questions
