"""What the model is shown, checked against references that share no code with the adapters.

The test writes its own small VRU-Accident and MM-AU downloads in the official layouts (mp4 files
with known frame rates, jpg/png frame folders), runs every tiny family through the real `lmms-eval`
command line (VLMs blind and video; causal LMs with and without a chat template, a SentencePiece
tokenizer and one that adds no BOS), letter and option scoring, and compares every sample with
`tests/adapters/independent_reference.py`, which builds prompts, frames, timing and tokens from
the models' documented usage. The questions' texts are this file's own, not read back through the
loaders."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from tests.adapters import independent_reference as ref
from tests.helpers.lmms_cli import free_port, lmms_eval_env, run_lmms_eval
from visdep_metrics.demo.tiny import LLM_KINDS, VLM_KINDS

TOLERANCE = 1e-4
MAX_FRAMES = 16
FOLDER_FPS = 30.0  # the rate MM-AU's frame folders are documented to be timed at (README)

# (category, question, options, answer letter) of the six questions about one VRU-Accident video
VRU_QUESTIONS = [
    ("weather and light", "What's the weather and lighting?", ["sunny day", "cloudy night", "stormy day",
                                                               "rainy evening"], "A"),
    ("location", "Where is the accident?", ["rural road", "urban street", "highway, near an exit", "tunnel"], "B"),
    ("road type", "What type of road is shown?", ["intersection", "straight road", "roundabout", "curve"], "A"),
    ("accident type", "What kind of accident happened?", ["a car hits a pedestrian", "a bus hits a cyclist",
                                                           "two cars collide", "a truck rolls over"], "C"),
    ("accident reason", "Why did the accident happen?", ["the driver was speeding", "the cyclist ran a red light",
                                                         "the road was icy", "the pedestrian was distracted"], "D"),
    ("prevention method", "How could it have been prevented?", ["slow down", "look both ways", "stop at the light",
                                                                "keep distance"], "B"),
]
MMAU_OPTIONS = ["pedestrian runs the red light.", "the ego car does not yield.", "a cyclist turns left suddenly.",
                "the truck changes lanes without signalling.", "the car ahead brakes hard."]


def _write_mp4(path: Path, n_frames: int, fps: int, seed: int, size=(48, 64)) -> None:
    frames = np.random.default_rng(seed).integers(0, 256, (n_frames, *size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())


def _write_folder(folder: Path, n_frames: int, suffix: str, digits: int, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n_frames):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(folder / f"{i + 1:0{digits}d}{suffix}")


@pytest.fixture(scope="module")
def fidelity_data(tmp_path_factory) -> tuple[dict[str, str], dict[str, tuple]]:
    """({ENV: root}, {question_id: (question, options, answer index, video loader or None)})."""
    root = tmp_path_factory.mktemp("fidelity")
    questions = {}
    vru = root / "vru"
    # VRU_1: 40 frames at 4 fps (10 s), six questions; VRU_7: 23 frames at 6 fps, one question
    _write_mp4(vru / "VRU_videos/CAP_DATA/VRU_1.mp4", 40, 4, seed=1)
    _write_mp4(vru / "VRU_videos/DADA_2000/VRU_7.mp4", 23, 6, seed=2)
    annotations = {
        "CAP_DATA": {"./VRU_videos/CAP_DATA/VRU_1.mp4": {
            cat: {"question": q, "options": ", ".join(f"{ref.LETTERS[k]}. {o}" for k, o in enumerate(opts)),
                  "GT": gt} for cat, q, opts, gt in VRU_QUESTIONS}},
        "DADA_2000": {"./VRU_videos/DADA_2000/VRU_7.mp4": {"location": {
            "question": "Where is the accident?", "options": "A. tunnel, B. bridge, C. parking lot, D. school zone",
            "GT": "C"}}},
        "DoTA": {}, "MANUAL_DATA": {}}
    for src, data in annotations.items():
        path = vru / "MetaData" / src / f"{src}_VQA_annotation.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(data))
    for cat, q, opts, gt in VRU_QUESTIONS:
        questions[f"CAP_DATA/VRU_1/{cat}"] = (q, opts, ref.LETTERS.index(gt),
                                               lambda: ref.load_mp4(vru / "VRU_videos/CAP_DATA/VRU_1.mp4", MAX_FRAMES))
    questions["DADA_2000/VRU_7/location"] = ("Where is the accident?", ["tunnel", "bridge", "parking lot",
                                                                         "school zone"], 2,
                                             lambda: ref.load_mp4(vru / "VRU_videos/DADA_2000/VRU_7.mp4", MAX_FRAMES))

    mmau = root / "mmau"
    cap = [{"video_id": "101", "num_option": 5, "qid": "0", **{f"a{k}": o for k, o in enumerate(MMAU_OPTIONS)},
            "answer": "1", "question": "what is the cause of the accident?", "video_name": "43-000101"},
           {"video_id": "102", "num_option": 5, "qid": "0", **{f"a{k}": o for k, o in enumerate(MMAU_OPTIONS[::-1])},
            "answer": "4", "question": "what is the cause of the accident?", "video_name": "5-000102"}]
    (mmau / "ArA label").mkdir(parents=True)
    (mmau / "ArA label" / "test.json").write_text(json.dumps(cap))
    _write_folder(mmau / "CAP-DATA/43/43/000101/images", 20, ".jpg", 6, seed=3)
    _write_folder(mmau / "CAP-DATA/1-10/5/000102/images", 37, ".jpg", 6, seed=4)
    _write_folder(mmau / "DADA-DATA/11/093/images", 30, ".png", 4, seed=5)
    import xlwt

    book = xlwt.Workbook()
    sheet = book.add_sheet("test")
    header = ["video", "type", "abnormal start frame", "accident frame", "abnormal end frame", "total frames",
              "question", "answer", "a0", "a1", "a2", "a3", "a4"]
    row = ["093", 11.0, 5.0, 20.0, 25.0, 30.0, "what is the cause of the accident?", 3.0, *MMAU_OPTIONS]
    for c, (h, v) in enumerate(zip(header, row, strict=True)):
        sheet.write(0, c, h)
        sheet.write(1, c, v)
    (mmau / "Reason_Answering/data/dada").mkdir(parents=True)
    book.save(str(mmau / "Reason_Answering/data/dada/testData.xls"))
    folder = mmau / "CAP-DATA/43/43/000101/images"
    questions["cap-101"] = (cap[0]["question"], MMAU_OPTIONS, 1,
                            lambda: ref.load_image_folder(folder, MAX_FRAMES, FOLDER_FPS))
    questions["cap-102"] = (cap[1]["question"], MMAU_OPTIONS[::-1], 4,
                            lambda: ref.load_image_folder(mmau / "CAP-DATA/1-10/5/000102/images", MAX_FRAMES,
                                                          FOLDER_FPS))
    questions["dada-11-093"] = ("what is the cause of the accident?", MMAU_OPTIONS, 3,
                                lambda: ref.load_image_folder(mmau / "DADA-DATA/11/093/images", MAX_FRAMES,
                                                              FOLDER_FPS))
    return {"VRU_ACCIDENT_ROOT": str(vru), "MMAU_ROOT": str(mmau)}, questions


VLM_TASKS = "vru_accident_blind,vru_accident_video,mmau_blind,mmau_video"
LLM_TASKS = "vru_accident_blind,mmau_blind"


@pytest.fixture(scope="module")
def cli_samples(fidelity_data, tiny_models, tmp_path_factory):
    """{(scoring, kind, task): [sample lines]} from two real `lmms-eval` processes, one per scoring mode, side
    by side on one thread each, each evaluating every family (one `--config` file listing them: the CLI's
    start-up is paid once per process)."""
    env_roots, _ = fidelity_data
    outs = {scoring: tmp_path_factory.mktemp(f"fidelity_{scoring}") for scoring in ("letter", "option")}
    configs = []
    for kind in VLM_KINDS + LLM_KINDS:
        vlm = kind in VLM_KINDS
        model_args = f"pretrained={tiny_models[kind]},device=cpu,dtype=float32"
        configs.append({"model": "visdep_vlm" if vlm else "visdep_llm", "tasks": VLM_TASKS if vlm else LLM_TASKS,
                        "model_args": model_args + (f",max_frames={MAX_FRAMES}" if vlm else ""), "batch_size": 4})
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {}
        for scoring, out in outs.items():
            (out / "config.yaml").write_text(yaml.safe_dump(configs))
            env = lmms_eval_env(env_roots, VISDEP_SCORING=scoring, OMP_NUM_THREADS="1")
            runs[scoring] = pool.submit(run_lmms_eval, ["--config", str(out / "config.yaml")], env, out, 900)
        for scoring, run in runs.items():
            assert run.result().returncode == 0, (outs[scoring] / "cli.log").read_text()[-4000:]
    found = {}
    for scoring, out in outs.items():
        for kind in VLM_KINDS + LLM_KINDS:
            for task in (VLM_TASKS if kind in VLM_KINDS else LLM_TASKS).split(","):
                # lmms-eval writes into OUT/<last two parts of pretrained=>, here "<tmp>__<kind>"
                files = sorted(out.glob(f"*__{kind}/*_samples_{task}.jsonl"))
                assert len(files) == 1, f"{scoring} {kind} {task}: {files}\n{(out / 'cli.log').read_text()[-4000:]}"
                found[scoring, kind, task] = [json.loads(line) for line in files[0].read_text().splitlines()]
    found["logs"] = {scoring: (out / "cli.log").read_text() for scoring, out in outs.items()}
    return found


@pytest.fixture(scope="module")
def loaded(tiny_models):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    cache = {}

    def get(kind: str):
        if kind not in cache:
            path = tiny_models[kind]
            if kind in VLM_KINDS:
                cache[kind] = (AutoModelForImageTextToText.from_pretrained(path).eval(),
                               AutoProcessor.from_pretrained(path))
            else:
                cache[kind] = (AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path))
        return cache[kind]

    return get


def _choices(scoring: str, options: list[str]) -> list[str]:
    return list(ref.LETTERS[: len(options)]) if scoring == "letter" else list(options)


@pytest.mark.slow
@pytest.mark.parametrize("scoring", ["letter", "option"])
@pytest.mark.parametrize("kind", VLM_KINDS + LLM_KINDS)
def test_cli_equals_the_independent_reference(kind, scoring, cli_samples, fidelity_data, loaded):
    _, questions = fidelity_data
    model, processor = loaded(kind)
    tasks = (VLM_TASKS if kind in VLM_KINDS else LLM_TASKS).split(",")
    for task in tasks:
        rows = cli_samples[scoring, kind, task]
        bench = task.rsplit("_", 1)[0]
        expected_ids = {q for q in questions if q.startswith("cap-") or q.startswith("dada-")} if bench == "mmau" \
            else {q for q in questions if not (q.startswith("cap-") or q.startswith("dada-"))}
        assert {r["visdep"]["question_id"] for r in rows} == expected_ids, task
        for row in rows:
            record = row["visdep"]
            question, options, answer, video = questions[record["question_id"]]
            assert row["input"] == ref.mc_prompt(question, options), "the task's prompt"
            assert (record["answer_index"], record["n_options"], record["scoring"]) == (answer, len(options), scoring)
            choices = _choices(scoring, options)
            if kind in VLM_KINDS:
                frames = video() if task.endswith("_video") else None
                want, scored, _ = ref.vlm_option_logprobs(model, processor, question, options, choices, frames)
            else:
                want, scored = ref.llm_option_logprobs(model, processor, question, options, choices)
            assert record["continuations"] == scored, f"{task} {record['question_id']}"
            np.testing.assert_allclose(record["option_logprobs"], want, rtol=0, atol=TOLERANCE,
                                       err_msg=f"{kind} {task} {record['question_id']}")


@pytest.mark.slow
def test_base_models_score_a_spaced_letter_after_the_answer_cue(cli_samples):
    """The tiny base LLM (no chat template) and the SentencePiece one score " A" after "\\nAnswer:", and the
    DeepSeek-style template ("...Assistant:") gets the space too; ChatML ("assistant\\n") does not."""
    for kind, want in (("qwen2_base", " A"), ("mistral_base", " A"), ("deepseek", " A"), ("qwen2", "A"),
                       ("llama", "A")):
        rows = cli_samples["letter", kind, "vru_accident_blind"]
        assert rows[0]["visdep"]["continuations"][0] == want, kind


def _vru_docs(fidelity_data, monkeypatch, video: str) -> list[dict]:
    from lmms_eval_tasks.loaders import load_benchmark

    for name, root in fidelity_data[0].items():
        monkeypatch.setenv(name, root)
    monkeypatch.setenv("VISDEP_SCORING", "letter")
    return [q.document() for q in load_benchmark("vru_accident") if q.video.endswith(video)]


def test_qwen2_5_vl_sees_the_clip_timing(tiny_models, fidelity_data, loaded, monkeypatch):
    """16 frames of a 40-frame clip at 4 fps (10 s) sample 1.6 frames per second: temporal_patch_size 2 /
    1.6 = 1.25 s per temporal patch reaches the model (transformers' default, 24 fps, would give 2/24).
    The reference that gets the clip's timing agrees with the adapter; one without it does not."""
    from tests.helpers.adapters import make_adapter, requests_for

    docs = _vru_docs(fidelity_data, monkeypatch, "CAP_DATA/VRU_1.mp4")
    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], max_frames=MAX_FRAMES)
    seen = []
    adapter.model.register_forward_pre_hook(
        lambda _, args, kwargs: seen.append(kwargs.get("second_per_grid_ts")), with_kwargs=True)
    got = [-loss for loss, _, _ in adapter.loglikelihood(requests_for(adapter, docs, video=True))]
    assert [None if t is None else t.tolist() for t in seen if t is not None] == [[1.25]]

    model, processor = loaded("qwen2_5_vl")
    frames, metadata = ref.load_mp4(Path(fidelity_data[0]["VRU_ACCIDENT_ROOT"]) / "VRU_videos/CAP_DATA/VRU_1.mp4",
                                    MAX_FRAMES)
    assert (metadata.fps, metadata.total_num_frames, len(frames)) == (4.0, 40, 16)
    question, options, _, _ = fidelity_data[1][docs[0]["question_id"]]
    want, _, inputs = ref.vlm_option_logprobs(model, processor, question, options, list("ABCD"), (frames, metadata))
    assert inputs["second_per_grid_ts"].tolist() == [1.25]
    np.testing.assert_allclose(got[:4], want, rtol=0, atol=TOLERANCE)
    untimed = ref.VideoMetadata(total_num_frames=16, frames_indices=list(range(16)))  # what a bare array implies
    wrong, _, inputs = ref.vlm_option_logprobs(model, processor, question, options, list("ABCD"), (frames, untimed))
    assert inputs["second_per_grid_ts"].tolist() == [pytest.approx(2 / 24)]
    gap = float(np.max(np.abs(np.array(wrong) - got[:4])))
    print(f"\nQwen2.5-VL, timed at 24 fps instead of 4: letters' log-probabilities move by up to {gap:.3f}")
    assert gap > 10 * TOLERANCE, "the comparison must be able to see the timing"


