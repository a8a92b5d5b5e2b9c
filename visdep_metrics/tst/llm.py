"""TsT-LLM: the test-set stress test with a LoRA-fine-tuned language model (Brown et al. 2025,
arXiv:2511.04655, section 3.2 and appendix B.1).

The folds are TsT-RF's (`visdep_metrics.tst.stress_test.question_folds`: grouped by video, stratified). Per fold,
LoRA adapters (peft, on every linear layer of the decoder) are put on the base causal LM and trained on
the training questions' text only: the prompt is the tasks' `build_prompt(question, options)` in the
model's chat template, and with z_k the logit of option letter k at the first assistant position,

    p_k(x) = softmax_{k < K(x)}(z_k),    loss = -ln p_{y*}(x)    (the tasks' `letter` scoring).

The held-out questions are scored with the same p_k(x); s(x) = p_{y*}(x). The adapters are removed
before the next fold, so every fold starts from the base weights. The paper's setting (GPU: Qwen2.5-7B-
Instruct, r = 128, alpha = 256, learning rate 5e-5, cosine schedule, batch 32, 3 epochs) is the default.
Needs torch, transformers and peft; nothing here runs at import.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from loguru import logger
from tqdm.auto import tqdm

from lmms_eval_tasks.records import LETTERS, Question
from lmms_eval_tasks.tasks import build_prompt
from visdep_metrics.tst.stress_test import TstResult, question_folds, score_table, summarize


@dataclass(frozen=True)
class LlmTstConfig:
    model: str                      # a local checkpoint folder (or a hub id where the hub is reachable)
    gguf_file: str | None = None    # a .gguf file inside `model`
    folds: int = 5
    seed: int = 42
    epochs: int = 3
    learning_rate: float = 5e-5
    batch_size: int = 32
    lora_r: int = 128
    lora_alpha: int = 256
    lora_dropout: float = 0.05
    warmup_ratio: float = 0.03
    max_length: int = 1024          # prompt tokens; a longer prompt is an error, not silently cut
    device: str = "auto"            # "auto" = cuda if available, else cpu


def letter_token_ids(tokenizer, n: int) -> list[int]:
    """Token id of each option letter A, B, ... as the first assistant token; each must be one token."""
    ids = []
    for letter in LETTERS[:n]:
        encoded = tokenizer.encode(letter, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"option letter {letter!r} is {len(encoded)} tokens for this tokenizer; TsT-LLM scores "
                             "single-token letters")
        ids.append(encoded[0])
    return ids


def prompt_token_ids(tokenizer, records: Sequence[Question], max_length: int) -> list[list[int]]:
    """The chat-templated prompt of each question up to the assistant's first token (raw prompt + newline for a
    tokenizer without a chat template)."""
    out = []
    for r in records:
        prompt = build_prompt(r.question, r.options)
        if tokenizer.chat_template:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = prompt + "\n"
        # The template already carries the special tokens (a Llama-3 tokenizer would add a second BOS).
        ids = tokenizer.encode(text, add_special_tokens=not tokenizer.chat_template)
        if len(ids) > max_length:
            raise ValueError(f"question {r.question_id!r}: prompt of {len(ids)} tokens exceeds max_length "
                             f"{max_length}")
        out.append(ids)
    return out


def _letter_logits(model, prompts: list[list[int]], letters, n_options: np.ndarray, pad_id: int, device):
    """(B, K_max) letter logits at the last prompt position, -inf beyond each question's K (left padding)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                logits_to_keep=1)
    logits = out.logits[:, -1, :].float()[:, letters]
    beyond = torch.arange(len(letters), device=device)[None, :] >= torch.as_tensor(n_options, device=device)[:, None]
    return logits.masked_fill(beyond, float("-inf"))


def run_tst_llm(records: Sequence[Question], config: LlmTstConfig, benchmark: str | None = None,
                progress: bool = True) -> TstResult:
    """k-fold TsT-LLM (see the module docstring); the same outputs as `visdep_metrics.tst.stress_test.run_tst`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ImportError("TsT-LLM needs the peft package: pip install 'peft>=0.13'") from e

    records = list(records)
    benchmark = benchmark or records[0].benchmark
    device = torch.device("cuda" if config.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if config.device == "auto" else config.device))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    load = {"gguf_file": config.gguf_file} if config.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(config.model, **load)
    base = AutoModelForCausalLM.from_pretrained(config.model, dtype=dtype, **load).to(device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    n_options = np.array([len(r.options) for r in records])
    answers = np.array([r.answer_index for r in records])
    letters = letter_token_ids(tokenizer, int(n_options.max()))
    prompts = prompt_token_ids(tokenizer, records, config.max_length)
    fold_of_question, _, _, stratified_by = question_folds(records, config.folds, config.seed)
    logger.info(f"TsT-LLM {benchmark}: {len(records)} questions, {config.folds} folds, {config.model} on {device}")

    p = np.full((len(records), int(n_options.max())), np.nan)
    losses = []
    for fold in tqdm(range(config.folds), desc=f"TsT-LLM {benchmark}", unit="fold", disable=not progress):
        torch.manual_seed(config.seed + fold)
        model = get_peft_model(base, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                                                lora_dropout=config.lora_dropout, target_modules="all-linear",
                                                task_type="CAUSAL_LM"))
        train = np.flatnonzero(fold_of_question != fold)
        test = np.flatnonzero(fold_of_question == fold)
        steps_per_epoch = int(np.ceil(len(train) / config.batch_size))
        optimizer = torch.optim.AdamW([w for w in model.parameters() if w.requires_grad], lr=config.learning_rate)
        total = steps_per_epoch * config.epochs
        schedule = get_cosine_schedule_with_warmup(optimizer, int(config.warmup_ratio * total), max(total, 1))
        order_rng = np.random.default_rng(config.seed + fold)
        model.train()
        fold_losses = []
        for _ in range(config.epochs):
            for batch in np.array_split(order_rng.permutation(train), steps_per_epoch):
                logits = _letter_logits(model, [prompts[i] for i in batch], letters, n_options[batch], pad_id, device)
                loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(answers[batch], device=device))
                loss.backward()
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                fold_losses.append(float(loss.detach()))
        model.eval()
        with torch.no_grad():
            for batch in np.array_split(test, int(np.ceil(len(test) / config.batch_size))):
                logits = _letter_logits(model, [prompts[i] for i in batch], letters, n_options[batch], pad_id, device)
                p[batch] = torch.softmax(logits, dim=1).cpu().numpy()
        losses.append(fold_losses)
        base = model.unload()  # remove the adapters: the next fold starts from the base weights

    p = np.where(np.arange(p.shape[1])[None, :] < n_options[:, None], p, np.nan)
    s_x = score_table(records, p, fold_of_question, config.seed)
    model_info = {"method": "TsT-LLM", "name": "LoRA fine-tuned causal LM",
                  **{k: v for k, v in asdict(config).items() if k not in ("folds", "seed")},
                  "train_loss_first_last": [[f[0], f[-1]] if f else [] for f in losses],
                  "versions": {name: importlib.metadata.version(name) for name in ("torch", "transformers", "peft")}}
    summary = summarize(s_x, records, benchmark, config.folds, config.seed, model_info,
                        ["chat-templated question and option text"], {}, stratified_by)
    return TstResult(s_x, summary)
