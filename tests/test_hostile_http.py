"""Slow and surplus HTTP connections (a "slowloris"): requests that never finish are closed,
and a new client gets in while the connection cap is reached.

Before the read deadlines and the cap, uvicorn waited forever for a request's head or body and
accepted connections until the process ran out of descriptors: with a 128-descriptor limit, 150
half-open requests kept every new client waiting in the listen queue.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import numpy as np
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings
from rag_mcp.deps import build_deps
from rag_mcp.embed.fake import HashEmbedder
from rag_mcp.embed.pool import EmbedderPool
from rag_mcp.logjson import LOG_NAME
from rag_mcp.serve.http_limits import pick_victim
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.test_http import serving, session_at, settings_for

#: a ceiling for waits on the server, never expected to be reached (the machine is shared)
CEILING = 120.0
PARTIAL_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n"
STALLED_BODY = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n"
                b'{"jsonrpc":')


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


def slow_request(url: str, sent: bytes) -> socket.socket:
    """A connection that sends ``sent`` (perhaps nothing) and then nothing more."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=CEILING)
    if sent:
        sock.sendall(sent)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset), without waiting."""
    try:
        while select.select([sock], [], [], 0)[0]:
            if not sock.recv(65536):
                return True
    except OSError:
        return True
    return False


def wait_until_closed(socks: list[socket.socket], at_least: int) -> int:
    """Wait (up to CEILING) until the server has closed ``at_least`` of ``socks``."""
    deadline = time.monotonic() + CEILING
    while True:
        closed = sum(closed_by_server(s) for s in socks)
        if closed >= at_least or time.monotonic() > deadline:
            return closed
        time.sleep(0.1)


@contextlib.contextmanager
def slow_requests(url: str, n: int) -> Iterator[list[socket.socket]]:
    """``n`` half-open requests of three kinds: silent, a partial head, a stalled body."""
    kinds = (b"", PARTIAL_HEAD, STALLED_BODY)
    socks: list[socket.socket] = []
    try:
        for i in range(n):
            socks.append(slow_request(url, kinds[i % 3]))
        yield socks
    finally:
        for s in socks:
            s.close()


async def one_tool_call(url: str) -> None:
    async with session_at(url) as s:
        assert not (await s.call_tool("rag_health", {})).is_error


def test_a_new_client_gets_in_past_150_slow_requests_with_128_descriptors(
        indexed: Settings, tmp_path: Path) -> None:
    """The server may open 128 files; 150 slow requests came first. Each new connection past
    the cap (64 here: half the descriptors) closes the oldest slow one, so the SDK client gets
    its answer and the tool log is still written."""
    logs = tmp_path / "logs"
    server = hio.HttpProc(Path(indexed.root), logs, tmp_path / "http.err", nofile=128,
                          extra_env={"RAG_EMBED_MODEL": hc.HASH,
                                     "RAG_HTTP_HEADER_TIMEOUT": "3000",
                                     "RAG_HTTP_BODY_TIMEOUT": "3000"})
    try:
        with slow_requests(server.url, 150) as socks:
            # wait until the server has taken them all: the cap left 64 open at most
            assert wait_until_closed(socks, 150 - 64) >= 150 - 64
            anyio.run(one_tool_call, server.url)
        assert server.proc.poll() is None
        deadline = time.monotonic() + CEILING
        while "rag_health" not in "".join(p.read_text() for p in logs.glob(f"{LOG_NAME}*")):
            assert time.monotonic() < deadline, "the tool log was not written"
            time.sleep(0.1)
    finally:
        server.close()
    assert "Traceback" not in server.stderr.read_text()


def test_a_request_that_never_finishes_is_closed(indexed: Settings,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Nothing sent, a partial head, a head trickled a byte at a time, a stalled body: each is
    closed after its read timeout (1 s here); the server then answers as usual."""
    s = settings_for(Path(indexed.root), http_header_timeout="1", http_body_timeout="1")
    with serving(s) as url, slow_requests(url, 3) as socks:
        trickled = slow_request(url, b"")
        socks.append(trickled)

        def trickle() -> None:
            with contextlib.suppress(OSError):  # the server closed it
                for byte in PARTIAL_HEAD * 1000:
                    trickled.sendall(bytes([byte]))
                    time.sleep(0.05)

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        assert wait_until_closed(socks, 4) == 4
        sender.join(CEILING)
        assert not sender.is_alive(), "the trickled head was never closed"
        anyio.run(one_tool_call, url)
    assert "Exception in ASGI application" not in caplog.text


class HeldEmbedder(HashEmbedder):
    """The test model, holding any query that says "hold" until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        if "hold" in text:
            self.entered.set()
            assert self.release.wait(CEILING)
        return super().embed_query(text)


def test_the_cap_never_closes_a_tool_call_in_flight(indexed: Settings) -> None:
    """With 10 connections allowed, a tool call in flight while 30 slow requests and a new
    client arrive is answered; the slow requests made room."""
    s = settings_for(Path(indexed.root), http_max_connections="10",
                     http_header_timeout="3000", http_body_timeout="3000")
    held = HeldEmbedder()
    deps = lambda: build_deps(s, models=EmbedderPool(s, lambda m, b: held))  # noqa: E731
    with serving(s, deps=deps) as url:

        async def scenario() -> None:
            async with session_at(url) as first:
                result = {}

                async def call() -> None:
                    result["r"] = await first.call_tool("rag_query", {"query": "hold parse"})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    assert await anyio.to_thread.run_sync(held.entered.wait, CEILING)
                    with slow_requests(url, 30) as socks:
                        await anyio.to_thread.run_sync(wait_until_closed, socks, 30 - 10)
                        await one_tool_call(url)
                    held.release.set()
                assert not result["r"].is_error, result["r"]
                assert result["r"].structured_content["hits"]

        anyio.run(scenario)


class Conn:
    def __init__(self, name: str, phase: str) -> None:
        self.name, self.phase = name, phase.rstrip("+*")
        self.unread = "+" in phase  # its request waits unread in the kernel
        self.served = int("*" in phase)  # answered a request before

    def has_unread_bytes(self) -> bool:
        return self.unread


@pytest.mark.parametrize("phases,victim", [
    (["busy", "idle", "head", "body"], "head"),  # the oldest still reading
    (["busy", "body", "head"], "body"),
    (["busy", "idle", "idle"], "idle"),  # then the oldest idle one
    (["busy", "busy"], "busy"),  # only when every one is in flight: the oldest
    (["head", "closing+"], "closing+"),
    (["head+", "body+", "head", "head"], "head"),  # not the server's own backlog
    (["idle+", "idle"], "idle"),
    (["busy", "head+", "idle+"], "head+"),  # an unread request before a call in flight
    (["head+", "head+"], "head+"),  # every one waiting: the oldest all the same
    (["body*", "head*", "idle", "head"], "head"),  # a client answered before: after the rest
    (["busy", "body*", "idle"], "idle"),
    (["busy", "body*", "head*"], "body*"),
])
def test_which_connection_makes_room(phases: list[str], victim: str) -> None:
    conns = [Conn(f"{p}{i}", p) for i, p in enumerate(phases)]
    assert pick_victim(conns).name == f"{victim}{phases.index(victim)}"
