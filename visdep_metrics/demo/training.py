"""A panel that learns: tiny checkpoints trained on CPU on the planted generator's training split.

Each model starts as a tiny random checkpoint (`visdep_metrics.demo.tiny`, transformers' own initialisation) and is
trained with AdamW on the same inputs the adapters score: the task's prompt in the model's chat template (VLMs:
the clip's frames sampled and timed as `visdep_vlm` samples them, in three of four examples; the rest blind),
and the loss on the tokens of the correct option's text as scored after that prompt (option scoring). So the
text LLMs learn the textual give-aways and the VLMs learn to see the colour of the crossing vehicle and which way
it goes (and the give-aways too, as real VLMs do). VLMs begin on the questions about the clip alone (colour and
direction, `CLIP_FIRST_EPOCHS`) and then see them in two of three examples: in the plain mix a tiny VLM learns the
give-aways long before it learns to look (seen: 0.3 on the colour questions after 1,000 steps, against 1.0 after
300 on colour questions alone), and with the clip's questions but half the mix from the start none of the three
tiny VLMs read the direction after 1,200 steps (Qwen2.5-VL did after 2,400).

Whether they learn the order, measured on the test split through the adapter (seed 0, the V panel's stream, 1,200
steps; accuracy on the direction questions with the frames in order / shuffled / the middle frame alone):
Qwen2.5-VL 0.88 / 0.40 / 0.35 and InternVL 1.00 / 0.42 / 0.35 learn it; LLaVA-OneVision does not (0.17 on all
three). LLaVA-OneVision can: on direction questions alone it reads them after 1,200 steps (1.00 / 0.35 / 0.28), but
then has not yet learnt the colour (0.28 after 600 more steps of the mix); so the demo keeps its budget and reports
what each model learnt (the ladder in OUT/report.md).

The training split shares only the patterns with the test split (`visdep_metrics.demo.planted`), and each role
learns from its own stream (`training_stream`: its own clips, questions and order): the text LLMs, the V panel's
VLMs, and the held-out VLM, which so shares no training example with the models whose decisions it checks.

Seeded, on one thread (so a checkpoint does not depend on the machine's cores), two checkpoints trained side
by side where the machine has two cores; a trained checkpoint is cached under a key of everything that
changes it and reused by later runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from loguru import logger

from visdep_metrics.demo.planted import FPS, PlantedConfig, PlantedQuestion, planted_clips

LEARNING_RATE = 1e-3
BATCH = 8
# role -> (its stream of the training split, whether it sees the clips): one stream per role
ROLES = {"text": (1, False), "vision": (2, True), "held_out": (3, True)}
CLIP_QUESTIONS = ("vehicle colour", "vehicle direction")  # the questions the clip decides
CLIP_FIRST_EPOCHS = 10  # a VLM's first epochs (600 clips, about 150 steps) ask only about the clip


@dataclass(frozen=True)
class TrainingExample:
    frames: np.ndarray | None  # the clip, or None for a blind example
    question: PlantedQuestion


def training_stream(config: PlantedConfig, role: str) -> Iterator[TrainingExample]:
    """The endless examples a model of `role` learns from, in the order it learns them: epoch after epoch of
    fresh training clips of the role's own stream. For the VLM roles: the first `CLIP_FIRST_EPOCHS` epochs ask only
    the questions about the clip (colour and direction), then every clip's colour and direction questions and one in
    three of its others (each about a third of the examples); three of four examples with their clip, in order."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    stream, vlm = ROLES[role]
    rng = np.random.default_rng([config.seed, stream, 0])
    epoch = 1
    while True:
        for frames, questions in planted_clips(config, "train", (stream, epoch)):
            for q in questions:
                if vlm and q.category not in CLIP_QUESTIONS:
                    if epoch <= CLIP_FIRST_EPOCHS or rng.random() < 2 / 3:
                        continue
                yield TrainingExample(frames if vlm and rng.random() < 0.75 else None, q)
        epoch += 1


def _key(kind: str, role: str, steps: int, config: PlantedConfig, max_frames: int) -> str:
    """Everything a trained checkpoint depends on: its settings, the libraries, and the code that builds its data
    and inputs (the generator, this trainer, the tiny builders, the task's prompt, the adapters' input code), so that
    an edit to any of them trains anew rather than reusing a checkpoint of other data."""
    import torch
    import transformers

    from lmms_eval_tasks import tasks
    from model_adapters.identity import code_identity, digest, file_sha256
    from visdep_metrics.demo import planted, tiny

    code = [[Path(m.__file__).name, file_sha256(m.__file__)] for m in (planted, tiny, tasks)]
    payload = {"kind": kind, "role": role, "steps": steps, "config": asdict(config), "max_frames": max_frames,
               "lr": LEARNING_RATE, "batch": BATCH, "transformers": transformers.__version__,
               "torch": torch.__version__, "code": code + [[Path(__file__).name, file_sha256(__file__)]],
               "adapters": code_identity()}
    return digest(payload)[:16]


