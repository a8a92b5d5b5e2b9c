"""Tiny random-weight Hugging Face checkpoints, built offline, for tests, the bench and the demo.

`build_tiny(kind, out_dir)` writes a checkpoint that loads through the ordinary
`from_pretrained(out_dir)` paths of the real model family: the real model and processor classes,
a byte-level BPE tokenizer trained here on a small generated corpus, and the family's real chat
template, so prompts have realistic shapes. Weights are random (seeded): rebuilds are
byte-identical. Nothing is downloaded.

Kinds: the vision-language families `qwen2_5_vl`, `qwen2_vl`, `llava_onevision`, `internvl`
(the HF-native InternVL2.5/3/3.5 `-hf` class) and the causal LMs `qwen2`, `llama` (Llama-3 style
tokenizer that prepends BOS). `size="bench"` makes a checkpoint in which model compute dominates
Python overhead: a wider text model and >= 256 visual tokens for a 16-frame video.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VLM_KINDS = ("qwen2_5_vl", "qwen2_vl", "llava_onevision", "internvl")
LLM_KINDS = ("qwen2", "llama")
KINDS = VLM_KINDS + LLM_KINDS
SIZES = ("test", "bench")

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>", "<image>", "<video>", "<IMG_CONTEXT>", "<img>", "</img>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>", "<|finetune_right_pad_id|>"]
# The pre-tokenizer split of Qwen2 / Llama-3 tokenizers.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Chat templates as the real checkpoints ship them (Qwen2-VL/Qwen2.5-VL-Instruct,
# llava-hf/llava-onevision-qwen2-*-ov-hf, OpenGVLab/InternVL3-*-hf, Qwen2.5-Instruct style ChatML,
# Llama-3.1-Instruct without tools).
QWEN_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: "
    "{% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAVA_ONEVISION_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + ' '}}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}{{ '<video>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{{'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
INTERNVL_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Size:
    """The knobs that set how much work one forward is."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    vision_hidden: int
    vision_layers: int
    frame_side: int  # pixels: the video processors resize frames to this side (LLaVA-OV, InternVL)
    qwen_pixels: int  # Qwen min = max pixels per frame (a multiple of 28*28 keeps the grid exact)


# test: ~1 MiB; 16 square frames give 32 (Qwen) to 65 (LLaVA-OV) visual tokens.
# bench: ~90 MiB; 16 square frames give about 1,000 visual tokens (Qwen: 8 temporal patches x 11x11
# merged; LLaVA-OV: 16 x 8x8 + 1; InternVL: 16 x 8x8), still fewer than real checkpoints use
# (LLaVA-OV-7B: 16 x 196), and the text model is wide enough that forwards, not Python, dominate.
SIZE_PRESETS = {
    "test": Size(hidden=64, layers=2, heads=4, kv_heads=2, vision_hidden=32, vision_layers=2, frame_side=32,
                 qwen_pixels=56 * 56),
    "bench": Size(hidden=512, layers=6, heads=8, kv_heads=2, vision_hidden=128, vision_layers=2, frame_side=128,
                  qwen_pixels=448 * 224),
}


def _corpus() -> list[str]:
    words = ("the a an of to in on is was what which who where when why how video clip frame car driver vehicle "
             "truck bus pedestrian cyclist motorcycle road street crossing intersection lane light red green "
             "yellow sunny rainy night day cloudy weather accident collision crash hit brake slow fast speed "
             "cause reason prevent should could type happened after before left right turn stop runs crosses "
             "suddenly option answer letter choices given directly correct describe happens scene rural urban "
             "one two three four five none others").split()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, 12)) + "?" for _ in range(3000)]
    lines += [f"{letter}. {w}" for letter in "ABCDEFGHIJKL" for w in words]
    # the prompt's fixed phrases, so that prompts tokenise about as compactly as with a real vocabulary
    lines += ["Answer with the option's letter from the given choices directly.", "0123456789", "You are a helpful "
              "assistant.", "system user assistant", "Choose the correct option (A, B, C, or D) without any "
              "explanations.", "What's the weather and lighting?", "What is the cause of the accident?"] * 50
    return lines


