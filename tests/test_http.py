"""Streamable HTTP: the official SDK client against a real uvicorn server, and the guard."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.deps import Deps
from rag_mcp.errors import ConfigError
from rag_mcp.logjson import LOG_NAME
from rag_mcp.serve import guard
from rag_mcp.serve import http as rag_http
from rag_mcp.serve.__main__ import main
from rag_mcp.serve.server import build_server
from tests.mcp_helpers import Era, error_code, hash_deps, mode, over_stdio, place, text

HASH = "test-hash-64"
TOKEN = "t0k-" + "x" * 40
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, "http_port": "0", **kw})


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


@contextlib.contextmanager
def serving(settings: Settings, auth: Any = None, connector_tools: bool = True,
            plan_out: list[Any] | None = None, deps: Callable[[], Deps] | None = None
            ) -> Iterator[str]:
    """A real uvicorn server on a free loopback port, in a thread; yields the /mcp URL."""
    plan = rag_http.plan_http(settings, auth)
    if plan_out is not None:
        plan_out.append(plan)
    server = build_server(settings, deps or (lambda: hash_deps(settings)),
                          connector_tools=connector_tools, **plan.server_options)
    uv = rag_http.make_server(server, settings, plan)
    with rag_http.shared_deps(server):
        thread = threading.Thread(target=uv.run, kwargs={"sockets": [plan.sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not uv.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        try:
            yield plan.url
        finally:
            uv.should_exit = True
            thread.join(10)


@contextlib.asynccontextmanager
async def session_at(url: str, headers: dict[str, str] | None = None, era: Era = "legacy"
                     ) -> Any:
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as hc, \
            Client(streamable_http_client(url, http_client=hc), mode=mode(era)) as session:
        yield session


def only_json_text(result: Any) -> dict[str, Any]:
    """The connector contract: exactly one text item, whose text is a JSON object."""
    assert not result.is_error, text(result)
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return json.loads(result.content[0].text)


@contextlib.asynccontextmanager
async def sdk_session(transport: str, settings: Settings) -> Any:
    if transport == "stdio":
        async with over_stdio(Path(settings.root)) as s:
            yield s
    else:
        with serving(settings) as url:
            async with session_at(url) as s:
                yield s


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_sdk_client_calls_every_tool(indexed: Settings, transport: str) -> None:
    async with sdk_session(transport, indexed) as s:
        tools = {t.name for t in (await s.list_tools()).tools}
        ours = {"rag_query", "rag_get_span", "rag_health"}
        assert tools == (ours | {"search", "fetch"} if transport == "http" else ours)

        q = await s.call_tool("rag_query", {"query": "parse_span_id", "k": 3})
        assert not q.is_error and q.structured_content is not None
        top = q.structured_content["hits"][0]
        # the file's definitions come back as one range, named best part first
        assert top["symbol"].split(", ")[0] == "parse_span_id"
        g = await s.call_tool("rag_get_span", {"span_id": top["id"]})
        assert g.structured_content and "\ndef parse_span_id(" in (
            "\n" + g.structured_content["text"])
        h = await s.call_tool("rag_health", {})
        assert h.structured_content and h.structured_content["status"] == "ok"

        assert error_code(await s.call_tool("rag_get_span", {"span_id": "../x:1-2:0"})
                          ) == "E_INVALID_ARGUMENT"
        assert error_code(await s.call_tool("rag_query", {"query": ""})) == "E_INVALID_ARGUMENT"
        assert error_code(await s.call_tool("nope", {})) == "E_NOT_FOUND"
        if transport == "stdio":
            assert error_code(await s.call_tool("search", {"query": "x"})) == "E_NOT_FOUND"
            return

        found = only_json_text(await s.call_tool("search", {"query": "retry with backoff"}))
        assert set(found) == {"results"} and found["results"]
        first = found["results"][0]
        assert set(first) == {"id", "title", "url"}
        assert first["id"].startswith("src/app/retry.py:")
        assert first["url"] == ""  # not a git checkout: no web link, and never a file:// one
        doc = only_json_text(await s.call_tool("fetch", {"id": first["id"]}))
        assert set(doc) == {"id", "title", "text", "url", "metadata"}
        assert doc["id"] == first["id"] and "def retry" in doc["text"]
        assert doc["metadata"]["path"] == "src/app/retry.py"
        assert error_code(await s.call_tool(
            "fetch", {"id": "src/app/retry.py:1-2:0123456789ab"})) == "E_NOT_FOUND"
    lines = [json.loads(x) for x in (indexed.log_path / LOG_NAME).read_text().splitlines()]
    logged = [r["tool"] for r in lines]
    for name in ("rag_query", "rag_get_span", "rag_health", "search", "fetch", "nope"):
        assert name in logged
    search_line = next(r for r in lines if r["tool"] == "search")
    assert search_line["client"]["name"] == "mcp" and search_line["returned"] >= 1


@pytest.mark.anyio
async def test_two_concurrent_sessions_do_not_cross_talk(indexed: Settings) -> None:
    with serving(indexed) as url:
        seen: dict[str, list[str]] = {"a": [], "b": []}

        async def run(name: str, query: str, rounds: int) -> None:
            async with session_at(url) as s:
                for _ in range(rounds):
                    r = await s.call_tool("rag_query", {"query": query, "k": 1,
                                                        "tau": 0.0})
                    assert r.structured_content is not None
                    assert text(r).startswith(f"1 span for {query!r}"), text(r)
                    seen[name].append(place(r.structured_content["hits"][0])[0])

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", "retry with exponential backoff", 12)
            tg.start_soon(run, "b", "ApiClient fetchUser", 3)  # ends first: its session closes
        assert set(seen["a"]) == {"src/app/retry.py"} and len(seen["a"]) == 12
        assert set(seen["b"]) == {"web/client.ts"}
        # The shared dependencies outlive any one session.
        async with session_at(url) as s:
            r = await s.call_tool("rag_health", {})
            assert r.structured_content and r.structured_content["status"] == "ok"


def test_loopback_is_the_default(sample_repo: Path) -> None:
    s = load_settings({"root": str(sample_repo)})
    assert s.http_host == "127.0.0.1" and s.http_port == 8765 and not s.http_token
    with serving(settings_for(sample_repo)) as url:
        assert url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_refuses_a_non_loopback_bind_without_a_token(sample_repo: Path, host: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    s = settings_for(sample_repo, http_host=host)
    with pytest.raises(ConfigError, match="RAG_HTTP_TOKEN"):
        rag_http.check_exposure(s)
    code = main(["serve", "--http", "--root", str(sample_repo), "--host", host, "--port", "0"])
    assert code == 2
    assert "refusing to serve" in capsys.readouterr().err


@pytest.mark.parametrize("token,why", [("short", "too short"), ("a/" * 20, "only letters")])
def test_refuses_weak_tokens(sample_repo: Path, token: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        rag_http.check_exposure(settings_for(sample_repo, http_host="0.0.0.0",
                                             http_token=token))
    rag_http.check_exposure(settings_for(sample_repo, http_host="0.0.0.0", http_token=TOKEN))


def test_token_required_bearer_or_secret_path(indexed: Settings,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    s = settings_for(Path(indexed.root), http_token=TOKEN)
    with serving(s) as url, httpx.Client(timeout=30) as c:
        r = c.post(url, json=INIT, headers=MCP_HEADERS)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert c.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer nope"}
                      ).status_code == 401
        assert c.post(url + "/" + TOKEN[:-1] + "y", json=INIT, headers=MCP_HEADERS
                      ).status_code == 401
        ok = c.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.headers.get("mcp-session-id")
        assert c.get(url.removesuffix("/mcp") + "/health").status_code == 200

        async def call_both() -> None:
            async with session_at(url, {"Authorization": f"Bearer {TOKEN}"}) as sess:
                assert not (await sess.call_tool("rag_health", {})).is_error
            async with session_at(f"{url}/{TOKEN}") as sess:  # ChatGPT's way: no headers
                r = await sess.call_tool("search", {"query": "checksum"})
                assert json.loads(text(r))["results"]

        anyio.run(call_both)
        # Failed attempts are throttled per client, before the token is even compared.
        codes = [c.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer x"}
                        ).status_code for _ in range(guard.AUTH_FAILURE_BURST + 2)]
        assert 429 in codes
        assert c.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
                      ).status_code == 429
    # Everything the server side logged (the test's own HTTP client logs its URLs: not ours).
    server_side = [r.getMessage() for r in caplog.records
                   if not r.name.startswith(("httpx", "httpcore", "mcp.client"))]
    logs = "\n".join(server_side) + "".join(p.read_text() for p in s.log_path.glob("*.jsonl"))
    assert TOKEN not in logs and TOKEN[:20] not in logs
    assert any("/mcp/***" in m for m in server_side)  # the secret path is logged masked


def test_origin_allow_list(indexed: Settings) -> None:
    s = settings_for(Path(indexed.root), http_allowed_origins="https://chat.example")
    with serving(s) as url, httpx.Client(timeout=30) as c:
        for bad in ("http://evil.example", "null", "http://localhost.evil.example"):
            r = c.post(url, json=INIT, headers={**MCP_HEADERS, "Origin": bad})
            assert r.status_code == 403, bad
            assert r.json()["error"] == "forbidden_origin"
        for good in ("http://localhost:3000", "http://127.0.0.1:6274", "https://chat.example"):
            assert c.post(url, json=INIT, headers={**MCP_HEADERS, "Origin": good}
                          ).status_code == 200, good
        assert c.post(url, json=INIT, headers=MCP_HEADERS).status_code == 200  # no Origin


def test_dns_rebinding_host_is_refused_without_a_token(indexed: Settings) -> None:
    with serving(indexed) as url, httpx.Client(timeout=30) as c:
        r = c.post(url, json=INIT, headers={**MCP_HEADERS, "Host": "attacker.example:8765"})
        assert r.status_code == 421
        assert c.post(url, json=INIT, headers={**MCP_HEADERS, "Host": "localhost:1"}
                      ).status_code == 200
        assert c.post(url + "/anything", json=INIT, headers=MCP_HEADERS).status_code == 404
    with serving(settings_for(Path(indexed.root), http_token=TOKEN)) as url, \
            httpx.Client(timeout=30) as c:
        # A tunnel rewrites Host; with a token the token is the defence.
        r = c.post(url, json=INIT, headers={**MCP_HEADERS, "Host": "abc.trycloudflare.com",
                                            "Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200


def test_oversized_bodies_get_413(indexed: Settings) -> None:
    s = settings_for(Path(indexed.root), http_max_body="2048")
    big = {**INIT, "params": {**INIT["params"], "pad": "x" * 4000}}
    with serving(s) as url, httpx.Client(timeout=30) as c:
        assert c.post(url, json=big, headers=MCP_HEADERS).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            body = json.dumps(big).encode()
            for i in range(0, len(body), 512):
                yield body[i:i + 512]

        assert c.post(url, content=chunks(), headers=MCP_HEADERS).status_code == 413
        assert c.post(url, json=INIT, headers=MCP_HEADERS).status_code == 200


def test_health_endpoint(sample_repo: Path, indexed: Settings) -> None:
    with serving(indexed) as url, httpx.Client(timeout=30) as c:
        r = c.get(url.removesuffix("/mcp") + "/health")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "ok" and body["index_present"] and body["spans"] > 0
    empty = settings_for(sample_repo, index_dir=str(sample_repo / "no-index"))
    with serving(empty) as url, httpx.Client(timeout=30) as c:
        r = c.get(url.removesuffix("/mcp") + "/health")
        assert r.status_code == 503
        assert r.json()["error"] == "E_INDEX_UNAVAILABLE" and str(sample_repo) not in r.text


def test_a_rotated_x_forwarded_for_does_not_escape_the_rate_limit(indexed: Settings) -> None:
    """From loopback (every local process, every tunnel) a new X-Forwarded-For per attempt was
    believed: unlimited failed-token attempts. Forwarded headers count only from proxies the
    operator names (``http.trusted_proxies``)."""
    s = settings_for(Path(indexed.root), http_token=TOKEN)
    with serving(s) as url, httpx.Client(timeout=30) as c:
        codes = [c.post(url, json=INIT, headers={
            **MCP_HEADERS, "Authorization": "Bearer x", "X-Forwarded-For": f"203.0.113.{i}"}
        ).status_code for i in range(guard.AUTH_FAILURE_BURST + 2)]
        assert 429 in codes, codes
    trusting = settings_for(Path(indexed.root), http_token=TOKEN,
                            http_trusted_proxies="127.0.0.1")
    with serving(trusting) as url, httpx.Client(timeout=30) as c:
        codes = [c.post(url, json=INIT, headers={
            **MCP_HEADERS, "Authorization": "Bearer x", "X-Forwarded-For": f"203.0.113.{i}"}
        ).status_code for i in range(guard.AUTH_FAILURE_BURST + 2)]
        assert set(codes) == {401}, codes  # a named proxy's clients are told apart


def test_a_new_client_gets_in_when_idle_sessions_fill_the_cap(
        indexed: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """``initialize`` calls that never came back filled the session cap, and every new client
    got 503 until the SDK's 30-minute idle timeout: the least recently used idle session now
    makes room; a session in use is kept."""
    monkeypatch.setattr(rag_http, "MAX_SESSIONS", 4)
    with serving(indexed) as url, httpx.Client(timeout=30) as c:
        idle = []
        for _ in range(4):
            r = c.post(url, json=INIT, headers=MCP_HEADERS)
            assert r.status_code == 200
            idle.append(r.headers["mcp-session-id"])

        async def newcomers() -> None:
            async with session_at(url) as first:  # in use while the next one arrives
                async with session_at(url) as second:
                    assert not (await second.call_tool("rag_health", {})).is_error
                assert not (await first.call_tool("rag_health", {})).is_error

        anyio.run(newcomers)
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        ended = [c.post(url, json=ping, headers={**MCP_HEADERS, "mcp-session-id": sid}
                        ).status_code for sid in idle]
        assert ended[:2] == [404, 404], ended  # the two least recently used made room


def test_rate_limiter_buckets() -> None:
    now = [0.0]
    rl = guard.RateLimiter(3, 1.0, max_keys=2, clock=lambda: now[0])
    assert [rl.take("a") for _ in range(4)] == [True, True, True, False]
    assert rl.exhausted("a") and not rl.exhausted("b")
    now[0] = 1.0
    assert rl.take("a") and not rl.take("a")
    rl.take("b")
    rl.take("c")  # evicts "a", the least recently seen
    assert not rl.exhausted("a")


def test_the_cli_serves_http_and_stops_on_sigint(indexed: Settings, tmp_path: Path) -> None:
    err = tmp_path / "server.err"
    with err.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rag_mcp", "serve", "--http", "--root", indexed.root,
             "--port", "0"], stdout=subprocess.PIPE, stderr=fh, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            m = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", err.read_text())
            url = m.group(1) if m else None
            time.sleep(0.1)
        assert httpx.get(url.removesuffix("/mcp") + "/health", timeout=30).status_code == 200

        async def health() -> None:
            async with session_at(url) as s:
                assert not (await s.call_tool("rag_health", {})).is_error

        anyio.run(health)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) in (0, -signal.SIGINT, 130)
        assert proc.stdout is not None and proc.stdout.read() == b""  # stdout stays unused
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
