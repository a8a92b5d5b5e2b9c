"""What the adapters promise besides the numbers: registration, arguments, clear errors."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
import torch

from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.frames import VideoReadError
from model_adapters.scoring import OutOfMemory, ScoringError
from tests.helpers.adapters import make_adapter, requests_for
from tests.helpers.imports import heavy_modules_loaded


def test_entry_point_registers_both_models():
    from lmms_eval.api.model import lmms
    from lmms_eval.models import get_model

    [ep] = [ep for ep in entry_points(group="lmms_eval.models") if ep.name == "visdep"]
    names = {m.model_id: m.simple_class_path for m in ep.load()()}
    assert {"visdep_vlm", "visdep_llm", "visdep_vllm"} <= set(names)
    assert names["visdep_vlm"] == "model_adapters.adapter.VisdepVLM"
    for name in names:
        cls = get_model(name)
        assert issubclass(cls, lmms) and cls.is_simple


def test_entry_point_module_imports_nothing_heavy():
    assert heavy_modules_loaded(["model_adapters.registry"]) == []


def test_unknown_model_args_are_errors(tiny_models):
    with pytest.raises(ValueError, match="max_frame"):
        make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], max_frame=8)  # typo of max_frames
    with pytest.raises(ValueError, match="max_frames"):
        make_adapter("llama", tiny_models["llama"], max_frames=8)  # a VLM argument given to the LLM adapter
    with pytest.raises(ValueError, match="batch_size"):
        make_adapter("llama", tiny_models["llama"], batch_size="auto")
    with pytest.raises(ValueError, match="model_type 'llama'.*qwen2_5_vl"):
        make_adapter("qwen2_5_vl", tiny_models["llama"])  # a text-only checkpoint given to visdep_vlm


def test_from_pretrained_keywords_pass_through(tiny_models):
    adapter = make_adapter("llama", tiny_models["llama"], revision="main", low_cpu_mem_usage=True)
    assert adapter.engine.model_kwargs["revision"] == "main" and adapter.engine.processor_kwargs == {"revision": "main"}


def test_text_only_model_refuses_video_tasks(tiny_models, benchmark_env):
    adapter = make_adapter("qwen2", tiny_models["qwen2"])
    docs = [q.document() for q in load_benchmark("vru_accident")[:1]]
    with pytest.raises(ValueError, match="text-only"):
        adapter.loglikelihood(requests_for(adapter, docs, video=True))
    with pytest.raises(NotImplementedError):
        adapter.generate_until([])


def test_unreadable_video_names_the_file(tiny_models, benchmark_env, tmp_path):
    from lmms_eval.api.instance import Instance

    broken = tmp_path / "VRU_broken.mp4"
    broken.write_bytes(b"\x00" * 2048)
    adapter = make_adapter("llava_onevision", tiny_models["llava_onevision"])
    adapter.task_dict = {"t": {"test": [{"question_id": "q0"}]}}
    requests = [Instance("loglikelihood", ("What happened?", c, lambda doc: [str(broken)], 0, "t", "test"), k,
                         metadata={"task": "t", "doc_id": 0, "repeats": 1}) for k, c in enumerate("AB")]
    with pytest.raises(VideoReadError, match="VRU_broken.mp4"):
        adapter.loglikelihood(requests)


def test_non_finite_log_likelihood_names_the_question(tiny_models, benchmark_env):
    adapter = make_adapter("llama", tiny_models["llama"])
    with torch.no_grad():
        adapter.model.lm_head.weight.fill_(float("nan"))
    docs = [q.document() for q in load_benchmark("vru_accident")[:2]]
    with pytest.raises(ScoringError, match=r"question t doc \d \(CAP_DATA/VRU_1/[a-z ]+\): .* is nan \(not finite\)"):
        adapter.loglikelihood(requests_for(adapter, docs, video=False))


def test_out_of_memory_suggests_a_smaller_batch(tiny_models, benchmark_env, monkeypatch):
    adapter = make_adapter("qwen2", tiny_models["qwen2"], batch_size=8)

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(adapter.model, "forward", no_memory)
    docs = [q.document() for q in load_benchmark("vru_accident")[:2]]
    with pytest.raises(OutOfMemory, match=r"batch_size=8.*try batch_size=4"):
        adapter.loglikelihood(requests_for(adapter, docs, video=False))
