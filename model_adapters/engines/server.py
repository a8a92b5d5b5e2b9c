"""The server engine of `visdep_server`: the options' log-likelihoods from a model behind an OpenAI-compatible server
that returns prompt log-probabilities (vLLM's `vllm serve`), not from weights loaded here.

    vllm serve Qwen/Qwen2.5-VL-7B-Instruct --trust-request-mm-kwargs   # (the flag: video models only)
    lmms-eval --model visdep_server --model_args base_url=http://host:8000/v1,model=Qwen/Qwen2.5-VL-7B-Instruct ...

Presentation goes through the server (`ServerTemplates`): its chat template (a one-token chat completion with
`return_prompt_text`; a video part is a 2-frame dummy there) and its tokenizer (`/tokenize`). A question without a
video is scored on `/v1/completions` with the token ids as the prompt: letters (every option one token) in one request
of the context with `logprob_token_ids`, options one request each (context + option, `prompt_logprobs=1`: each option
token's log-probability and rank). A video question goes to `/v1/chat/completions` (an option as an assistant turn the
template continues), the video as `data:video/jpeg;base64,<png>,<png>,...` (lossless; vLLM opens each frame with PIL)
with `media_io_kwargs` carrying the sampled frames' timing and `mm_processor_kwargs` `do_sample_frames: False`, so the
processor sees the frames and timing visdep_vlm gives it (`frames.FrameSource`).

Each answer is checked: the server ran the prompt presented (text; ids up to the video's expansion) ending in the
option's ids, else the question fails (`ScoringError`). Connection errors, timeouts, 408/429 and 5xx are retried with
backoff, then fail in one line (`ServerError`). The API key comes from the variable `api_key_env` names, never logged.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from lmms_eval_tasks.errors import VisdepError
from model_adapters import identity
from model_adapters.engines import Engine, Loaded
from model_adapters.pipeline import Batches, Presented, Scores, ScoringError
from model_adapters.presentation import user_message
from model_adapters.settings import FRAME_ARGUMENTS, Argument

# `model` is the served model (it names the results); `vision` unset: detected at load (`check_video`)
ARGUMENTS = (Argument("base_url", changes_scores=False), Argument("model"),
             Argument("api_key_env", changes_scores=False), Argument("timeout", float, 300.0, changes_scores=False),
             Argument("retries", int, 3, changes_scores=False), Argument("concurrency", int, 8, changes_scores=False),
             Argument("vision", bool), *FRAME_ARGUMENTS)
BACKOFF_S = 0.5  # the first retry's wait; doubled after each
RETRIED = frozenset({408, 429})  # besides every 5xx
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
TRUST_FLAG = "--trust-request-mm-kwargs"
# The token a letter request generates is the argmax (its greedy flag): no penalty from the sampling defaults `vllm
# serve` takes from a checkpoint's generation_config.json (the log-probabilities returned are raw either way).
GREEDY = {"temperature": 0, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


class ServerError(VisdepError):
    """The server cannot be used: unreachable, slow, failing, or answering without what visdep needs."""


def video_fields(frames, metadata) -> tuple[str, dict]:
    """A video as vLLM takes a frame sequence: `data:video/jpeg;base64,` and each frame's base64, comma-separated
    (vLLM decodes each frame with PIL, whatever its format: PNG keeps the pixels); and the request fields that make
    it show the frames with their timing (`metadata`, transformers' `VideoMetadata`) and not sample them again."""
    from PIL import Image

    parts = []
    for frame in frames:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG")
        parts.append(base64.b64encode(buffer.getvalue()).decode())
    timing = {"num_frames": len(frames), "fps": float(metadata.fps), "duration": float(metadata.duration),
              "total_num_frames": int(metadata.total_num_frames),
              "frames_indices": [int(i) for i in metadata.frames_indices]}
    return "data:video/jpeg;base64," + ",".join(parts), {"media_io_kwargs": {"video": timing},
                                                          "mm_processor_kwargs": {"do_sample_frames": False}}


def with_video(messages: list[dict], url: str) -> list[dict]:
    """Messages in transformers' form (`presentation.user_message`) as the server takes them: each `{"type": "video"}`
    part a `video_url` part holding `url`."""
    video = {"type": "video_url", "video_url": {"url": url}}
    return [{**m, "content": m["content"] if isinstance(m["content"], str) else
             [video if part.get("type") == "video" else part for part in m["content"]]} for m in messages]


def tokens_match(ours: Sequence[int], theirs: Sequence[int], video: bool) -> bool:
    """Whether the server ran our tokens: the same ids, or for a video question the same ids but for the video's
    placeholder, which the server expands (at most one of ours replaced: the common prefix and suffix cover the
    rest)."""
    ours, theirs = list(ours), list(theirs)
    if not video or ours == theirs:
        return ours == theirs

    def common(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    return common(ours, theirs) + common(ours[::-1], theirs[::-1]) >= len(ours) - 1


def option_scores(question: Presented, k: int, positions: Sequence[dict | None]) -> tuple[float, bool]:
    """(loss, is_greedy) of option k from the prompt log-probabilities of its tokens ({str(id): {logprob, rank}})."""
    option = question.options[k]
    found = []
    for token, position in zip(option, positions[-len(option):], strict=True):
        entry = (position or {}).get(str(token))
        if entry is None or entry.get("logprob") is None:
            raise ScoringError(f"question {question.qid}: the server gave no log-probability for token {token} of "
                               f"option {k} ({question.scored[k]!r})")
        found.append(entry)
    return finite(question, k, -sum(float(e["logprob"]) for e in found)), all(e.get("rank") == 1 for e in found)


def finite(question: Presented, k: int, loss: float) -> float:
    if not math.isfinite(loss):
        raise ScoringError(f"question {question.qid}: log-likelihood of option {k} is {-loss} (not finite)")
    return loss


class DummyTiming:  # the timing of the dummy video the chat template is rendered with
    fps, duration, total_num_frames, frames_indices = 1.0, 2.0, 2, (0, 1)


@functools.cache
def dummy_video() -> tuple[str, dict]:
    """A 2-frame black video and its timing: what the chat template is rendered with (it only sees a video part)."""
    import numpy as np

    frames = np.zeros((2, 56, 56, 3), dtype=np.uint8)
    return video_fields(frames, DummyTiming)


class ServerTemplates:
    """`engines.Templates` of the server: its chat template (`render`, memoised) and its tokenizer (`/tokenize`)."""

    def __init__(self, engine: ServerEngine) -> None:
        self.engine = engine
        self.rendered: dict[str, str | None] = {}
        self.turns: dict[str, list[dict]] = {}  # prompt -> the messages rendered to it (a video question's request)

    def render(self, conversations: Sequence[list[dict]]) -> list[str | None]:
        keys = [json.dumps(messages, sort_keys=True) for messages in conversations]
        new = {key: messages for key, messages in zip(keys, conversations, strict=True) if key not in self.rendered}
        for (key, messages), prompt in zip(new.items(), self.engine.pool.map(self.engine.render, new.values()),
                                           strict=True):
            self.rendered[key] = prompt
            if prompt is not None:
                self.turns[prompt] = messages
        return [self.rendered[key] for key in keys]

    def tokenize(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        bodies = [{"model": self.engine.served, "prompt": t, "add_special_tokens": add_special_tokens} for t in texts]
        return [[int(t) for t in found["tokens"]] for found in self.engine.pool.map(
            lambda body: self.engine.answer("/tokenize", body, "tokens"), bodies)]


class ServerEngine(Engine):
    """`visdep_server`: a model behind an OpenAI-compatible server (vLLM's `vllm serve`)."""

    arguments = ARGUMENTS
    default_batch_size = 32  # questions sent at a time (a store write each), when lmms-eval gives no --batch_size

    def __init__(self, adapter: str, arguments) -> None:
        super().__init__(adapter, arguments)
        a = self.arguments
        for name in ("base_url", "model"):
            if not a[name]:
                raise VisdepError(f"{adapter}: model_args {name}=... is required (base_url=http://host:8000/v1,"
                                  "model=<the served model name>)")
        url = str(a["base_url"]).rstrip("/")
        self.base_url, self.root_url = url, url.removesuffix("/v1")
        if urlsplit(self.root_url).scheme not in ("http", "https") or not urlsplit(self.root_url).netloc:
            raise VisdepError(f"{adapter}: base_url must be http(s)://host[:port][/v1], got {url!r}")
        self.served = str(a["model"])
        for name, low in (("timeout", 0), ("retries", -1), ("concurrency", 0)):
            if a[name] <= low:
                raise VisdepError(f"{adapter}: {name} must be > {low}, got {a[name]}")
        self._key = os.environ.get(str(a["api_key_env"])) if a["api_key_env"] else None
        if a["api_key_env"] and not self._key:
            raise VisdepError(f"{adapter}: api_key_env={a['api_key_env']}: that environment variable is not set (it "
                              "holds the server's API key; the key itself is never a model_arg)")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise VisdepError(f"{adapter}: run one lmms-eval process; the server batches the requests (concurrency)")
        self.client = self.pool = self.version = self.fingerprint = self.vision = self.frames = None
        self.letters_listed, self.model_entry = False, {}
        self.stop = threading.Event()  # set when a batch fails: its other requests are neither sent nor retried
        # a video's data URL and timing fields, from the engine's `FrameSource`; the last few kept
        self.video_request = functools.lru_cache(maxsize=4)(lambda video: video_fields(*self.frames(video)))

    # ------------------------------------------------------------------ HTTP
    def call(self, method: str, path: str, body: dict | None = None):
        """The server's response (any status below 500 but 408 and 429); transport errors, timeouts, 408, 429 and
        5xx are retried `retries` times with exponential backoff, then a `ServerError` in one line."""
        import httpx
        from loguru import logger

        retries, wait = self.arguments["retries"], BACKOFF_S
        for attempt in range(retries + 1):
            if self.stop.is_set():
                raise ServerError(f"{self.adapter}: {path} not sent: another request of its batch failed")
            try:
                response = self.client.request(method, self.root_url + path, json=body)
            except httpx.TimeoutException:
                problem = f"gave no answer within timeout={self.arguments['timeout']:g} s"
            except httpx.TransportError as e:
                problem = f"cannot be reached ({type(e).__name__}: {str(e) or 'connection failed'})"
            else:
                if response.status_code < 500 and response.status_code not in RETRIED:
                    return response
                problem = f"answered HTTP {response.status_code} ({error_text(response)})"
            if attempt < retries and not self.stop.is_set():
                logger.warning(f"{self.adapter}: {path}: the server {problem}; retry {attempt + 1} of {retries} in "
                               f"{wait:g} s")
                time.sleep(wait)
                wait *= 2
        raise ServerError(f"{self.adapter}: the server at {self.base_url} {problem} on {path} "
                          f"({retries + 1} tries; model_args timeout, retries)")

    def answer(self, path: str, body: dict, *fields: str) -> dict:
        """The JSON of a successful answer holding `fields`; any other answer is a `ServerError` naming it."""
        response = self.call("POST", path, body)
        if response.status_code != 200:
            raise ServerError(f"{self.adapter}: the server at {self.base_url} refused {path}: HTTP "
                              f"{response.status_code} ({error_text(response)})")
        found = response.json()
        if missing := [f for f in fields if f not in found and f not in (found.get("choices") or [{}])[0]]:
            raise ServerError(f"{self.adapter}: the server at {self.base_url} answered {path} without {missing}; "
                              "visdep_server needs vLLM's OpenAI-compatible server (`vllm serve`)")
        return found

    # ------------------------------------------------------------------ loading
    def load(self) -> Loaded:
        import httpx

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self.client = httpx.Client(timeout=self.arguments["timeout"], headers=headers,
                                   limits=httpx.Limits(max_connections=self.arguments["concurrency"] + 2))
        self.pool = ThreadPoolExecutor(self.arguments["concurrency"], "visdep-server")
        models = self.call("GET", "/v1/models")
        if models.status_code != 200:
            raise ServerError(f"{self.adapter}: {self.base_url}/models answered HTTP {models.status_code} "
                              f"({error_text(models)}); is base_url an OpenAI-compatible server (and the key right)?")
        served = {m.get("id"): m for m in models.json().get("data", [])}
        if self.served not in served:
            raise VisdepError(f"{self.adapter}: the server at {self.base_url} serves no model {self.served!r} "
                              f"(model=...); it serves: {', '.join(map(str, served)) or 'nothing'}")
        self.model_entry = served[self.served]
        version = self.call("GET", "/version")
        self.version = version.json().get("version") if version.status_code == 200 else None
        self.probe_logprobs()
        self.vision = vision = self.check_video(self.arguments["vision"])
        if vision:
            from model_adapters.frames import frame_source

            a = self.arguments
            self.frames = frame_source(self.adapter, a["max_frames"], a["frame_folder_fps"], a["frames"],
                                       a["frame_order"])
        self.templates = ServerTemplates(self)
        return Loaded(self.served, self.templates,
                      f"{'video' if vision else 'text'} model {self.served} served at {self.base_url} "
                      f"(server version {self.version or 'unknown'}; letters by "
                      f"{'listed-token log-probabilities' if self.letters_listed else 'prompt log-probabilities'})")

    def probe_logprobs(self) -> None:
        """Before any scoring: the server returns prompt log-probabilities (else refused in one line), and whether it
        returns the log-probabilities of listed next tokens (`logprob_token_ids`, letters in one request)."""
        ids = self.answer("/tokenize", {"model": self.served, "prompt": "The answer is A", "add_special_tokens": True},
                          "tokens")["tokens"]
        body = {"model": self.served, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1,
                "return_token_ids": True}
        response = self.call("POST", "/v1/completions", body)
        found = response.json() if response.status_code == 200 else {}
        self.fingerprint, choice = found.get("system_fingerprint"), (found.get("choices") or [{}])[0]
        positions = choice.get("prompt_logprobs") or []
        if len(positions) != len(ids) or any(str(t) not in (p or {}) for t, p in zip(ids[1:], positions[1:],
                                                                                      strict=True)):
            shown = f"HTTP {response.status_code} ({error_text(response)})" if response.status_code != 200 else \
                "no prompt log-probabilities"
            raise ServerError(f"{self.adapter}: the server at {self.base_url} answered a request for prompt "
                              f"log-probabilities (prompt_logprobs) with {shown}; visdep_server needs a server that "
                              "returns them (vLLM's `vllm serve`)")
        listed = {**body, "prompt_logprobs": None, "logprobs": 0, "logprob_token_ids": [ids[-1]],
                  "return_tokens_as_token_ids": True}
        response = self.call("POST", "/v1/completions", listed)
        if response.status_code == 200:
            top = ((response.json()["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
            self.letters_listed = f"token_id:{ids[-1]}" in top

    def check_video(self, vision: bool | None) -> bool:
        """Whether the model takes videos (`vision`, else detected: vLLM answers a text model's video with 400 "...
        is not a multimodal model"); a video model's server must take the frames' timing per request."""
        if vision is False:
            return False
        url, timing = dummy_video()
        body = {"model": self.served, "messages": with_video(user_message("?", True), url), "max_tokens": 1}
        if vision is None:
            response = self.call("POST", "/v1/chat/completions", body)
            if response.status_code != 200 and "multimodal" in error_text(response):
                return False
        response = self.call("POST", "/v1/chat/completions", {**body, **timing})
        if response.status_code != 200:
            hint = f"; start it with {TRUST_FLAG}" if "trust" in error_text(response) else ""
            raise ServerError(f"{self.adapter}: the server at {self.base_url} refused a video with its frame timing "
                              f"(media_io_kwargs, mm_processor_kwargs): HTTP {response.status_code} "
                              f"({error_text(response)}){hint}" + (" (or give vision=false)" if vision is None else ""))
        return True

    def render(self, messages: list[dict]) -> str | None:
        """The server's chat template over `messages` (HF form: a `{"type": "video"}` part is sent as a dummy video)
        with the assistant's header; None where the model has no chat template."""
        video = any(p.get("type") == "video" for m in messages if not isinstance(m["content"], str)
                    for p in m["content"])
        url, timing = dummy_video()
        body = {"model": self.served, "messages": with_video(messages, url), "max_tokens": 1,
                "return_prompt_text": True, **(timing if video else {})}
        response = self.call("POST", "/v1/chat/completions", body)
        if response.status_code == 400 and "chat template" in error_text(response).lower():
            return None
        if response.status_code != 200 or "prompt_text" not in response.json():
            raise ServerError(f"{self.adapter}: the server at {self.base_url} did not render the chat template "
                              f"(return_prompt_text): HTTP {response.status_code} ({error_text(response)})")
        return response.json()["prompt_text"]

    # ------------------------------------------------------------------ identity
    def checkpoint(self, loaded: bool) -> dict[str, str]:
        """What the server reports it serves: the model's name, its `root` (a folder or hub id), its files' identity
        where the root is a folder on this machine and the server on the loopback, the server's version and config
        fingerprint. Before loading (and as the adapter re-checks it), the arguments alone."""
        if not loaded or self.client is None:
            return {"identity": identity.digest({"server_model": self.served}),
                    "source": f"server {self.base_url} {self.served}"}
        root = self.model_entry.get("root")
        local = root and urlsplit(self.root_url).hostname in LOOPBACK and os.path.isdir(root)
        files = identity.checkpoint_identity(root)["identity"] if local else None
        reported = {"model": self.served, "root": root, "files": files, "version": self.version,
                    "max_model_len": self.model_entry.get("max_model_len")}
        return {"identity": identity.digest(reported),
                "source": f"server {self.base_url} {self.served} ({self.version or 'version unknown'})"}

    def store_key(self) -> dict:
        return {"engine": "server", "server_version": self.version, "fingerprint": self.fingerprint,
                "vision": self.vision, "letters": "logprob_token_ids" if self.letters_listed else "prompt_logprobs",
                "options": "prompt_logprobs", "video": "png frames, media_io_kwargs timing, do_sample_frames false"}

    def run_record(self) -> dict:
        return {"engine": f"server {self.version or 'version unknown'}",
                "server": {"base_url": self.base_url, "model": self.served, "version": self.version,
                           "root": self.model_entry.get("root")}}

    # ------------------------------------------------------------------ scoring
    def request(self, question: Presented, k: int | None) -> tuple[str, dict]:
        """(path, body) of a question's letter request (k None) or of option k's."""
        base = {"model": self.served, "max_tokens": 1, "return_token_ids": True, **GREEDY}
        letters = {"logprobs": True, "logprob_token_ids": sorted({o[0] for o in question.options}),
                   "return_tokens_as_token_ids": True}
        if question.video is None:
            if k is None:
                return "/v1/completions", {**base, "prompt": list(question.context), **letters, "logprobs": 0}
            return "/v1/completions", {**base, "prompt": [*question.context, *question.options[k]],
                                       "prompt_logprobs": 1}
        if self.frames is None:
            raise ScoringError(f"{question.qid}: a video question needs a video model (vision=true)")
        turns = self.templates.turns.get(question.prompt)
        if turns is None:
            raise ScoringError(f"{question.qid}: its prompt was not rendered by this server's chat template")
        url, kwargs = self.video_request(question.video)
        messages = with_video(turns, url)
        body = {**base, **kwargs, "return_prompt_text": True}
        if k is None:
            return "/v1/chat/completions", {**body, "messages": messages, **letters}
        return "/v1/chat/completions", {**body, "prompt_logprobs": 1, "add_generation_prompt": False,
                                        "continue_final_message": True,
                                        "messages": [*messages, {"role": "assistant", "content": question.scored[k]}]}

    def ask(self, question: Presented, k: int | None) -> Scores:
        """The scores one request gives: every option's (letters, k None) or option k's."""
        path, body = self.request(question, k)
        found = self.answer(path, body, "prompt_token_ids" if question.video is not None else "choices")
        choice = found["choices"][0]
        ran = found.get("prompt_token_ids") or choice.get("prompt_token_ids") or []
        expected = list(question.context) + ([] if k is None else list(question.options[k]))
        video = question.video is not None
        if video and found.get("prompt_text") != question.prompt + ("" if k is None else question.scored[k]):
            raise ScoringError(f"question {question.qid}: the server's chat template gave another prompt than the "
                               f"one presented{'' if k is None else f' with option {k} ({question.scored[k]!r})'}")
        if not tokens_match(expected, ran, video) or (k is not None and list(ran[-len(question.options[k]):])
                                                      != list(question.options[k])):
            raise ScoringError(f"question {question.qid}: the server ran other tokens than the presented "
                               + ("context" if k is None else f"context and option {k} ({question.scored[k]!r})"))
        if k is not None:
            positions = found.get("prompt_logprobs") if video else choice.get("prompt_logprobs")
            return [option_scores(question, k, positions or [])]
        logprobs = choice.get("logprobs") or {}
        top = {e["token"]: e["logprob"] for e in (logprobs.get("content") or [{}])[0].get("top_logprobs", [])} \
            if video else (logprobs.get("top_logprobs") or [{}])[0] or {}
        sampled = (choice.get("token_ids") or [None])[0]
        scores = []
        for j, option in enumerate(question.options):
            value = top.get(f"token_id:{option[0]}")
            if value is None:
                raise ScoringError(f"question {question.qid}: the server gave no log-probability for option {j}'s "
                                   f"token {option[0]} ({question.scored[j]!r})")
            scores.append((finite(question, j, -float(value)), sampled == option[0]))
        return scores

    def score(self, questions: Sequence[Presented], batches: Batches, batch_size: int) -> list[Scores | None]:
        """`batch_size` questions at a time (one durable-store write each), their requests `concurrency` at once."""
        from tqdm import tqdm

        results: list[Scores | None] = [None] * len(questions)
        bar = tqdm(total=len(questions), desc=f"{self.adapter} scoring", unit="question", disable=self.rank != 0)
        try:
            for start in range(0, len(questions), batch_size):
                part = list(range(start, min(start + batch_size, len(questions))))
                if batches.skip is not None and batches.skip(part):
                    bar.update(len(part))
                    continue
                letters = {i for i in part if self.letters_listed and all(len(o) == 1 for o in questions[i].options)}
                jobs = [(i, k) for i in part for k in ([None] if i in letters else range(len(questions[i].options)))]
                self.stop.clear()
                futures = [self.pool.submit(self.ask, questions[i], k) for i, k in jobs]
                try:
                    answers = [future.result() for future in futures]
                except BaseException:  # the batch fails (the first failure is the one raised)
                    self.stop.set()
                    raise
                for i in part:
                    results[i] = [s for (j, _), found in zip(jobs, answers, strict=True) if j == i for s in found]
                if batches.scored is not None:
                    batches.scored(part, [results[i] for i in part])
                bar.update(len(part))
        finally:
            bar.close()
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)
        if self.client is not None:
            self.client.close()


def error_text(response) -> str:
    """The server's error message on one line, at most 300 characters."""
    try:
        found = response.json()
        message = found.get("error", found) if isinstance(found, dict) else found
        message = message.get("message", message) if isinstance(message, dict) else message
    except ValueError:
        message = response.text
    return " ".join(str(message).split())[:300]
