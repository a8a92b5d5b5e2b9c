"""The adapters' scoring core against the naive procedure: one full forward per option, no cache, no batching.

The naive procedure (`tests/helpers/naive.py`) builds its inputs with the adapters' own code, so
this file checks the key/value cache, the shared prefix and the batching, not what the model is shown;
`test_fidelity.py` checks that against references sharing no code with the adapters.

Every family, blind and video, letter and option scoring, on the synthetic benchmarks: seven
VRU-Accident questions (six share one mp4, so the video prefix and the batching of questions are
exercised) and three MM-AU questions (jpg and png frame folders, five multi-token options). The first test runs for
the adapters' own engine and for a test engine implementing only `score` (`tests/helpers/engines.py`), so the steps
around the engine (grouping, presenting, the order of the results) are checked for any engine."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from lmms_eval_tasks import tasks
from lmms_eval_tasks.loaders import load_benchmark
from model_adapters.frames import read_frames
from tests.helpers.adapters import ENGINES, count_forwards, make_adapter, requests_for
from tests.helpers.naive import naive_option_scores, reference_inputs, reference_prompt
from visdep_metrics.demo.tiny import LLM_KINDS, VLM_KINDS

TOLERANCE = 1e-4
MAX_FRAMES = 8
CASES = ([(k, mode, s) for k in VLM_KINDS for mode in ("video", "blind") for s in ("letter", "option")]
         + [(k, "blind", s) for k in LLM_KINDS for s in ("letter", "option")])


@pytest.fixture(scope="module")
def adapter_of(tiny_models):
    @cache
    def get(kind: str, engine: str = "hf"):
        extra = {"max_frames": MAX_FRAMES} if kind in VLM_KINDS else {}
        return make_adapter(kind, tiny_models[kind], engine, batch_size=4, **extra)

    return get


def questions() -> list[dict]:
    vru, mmau = load_benchmark("vru_accident"), load_benchmark("mmau")
    return [q.document() for q in vru[:7] + mmau[:2] + mmau[-1:]]


def naive_scores(adapter, docs: list[dict], video: bool) -> list[tuple[float, bool]]:
    processor = getattr(adapter.engine, "processor", None) or adapter.engine.tokenizer
    out = []
    for doc in docs:
        video_input = read_frames(Path(tasks.doc_to_visual_video(doc)[0]), MAX_FRAMES) if video else None
        out += naive_option_scores(adapter.model, processor, tasks.doc_to_text(doc), tasks.doc_to_choice(doc),
                                   video_input)
    return out


def assert_same(got, expected):
    assert len(got) == len(expected)
    losses, ref = np.array([g[0] for g in got]), np.array([e[0] for e in expected])
    np.testing.assert_allclose(losses, ref, rtol=0, atol=TOLERANCE)
    assert [g[1] for g in got] == [e[1] for e in expected]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind,mode,scoring", CASES)
def test_adapter_equals_naive_reference(adapter_of, benchmark_env, monkeypatch, kind, mode, scoring, engine):
    monkeypatch.setenv("VISDEP_SCORING", scoring)
    adapter = adapter_of(kind, engine)
    docs = questions()
    video = mode == "video"
    got = adapter.loglikelihood(requests_for(adapter, docs, video))
    assert_same(got, naive_scores(adapter, docs, video))
    assert all(np.isfinite(g[0]) and g[0] > 0 for g in got)


def test_unbatched_equals_batched(adapter_of, benchmark_env, monkeypatch):
    monkeypatch.setenv("VISDEP_SCORING", "option")
    adapter = adapter_of("qwen2_5_vl")
    docs = questions()
    batched = adapter.loglikelihood(requests_for(adapter, docs, True))
    adapter.batch_size_per_device = 1
    try:
        single = adapter.loglikelihood(requests_for(adapter, docs, True))
    finally:
        adapter.batch_size_per_device = 4
    # float32 sums of ~150 nats: rounding differs by batch shape at the 1e-7 relative level
    np.testing.assert_allclose([s[0] for s in single], [b[0] for b in batched], rtol=2e-7, atol=1e-5)



def test_shared_prefix_and_one_decode_per_video(tiny_models, benchmark_env):
    """Letter scoring of 7 questions over 2 videos at batch_size 4: video 1 (six questions) one prefix
    forward + two tail forwards, video 2 (one question) one forward for prefix and tail, no option
    forward; each video decoded once; padding copies and shuffled input order change nothing."""
    adapter = make_adapter("qwen2_5_vl", tiny_models["qwen2_5_vl"], batch_size=4, max_frames=MAX_FRAMES)
    calls = count_forwards(adapter.model)
    docs = [q.document() for q in load_benchmark("vru_accident")[:7]]
    requests = requests_for(adapter, docs, True)
    first = adapter.loglikelihood(requests)
    assert calls[0] == (1 + 2) + 1
    videos = {tasks.doc_to_visual_video(d)[0] for d in docs}
    assert dict(adapter.engine.frames.decodes) == {v: 1 for v in videos}

    order = np.random.default_rng(0).permutation(len(requests))
    pad = requests[-1].__class__(**{**vars(requests[-1]), "metadata": {**requests[-1].metadata,
                                                                        "__padding_only__": True}})
    shuffled = [requests[i] for i in order] + [pad, pad]
    again = adapter.loglikelihood(shuffled)
    # Shuffling regroups the questions into other batches: equal up to float rounding.
    assert_same(again[: len(order)], [first[i] for i in order])
    assert again[-2:] == [again[list(order).index(len(requests) - 1)]] * 2
    assert dict(adapter.engine.frames.decodes) == {v: 1 for v in videos}, "the frame cache must serve the second call"


def test_letters_are_the_first_assistant_token(adapter_of, benchmark_env):
    adapter = adapter_of("qwen2_5_vl")
    doc = load_benchmark("vru_accident")[0].document()
    [question] = adapter.engine.questions(adapter.present([_request(adapter, doc, ["A", "B"], video=True)]))
    header = adapter.engine.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert question.tail[-len(header):] == header
    assert question.continuations == [[adapter.engine.tokenizer.convert_tokens_to_ids(c)] for c in "AB"]


def _request(adapter, doc, continuations, video):
    from model_adapters.pipeline import DistinctQuestion

    visuals = tasks.doc_to_visual_video(doc) if video else []
    return DistinctQuestion("t", 0, tasks.doc_to_text(doc), visuals, doc["question_id"], list(continuations))


@pytest.mark.parametrize("kind", ["qwen2", "qwen2_5_vl"])
def test_is_greedy_true_for_the_greedy_continuation(adapter_of, benchmark_env, kind):
    """A two-token continuation made of the model's own greedy tokens (from `generate`) is greedy;
    changing its last token makes it not greedy. Random weights often pick byte tokens that do not
    survive decoding and re-encoding, so the first question whose greedy tokens do is used."""
    adapter = adapter_of(kind)
    video = kind in VLM_KINDS
    processor = getattr(adapter.engine, "processor", None) or adapter.engine.tokenizer
    for doc in (q.document() for q in load_benchmark("vru_accident")):
        video_input = read_frames(Path(tasks.doc_to_visual_video(doc)[0]), MAX_FRAMES) if video else None
        prompt, special = reference_prompt(processor, tasks.doc_to_text(doc), video)
        inputs = reference_inputs(adapter.model, processor, prompt, special, video_input)
        generated = adapter.model.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
        greedy = generated[0, inputs["input_ids"].shape[1]:].tolist()
        text = adapter.engine.tokenizer.decode(greedy)
        [check] = adapter.present([_request(adapter, doc, [text], video)])
        if check.options == (tuple(greedy),):
            break
    else:
        pytest.fail("no question's greedy tokens survive decoding and re-encoding")
    other = next(t for t in adapter.engine.tokenizer.convert_tokens_to_ids(["A", "B"]) if t != greedy[-1])
    wrong = adapter.engine.tokenizer.decode(greedy[:-1] + [other])
    got = adapter.loglikelihood(requests_for(adapter, [doc], video, choices=lambda d: [text, wrong]))
    assert [g[1] for g in got] == [True, False]
    assert_same(got, naive_option_scores(adapter.model, processor, tasks.doc_to_text(doc), [text, wrong], video_input))
