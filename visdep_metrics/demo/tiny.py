"""Tiny random-weight Hugging Face checkpoints, built offline, for tests, the bench and the demo.

`build_tiny(kind, out_dir)` writes a checkpoint that loads through the ordinary
`from_pretrained(out_dir)` paths of the real model family: the real model and processor classes,
a byte-level BPE tokenizer trained here on a small generated corpus, and the family's real chat
template, so prompts have realistic shapes. Weights are random (seeded): rebuilds are
byte-identical. Nothing is downloaded.

Kinds: the vision-language families `qwen2_5_vl`, `qwen2_vl`, `llava_onevision`, `internvl`
(the HF-native InternVL2.5/3/3.5 `-hf` class) and the causal LMs
- `qwen2`: Qwen2.5-Instruct style, ChatML template, byte-level BPE, no BOS;
- `llama`: Llama-3.1-Instruct style, byte-level BPE tokenizer that prepends BOS;
- `mistral_base`: Mistral-7B-v0.1 / Llama-2 style base model: a SentencePiece-style BPE (Metaspace "▁",
  byte fallback `<0x0A>`, prepends `<s>`) and no chat template;
- `qwen2_base`: a base model whose tokenizer adds no BOS, no chat template;
- `deepseek`: DeepSeek-LLM-7B-Chat style, whose template's generation prompt ends in "Assistant:" (no space).

`size="bench"` makes a checkpoint in which model compute dominates
Python overhead: a wider text model and >= 256 visual tokens for a 16-frame video.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VLM_KINDS = ("qwen2_5_vl", "qwen2_vl", "llava_onevision", "internvl")
LLM_KINDS = ("qwen2", "llama", "mistral_base", "qwen2_base", "deepseek")
KINDS = VLM_KINDS + LLM_KINDS
SIZES = ("test", "bench", "demo", "vllm")

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>", "<image>", "<video>", "<IMG_CONTEXT>", "<img>", "</img>"]
SENTENCEPIECE_SPECIALS = ["<unk>", "<s>", "</s>"]
DEEPSEEK_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]
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

DEEPSEEK_TEMPLATE = (  # deepseek-ai/deepseek-llm-7b-chat
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}"
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
    "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
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
    weight_std: float | None = None  # redraw every matrix from N(0, std); None keeps transformers' init (0.02)


# test: ~1 MiB; 16 square frames give 32 (Qwen) to 65 (LLaVA-OV) visual tokens. Its matrices are drawn with std 0.1:
# at transformers' 0.02 a model this small answers almost uniformly whatever it is shown (16 frames timed at 1.25 s
# or at 2/24 s per temporal patch moved the letters' log-probabilities by 3e-4), and a test comparing values
# within 1e-4 could barely tell a wrong input from a right one; at 0.1 the same change moves them by about 0.4.
# bench: ~90 MiB; 16 square frames give about 1,000 visual tokens (Qwen: 8 temporal patches x 11x11
# merged; LLaVA-OV: 16 x 8x8 + 1; InternVL: 16 x 8x8), still fewer than real checkpoints use
# (LLaVA-OV-7B: 16 x 196), and the text model is wide enough that forwards, not Python, dominate.
SIZE_PRESETS = {
    "test": Size(hidden=64, layers=2, heads=4, kv_heads=2, vision_hidden=32, vision_layers=2, frame_side=32,
                 qwen_pixels=56 * 56, weight_std=0.1),
    # demo: the test dimensions with transformers' own initialisation, as the start of the demo's training
    "demo": Size(hidden=64, layers=2, heads=4, kv_heads=2, vision_hidden=32, vision_layers=2, frame_side=32,
                 qwen_pixels=56 * 56),
    "bench": Size(hidden=512, layers=6, heads=8, kv_heads=2, vision_hidden=128, vision_layers=2, frame_side=128,
                  qwen_pixels=448 * 224),
    # vllm: the test dimensions with text heads of 32 (vLLM's CPU attention takes head sizes 32, 64, 80, ...)
    "vllm": Size(hidden=64, layers=2, heads=2, kv_heads=1, vision_hidden=32, vision_layers=2, frame_side=32,
                 qwen_pixels=56 * 56, weight_std=0.1),
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
    # base-model answer cues and chat turns, so that " A" and "Assistant:" are whole tokens as in real vocabularies
    lines += [f"Answer: {letter}" for letter in "ABCDEFGHIJKL"] * 20 + ["User: Assistant:"] * 50
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


def _qwen_tokenizer(chat_template: str | None, named_tokens: dict[str, str] | None = None):
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


def _bos_tokenizer(specials: list[str], bos: str, eos: str, pad: str | None, chat_template: str):
    """A byte-level BPE `PreTrainedTokenizerFast` that prepends `bos` (Llama-3, DeepSeek-LLM)."""
    import transformers as tf
    from tokenizers import processors

    raw = _train_bpe(specials)
    raw.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, specials.index(bos))])
    return tf.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=bos, eos_token=eos, pad_token=pad,
                                      chat_template=chat_template)


def _build_llama(size: Size):
    import transformers as tf

    tok = _bos_tokenizer(LLAMA_SPECIALS, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>",
                         LLAMA3_TEMPLATE)
    bos, eos, pad = _ids(tok, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>")
    config = tf.LlamaConfig(**_text_config(size, len(tok), bos_token_id=bos, eos_token_id=eos, pad_token_id=pad),
                            rope_theta=5e5)
    return tf.LlamaForCausalLM(config), tok


def _build_deepseek(size: Size):
    import transformers as tf

    bos, eos = DEEPSEEK_SPECIALS
    tok = _bos_tokenizer(DEEPSEEK_SPECIALS, bos, eos, eos, DEEPSEEK_TEMPLATE)
    bos_id, eos_id = _ids(tok, bos, eos)
    config = tf.LlamaConfig(**_text_config(size, len(tok), bos_token_id=bos_id, eos_token_id=eos_id,
                                           pad_token_id=eos_id))
    return tf.LlamaForCausalLM(config), tok


def _sentencepiece_tokenizer():
    """A Llama-2 / Mistral style tokenizer: BPE over Metaspace pieces ("▁the"), trained per word so that no
    piece spans a word boundary (as SentencePiece's are), byte fallback to `<0x00>`..`<0xFF>` for characters
    outside the vocabulary (newlines among them), `<s>` prepended, no chat template."""
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SENTENCEPIECE_SPECIALS, show_progress=False)
    trainer_tok.train_from_iterator(_corpus(), trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(SENTENCEPIECE_SPECIALS + [f"<0x{b:02X}>" for b in range(256)])}
    for token, _ in sorted(trained["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    return tf.LlamaTokenizer(vocab=vocab, merges=merges, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                             add_bos_token=True, legacy=False, add_prefix_space=True)


def _build_mistral_base(size: Size):
    import transformers as tf

    tok = _sentencepiece_tokenizer()
    bos, eos = _ids(tok, "<s>", "</s>")
    config = tf.MistralConfig(**_text_config(size, len(tok), bos_token_id=bos, eos_token_id=eos), sliding_window=None)
    return tf.MistralForCausalLM(config), tok


def _build_qwen2_base(size: Size):
    import transformers as tf

    tok = _qwen_tokenizer(None)
    eos = _ids(tok, "<|endoftext|>")[0]
    config = tf.Qwen2Config(**_text_config(size, len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos),
                            tie_word_embeddings=True)
    return tf.Qwen2ForCausalLM(config), tok


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
                    "llama": lambda: _build_llama(preset), "mistral_base": lambda: _build_mistral_base(preset),
                    "qwen2_base": lambda: _build_qwen2_base(preset), "deepseek": lambda: _build_deepseek(preset)}
        model, processor = builders[kind]()
        if preset.weight_std is not None:
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.dim() >= 2:
                        parameter.normal_(0.0, preset.weight_std)
    model.eval().save_pretrained(out)
    processor.save_pretrained(out)
    return out
