"""What a model is, by content (`model_adapters.identity`), and what an adapter records about itself once loaded:
its arguments with defaults filled in (`model_adapters.settings`) and its checkpoint's identity, in the store's model
key and in `results["visdep"]["model"]` (the contract with the audit)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from model_adapters import identity
from tests.helpers import checkpoints
from tests.helpers.adapters import make_adapter
from tests.helpers.imports import heavy_modules_loaded
from tests.helpers.lmms_cli import lmms_eval_env, read_results, read_samples, run_lmms_eval


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documented_folder_identity(folder: Path) -> str:
    """docs/durability.md's definition, for a folder of small files only: SHA-256 of the canonical JSON (sorted
    keys, no spaces) of [[relative name, "sha256", SHA-256 of the content], ...] over its files, sorted by name,
    leaving out generation_config.json, documentation and hidden files."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "generation_config.json"
                   and not p.name.endswith(".md") and not any(x.startswith(".") for x in p.relative_to(folder).parts))
    entries = [[p.relative_to(folder).as_posix(), "sha256", sha256_file(p)] for p in files]
    return hashlib.sha256(json.dumps(entries, separators=(",", ":")).encode()).hexdigest()


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}, indent=2))


@pytest.fixture
def checkpoint(tiny_models, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_models["qwen2_5_vl"], tmp_path / "qwen2_5_vl"))


# --------------------------------------------------------------------------- checkpoints
def test_a_folder_is_identified_by_every_file_that_changes_a_value(checkpoint):
    original = identity.folder_identity(checkpoint)
    assert original == {"identity": documented_folder_identity(checkpoint), "source": f"folder {checkpoint.resolve()}"}

    def changed(name: str, edit) -> str:
        path = checkpoint / name
        before = path.read_bytes()
        edit(path)
        try:
            return identity.folder_identity(checkpoint)["identity"]
        finally:
            path.write_bytes(before)

    template = "chat_template.jinja"
    assert "You are a helpful assistant." in (checkpoint / template).read_text()
    edits = {
        template: lambda p: p.write_text(p.read_text().replace("a helpful assistant", "a careful assistant")),
        "processor_config.json": lambda p: edit_json(p, video_processor={
            **json.loads(p.read_text())["video_processor"], "max_pixels": 112 * 112}),
        "config.json": lambda p: edit_json(p, tie_word_embeddings=True),
        "tokenizer_config.json": lambda p: edit_json(p, model_max_length=4096),
        "tokenizer.json": lambda p: p.write_text(p.read_text().replace('"<|im_end|>"', '"<|im_stop|>"')),
        "model.safetensors": lambda p: p.write_bytes(p.read_bytes()[:-4] + b"\x00\x00\x80\x3f"),
    }
    for name, edit in edits.items():
        assert changed(name, edit) != original["identity"], name
    # content, not modification time, for small files: put back, the same checkpoint
    assert identity.folder_identity(checkpoint) == original


def test_files_that_change_no_value_leave_the_identity_alone(checkpoint):
    original = identity.folder_identity(checkpoint)
    (checkpoint / "README.md").write_text("# a model card\n")
    (checkpoint / "LICENSE").write_text("Apache-2.0\n")
    edit_json(checkpoint / "generation_config.json", temperature=0.1)
    (checkpoint / ".cache" / "huggingface").mkdir(parents=True)
    (checkpoint / ".cache" / "huggingface" / "config.json.metadata").write_text("abc\n")
    (checkpoint / "__pycache__").mkdir()
    (checkpoint / "__pycache__" / "modeling.cpython-311.pyc").write_bytes(b"\x00")
    assert identity.folder_identity(checkpoint) == original


def test_large_weights_count_by_size_and_modification_time(checkpoint, monkeypatch):
    monkeypatch.setattr(identity, "CONTENT_HASH_MAX_BYTES", 100_000)  # the weights (~1 MB) are now "large"
    weights = checkpoint / "model.safetensors"
    original = identity.folder_identity(checkpoint)["identity"]
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # saved again
    assert identity.folder_identity(checkpoint)["identity"] != original


