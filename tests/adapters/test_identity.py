"""What a model is, by content (`model_adapters.identity`), and what an adapter records about itself once loaded:
its arguments with defaults filled in (`model_adapters.settings`) and its checkpoint's identity, in the store's model
key and in `results["visdep"]["model"]` (the contract with the audit)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from model_adapters import identity
from tests.helpers.adapters import make_adapter
from tests.helpers.imports import heavy_modules_loaded
from tests.helpers.lmms_cli import lmms_eval_env, read_results, run_lmms_eval


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
    assert {"model_adapters/base.py", "model_adapters/llm.py", "model_adapters/vlm.py", "model_adapters/scoring.py",
            "model_adapters/frames.py", "model_adapters/families.py", "lmms_eval_tasks/videos.py"} <= names
    assert not names & {"model_adapters/durable.py", "model_adapters/identity.py", "model_adapters/registry.py"}
    assert len(identity.code_identity()) == 64


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
    assert identity.video_identity(tmp_path / "absent") == ["missing"]


def test_a_video_file_is_its_size_time_and_sampled_content(tmp_path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(os.urandom(300_000))
    original = identity.video_identity(video)
    stat = video.stat()
    data = bytearray(video.read_bytes())
    data[-10] ^= 0xFF  # same size, the modification time put back: the sampled tail still differs
    video.write_bytes(bytes(data))
    os.utime(video, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert identity.video_identity(video) != original


# --------------------------------------------------------------------------- what an adapter records
def test_defaults_are_filled_in_before_runs_are_told_apart(tiny_models):
    from model_adapters.llm import VisdepLLM
    from model_adapters.vlm import VisdepVLM

    path = str(tiny_models["qwen2_5_vl"])
    default = VisdepVLM(pretrained=path, device="cpu")
    written = VisdepVLM(pretrained=path, device="cpu", batch_size=4, max_frames="16", frame_folder_fps=30.0,
                        dtype="auto")
    assert default.run_settings == written.run_settings == {"dtype": "auto", "frame_folder_fps": "30",
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
    assert default["settings"] == {"dtype": "auto", "frame_folder_fps": "30", "max_frames": "16"}
    assert default["checkpoint"] == {"identity": documented_folder_identity(checkpoint),
                                     "source": f"folder {checkpoint.resolve()}"}
