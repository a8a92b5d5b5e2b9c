"""Questions per second of visdep's adapters on 7B-shaped checkpoints, for a lent GPU machine (one H200).

The machine has Python with torch, transformers and accelerate but no lmms-eval, PyAV or vLLM, and no network;
`bench/gpu/wheelhouse.sh` (run where PyPI is reachable) collects the few wheels the adapters import besides, and
`bench/gpu/run.sh` installs them offline and runs this script (docs/performance.md, "A GPU machine").

What runs is the adapters' own `loglikelihood` on lmms-eval `Instance`s, as lmms-eval's evaluator calls it
(grouping, presentation, the durable store's pass-through, the scoring core, the prefetch of frames), on

- `visdep_vlm`: a Qwen2.5-VL with Qwen/Qwen2.5-VL-7B-Instruct's architecture, video questions, VRU-Accident's
  layout of six questions per video, 16-frame clips (MM-AU-style JPEG folders: the machine has no PyAV), frames
  processed with the checkpoint's own preprocessor settings;
- `visdep_llm`: a Qwen2 with Qwen/Qwen2.5-7B-Instruct's architecture, the same questions blind;
- `visdep_vllm`, the same two, wherever vLLM is importable (skipped with the reason otherwise);

letter scoring, bf16, sdpa attention, `--batch-size` questions per forward. Weights are random (seeded) and built on
the device: only the loading of weights differs from a user's run (`from_pretrained` builds the model from the
checkpoint's config instead of reading a file). The tokenizer is the offline byte-level BPE of
`visdep_metrics.demo.tiny` (about 1,000 tokens; the embedding keeps the published vocabulary size), so prompts are
about as long as with the real tokenizer but not identical.

Each phase is time-boxed: chunks of `--chunk-videos` videos are scored until the phase's share of `--budget-s` is
spent; questions/s = questions scored / seconds, after one warm-up chunk. Prints a table and writes
OUT/gpu_bench.json after each phase (a run stopped by a timeout keeps what it measured).

    python bench/gpu/bench_gpu.py --out OUT [--size 7b|tiny] [--device cuda] [--budget-s 420] [--batch-size 8]

`--size tiny` runs the same code on a CPU in seconds (tests/test_gpu_bench.py): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing visdep

# Qwen/Qwen2.5-VL-7B-Instruct, config.json and preprocessor_config.json on the Hugging Face hub (as saved by
# transformers 4.53.1; read here from copies of the files and of transformers' printout of the loaded model:
# embedding 152064 x 3584, 28 decoder layers with k/v projections of 512, MLP 18944, 32 vision blocks of 1280).
QWEN2_5_VL_7B = {
    "text": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                 num_key_value_heads=4, vocab_size=152064, max_position_embeddings=128000, rms_norm_eps=1e-6,
                 rope_theta=1e6, hidden_act="silu", tie_word_embeddings=False, sliding_window=32768,
                 use_sliding_window=False, max_window_layers=28),
    "mrope_section": [16, 24, 24],
    "vision": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                   patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                   fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu", in_channels=3),
    "pixels": dict(min_pixels=3136, max_pixels=12845056),
}
# Qwen/Qwen2.5-7B-Instruct, config.json on the Hugging Face hub (as transformers 4.57.1 prints it when loading it).
QWEN2_5_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                  num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=1e6, hidden_act="silu", tie_word_embeddings=False, use_sliding_window=False,
                  max_window_layers=28)
# The same structure at test dimensions (head size 32, which vLLM's CPU attention takes), for the CPU.
TINY_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1e6,
                 hidden_act="silu", tie_word_embeddings=False)
TINY = {"text": TINY_TEXT, "mrope_section": [8, 4, 4],
        "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                       spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
                       tokens_per_second=2, hidden_act="silu", in_channels=3),
        "pixels": dict(min_pixels=56 * 56, max_pixels=56 * 56)}
SIZES = {"7b": {"vlm": QWEN2_5_VL_7B, "llm": QWEN2_5_7B, "frame": (720, 1280)},
         "tiny": {"vlm": TINY, "llm": {**TINY_TEXT}, "frame": (64, 64)}}
FRAMES = 16
QUESTIONS_PER_VIDEO = 6
DISTINCT_CLIPS = 8  # clips written; further videos are hard links to them at their own paths (decoded again)
# What the GPU machine must have (with their own requirements); bench/gpu/wheelhouse.txt carries the rest.
MACHINE_HAS = ("torch", "torchvision", "transformers", "accelerate", "numpy", "pillow", "jinja2", "pyyaml", "tqdm")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def transformers_requirement():
    """visdep's requirement on transformers, as pyproject.toml declares it: the machine's own transformers is used
    wherever it lies in that range (the wheelhouse carries none)."""
    import tomllib
    from packaging.requirements import Requirement

    declared = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, declared) if r.name == "transformers")


def checkpoints(size: str, root: Path) -> dict[str, Path]:
    """{"vlm", "llm"}: folders with the config, the offline tokenizer / processor and no weights."""
    import transformers as tf

    from visdep_metrics.demo.tiny import build_tiny

    spec = SIZES[size]
    out = {}
    vl = build_tiny("qwen2_5_vl", root / "tiny_vl")  # for its offline processor and special-token ids
    processor = tf.AutoProcessor.from_pretrained(vl)
    ids = json.loads((vl / "config.json").read_text())
    text = {"eos_token_id": ids["text_config"]["eos_token_id"], "pad_token_id": ids["text_config"]["pad_token_id"],
            "bos_token_id": ids["text_config"]["bos_token_id"]}
    vocab = {"vocab_size": len(processor.tokenizer)} if size == "tiny" else {}
    vlm = spec["vlm"]
    config = tf.Qwen2_5_VLConfig(
        text_config={**vlm["text"], **vocab, **text,
                     "rope_scaling": {"type": "mrope", "mrope_section": vlm["mrope_section"]}},
        vision_config=vlm["vision"],
        **{k: ids[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")},
        architectures=["Qwen2_5_VLForConditionalGeneration"])
    for name in ("image_processor", "video_processor"):
        sub = getattr(processor, name)
        sub.min_pixels, sub.max_pixels = vlm["pixels"]["min_pixels"], vlm["pixels"]["max_pixels"]
        sub.size = {"shortest_edge": vlm["pixels"]["min_pixels"], "longest_edge": vlm["pixels"]["max_pixels"]}
    out["vlm"] = root / "qwen2_5_vl"
    config.save_pretrained(out["vlm"])
    processor.save_pretrained(out["vlm"])
    lm = build_tiny("qwen2", root / "tiny_lm")
    tokenizer = tf.AutoTokenizer.from_pretrained(lm)
    lm_ids = json.loads((lm / "config.json").read_text())
    out["llm"] = root / "qwen2"
    tf.Qwen2Config(**spec["llm"], **({"vocab_size": len(tokenizer)} if size == "tiny" else {}),
                   **{k: lm_ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
                   architectures=["Qwen2ForCausalLM"]).save_pretrained(out["llm"])
    tokenizer.save_pretrained(out["llm"])
    return out


@contextmanager
def random_weights(device: str, seed: int = 0):
    """`from_pretrained` of the adapters' Auto classes builds the model from the folder's config, on `device`, with
    transformers' own initialisation from a fixed seed: the weights of a 7B model never touch the disk."""
    import torch
    import transformers as tf

    def builder(auto):
        def from_pretrained(pretrained, dtype=None, attn_implementation=None, **kwargs):
            config = tf.AutoConfig.from_pretrained(pretrained)
            torch.manual_seed(seed)
            with torch.device(device):
                return auto.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
        return from_pretrained

    with mock.patch.object(tf.AutoModelForImageTextToText, "from_pretrained",
                           builder(tf.AutoModelForImageTextToText)), \
            mock.patch.object(tf.AutoModelForCausalLM, "from_pretrained", builder(tf.AutoModelForCausalLM)):
        yield


