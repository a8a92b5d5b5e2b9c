"""bf16 against float32 on Qwen2.5-VL-7B's shapes, for a lent GPU: the option log-probabilities' difference that
docs/adapters.md ("The checkpoints' own dtype") bounds on tiny checkpoints, measured at full size.

One Qwen2.5-VL with Qwen/Qwen2.5-VL-7B-Instruct's architecture (`bench_gpu.QWEN2_5_VL_7B`), random weights from
transformers' own initialisation (seeded), built on the device in float32, and a bf16 copy of the same weights. Each
of `--prompts` prompts is a 16-frame 448 x 448 video (random normalised pixels: 8 temporal patches of 32 x 32, 2,048
tokens after the merge, timed at 83.375 s per temporal patch, a 667 s clip), then random text; scored in both dtypes
with the same inputs and the same position ids (Qwen's rule, the timing in float32): letter scoring (the log-probability
of 4 tokens after the prompt) and option scoring (the summed log-probabilities of 4 options of 8 random tokens).
Prints and writes OUT/bf16_bound.json: the largest and median |bf16 - fp32| per option, per scoring mode.

Needs only torch and transformers (5.17 or later); no file is read or downloaded. Under 3 minutes on one H200:

    python bench/gpu/bf16_bound.py --out OUT [--size 7b|tiny] [--device cuda] [--prompts 8]

`--size tiny` runs the same code on a CPU in seconds (tests/test_gpu_bench.py): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import QWEN2_5_VL_7B, TINY  # noqa: E402  (the published shapes, one home)

# Qwen2.5-VL's special tokens (the released tokenizer's ids)
VISION_START, VISION_END, IMAGE, VIDEO = 151652, 151653, 151655, 151656
SECONDS_PER_PATCH = 83.375
LETTERS, OPTIONS, OPTION_TOKENS = 4, 4, 8


def build(size: str, device: str):
    """The float32 model and a bf16 copy of its weights."""
    import torch
    import transformers as tf

    spec = {"7b": QWEN2_5_VL_7B, "tiny": TINY}[size]
    config = tf.Qwen2_5_VLConfig(
        text_config={**spec["text"], "rope_scaling": {"type": "mrope", "mrope_section": spec["mrope_section"]}},
        vision_config=spec["vision"], image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END)
    torch.manual_seed(0)
    with torch.device(device):
        fp32 = tf.Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.float32).eval()
        bf16 = tf.Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16).eval()
    bf16.load_state_dict(fp32.state_dict())  # the same weights, rounded to bf16
    return fp32, bf16


def positions(ids: list[int], grid: tuple[int, int, int], merge: int, tokens_per_second: float):
    """Qwen's rule for one video in a prompt (transformers 4's float32 temporal rounding; text after the video one
    past the largest position before it)."""
    import torch

    t, h, w = grid
    start = ids.index(VIDEO)
    n = t * (h // merge) * (w // merge)
    temporal = (torch.arange(t) * torch.tensor(SECONDS_PER_PATCH, dtype=torch.float32) * tokens_per_second).long()
    block = torch.stack(torch.meshgrid(temporal, torch.arange(h // merge), torch.arange(w // merge),
                                       indexing="ij")).reshape(3, -1) + start
    after = int(block.max()) + 1
    columns = [torch.arange(start).expand(3, start), block,
               torch.arange(after, after + len(ids) - start - n).expand(3, -1)]
    return torch.cat(columns, dim=1)[:, None, :]


def log_probabilities(model, ids: list[int], pixels, grid: tuple[int, int, int], device: str):
    """log p of the next token at every position of one prompt with the video (L, vocabulary), in float32."""
    import torch

    vision = model.config.vision_config
    inputs = {"input_ids": torch.tensor([ids], device=device),
              "pixel_values_videos": pixels.to(device, model.dtype),
              "video_grid_thw": torch.tensor([grid], device=device),
              "second_per_grid_ts": torch.tensor([SECONDS_PER_PATCH], device=device),
              "position_ids": positions(ids, grid, vision.spatial_merge_size, vision.tokens_per_second).to(device)}
    return torch.log_softmax(model(**inputs).logits[0].float(), dim=-1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=("7b", "tiny"), default="7b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompts", type=int, default=8)
    args = parser.parse_args(argv)
    import numpy as np
    import torch

    began = time.perf_counter()
    fp32, bf16 = build(args.size, args.device)
    vision = fp32.config.vision_config
    merge, patch, temporal_patch = vision.spatial_merge_size, vision.patch_size, vision.temporal_patch_size
    side = 448 if args.size == "7b" else 56
    grid = (16 // temporal_patch, side // patch, side // patch)
    patches = grid[0] * grid[1] * grid[2]
    generator = torch.Generator().manual_seed(1)
    text = lambda n: torch.randint(1000, 150000, (n,), generator=generator).tolist()  # noqa: E731
    deltas: dict[str, list[float]] = {"letter": [], "option": []}
    values: dict[str, list[float]] = {"letter": [], "option": []}
    with torch.inference_mode():
        for _ in range(args.prompts):
            pixels = torch.randn(patches, 3 * temporal_patch * patch * patch, generator=generator)
            prompt = text(20) + [VISION_START] + [VIDEO] * (patches // merge ** 2) + [VISION_END] + text(60)
            letters = text(LETTERS)
            options = [text(OPTION_TOKENS) for _ in range(OPTIONS)]
            scored = {}
            for name, model in (("fp32", fp32), ("bf16", bf16)):
                last = log_probabilities(model, prompt, pixels, grid, args.device)[-1]
                letter = [float(last[token]) for token in letters]
                option = []
                for tokens in options:
                    dist = log_probabilities(model, prompt + tokens, pixels, grid, args.device)[len(prompt) - 1:-1]
                    option.append(float(dist.gather(-1, torch.tensor(tokens, device=args.device)[:, None]).sum()))
                scored[name] = {"letter": letter, "option": option}
            for mode in deltas:
                deltas[mode] += list(np.abs(np.array(scored["bf16"][mode]) - np.array(scored["fp32"][mode])))
                values[mode] += scored["fp32"][mode]
    report = {"size": args.size, "device": args.device, "torch": torch.__version__,
              "transformers": __import__("transformers").__version__, "prompts": args.prompts,
              "tokens_per_prompt": len(prompt), "seconds": round(time.perf_counter() - began, 1),
              **{mode: {"max_abs_difference": float(np.max(d)), "median_abs_difference": float(np.median(d)),
                        "fp32_values": [float(np.min(values[mode])), float(np.max(values[mode]))], "n": len(d)}
                 for mode, d in deltas.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bf16_bound.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
