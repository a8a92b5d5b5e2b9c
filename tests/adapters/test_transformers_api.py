"""`model_adapters.transformers_api` on the transformers installed: the cache goes in and comes out under the name
this release's models use, and a forward continued from it gives the logits of one full forward. (The adapters'
exactness, fidelity and positions tests run under the lowest, vLLM's and the newest release: `.ci/transformers-range`.)
"""

from __future__ import annotations

import inspect

import torch

from model_adapters.transformers_api import cache_argument, cache_name, cache_of


def test_the_cache_goes_by_the_name_this_transformers_models_take_and_continues_a_sequence(tiny_models):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    model = AutoModelForCausalLM.from_pretrained(tiny_models["qwen2"]).eval()
    vlm = AutoModelForImageTextToText.from_pretrained(tiny_models["qwen2_5_vl"]).eval()
    for loaded in (model, vlm):
        assert cache_name() in inspect.signature(type(loaded).forward).parameters
    ids = torch.tensor([[5, 9, 13, 2, 7, 11]])
    with torch.inference_mode():
        whole = model(input_ids=ids).logits
        cache = cache_of(model(input_ids=ids[:, :4], use_cache=True))
        assert cache.get_seq_length() == 4
        rest = model(input_ids=ids[:, 4:], **cache_argument(cache), use_cache=True,
                     position_ids=torch.arange(4, 6)[None])
    assert cache_of(rest).get_seq_length() == 6
    torch.testing.assert_close(rest.logits, whole[:, 4:], rtol=0, atol=1e-5)