def write_videos(root: Path, n_videos: int, frame: tuple[int, int]) -> list[str]:
    """`n_videos` frame folders of FRAMES JPEGs each (MM-AU's layout), DISTINCT_CLIPS different clips hard-linked."""
    from lmms_eval_tasks.layouts import write_frame_folder

    height, width = frame
    clips = []
    for c in range(min(DISTINCT_CLIPS, n_videos)):
        rng = np.random.default_rng(c)
        blocks = rng.integers(0, 256, (FRAMES, max(1, height // 16), max(1, width // 16), 3), dtype=np.uint8)
        frames = np.ascontiguousarray(np.repeat(np.repeat(blocks, 16, axis=1), 16, axis=2)[:, :height, :width])
        write_frame_folder(root / f"clip{c}", frames, ".jpg", 6)
        clips.append(root / f"clip{c}")
    paths = []
    for v in range(n_videos):
        folder = root / f"video{v:05d}"
        if v < len(clips):
            folder = clips[v]
        else:
            folder.mkdir()
            for f in sorted(clips[v % len(clips)].iterdir()):
                os.link(f, folder / f.name)
        paths.append(str(folder))
    return paths


def documents(videos: list[str]) -> list[dict]:
    """VRU-Accident's six question types per video, each question text numbered by its clip (so that the blind
    questions are distinct, as a benchmark's are)."""
    from visdep_metrics.demo.fixtures import VRU_QUESTIONS, VRU_SUFFIX

    return [{"question": f"Clip {v + 1}. {q}{VRU_SUFFIX}", "options": list(options), "answer_index": 0,
             "video": path}
            for v, path in enumerate(videos) for q, options in VRU_QUESTIONS.values()]


def requests_for(adapter, docs: list[dict], video: bool, task: str) -> list:
    """lmms-eval's multiple_choice requests (K per document), wired to the adapter as the evaluator wires them."""
    from lmms_eval.api.instance import Instance

    from lmms_eval_tasks import tasks

    def to_visual(doc: dict) -> list[str]:
        return [doc["video"]] if video else []

    adapter.task_dict = {task: {"test": docs}}
    return [Instance("loglikelihood", (tasks.doc_to_text(d), c, to_visual, i, task, "test"), k,
                     metadata={"task": task, "doc_id": i, "repeats": 1})
            for i, d in enumerate(docs) for k, c in enumerate(tasks.doc_to_choice(d))]


def visual_tokens(processor, video: str) -> int:
    """Video tokens the language model sees for one clip (the processor's expansion of the video placeholder)."""
    from model_adapters.frames import read_frames

    frames, metadata = read_frames(Path(video), FRAMES)
    encoding = processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[frames],
                         video_metadata=[metadata], do_sample_frames=False, return_tensors="pt")
    video_id = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    return int((encoding["input_ids"] == video_id).sum())


def time_boxed(adapter, docs: list[dict], video: bool, seconds: float, chunk_videos: int, sync) -> dict:
    """Score chunks of `chunk_videos` videos' questions until `seconds` are spent or the documents run out (one
    warm-up chunk first, not counted); questions, seconds, questions/s."""
    per_chunk = chunk_videos * QUESTIONS_PER_VIDEO
    chunks = [docs[i:i + per_chunk] for i in range(0, len(docs), per_chunk)]
    adapter.loglikelihood(requests_for(adapter, chunks[0], video, "warmup"))
    sync()
    scored, spent = 0, 0.0
    for n, chunk in enumerate(chunks[1:]):
        start = time.perf_counter()
        values = adapter.loglikelihood(requests_for(adapter, chunk, video, f"chunk{n}"))
        sync()
        spent += time.perf_counter() - start
        scored += len(chunk)
        if len(values) != sum(len(d["options"]) for d in chunk) or not all(np.isfinite(v[0]) for v in values):
            raise SystemExit(f"chunk {n}: {len(values)} values, or one not finite")
        if spent + spent / (n + 1) > seconds:
            break
    if not scored:
        raise SystemExit("no chunk after the warm-up: raise --max-videos")
    return {"questions": scored, "seconds": round(spent, 3), "questions_per_s": round(scored / spent, 3)}


def free(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def vllm_adapter():
    """visdep_vllm's class, or (None, why not)."""
    if importlib.util.find_spec("vllm") is None:
        return None, "vLLM is not installed here (it cannot travel as wheels within the 64 MiB that reach the GPU)"
    from model_adapters.registry import MODELS

    path = MODELS.get("visdep_vllm")
    if path is None:
        return None, "visdep_vllm is not registered in model_adapters.registry"
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name), None


@contextmanager
def vllm_random_weights():
    """vLLM's own random weights (`load_format="dummy"`) for the engine the adapter builds: no weights on disk."""
    import vllm

    real = vllm.LLM
    with mock.patch.object(vllm, "LLM", lambda *a, **kw: real(*a, load_format="dummy", **kw)):
        yield


def vllm_engine_arguments(args: argparse.Namespace) -> dict:
    """Defaults for the bench (a second engine must fit beside a first one vLLM may not have released) and
    `--vllm-args` over them."""
    defaults = {"max_model_len": 16384, **({"gpu_memory_utilization": 0.4} if args.device.startswith("cuda") else {})}
    return {**defaults, **args.vllm_args}


def run(args: argparse.Namespace, save) -> dict:
    """The phases in turn; `save(report)` after each, so that a run stopped by its timeout keeps what it measured.
    A phase is skipped when less than its minimum share of the budget is left (vLLM's engine start is long)."""
    import torch
    import transformers

    from lmms_eval_tasks.evaluation import Evaluation, evaluating
    from model_adapters.adapter import VisdepLLM, VisdepVLM

    started = time.perf_counter()
    spec = SIZES[args.size]
    root = Path(args.workdir or tempfile.mkdtemp(prefix="visdep_gpu_bench_"))
    folders = checkpoints(args.size, root / "checkpoints")
    videos = write_videos(root / "videos", args.max_videos, spec["frame"])
    docs = documents(videos)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    common = dict(device=args.device, dtype=args.dtype, batch_size=args.batch_size, attn_implementation="sdpa")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    report = {"machine": {"gpu": gpu, "cpus": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "transformers": transformers.__version__},
              "settings": {"size": args.size, "device": args.device, "dtype": args.dtype,
                           "batch_size": args.batch_size, "frames": FRAMES, "frame_size": list(spec["frame"]),
                           "questions_per_video": QUESTIONS_PER_VIDEO, "scoring": "letter", "attention": "sdpa",
                           "budget_s": args.budget_s, "vllm_batch_size": args.vllm_batch_size,
                           "vllm_engine_arguments": vllm_engine_arguments(args)},
              "results": [], "skipped": []}
    phases = [("visdep_vlm", "vlm", True, 0.45), ("visdep_llm", "llm", False, 0.15)]  # share of the budget
    vllm_class, why_not = vllm_adapter()
    if vllm_class is None:
        report["skipped"].append({"adapter": "visdep_vllm", "reason": why_not})
    else:
        phases += [("visdep_vllm", "vlm", True, 0.15), ("visdep_vllm", "llm", False, 0.05)]
    with evaluating(Evaluation(scoring="letter")):
        for name, kind, video, share in phases:
            left = args.budget_s - (time.perf_counter() - started)
            if left < (0.25 if name == "visdep_vllm" else 0.1) * args.budget_s:
                report["skipped"].append({"adapter": name, "input": "video" if video else "blind",
                                          "reason": f"{left:.0f} s of the budget left"})
                continue
            build = time.perf_counter()
            if name == "visdep_vllm":
                with vllm_random_weights():
                    adapter = vllm_class(pretrained=str(folders[kind]), dtype=args.dtype,
                                         batch_size=args.vllm_batch_size, **({"max_frames": FRAMES} if video else {}),
                                         **vllm_engine_arguments(args))
            else:
                cls = VisdepVLM if kind == "vlm" else VisdepLLM
                extra = {"max_frames": FRAMES} if kind == "vlm" else {}
                with random_weights(args.device):
                    adapter = cls(pretrained=str(folders[kind]), **common, **extra)
            built = time.perf_counter() - build
            left = args.budget_s - (time.perf_counter() - started)
            result = time_boxed(adapter, docs, video, min(share * args.budget_s, 0.8 * left), args.chunk_videos,
                                sync)
            model = getattr(adapter, "model", None)
            result.update(adapter=name, model=("Qwen2.5-VL-7B-Instruct" if kind == "vlm" else "Qwen2.5-7B-Instruct")
                          + (" shape" if args.size == "7b" else " structure, tiny"),
                          input="video" if video else "blind", build_s=round(built, 2),
                          parameters=sum(p.numel() for p in model.parameters()) if hasattr(model, "parameters")
                          else None)
            if video and name == "visdep_vlm":
                result["visual_tokens_per_video"] = visual_tokens(adapter.engine.processor, videos[0])
            if args.device.startswith("cuda"):
                result["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                torch.cuda.reset_peak_memory_stats()
            report["results"].append(result)
            report["wall_s"] = round(time.perf_counter() - started, 1)
            save(report)
            del adapter, model
            free(args.device)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    return report


def print_table(report: dict) -> None:
    m, s = report["machine"], report["settings"]
    print(f"\n{m['gpu'] or 'CPU'}, torch {m['torch']}, transformers {m['transformers']}, Python {m['python']}; "
          f"{s['dtype']}, {s['attention']}, batch {s['batch_size']}, {s['frames']} frames of "
          f"{s['frame_size'][1]}x{s['frame_size'][0]}, {s['questions_per_video']} questions per video, "
          f"{s['scoring']} scoring")
    print(f"{'adapter':12} {'model':40} {'input':6} {'questions':>9} {'seconds':>8} {'q/s':>8} {'build s':>8}  "
          "visual tokens/video")
    for r in report["results"]:
        print(f"{r['adapter']:12} {r['model']:40} {r['input']:6} {r['questions']:9d} {r['seconds']:8.2f} "
              f"{r['questions_per_s']:8.2f} {r['build_s']:8.1f}  {r.get('visual_tokens_per_video', '')}")
    for s in report["skipped"]:
        print(f"{s['adapter']}{' ' + s['input'] if 'input' in s else ''}: skipped, {s['reason']}")
    print(f"wall {report['wall_s']} s")


def fail(message: str) -> None:
    print(f"bench_gpu: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_bench.json")
    parser.add_argument("--size", choices=sorted(SIZES), default="7b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--vllm-batch-size", type=int, default=64, help="questions per vLLM call")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock seconds for the whole run")
    parser.add_argument("--chunk-videos", type=int, default=8, help="videos per timed loglikelihood call")
    parser.add_argument("--max-videos", type=int, default=1200, help="videos written (each phase stops at them)")
    parser.add_argument("--vllm-args", type=json.loads, default={},
                        help='JSON: engine arguments of visdep_vllm (default {"max_model_len": 16384})')
    parser.add_argument("--workdir", help="where checkpoints and clips are written (default: a temporary folder)")
    args = parser.parse_args(argv)
    import torch
    import transformers

    required = transformers_requirement()
    if not required.specifier.contains(transformers.__version__, prereleases=True):
        fail(f"transformers {transformers.__version__}: visdep needs {required} (pyproject.toml); install one there")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device here (--size tiny --device cpu runs on a CPU)")
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")  # the adapters log per call; the table is the output
    args.out.mkdir(parents=True, exist_ok=True)

    def save(report: dict) -> None:
        (args.out / "gpu_bench.json").write_text(json.dumps(report, indent=2) + "\n")

    report = run(args, save)
    save(report)
    print_table(report)


if __name__ == "__main__":
    main()