def _train_bpe(specials: list[str], vocab_size: int = 1024):
    """A byte-level BPE shaped like Qwen2's and Llama-3's; special tokens take ids 0..n-1."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def _qwen_tokenizer(chat_template: str, named_tokens: dict[str, str] | None = None):
    """A `Qwen2Tokenizer`; `named_tokens` become `tokenizer.<name>` attributes (InternVL's processor reads them)."""
    import transformers as tf

    model = json.loads(_train_bpe(QWEN_SPECIALS).to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = tf.Qwen2Tokenizer(vocab=model["vocab"], merges=merges, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                            unk_token=None, extra_special_tokens=named_tokens or {})
    tok.add_special_tokens({"additional_special_tokens": QWEN_SPECIALS[1:]}, replace_extra_special_tokens=False)
    tok.chat_template = chat_template
    return tok


def _text_config(size: Size, vocab_size: int, **extra) -> dict:
    return dict(vocab_size=vocab_size, hidden_size=size.hidden, intermediate_size=2 * size.hidden,
                num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
                max_position_embeddings=4096, rms_norm_eps=1e-6, **extra)


def _ids(tok, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def _build_qwen_vl(size: Size, version: str):
    import transformers as tf

    tok = _qwen_tokenizer(QWEN_VL_TEMPLATE)
    image, video, start, end, eos, pad = _ids(tok, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                              "<|vision_end|>", "<|im_end|>", "<|endoftext|>")
    pixels = dict(min_pixels=size.qwen_pixels, max_pixels=size.qwen_pixels)
    head_dim = size.hidden // size.heads
    # mrope splits head_dim/2 rotary frequencies over (time, height, width)
    section = [head_dim // 2 - 2 * (head_dim // 6), head_dim // 6, head_dim // 6]
    text = _text_config(size, len(tok), bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, rope_theta=1e6,
                        rope_scaling={"type": "mrope", "mrope_section": section})
    common = dict(image_token_id=image, video_token_id=video, vision_start_token_id=start, vision_end_token_id=end)
    if version == "2.5":
        processor = tf.Qwen2_5_VLProcessor(
            image_processor=tf.Qwen2VLImageProcessor(**pixels),
            video_processor=tf.Qwen2VLVideoProcessor(**pixels, cap_pixels_per_frame=True), tokenizer=tok,
            chat_template=QWEN_VL_TEMPLATE)
        vision = dict(depth=size.vision_layers, hidden_size=size.vision_hidden,
                      intermediate_size=2 * size.vision_hidden, num_heads=2, out_hidden_size=size.hidden,
                      patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                      fullatt_block_indexes=[size.vision_layers - 1], tokens_per_second=2)
        config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)
        return tf.Qwen2_5_VLForConditionalGeneration(config), processor
    processor = tf.Qwen2VLProcessor(
        image_processor=tf.Qwen2VLImageProcessor(**pixels),
        video_processor=tf.Qwen2VLVideoProcessor(**pixels, cap_pixels_per_frame=True), tokenizer=tok,
        chat_template=QWEN_VL_TEMPLATE)
    vision = dict(depth=size.vision_layers, embed_dim=size.vision_hidden, hidden_size=size.hidden, mlp_ratio=2,
                  num_heads=2, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    config = tf.Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    return tf.Qwen2VLForConditionalGeneration(config), processor


def _build_llava_onevision(size: Size):
    import transformers as tf

    tok = _qwen_tokenizer(LLAVA_ONEVISION_TEMPLATE)
    image, video, eos, pad = _ids(tok, "<image>", "<video>", "<|im_end|>", "<|endoftext|>")
    side, patch = size.frame_side, 8
    pinpoints = [[side, side], [side, 2 * side], [2 * side, side], [2 * side, 2 * side]]
    frame = {"height": side, "width": side}
    processor = tf.LlavaOnevisionProcessor(
        image_processor=tf.LlavaOnevisionImageProcessor(size=frame, image_grid_pinpoints=pinpoints),
        video_processor=tf.LlavaOnevisionVideoProcessor(size=frame), tokenizer=tok,
        num_image_tokens=(side // patch) ** 2, vision_feature_select_strategy="full",
        chat_template=LLAVA_ONEVISION_TEMPLATE)
    config = tf.LlavaOnevisionConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=size.vision_hidden,
                           intermediate_size=2 * size.vision_hidden, num_hidden_layers=size.vision_layers,
                           num_attention_heads=2, image_size=side, patch_size=patch),
        text_config=dict(model_type="qwen2", **_text_config(size, len(tok), bos_token_id=pad, eos_token_id=eos,
                                                            pad_token_id=pad)),
        image_token_index=image, video_token_index=video, vision_feature_select_strategy="full",
        vision_feature_layer=-1, image_grid_pinpoints=pinpoints, vision_aspect_ratio="anyres_max_9")
    return tf.LlavaOnevisionForConditionalGeneration(config), processor


def _build_internvl(size: Size):
    import transformers as tf

    named = {"context_image_token": "<IMG_CONTEXT>", "start_image_token": "<img>", "end_image_token": "</img>",
             "video_token": "<video>"}
    tok = _qwen_tokenizer(INTERNVL_TEMPLATE, named_tokens=named)
    context, eos, pad = _ids(tok, "<IMG_CONTEXT>", "<|im_end|>", "<|endoftext|>")
    side, patch = size.frame_side, 8
    tokens_per_frame = (side // patch // 2) ** 2  # pixel shuffle with downsample ratio 0.5
    frame = {"height": side, "width": side}
    processor = tf.InternVLProcessor(
        image_processor=tf.GotOcr2ImageProcessor(size=frame, crop_to_patches=True, max_patches=4),
        video_processor=tf.InternVLVideoProcessor(size=frame), tokenizer=tok, image_seq_length=tokens_per_frame,
        chat_template=INTERNVL_TEMPLATE)
    config = tf.InternVLConfig(
        vision_config=dict(hidden_size=size.vision_hidden, intermediate_size=2 * size.vision_hidden,
                           num_hidden_layers=size.vision_layers, num_attention_heads=2, image_size=[side, side],
                           patch_size=[patch, patch]),
        text_config=dict(model_type="qwen2", **_text_config(size, len(tok), bos_token_id=pad, eos_token_id=eos,
                                                            pad_token_id=pad)),
        image_token_id=context, image_seq_length=tokens_per_frame, downsample_ratio=0.5, vision_feature_layer=-1,
        vision_feature_select_strategy="default")
    return tf.InternVLForConditionalGeneration(config), processor


def _build_qwen2(size: Size):
    import transformers as tf

    tok = _qwen_tokenizer(CHATML_TEMPLATE)
    eos, pad = _ids(tok, "<|im_end|>", "<|endoftext|>")
    config = tf.Qwen2Config(**_text_config(size, len(tok), bos_token_id=pad, eos_token_id=eos, pad_token_id=pad),
                            tie_word_embeddings=True)
    return tf.Qwen2ForCausalLM(config), tok


def _build_llama(size: Size):
    import transformers as tf
    from tokenizers import processors

    raw = _train_bpe(LLAMA_SPECIALS)
    raw.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", 0)])
    tok = tf.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                     pad_token="<|finetune_right_pad_id|>", chat_template=LLAMA3_TEMPLATE)
    bos, eos, pad = _ids(tok, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>")
    config = tf.LlamaConfig(**_text_config(size, len(tok), bos_token_id=bos, eos_token_id=eos, pad_token_id=pad),
                            rope_theta=5e5)
    return tf.LlamaForCausalLM(config), tok


def build_tiny(kind: str, out_dir: str | Path, size: str = "test", seed: int = 0) -> Path:
    """Write a random-weight checkpoint of family `kind` into `out_dir` and return the folder.

    Same (kind, size, seed) -> byte-identical files. Loads with `AutoModelForImageTextToText` +
    `AutoProcessor` (VLM kinds) or `AutoModelForCausalLM` + `AutoTokenizer` (LLM kinds)."""
    import torch

    if kind not in KINDS:
        raise ValueError(f"unknown tiny checkpoint kind {kind!r}; expected one of {', '.join(KINDS)}")
    if size not in SIZE_PRESETS:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
    preset = SIZE_PRESETS[size]
    out = Path(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        builders = {"qwen2_5_vl": lambda: _build_qwen_vl(preset, "2.5"),
                    "qwen2_vl": lambda: _build_qwen_vl(preset, "2"),
                    "llava_onevision": lambda: _build_llava_onevision(preset),
                    "internvl": lambda: _build_internvl(preset), "qwen2": lambda: _build_qwen2(preset),
                    "llama": lambda: _build_llama(preset)}
        model, processor = builders[kind]()
    model.eval().save_pretrained(out)
    processor.save_pretrained(out)
    return out
