"""The server's own stdio transport (``serve.stdio.pipe_stdio``) on real pipes, in process."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

import rag_mcp.serve.stdio as stdio_module
from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.serve.sdk import run_session
from rag_mcp.serve.server import build_server
from rag_mcp.serve.stdio import pipe_stdio
from tests.mcp_helpers import hash_deps

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = load_settings({"root": str(sample_repo), "embed_model": "test-hash-64"})
    run_index(s)
    return s


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return orjson.dumps(msg) + b"\n"


INIT = {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "pipe-test", "version": "1"}}


class Lines:
    """Reads newline-delimited JSON from a pipe in a worker thread."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.notes: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        """The next response; notifications on the way are kept in ``self.notes``."""
        while True:
            with anyio.fail_after(60):
                while b"\n" not in self.buf:
                    chunk = await anyio.to_thread.run_sync(os.read, self.fd, 1 << 16)
                    assert chunk, "the server closed stdout before answering"
                    self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            msg = orjson.loads(line)
            if "id" in msg:
                return msg
            self.notes.append(msg)


async def test_pipe_transport_answers_and_survives_bad_lines(
        indexed: Settings, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(stdio_module, "MAX_LINE_BYTES", 4096)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    server = build_server(indexed, lambda: hash_deps(indexed))
    lines = Lines(out_r)

    async def serve() -> None:
        async with pipe_stdio(in_r, out_w) as (read_stream, write_stream):
            await run_session(server, read_stream, write_stream)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            os.write(in_w, request(1, "initialize", INIT))
            init = await lines.next()
            assert init["id"] == 1 and init["result"]["serverInfo"]["name"] == "rag-mcp"
            os.write(in_w, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            os.write(in_w, b"this is not JSON\n")  # reported to the session, as by the SDK's
            os.write(in_w, b"x" * 10_000 + b"\n")  # over the cap in one read: dropped
            os.write(in_w, b"y" * 5_000)  # over the cap before its newline: never buffered whole
            await anyio.sleep(0.05)
            os.write(in_w, b"y" * 5_000 + b"\n")
            # A request split across writes and one arriving with the next in a single write.
            health = request(2, "tools/call", {"name": "rag_health", "arguments": {}})
            os.write(in_w, health[:20])
            await anyio.sleep(0.05)
            os.write(in_w, health[20:] + request(3, "tools/list"))
            got = {m["id"]: m for m in (await lines.next(), await lines.next())}
            assert got[2]["result"]["structuredContent"]["status"] == "ok"
            assert "rag_query" in {t["name"] for t in got[3]["result"]["tools"]}
            # Each bad line was dropped and logged once, as the SDK's transport drops it.
            logged = [r.getMessage() for r in caplog.records]
            assert sum("line over 4096 bytes" in m for m in logged) == 2, logged
            assert sum("not a JSON-RPC message" in m for m in logged) == 1, logged
            # A non-ASCII query survives the byte-level framing.
            os.write(in_w, request(4, "tools/call", {"name": "rag_query",
                                                     "arguments": {"query": "Prüfsumme 校验和"}}))
            q = await lines.next()
            assert q["id"] == 4 and "'Prüfsumme 校验和'" in q["result"]["content"][0]["text"]
            os.close(in_w)  # EOF ends the session
            in_w = -1
    finally:
        if in_w >= 0:
            os.close(in_w)
    assert os.get_blocking(in_r) and os.get_blocking(out_w)  # restored for whoever shares them
    for fd in (in_r, out_r, out_w):
        os.close(fd)


def test_only_pipes_sockets_and_terminals_use_the_pipe_transport(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        assert stdio_module._pipe_like(r) and stdio_module._pipe_like(w)
    finally:
        os.close(r)
        os.close(w)
    with tempfile.TemporaryFile(dir=tmp_path) as fh:  # `rag-mcp serve < requests.jsonl`
        assert not stdio_module._pipe_like(fh.fileno())
    assert not stdio_module._pipe_like(10_000)  # not open at all


async def test_a_client_that_closes_stdout_ends_the_session_quietly(indexed: Settings) -> None:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    server = build_server(indexed, lambda: hash_deps(indexed))
    lines = Lines(out_r)
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                async def serve() -> None:
                    async with pipe_stdio(in_r, out_w) as (read_stream, write_stream):
                        await run_session(server, read_stream, write_stream)

                tg.start_soon(serve)
                os.write(in_w, request(1, "initialize", INIT))
                assert (await lines.next())["id"] == 1
                os.close(out_r)  # the client goes away without closing our stdin
                out_r = -1
                os.write(in_w, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                         + request(2, "tools/call", {"name": "rag_health", "arguments": {}}))
        # serve() returned on its own: no exception, stdin still open
    finally:
        for fd in (in_r, in_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)