def test_base_llm_without_the_answer_cue_would_be_seen(tiny_models, fidelity_data, loaded, monkeypatch):
    """The reference's answer cue matters to the comparison: scoring "A" glued to "...directly." (what
    the adapter did before) differs from the adapter's values by far more than the tolerance."""
    from tests.helpers.adapters import make_adapter, requests_for

    docs = _vru_docs(fidelity_data, monkeypatch, "CAP_DATA/VRU_1.mp4")[:1]
    for kind in ("qwen2_base", "mistral_base"):
        adapter = make_adapter(kind, tiny_models[kind])
        got = [-loss for loss, _, _ in adapter.loglikelihood(requests_for(adapter, docs, video=False))]
        model, tokenizer = loaded(kind)
        question, options, _, _ = fidelity_data[1][docs[0]["question_id"]]
        want, scored = ref.llm_option_logprobs(model, tokenizer, question, options, list("ABCD"))
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)
        assert scored == [" A", " B", " C", " D"]
        context = tokenizer(ref.mc_prompt(question, options), return_tensors="pt")["input_ids"]
        glued = []
        for letter in "ABCD":
            ids = tokenizer(ref.mc_prompt(question, options) + letter, return_tensors="pt")["input_ids"]
            with torch.inference_mode():
                logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            glued.append(float(logprobs[context.shape[1] - 1:].gather(-1, ids[0, context.shape[1]:, None]).sum()))
        gap = float(np.max(np.abs(np.array(glued) - got)))
        print(f"\n{kind}: 'A' glued to the prompt instead of ' A' after 'Answer:' moves log-probabilities by {gap:.3f}")
        assert gap > 10 * TOLERANCE, kind


