"""The adapter apart from its engines (`model_adapters.engines`): an engine is one module and one registry line, its
spec gives the arguments, the audit's settings and the errors. Nothing here loads a checkpoint."""

from __future__ import annotations

import sys
import textwrap

import pytest

from lmms_eval_tasks.errors import VisdepError
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters import adapter as adapter_module
from model_adapters import registry
from tests.helpers.adapters import requests_for, store_records

# A whole engine, as a user would write one: characters as tokens, and a loss computed from the option's characters
# (so the values are known here without the engine's code).
TOY_ENGINE = textwrap.dedent('''
    from model_adapters.engines import Engine, Loaded
    from model_adapters.settings import Argument


    class CharacterTemplates:
        def render(self, conversations):
            return [None] * len(conversations)  # no chat template: the base-model prompt and its answer cue

        def tokenize(self, texts, add_special_tokens):
            return [[ord(c) for c in text] for text in texts]


    class ToyEngine(Engine):
        arguments = (Argument("pretrained"), Argument("scale", float, 1.0), Argument("workers", int, 1, False))
        calls = []

        def load(self):
            return Loaded(self.arguments["pretrained"], CharacterTemplates(), "toy engine")

        def checkpoint(self, loaded):
            return {"identity": "toy-" + self.arguments["pretrained"], "source": "toy"}

        def store_key(self):
            return {"engine": "toy"}

        def score(self, questions, batches, batch_size):
            out = []
            for start in range(0, len(questions), batch_size):
                part = list(range(start, min(start + batch_size, len(questions))))
                ToyEngine.calls.append(part)
                if batches.skip is not None and batches.skip(part):
                    out += [None] * len(part)
                    continue
                scale = self.arguments["scale"]
                scores = [[(scale * sum(o) / 1000, k == 0) for k, o in enumerate(questions[i].options)] for i in part]
                out += scores
                if batches.scored is not None:
                    batches.scored(part, scores)
            return out
''')


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    """`toy_engine.py` on the path and its one line in the registry."""
    (tmp_path / "toy_engine.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.ADAPTERS, "visdep_toy", ("VisdepToy", "toy_engine:ToyEngine"))
    registry.engine_class.cache_clear()
    registry.not_score_changing.cache_clear()
    yield sys.modules.get("toy_engine")
    registry.engine_class.cache_clear()
    registry.not_score_changing.cache_clear()
    adapter_module.__dict__.pop("VisdepToy", None)
    sys.modules.pop("toy_engine", None)


def test_a_new_engine_is_one_module_and_one_registry_line(toy_registered, benchmark_env, store_root):
    from lmms_eval.models import get_model  # noqa: F401  (lmms-eval resolves a class path as below)

    cls = adapter_module.VisdepToy  # what lmms-eval's simple_class_path "model_adapters.adapter.VisdepToy" gives
    assert cls.adapter_name == "visdep_toy" and cls.is_simple
    model = cls(pretrained="m1", scale="2", batch_size=2)
    docs = [q.document() for q in load_benchmark("vru_accident")[:3]]
    requests = requests_for(model, docs, video=False)
    values = model.loglikelihood(requests)
    # the base-model prompt ends in "Answer:", so each option is scored with a leading space: " A" is [32, 65]
    expected = [2 * (32 + ord(r.args[1])) / 1000 for r in requests]
    assert [v[0] for v in values] == pytest.approx(expected)
    assert [v[2] for v in values] == [" " + r.args[1] for r in requests]
    identity = model.run_identity()
    assert identity["adapter"] == "visdep_toy" and identity["pretrained"] == "m1"
    assert identity["settings"] == {"scale": "2"}  # `workers` changes no score; `pretrained` is the model's name
    assert identity["checkpoint"] == {"identity": "toy-m1", "source": "toy"}
    assert model.model_identity()["engine"] == "toy"
    assert len(store_records(store_root)) == 3  # the durable store wrapped around the engine from outside
    toy = sys.modules["toy_engine"].ToyEngine
    toy.calls.clear()
    again = cls(pretrained="m1", scale="2", batch_size=2)
    assert again.loglikelihood(requests_for(again, docs, video=False)) == values
    assert toy.calls == [[0, 1], [2]] and len(store_records(store_root)) == 3  # asked to skip, nothing rescored


def test_the_spec_gives_the_settings_and_refuses_bad_arguments(toy_registered):
    assert registry.score_settings("visdep_toy", {"pretrained": "m", "workers": 4}) == {"scale": "1"}
    assert "workers" in registry.not_score_changing()
    with pytest.raises(VisdepError, match=r"^visdep_toy: scale must be a number, got 'x'$"):
        adapter_module.VisdepToy(pretrained="m", scale="x")
    with pytest.raises(VisdepError, match=r"^visdep_toy: unknown model_args \['scael'\]; accepted: .*scale"):
        adapter_module.VisdepToy(pretrained="m", scael="2")


def test_the_engines_specs_give_the_settings_the_audit_reads():
    video = {"dtype": "auto", "frame_folder_fps": "30", "frame_order": "original", "frames": "uniform",
             "max_frames": "16"}
    assert registry.score_settings("visdep_vlm", {"pretrained": "x"}) == video
    assert registry.score_settings("visdep_vllm", {"pretrained": "x", "tensor_parallel_size": 2}) == video
    assert registry.score_settings("visdep_llm", {"pretrained": "x", "device": "cpu", "batch_size": 8}) == \
        {"dtype": "auto"}
    assert registry.score_settings("visdep_vlm", {"max_frames": "8.0", "decode_workers": 3}) == \
        {**video, "max_frames": "8"}
    # an adapter visdep does not know: its arguments as written, less those no visdep model counts
    assert registry.score_settings("other", {"max_frames": 8, "tensor_parallel_size": 2}) == {"max_frames": "8"}


@pytest.mark.parametrize(("adapter", "arguments", "message"), [
    ("VisdepVLM", {"pretrained": "/x", "max_frames": "many"}, "visdep_vlm: max_frames must be an integer, got 'many'"),
    ("VisdepVLM", {"pretrained": "/x", "frames": "all"},
     "visdep_vlm: frames must be one of uniform, middle, got 'all'"),
    ("VisdepVLM", {"pretrained": "/x", "max_frames": 0}, "visdep_vlm: max_frames must be >= 1, got 0"),
    ("VisdepLLM", {"pretrained": "/x", "dtype": "int8"}, "visdep_llm: dtype must be one of auto, float32, float16, "
                                                         "bfloat16, got 'int8'"),
    ("VisdepLLM", {"pretrained": "/x", "trust_remote_code": "perhaps"},
     "visdep_llm: trust_remote_code must be true or false, got 'perhaps'"),
    ("VisdepLLM", {}, "visdep_llm: model_args pretrained=<checkpoint folder or hub id> is required"),
    ("VisdepLLM", {"pretrained": "/x", "batch_size": "auto"}, "visdep_llm: batch_size must be an integer, got 'auto'"),
    ("VisdepVLLM", {"pretrained": "/x", "max_model_len": "long"}, "visdep_vllm: max_model_len must be an integer"),
])
def test_a_bad_argument_is_one_visdep_error_naming_it(adapter, arguments, message):
    with pytest.raises(VisdepError) as refused:
        getattr(adapter_module, adapter)(**arguments)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
