"""A loopback HTTP server that speaks Ollama's ``/api/chat`` and ``/api/tags``, and misbehaves.

No Ollama server exists on the machines that run the tests, and the local-LLM tool must be
tested through the real ``ollama`` client (its error types are what ``rag_mcp.llm`` translates),
so this server plays Ollama on 127.0.0.1. It records every request body it receives (the prompt
is what a secret must never reach) and can be switched into each fault the suite studies:

* ``ok``       answers, citing the first span ID it finds in the prompt;
* ``hang``     accepts the request and never answers;
* ``trickle``  sends headers, then one byte of body every ``trickle_every`` seconds, forever
               (each read succeeds, so only an overall deadline stops it);
* ``garbage``  ``200 OK`` with a body that is not JSON;
* ``wrong_shape`` ``200 OK`` with JSON that is not a chat reply;
* ``cut``      announces a body longer than it sends, then closes the connection;
* an unknown model (any model not in ``models``) gets Ollama's 404 ``model ... not found``.

``refused_url()`` gives an address where nothing listens (connection refused).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "hang", "trickle", "garbage", "wrong_shape", "cut")
DEFAULT_MODEL = "qwen2.5-coder:3b"
_SPAN_ID = re.compile(r'<span id="([^"]+)">')


class FakeOllama:
    """``with FakeOllama() as fake: ... fake.url ... fake.requests``; thread-safe."""

    def __init__(self, mode: str = "ok", *, models: tuple[str, ...] = (DEFAULT_MODEL,),
                 answer: str | None = None, trickle_every: float = 0.2) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode
        self.models = models
        self.answer = answer
        self.trickle_every = trickle_every
        self.requests: list[dict[str, Any]] = []  # (path, parsed body) of every request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- what the tests read -------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def prompts(self) -> list[str]:
        """Every message text sent to ``/api/chat`` (system and user), in order."""
        with self._lock:
            bodies = [r["body"] for r in self.requests if r["path"] == "/api/chat"]
        return [str(m.get("content", "")) for b in bodies if isinstance(b, dict)
                for m in b.get("messages", []) if isinstance(m, dict)]

    def raw_bodies(self) -> bytes:
        """The raw bytes of every request body, for leak checks that trust no parser."""
        with self._lock:
            return b"\n".join(r["raw"] for r in self.requests)

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # keep the test output clean

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                fake._record(self.path, b"")
                if self.path.rstrip("/") == "/api/tags":
                    fake._reply(self, "tags", {"models": [
                        {"name": m, "model": m, "size": 1, "digest": "0" * 64}
                        for m in fake.models]})
                else:
                    fake._send_json(self, 404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = fake._record(self.path, raw)
                if self.path.rstrip("/") != "/api/chat":
                    fake._send_json(self, 404, {"error": "not found"})
                    return
                fake._reply(self, "chat", body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases hanging and trickling handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- behaviour -----------------------------------------------------------------------

    def _record(self, path: str, raw: bytes) -> Any:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append({"path": path, "raw": raw, "body": body})
        return body

    @staticmethod
    def _send_json(h: BaseHTTPRequestHandler, status: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _reply(self, h: BaseHTTPRequestHandler, what: str, body: Any) -> None:
        model = body.get("model") if isinstance(body, dict) else None
        if self.mode == "hang":
            self._stop.wait()  # never answers while the server runs
            h.close_connection = True
            return
        if self.mode == "trickle":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "1000000")
            h.end_headers()
            try:
                while not self._stop.wait(self.trickle_every):
                    h.wfile.write(b" ")
                    h.wfile.flush()
            except OSError:
                pass  # the client gave up: that is the point
            h.close_connection = True
            return
        if self.mode == "garbage":
            data = b"<html>\x00\xff not json {{{"
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        if self.mode == "wrong_shape":
            self._send_json(h, 200, {"message": "ok", "choices": [1, 2, 3]})
            return
        if self.mode == "cut":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "5000")
            h.end_headers()
            h.wfile.write(b'{"model": "x", "message": {"role": "assis')
            h.wfile.flush()
            h.close_connection = True
            return
        if what == "tags":
            self._send_json(h, 200, body)
            return
        if model not in self.models:
            self._send_json(h, 404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        self._send_json(h, 200, self._chat_reply(str(model), body))

    def _chat_reply(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages") or [{}]
        prompt = str(msgs[-1].get("content", ""))
        ids = _SPAN_ID.findall(prompt)
        answer = self.answer
        if answer is None:
            answer = (f"The code is in [{ids[0]}]." if ids
                      else "The spans do not contain the answer.")
        return {"model": model, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "message": {"role": "assistant", "content": answer}, "done": True,
                "done_reason": "stop", "prompt_eval_count": len(prompt) // 4,
                "eval_count": len(answer) // 4}


def refused_url() -> str:
    """A loopback URL where nothing listens: the port was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextmanager
def fake_ollama(mode: str = "ok", **kw: Any) -> Iterator[FakeOllama]:
    with FakeOllama(mode, **kw) as fake:
        yield fake