def test_a_large_file_replaced_with_equal_size_and_time_is_another_checkpoint(checkpoint, monkeypatch):
    """Weights over the whole-content limit count by sampled content too: another file of the same size with its
    modification time put back (what Nix and reproducible image layers give every file) is seen."""
    monkeypatch.setattr(identity, "CONTENT_HASH_MAX_BYTES", 100_000)
    weights = checkpoint / "model.safetensors"
    monkeypatch.setattr(identity, "SAMPLE_BLOCK_BYTES", 1024)
    assert weights.stat().st_size > identity.SAMPLE_BLOCKS * identity.SAMPLE_BLOCK_BYTES  # sampled, not read whole
    original = identity.folder_identity(checkpoint)["identity"]
    stat = weights.stat()
    weights.write_bytes(os.urandom(stat.st_size))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert identity.folder_identity(checkpoint)["identity"] != original


def test_sampled_content_reads_spread_blocks_of_a_large_file(tmp_path, monkeypatch):
    monkeypatch.setattr(identity, "SAMPLE_BLOCKS", 4)
    monkeypatch.setattr(identity, "SAMPLE_BLOCK_BYTES", 10)
    path = tmp_path / "f"
    data = bytes(range(100))
    path.write_bytes(data)
    blocks = b"".join(data[o:o + 10] for o in (0, 30, 60, 90))  # offsets 0, (100-10)/3 * i
    assert identity.sampled_sha256(path) == hashlib.sha256(blocks).hexdigest()
    path.write_bytes(data[:40])
    assert identity.sampled_sha256(path) == hashlib.sha256(data[:40]).hexdigest()  # small: the whole content


def test_a_peft_adapter_is_itself_and_its_base(checkpoint, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(checkpoint)}))
    found = identity.checkpoint_identity(str(adapter))
    assert found["source"] == f"folder {adapter} (adapter) on folder {checkpoint}"
    edit_json(checkpoint / "config.json", tie_word_embeddings=True)
    assert identity.checkpoint_identity(str(adapter))["identity"] != found["identity"]
    # an adapter saved with a config.json of its own is a whole model: transformers loads it, not the base
    (adapter / "config.json").write_text("{}")
    assert identity.checkpoint_identity(str(adapter)) == identity.folder_identity(adapter)


def test_a_hub_snapshot_is_its_commit_and_its_files(tiny_models, tmp_path):
    from tests.helpers.checkpoints import hub_snapshot

    snapshot = hub_snapshot(tiny_models["qwen2"], tmp_path, "org/tiny")
    cache = str(tmp_path / "hub")
    found = identity.checkpoint_identity("org/tiny", cache_dir=cache)
    assert found["source"] == f"hub org/tiny@{snapshot.name}"
    assert identity.checkpoint_identity("org/tiny", commit=snapshot.name, cache_dir=cache) == found
    edit_json(snapshot / "config.json", rope_parameters={"rope_theta": 100.0, "rope_type": "default"})
    assert identity.checkpoint_identity("org/tiny", cache_dir=cache)["identity"] != found["identity"]


def test_the_loaded_class_and_its_source_are_known():
    from transformers import Qwen2ForCausalLM

    class Custom(Qwen2ForCausalLM):
        pass

    native = identity.loaded_code(Qwen2ForCausalLM.__new__(Qwen2ForCausalLM))
    assert native["class"] == "transformers.models.qwen2.modeling_qwen2.Qwen2ForCausalLM"
    import transformers.models.qwen2.modeling_qwen2 as modeling

    assert native["source_sha256"] == sha256_file(Path(modeling.__file__))
    custom = identity.loaded_code(Custom.__new__(Custom))
    assert custom["class"].endswith("test_the_loaded_class_and_its_source_are_known.<locals>.Custom")
    assert custom["source_sha256"] == sha256_file(Path(__file__))


def test_the_libraries_that_compute_values_are_keyed():
    assert {"torch", "transformers", "tokenizers", "torchvision", "av", "pillow"} <= set(identity.library_versions())


