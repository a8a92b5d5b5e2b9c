"""`visdep_vlm`: Hugging Face vision-language models (Qwen2-VL, Qwen2.5-VL, HF-native InternVL, LLaVA-OneVision).

    lmms-eval --model visdep_vlm --model_args pretrained=Qwen/Qwen2.5-VL-7B-Instruct,max_frames=16 \\
        --tasks visdep_blind,visdep_video --log_samples --output_path runs/

The user turn holds the video (frames sampled uniformly, `max_frames`; or the ladder's conditions: `frames=middle`,
`frame_order=shuffled|reversed`, docs/ladder.md) and then the task's
prompt; the model's own chat template adds the assistant header, after which each option is
scored (with a leading space where the header does not end in whitespace). Blind tasks send the
same messages without the video. The frames reach the processor with their timing
(`video_metadata`: source fps, total frames, sampled indices) and are not sampled again there;
frame folders (MM-AU) are timed at `frame_folder_fps` (default 30, see `model_adapters.frames`).

While the model scores one video's questions, `decode_workers` threads (default: one per core but
one, at most 16; 0: decode in the scoring loop) decode the next videos and run the processor on
them (`model_adapters.prefetch`), at most `prefetch_videos` videos (default twice the workers) and
`prefetch_mb` MiB of processed frames (default 768) ahead. The scores are the same whatever these are.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from functools import partial

from loguru import logger

from model_adapters.base import ScoringAdapter, answer_strings, continuation_tokens
from model_adapters.families import family_of, prefix_positions
from model_adapters.frames import frame_source
from model_adapters.pipeline import Batches, DistinctQuestion, Presented, Scores
from model_adapters.prefetch import DEFAULT_PREFETCH_MB, Prefetch, decoder_threads_for
from model_adapters.scoring import Prefix, Question, ScoringError, score_questions
from model_adapters.settings import DEFAULT_FRAME_FOLDER_FPS, DEFAULT_MAX_FRAMES, ORIGINAL_ORDER, UNIFORM_FRAMES


def user_message(context: str, with_video: bool) -> list[dict]:
    """The one user turn: the video first, then the text (the project's prompt contract)."""
    content = ([{"type": "video"}] if with_video else []) + [{"type": "text", "text": context}]
    return [{"role": "user", "content": content}]


def present_video(processor, questions: Sequence[DistinctQuestion], adapter_name: str = "visdep_vlm",
                  ) -> list[Presented]:
    """What a vision-language model is shown of each question (`pipeline.Presented`), for any engine: the processor's
    chat template over `user_message`, the video's path (its frames and timing: `frames.FrameSource`)."""
    out = []
    for q in questions:
        if len(q.visuals) > 1 or any(not isinstance(v, str) for v in q.visuals):
            raise ValueError(f"{q.qid}: {adapter_name} takes one video path per question, got {list(q.visuals)!r}")
        video = q.visuals[0] if q.visuals else None
        prompt = processor.apply_chat_template(user_message(q.context, video is not None), add_generation_prompt=True,
                                               tokenize=False)
        scored = answer_strings(prompt, q.continuations)
        context, options = continuation_tokens(processor.tokenizer, prompt, scored, False, q.qid)
        out.append(Presented(q.qid, prompt, tuple(q.continuations), tuple(scored), tuple(context),
                             tuple(map(tuple, options)), video))
    return out


def on_device(encoding, device, dtype) -> dict:
    """A processor's output as model inputs: on `device`, the pixels (`pixel_values*`) in the model's dtype, every
    other tensor in its own: ids and grids int64, Qwen2.5-VL's `second_per_grid_ts` float32, the timing its
    temporal positions are computed from (in bf16 they would move by up to 15: docs/adapters.md)."""
    return {k: v.to(device, dtype=dtype if k.startswith("pixel_values") else None) for k, v in encoding.items()}


class VisdepVLM(ScoringAdapter):
    adapter_name = "visdep_vlm"
    own_arguments = ("max_frames", "frame_folder_fps", "frames", "frame_order", "decode_workers", "prefetch_videos",
                     "prefetch_mb")

    def __init__(self, pretrained: str, max_frames: int = DEFAULT_MAX_FRAMES,
                 frame_folder_fps: float = DEFAULT_FRAME_FOLDER_FPS, frames: str = UNIFORM_FRAMES,
                 frame_order: str = ORIGINAL_ORDER, decode_workers: int | str | None = None,
                 prefetch_videos: int | None = None, prefetch_mb: float = DEFAULT_PREFETCH_MB,
                 **kwargs) -> None:
        try:
            self.prefetch = Prefetch.of(decode_workers, prefetch_videos, prefetch_mb)
        except ValueError as e:
            raise ValueError(f"{self.adapter_name}: {e}") from None
        # FFmpeg's decoder threads return the same frames whatever their number (tests/adapters/test_frames.py)
        self.frames = frame_source(self.adapter_name, max_frames, frame_folder_fps, frames, frame_order,
                                   decoder_threads=decoder_threads_for(self.prefetch.workers))
        self._thread_processors = threading.local()
        super().__init__(pretrained, **kwargs)

    def load_model(self):
        from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

        # an unsupported family fails before any weight is read
        self.family = family_of(AutoConfig.from_pretrained(self.pretrained, **self.processor_kwargs))
        self.processor = AutoProcessor.from_pretrained(self.pretrained, **self.processor_kwargs)
        self._owner_thread = threading.get_ident()
        self.tokenizer = self.processor.tokenizer
        return AutoModelForImageTextToText.from_pretrained(self.pretrained, **self.model_kwargs)

    def score_settings(self) -> dict:
        return {**super().score_settings(), **self.frames.settings()}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.frames.settings().items())
        return f"VisdepVLM(pretrained={self.pretrained!r}, {shown})"

    def _processor_here(self):
        """The processor for the calling thread: the adapter's own on the thread that built it, a copy on each
        worker thread (a tokenizer is not safe to call from several threads at once)."""
        if threading.get_ident() == self._owner_thread:
            return self.processor
        local = self._thread_processors
        if getattr(local, "processor", None) is None:
            local.processor = copy.deepcopy(self.processor)
        return local.processor

    def _prepare_prefix(self, video: str, prefix_text: str):
        """The CPU part of a video prefix, on any thread: the video decoded and sampled (cached), the processor's
        encoding of the prompt up to the end of the video (tensors on the host)."""
        frames, metadata = self.frames(video)
        return self._processor_here()(text=[prefix_text], videos=[frames], video_metadata=[metadata],
                                      do_sample_frames=False, return_tensors="pt", add_special_tokens=False)

    def _prefix_to_model(self, encoding) -> tuple[dict, int]:
        """The device part, on the model's thread: the encoding as model inputs with their position ids."""
        inputs = on_device(encoding, self._device, self._model.dtype)
        positions, next_position = prefix_positions(self.family, self._model, inputs)
        inputs["position_ids"] = positions
        return inputs, next_position

    def present(self, questions: Sequence[DistinctQuestion]) -> list[Presented]:
        return present_video(self.processor, questions, self.adapter_name)

    def hf_questions(self, questions: Sequence[Presented]) -> list[Question]:
        """The scoring core's questions: a video question's prompt cut after the family's video marker, the part
        before it (system turn, user header, frames) the prefix shared by that video's questions."""
        out = []
        for q in questions:
            context, prefix, tail = list(q.context), None, list(q.context)
            if q.video is not None:
                end = q.prompt.rfind(self.family.video_end)
                if end < 0:
                    raise ScoringError(f"{q.qid}: the chat template of {self.pretrained} did not place the video "
                                       f"marker {self.family.video_end!r} in {q.prompt!r}")
                prefix_text = q.prompt[: end + len(self.family.video_end)]
                prefix_ids = self.tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
                if context[: len(prefix_ids)] != prefix_ids:
                    raise ScoringError(f"{q.qid}: cutting the prompt after {self.family.video_end!r} changes its "
                                       "tokens; the video prefix cannot be shared")
                prefix = Prefix((q.video, prefix_text), partial(self._prepare_prefix, q.video, prefix_text),
                                self._prefix_to_model, self.prefetch)
                tail = context[len(prefix_ids):]
            out.append(Question(q.qid, prefix, tail, [list(o) for o in q.options]))
        return out

    def score(self, questions: Sequence[Presented], batches: Batches) -> list[Scores | None]:
        """The Hugging Face engine: the scoring core, each video's prefix run once for its questions."""
        return score_questions(self._model, self.hf_questions(questions), self.batch_size_per_device, self._device,
                               progress=self.rank == 0, on_scored=batches.scored, done=batches.skip)

    def after_scoring(self, n_questions: int) -> None:
        decodes = self.frames.decodes
        logger.info(f"visdep_vlm rank {self.rank}: {n_questions} questions scored; {len(decodes)} videos, "
                    f"{sum(decodes.values())} decodes")