def _examples(processor, config: PlantedConfig, role: str, max_frames: int):
    """Endless (prompt text, continuation, frames or None, VideoMetadata or None) in the adapters' own format."""
    from transformers.video_utils import VideoMetadata

    from lmms_eval_tasks.tasks import build_prompt
    from model_adapters.frames import sample_indices
    from model_adapters.presentation import TokenizerTemplates, answer_strings, chat_prompt, user_message

    vlm = ROLES[role][1]
    for example in training_stream(config, role):
        q = example.question
        prompt = build_prompt(q.question, list(q.options))
        with_video = example.frames is not None
        if vlm:
            text = processor.apply_chat_template(user_message(prompt, with_video), add_generation_prompt=True,
                                                 tokenize=False)
        else:
            text, _ = chat_prompt(TokenizerTemplates(processor), prompt)
        continuation = answer_strings(text, [q.options[q.answer]])[0]
        if with_video:
            indices = sample_indices(len(example.frames), max_frames)
            metadata = VideoMetadata(total_num_frames=len(example.frames), fps=FPS,
                                     frames_indices=[int(i) for i in indices])
            yield text, continuation, np.ascontiguousarray(example.frames[indices]), metadata
        else:
            yield text, continuation, None, None


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


def train_checkpoint(kind: str, role: str, out_dir: Path, config: PlantedConfig, steps: int, max_frames: int) -> Path:
    """Train a tiny checkpoint of `kind` (a `visdep_metrics.demo.tiny` kind) for `steps` batches on the training
    stream of `role` (a key of `ROLES`); its folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    from model_adapters.families import FAMILIES, qwen_positions
    from visdep_metrics.demo.tiny import VLM_KINDS, build_tiny

    vlm = kind in VLM_KINDS
    mrope = vlm and FAMILIES[kind].mrope
    if role not in ROLES or ROLES[role][1] != vlm:
        raise ValueError(f"a {kind} checkpoint cannot take the role {role!r} (roles: {ROLES})")
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
        stream = _examples(processor, config, role, max_frames)
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
            if mrope and "video_grid_thw" in enc:  # Qwen's positions, as the adapters score with them
                enc["position_ids"] = qwen_positions(model, enc)
            loss = model(**enc, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
        model.eval()
    torch.set_num_threads(threads)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    logger.info(f"trained {kind} ({role}) for {steps} steps in {time.perf_counter() - start:.0f} s "
                f"(last loss {float(loss):.3f})")
    return out_dir


def trained_checkpoint(kind: str, role: str, cache_dir: Path, config: PlantedConfig, steps: int,
                       max_frames: int) -> Path:
    """The cached checkpoint of `kind` trained on the stream of `role`, training it if missing."""
    folder = cache_dir / f"{kind}-{_key(kind, role, steps, config, max_frames)}"
    if (folder / "trained.json").exists():
        return folder
    train_checkpoint(kind, role, folder, config, steps, max_frames)
    (folder / "trained.json").write_text(json.dumps({"kind": kind, "role": role, "stream": ROLES[role][0],
                                                     "steps": steps, "config": asdict(config),
                                                     "max_frames": max_frames}, indent=1))
    return folder


def train_panel(roles: dict[str, str], cache_dir: Path, config: PlantedConfig, llm_steps: int, vlm_steps: int,
                max_frames: int) -> dict[str, Path]:
    """{kind: trained checkpoint} for `roles` ({kind: role}), training the missing ones two at a time (forked, one
    thread each) on Linux."""
    from concurrent.futures import ProcessPoolExecutor

    from visdep_metrics.demo.tiny import VLM_KINDS
    from visdep_metrics.parallel import fork_context, usable_cores

    steps = {kind: vlm_steps if kind in VLM_KINDS else llm_steps for kind in roles}
    context = fork_context()
    if context is None or usable_cores() < 2:
        return {kind: trained_checkpoint(kind, role, cache_dir, config, steps[kind], max_frames)
                for kind, role in roles.items()}
    # the slowest first, so that the two workers end about together
    order = sorted(roles, key=lambda kind: -steps[kind])
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        futures = {kind: pool.submit(trained_checkpoint, kind, roles[kind], cache_dir, config, steps[kind],
                                     max_frames)
                   for kind in order}
        return {kind: futures[kind].result() for kind in roles}
