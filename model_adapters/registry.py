"""Entry point of the `lmms_eval.models` group: names the visdep models, imports nothing heavy.

lmms-eval loads every entry point of the group inside one try-block (a failure here could skip the
task-discovery entry point too), so this module only builds manifests; the model classes are
imported by lmms-eval when one is asked for."""

MODELS = {"visdep_vlm": "model_adapters.vlm.VisdepVLM", "visdep_llm": "model_adapters.llm.VisdepLLM",
          "visdep_vllm": "model_adapters.vllm_adapter.VisdepVLLM"}  # vLLM is imported only when that class loads


def manifests() -> list:
    from lmms_eval.models.registry_v2 import ModelManifest  # already imported by the caller

    return [ModelManifest(model_id=name, simple_class_path=path) for name, path in MODELS.items()]