def test_loader_switches_that_choose_what_is_loaded_change_the_settings():
    from model_adapters.registry import score_settings

    plain = score_settings("visdep_llm", {})
    assert score_settings("visdep_llm", {"trust_remote_code": "False"}) == plain
    assert score_settings("visdep_llm", {"trust_remote_code": True}) == {**plain, "trust_remote_code": "true"}
    assert score_settings("visdep_llm", {"use_safetensors": "false"})["use_safetensors"] == "false"


def test_a_copy_that_keeps_modification_times_is_the_same_checkpoint(checkpoint, tmp_path):
    copy = Path(shutil.copytree(checkpoint, tmp_path / "elsewhere"))  # copy2 keeps mtimes
    assert identity.folder_identity(copy) == {"identity": identity.folder_identity(checkpoint)["identity"],
                                              "source": f"folder {copy.resolve()}"}


def test_a_hub_checkpoint_is_its_commit(tmp_path):
    a, b = "a" * 40, "b" * 40
    assert identity.checkpoint_identity("org/model", commit=a)["source"] == f"hub org/model@{a}"
    assert identity.checkpoint_identity("org/model", commit=a) != identity.checkpoint_identity("org/model", commit=b)
    assert (identity.checkpoint_identity("org/model", commit=a)["identity"]
            != identity.checkpoint_identity("org/other", commit=a)["identity"])
    # the loader did not say which commit: the snapshot of the hub cache that holds the file does
    snapshot = tmp_path / "models--org--model" / "snapshots" / b
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--model" / "refs").mkdir()
    (tmp_path / "models--org--model" / "refs" / "main").write_text(b)
    assert identity.checkpoint_identity("org/model", cache_dir=str(tmp_path))["source"] == f"hub org/model@{b}"
    assert identity.checkpoint_identity("org/absent", cache_dir=str(tmp_path))["source"].endswith("(commit unknown)")


def test_the_scoring_code_is_every_module_that_computes_values():
    names = {f"{p.parent.name}/{p.name}" for p in identity.value_code_files()}
    assert {"model_adapters/adapter.py", "model_adapters/presentation.py", "engines/__init__.py", "engines/hf.py",
            "engines/vllm.py", "model_adapters/scoring.py", "model_adapters/vllm_engine.py",
            "model_adapters/frames.py", "model_adapters/families.py", "lmms_eval_tasks/videos.py"} <= names
    assert not names & {"model_adapters/durable.py", "model_adapters/identity.py", "model_adapters/registry.py"}
    assert len(identity.code_identity()) == 64
    # an engine's runs count its own module, not the other engines': editing one keeps the others' values
    import model_adapters.engines.hf as hf

    of_hf = {f"{p.parent.name}/{p.name}" for p in identity.value_code_files(hf.__file__)}
    assert of_hf == names - {n for n in names if n.startswith("engines/") and n not in ("engines/__init__.py",
                                                                                         "engines/hf.py")}
    assert identity.code_identity(hf.__file__) != identity.code_identity()


def test_identity_and_settings_load_without_torch():
    assert heavy_modules_loaded(["model_adapters.identity", "model_adapters.settings"]) == []


