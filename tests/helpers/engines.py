"""A second scoring engine for the adapters, implementing only `score` (`model_adapters.pipeline`): what a new engine
(vLLM) is given. It scores each presented question by the naive procedure, one full forward of the prompt and one
option per option, from the question's templated prompt, the strings scored and the video's frames and timing (the
adapter's `FrameSource`), and reports each question as a batch of its own. Everything else (grouping, presenting,
the durable store, the order of the results) is the adapters' own code."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model_adapters.adapter import VisdepLLM, VisdepVLM
from model_adapters.pipeline import Batches, Presented, Scores
from tests.helpers.naive import full_forward_logits, reference_inputs


class NaiveScoring:
    @torch.inference_mode()
    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        processor = getattr(self.engine, "processor", None) or self.engine.tokenizer
        results: list[Scores | None] = []
        for i, q in enumerate(questions):
            if batches.skip is not None and batches.skip([i]):
                results.append(None)
                continue
            video = None if q.video is None else self.engine.frames(q.video)
            n_context = reference_inputs(self.model, processor, q.prompt, q.add_special_tokens, video)["input_ids"]
            scores = []
            for text in q.scored:
                inputs = reference_inputs(self.model, processor, q.prompt + text, q.add_special_tokens, video)
                target = inputs["input_ids"][0, n_context.shape[1]:]
                dist = torch.log_softmax(full_forward_logits(self.model, inputs)[n_context.shape[1] - 1: -1], dim=-1)
                scores.append((-dist.gather(-1, target[:, None]).sum().item(), bool((dist.argmax(-1) == target).all())))
            results.append(scores)
            if batches.scored is not None:
                batches.scored([i], [scores])
        return results


class NaiveLLM(NaiveScoring, VisdepLLM):
    pass


class NaiveVLM(NaiveScoring, VisdepVLM):
    pass
