"""Variants of a tiny causal-LM checkpoint for the durable store's tests: weights saved again with other values, a
LoRA adapter folder on a local base, a folder with its own modeling code (`auto_map`), a hub-cache snapshot, and
weights padded past the size up to which files are hashed whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt")


def resave_with_other_weights(folder: Path, seed: int, padding_bytes: int = 0) -> None:
    """Load the checkpoint in `folder`, move every weight by N(0, 0.05) noise (seeded), save it back into `folder`;
    `padding_bytes` adds an unused float32 tensor of that size to the weights file (same size for every seed)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    model.save_pretrained(folder)
    if padding_bytes:
        weights = folder / "model.safetensors"
        tensors = load_file(weights)
        tensors["unused_padding"] = torch.zeros(padding_bytes // 4, dtype=torch.float32)
        save_file(tensors, weights, metadata={"format": "pt"})


def lora_adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter folder on the local checkpoint `base` (its adapter_config.json names `base`), with nonzero
    LoRA weights (they change the scores) and the base's tokenizer files; no config.json of its own."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(out)
    config = json.loads((out / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (base / name).exists():
            shutil.copy2(base / name, out / name)
    return out


CUSTOM_MODELING = '''
from transformers import Qwen2ForCausalLM


class CustomQwen2(Qwen2ForCausalLM):
    """The checkpoint's own class: Qwen2 with its logits doubled."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out
'''


def with_own_modeling_code(folder: Path) -> None:
    """Give the checkpoint in `folder` its own class (`auto_map` -> modeling_custom.CustomQwen2), which
    `trust_remote_code=True` loads instead of transformers' Qwen2ForCausalLM."""
    (folder / "modeling_custom.py").write_text(CUSTOM_MODELING)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomQwen2"}
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def hub_snapshot(checkpoint: Path, hf_home: Path, repo: str, commit: str = "0" * 39 + "1") -> Path:
    """`checkpoint` laid out in HF_HOME's hub cache as the hub client leaves a download of `repo`: the files as
    blobs, linked from snapshots/<commit>/, refs/main naming the commit. The snapshot folder."""
    import hashlib

    base = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = base / "snapshots" / commit
    (base / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(commit)
    for path in sorted(checkpoint.iterdir()):
        if path.is_file():
            blob = base / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
            shutil.copy2(path, blob)
            (snapshot / path.name).symlink_to(Path("..", "..", "blobs", blob.name))
    return snapshot
