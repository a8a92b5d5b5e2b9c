"""A panel that learns: tiny checkpoints trained on CPU on the planted generator's training split.

Each model starts as a tiny random checkpoint (`visdep_metrics.demo.tiny`, transformers' own initialisation) and is
trained with AdamW on the same inputs the adapters score: the task's prompt in the model's chat template (VLMs:
the clip's frames sampled and timed as `visdep_vlm` samples them, in three of four examples; the rest blind),
and the loss on the tokens of the correct option's text as scored after that prompt (option scoring). So the
text LLMs learn the textual give-aways and the VLMs learn to see the colour of the crossing vehicle (and the
give-aways too, as real VLMs do). VLMs see the colour questions half the time: in the plain mix (one in four)
a tiny VLM learns the give-aways long before it learns to look (seen: 0.3 on the colour questions after 1,000
steps, against 1.0 after 300 on colour questions alone).

Seeded, on one thread (so a checkpoint does not depend on the machine's cores), two checkpoints trained side
by side where the machine has two cores; a trained checkpoint is cached under a key of everything that
changes it and reused by later runs.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from loguru import logger

from visdep_metrics.demo.planted import FPS, PlantedConfig, training_examples

TRAINING_VERSION = 3  # bump when the training changes what a checkpoint learns
LEARNING_RATE = 1e-3
BATCH = 8


def _key(kind: str, steps: int, config: PlantedConfig, max_frames: int) -> str:
    import torch
    import transformers

    payload = {"kind": kind, "steps": steps, "config": asdict(config), "max_frames": max_frames,
               "version": TRAINING_VERSION, "lr": LEARNING_RATE, "batch": BATCH,
               "transformers": transformers.__version__, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _examples(processor, config: PlantedConfig, max_frames: int, vlm: bool):
    """Endless (prompt text, continuation, frames or None, VideoMetadata or None) in the adapters' own format."""
    from transformers.video_utils import VideoMetadata

    from lmms_eval_tasks.tasks import build_prompt
    from model_adapters.base import answer_strings
    from model_adapters.frames import sample_indices
    from model_adapters.llm import chat_prompt
    from model_adapters.vlm import user_message

    rng = np.random.default_rng([config.seed, 7])
    epoch = 1
    while True:
        for frames, q, options, answer in training_examples(config, seed_offset=epoch):
            if vlm and not q.startswith("What colour") and rng.random() < 2 / 3:
                continue  # VLMs see the colour questions, which need the frames, half the time
            prompt = build_prompt(q, options)
            with_video = vlm and rng.random() < 0.75
            if vlm:
                text = processor.apply_chat_template(user_message(prompt, with_video), add_generation_prompt=True,
                                                     tokenize=False)
            else:
                text, _ = chat_prompt(processor, prompt)
            continuation = answer_strings(text, [options[answer]])[0]
            if with_video:
                indices = sample_indices(len(frames), max_frames)
                metadata = VideoMetadata(total_num_frames=len(frames), fps=FPS,
                                         frames_indices=[int(i) for i in indices])
                yield text, continuation, np.ascontiguousarray(frames[indices]), metadata
            else:
                yield text, continuation, None, None
        epoch += 1


def _batch(processor, tokenizer, examples: list, special: bool):
    """Padded inputs and labels: only the continuation's tokens count."""
    texts = [t + c for t, c, _, _ in examples]
    videos = [f for _, _, f, _ in examples if f is not None]
    kwargs = {}
    if videos:
        if len(videos) != len(examples):  # one batch is all video or all blind
            raise ValueError("mixed batch")
        kwargs = {"videos": videos, "video_metadata": [m for _, _, _, m in examples], "do_sample_frames": False}
    encode = processor if kwargs or hasattr(processor, "tokenizer") else tokenizer
    enc = encode(text=texts, return_tensors="pt", padding=True, add_special_tokens=special, **kwargs)
    labels = enc["input_ids"].clone()
    labels[:] = -100
    for i, (t, c, _, _) in enumerate(examples):
        joint = tokenizer([t, t + c], add_special_tokens=special)["input_ids"]
        n = len(joint[1]) - len(joint[0])
        # the row's last n real tokens, wherever the processor pads (InternVL's pads on the left)
        real = enc["attention_mask"][i].nonzero()[:, 0][-n:]
        labels[i, real] = enc["input_ids"][i, real]
    return enc, labels


def train_checkpoint(kind: str, out_dir: Path, config: PlantedConfig, steps: int, max_frames: int) -> Path:
    """Train a tiny checkpoint of `kind` (a `visdep_metrics.demo.tiny` kind) for `steps` batches; its folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    from visdep_metrics.demo.tiny import VLM_KINDS, build_tiny

    vlm = kind in VLM_KINDS
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        path = build_tiny(kind, out_dir, size="demo", seed=config.seed)
        if vlm:
            processor = AutoProcessor.from_pretrained(path)
            tokenizer = processor.tokenizer
            model = AutoModelForImageTextToText.from_pretrained(path)
        else:
            processor = tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer.padding_side = "right"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        special = not vlm and not tokenizer.chat_template
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        stream = _examples(processor, config, max_frames, vlm)
        pending = {True: [], False: []}
        model.train()
        done = 0
        while done < steps:
            example = next(stream)
            group = pending[example[2] is not None]
            group.append(example)
            if len(group) < BATCH:
                continue
            enc, labels = _batch(processor, tokenizer, group, special)
            group.clear()
            loss = model(**enc, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
        model.eval()
    torch.set_num_threads(threads)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    logger.info(f"trained {kind} for {steps} steps in {time.perf_counter() - start:.0f} s "
                f"(last loss {float(loss):.3f})")
    return out_dir


def trained_checkpoint(kind: str, cache_dir: Path, config: PlantedConfig, steps: int, max_frames: int) -> Path:
    """The cached checkpoint of `kind` trained on `config`'s training split, training it if missing."""
    folder = cache_dir / f"{kind}-{_key(kind, steps, config, max_frames)}"
    if (folder / "trained.json").exists():
        return folder
    train_checkpoint(kind, folder, config, steps, max_frames)
    (folder / "trained.json").write_text(json.dumps({"kind": kind, "steps": steps, "config": asdict(config),
                                                     "max_frames": max_frames}, indent=1))
    return folder


def train_panel(kinds: tuple[str, ...], cache_dir: Path, config: PlantedConfig, llm_steps: int, vlm_steps: int,
                max_frames: int) -> dict[str, Path]:
    """{kind: trained checkpoint}, training the missing ones two at a time (forked, one thread each) on Linux."""
    from concurrent.futures import ProcessPoolExecutor

    from visdep_metrics.demo.tiny import VLM_KINDS
    from visdep_metrics.parallel import fork_context, usable_cores

    steps = {kind: vlm_steps if kind in VLM_KINDS else llm_steps for kind in kinds}
    context = fork_context()
    if context is None or usable_cores() < 2:
        return {kind: trained_checkpoint(kind, cache_dir, config, steps[kind], max_frames) for kind in kinds}
    # the slowest first, so that the two workers end about together
    order = sorted(kinds, key=lambda kind: -steps[kind])
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        futures = {kind: pool.submit(trained_checkpoint, kind, cache_dir, config, steps[kind], max_frames)
                   for kind in order}
        return {kind: futures[kind].result() for kind in kinds}