# --------------------------------------------------------------------------- videos
def test_a_frame_folder_is_its_frames(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(1, 4):
        (folder / f"{i:06d}.jpg").write_bytes(bytes([i]) * 100)
    original = identity.video_identity(folder)
    folder_mtime = folder.stat().st_mtime_ns
    (folder / "000002.jpg").write_bytes(b"\x07" * 120)  # a frame replaced in place
    assert folder.stat().st_mtime_ns == folder_mtime, "the folder's own stat does not see it"
    assert identity.video_identity(folder) != original
    frame, changed = folder / "000003.jpg", identity.video_identity(folder)
    stat = frame.stat()
    frame.write_bytes(b"\x09" * 100)  # same size, the modification time put back
    os.utime(frame, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert identity.video_identity(folder) != changed
    assert identity.video_identity(tmp_path / "absent") == ["missing"]


def test_a_video_file_is_its_size_time_and_sampled_content(tmp_path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(os.urandom(300_000))
    original = identity.video_identity(video)
    stat = video.stat()
    for offset in (-10, 150_000):  # the tail, the middle: same size, the modification time put back
        data = bytearray(video.read_bytes())
        data[offset] ^= 0xFF
        video.write_bytes(bytes(data))
        os.utime(video, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert identity.video_identity(video) != original
        original = identity.video_identity(video)


# --------------------------------------------------------------------------- what an adapter records
def test_defaults_are_filled_in_before_runs_are_told_apart(tiny_models):
    from model_adapters.adapter import VisdepLLM, VisdepVLM

    path = str(tiny_models["qwen2_5_vl"])
    default = VisdepVLM(pretrained=path, device="cpu")
    written = VisdepVLM(pretrained=path, device="cpu", batch_size=4, max_frames="16", frame_folder_fps=30.0,
                        dtype="auto")
    assert default.run_settings == written.run_settings == {"dtype": "auto", "frame_folder_fps": "30",
                                                            "frame_order": "original", "frames": "uniform",
                                                            "max_frames": "16"}
    assert default.model_identity() == written.model_identity()
    fewer = VisdepVLM(pretrained=path, device="cpu", max_frames=8)
    assert fewer.run_settings["max_frames"] == "8" and fewer.model_identity() != default.model_identity()

    llm = str(tiny_models["qwen2"])
    assert VisdepLLM(pretrained=llm, device="cpu").model_identity() == VisdepLLM(
        pretrained=llm, device="cpu", dtype="AUTO", batch_size=2).model_identity()
    assert make_adapter("qwen2", tiny_models["qwen2"], revision="main").run_settings == {"dtype": "float32",
                                                                                        "revision": "main"}


@pytest.mark.slow
def test_the_results_file_records_the_model(tiny_models, fixture_env, tmp_path):
    """Through the real CLI: a default run and a `max_frames=16` run of one checkpoint record the same model, with
    the fields the audit reads."""
    checkpoint = tiny_models["qwen2_5_vl"]
    env = lmms_eval_env(fixture_env)
    records = []
    for name, extra in (("default", ""), ("written_out", ",max_frames=16,dtype=auto")):
        out = tmp_path / name
        proc = run_lmms_eval(["--model", "visdep_vlm", "--model_args", f"pretrained={checkpoint},device=cpu{extra}",
                              "--tasks", "vru_accident_video", "--limit", "2"], env, out)
        assert proc.returncode == 0, (out / "cli.log").read_text()[-3000:]
        records.append(read_results(out)["visdep"]["model"])
    default, written = records
    assert default == written
    assert default["adapter"] == "visdep_vlm" and default["pretrained"] == str(checkpoint)
    assert default["settings"] == {"dtype": "auto", "frame_folder_fps": "30", "frame_order": "original",
                                   "frames": "uniform", "max_frames": "16"}
    assert default["checkpoint"] == {"identity": documented_folder_identity(checkpoint),
                                     "source": f"folder {checkpoint.resolve()}"}


# --------------------------------------------------------------------------- what was loaded, through the real CLI
REUSE = re.compile(r"visdep_llm rank \d+: (\d+) of (\d+) questions taken from the durable store")
LIMIT = 8


def cli_values(model_args: str, cache: Path | None, env: dict, out: Path) -> tuple[int | None, dict]:
    """Run `visdep_llm` through the real lmms-eval CLI on 8 blind questions; (questions taken from the store, or
    None without one; question id -> option log-probabilities)."""
    args = ["--model", "visdep_llm", "--model_args", f"{model_args},device=cpu,dtype=float32", "--tasks",
            "vru_accident_blind", "--batch_size", "4", "--limit", str(LIMIT)]
    proc = run_lmms_eval(args + (["--use_cache", str(cache)] if cache is not None else []), env, out)
    log = (out / "cli.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    samples = read_samples(out, "vru_accident_blind")
    values = {s["visdep"]["question_id"]: s["visdep"]["option_logprobs"] for s in samples}
    assert len(values) == LIMIT
    taken = [int(t) for t, _ in REUSE.findall(log)]
    return (taken[0] if taken else None), values


def assert_rerun_is_a_fresh_run(tmp_path: Path, env: dict, before: str, change, after: str | None = None) -> None:
    """A run with a cache (model_args `before`); `change()`; a rerun with the same cache (model_args `after`,
    default `before`) takes nothing from it and equals a run without the cache, and the change moved the values."""
    cache = tmp_path / "cache"
    _, first = cli_values(before, cache, env, tmp_path / "first")
    change()
    after = after or before
    taken, rerun = cli_values(after, cache, env, tmp_path / "rerun")
    none, plain = cli_values(after, None, env, tmp_path / "plain")
    assert taken == 0 and none is None
    assert rerun.keys() == plain.keys() == first.keys()
    for qid in plain:
        np.testing.assert_allclose(rerun[qid], plain[qid], rtol=0, atol=1e-6, err_msg=qid)
    assert max(abs(a - b) for q in first for a, b in zip(first[q], plain[q], strict=True)) > 1e-3


@pytest.mark.slow
def test_a_lora_folder_whose_base_is_saved_again_is_not_served_from_the_store(tiny_models, fixture_env, tmp_path):
    base = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "base"))
    adapter = checkpoints.lora_adapter(base, tmp_path / "lora")
    assert identity.checkpoint_identity(str(adapter))["source"] == f"folder {adapter} (adapter) on folder {base}"
    assert_rerun_is_a_fresh_run(tmp_path, lmms_eval_env(fixture_env), f"pretrained={adapter}",
                                lambda: checkpoints.resave_with_other_weights(base, seed=1))


@pytest.mark.slow
def test_trust_remote_code_on_a_folder_with_its_own_class_is_another_model(tiny_models, fixture_env, tmp_path):
    folder = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "custom"))
    checkpoints.with_own_modeling_code(folder)
    assert_rerun_is_a_fresh_run(tmp_path, lmms_eval_env(fixture_env), f"pretrained={folder}", lambda: None,
                                after=f"pretrained={folder},trust_remote_code=True")


@pytest.mark.slow
def test_a_hub_snapshot_whose_config_is_edited_is_another_checkpoint(tiny_models, fixture_env, tmp_path):
    hf_home = tmp_path / "hf"
    snapshot = checkpoints.hub_snapshot(tiny_models["qwen2"], hf_home, "visdep-test/tiny-qwen2")
    env = lmms_eval_env(fixture_env, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    config = snapshot / "config.json"

    def edit() -> None:
        assert config.is_symlink()
        edit_json(config, rope_parameters={"rope_theta": 100.0, "rope_type": "default"})

    assert_rerun_is_a_fresh_run(tmp_path, env, "pretrained=visdep-test/tiny-qwen2", edit)


@pytest.mark.slow
def test_a_large_weight_file_replaced_with_equal_size_and_time_is_another_checkpoint(tiny_models, fixture_env,
                                                                                     tmp_path):
    folder = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "large"))
    other = Path(shutil.copytree(tiny_models["qwen2"], tmp_path / "other"))
    padding = identity.CONTENT_HASH_MAX_BYTES + 2**20
    checkpoints.resave_with_other_weights(folder, seed=1, padding_bytes=padding)
    checkpoints.resave_with_other_weights(other, seed=2, padding_bytes=padding)
    weights, replacement = folder / "model.safetensors", other / "model.safetensors"
    assert weights.stat().st_size == replacement.stat().st_size > identity.CONTENT_HASH_MAX_BYTES

    def replace() -> None:
        stat = weights.stat()
        shutil.copyfile(replacement, weights)
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)

    assert_rerun_is_a_fresh_run(tmp_path, lmms_eval_env(fixture_env), f"pretrained={folder}", replace)