DECODES = re.compile(r"visdep_vlm rank (\d+): (\d+) questions scored; (\d+) videos, (\d+) decodes")


@pytest.mark.slow
def test_cli_decodes_each_video_once(cli_samples):
    """Per VLM and process: 19 distinct questions (9 blind: cap-101 and dada-11-093 read the same without their
    videos and are scored once; 7 VRU-Accident video over 2 mp4 files, 3 MM-AU video over 3 frame folders),
    5 videos, 5 decodes."""
    for scoring, log in cli_samples["logs"].items():
        assert DECODES.findall(log) == [("0", "19", "5", "5")] * len(VLM_KINDS), scoring



@pytest.mark.slow
def test_two_cpu_processes_give_the_same_samples_as_one(cli_samples, fidelity_data, tiny_models, tmp_path):
    """torchrun --nproc_per_node 2 (gloo on the CPU): both ranks score, rank 0 writes every sample, values
    equal the one-process run; lmms-eval's padding copies of the shorter rank are not scored twice."""
    out = tmp_path / "ranks2"
    out.mkdir()
    model_args = f"pretrained={tiny_models['qwen2_5_vl']},device=cpu,dtype=float32,max_frames={MAX_FRAMES}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "lmms_eval", "--model", "visdep_vlm", "--model_args", model_args, "--tasks", VLM_TASKS,
           "--batch_size", "4", "--log_samples", "--output_path", str(out)]
    env = lmms_eval_env(fidelity_data[0], VISDEP_SCORING="letter")
    proc = subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    ranks = {int(r): (int(q), int(v), int(d)) for r, q, v, d in DECODES.findall(log)}
    assert set(ranks) == {0, 1}, log[-3000:]
    assert all(videos == decodes for _, videos, decodes in ranks.values())
    # documents stride over the ranks: VRU-Accident 7 -> 4 + 3, MM-AU 3 -> 2 + 1, blind and video each; rank 0's
    # two MM-AU questions (cap-101, dada-11-093) read the same blind and are scored once
    assert {r: q for r, (q, _, _) in ranks.items()} == {0: 11, 1: 8}
    for task in VLM_TASKS.split(","):
        [file] = out.glob(f"*/*_samples_{task}.jsonl")
        two = {row["visdep"]["question_id"]: row["visdep"]["option_logprobs"]
               for row in map(json.loads, file.read_text().splitlines())}
        one = {row["visdep"]["question_id"]: row["visdep"]["option_logprobs"]
               for row in cli_samples["letter", "qwen2_5_vl", task]}
        assert one.keys() == two.keys(), task
        for qid in one:
            np.testing.assert_allclose(two[qid], one[qid], rtol=0, atol=1e-5, err_msg=f"{task} {qid}")
