"""End to end with the real parts: the default model, rag-index as a process, rag-mcp over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from rag_mcp.embed.catalog import DEFAULT
from tests.mcp_helpers import answer, error_code, over_stdio, text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def real_index(sample_repo: Path, tmp_path: Path) -> Path:
    """The sample repository indexed by the real CLI with the default model."""
    out = subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(sample_repo)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "Indexed" in out.stdout and DEFAULT not in out.stdout.split("\n")[0]
    return sample_repo


async def test_stdio_session_end_to_end(real_index: Path, tmp_path: Path) -> None:
    logs = tmp_path / "stdio-logs"
    async with over_stdio(real_index, env={"RAG_LOG_DIR": str(logs)}) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"rag_query", "rag_get_span", "rag_health"}
        r = await session.call_tool("rag_query", {"query": "how do I install it on Debian?"})
        top = answer(r)["hits"][0]
        assert top["path"] == "docs/install.md" and "Debian" in (top["heading"] or "")
        r = await session.call_tool("rag_query", {"query": "retry a call with exponential "
                                                           "backoff", "kind": "code"})
        top = answer(r)["hits"][0]
        assert top["symbol"] == "retry"
        g = await session.call_tool("rag_get_span", {"span_id": top["id"], "context_lines": 1})
        assert not g.is_error and "def retry" in text(g)
        assert error_code(await session.call_tool("rag_get_span", {"span_id": "a:1-1:zz"})) \
            == "E_INVALID_ARGUMENT"
        h = await session.call_tool("rag_health", {})
        assert h.structured_content is not None and h.structured_content["status"] == "ok"
        assert h.structured_content["embedding_model"] == DEFAULT
    lines = [orjson.loads(x) for x in (logs / "rag-mcp.jsonl").read_bytes().splitlines()]
    assert [x["tool"] for x in lines] == ["rag_query", "rag_query", "rag_get_span",
                                          "rag_get_span", "rag_health"]
    assert lines[0]["client"]["name"] == "mcp"


def test_stdout_carries_only_json_rpc(real_index: Path) -> None:
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "rag_query", "arguments": {"query": "checksum"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "rag_get_span", "arguments": {"span_id": "../x:1-2:0123456789ab"}}},
    ]
    proc = subprocess.Popen([sys.executable, "-m", "rag_mcp", "--root", str(real_index)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "RAG_LOG_DIR": str(real_index / ".l")})
    assert proc.stdin is not None and proc.stdout is not None
    for m in msgs:
        proc.stdin.write(json.dumps(m) + "\n")
    proc.stdin.flush()
    replies = []
    by_id: dict[int, dict] = {}
    while len(by_id) < 4:  # keep stdin open until every answer is in: EOF ends the session
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "server exited"
        reply = json.loads(line)  # every stdout line is JSON
        replies.append(reply)
        if "id" in reply:
            by_id[reply["id"]] = reply
    proc.stdin.close()
    rest = proc.stdout.read()
    proc.wait(30)
    assert all(r.get("jsonrpc") == "2.0" for r in replies) and rest.strip() == ""
    assert by_id[3]["result"]["isError"] is False
    assert by_id[4]["result"]["isError"] is True
    assert by_id[4]["result"]["content"][0]["text"].startswith("E_INVALID_ARGUMENT")


LIGHT = textwrap.dedent("""
    import sys, anyio
    from mcp import Client
    from rag_mcp.config import load_settings
    from rag_mcp.deps import build_deps
    from rag_mcp.serve.server import build_server
    import tools.rag_query, tools.rag_get_span, tools.rag_health
    s = load_settings({"root": sys.argv[1]})
    srv = build_server(s, lambda: build_deps(s))
    async def main():
        async with Client(srv, mode="legacy") as c:
            await c.list_tools()
            heavy = [m for m in ("torch", "tree_sitter", "sentence_transformers", "transformers")
                     if m in sys.modules]
            print("BEFORE", ",".join(heavy))
            r = await c.call_tool("rag_query", {"query": "checksum"})
            assert not r.is_error, r
            # an embedded index is read through chromadb's Rust bindings alone
            heavy = [m for m in ("torch", "tree_sitter", "sentence_transformers", "chromadb")
                     if m in sys.modules]
            print("AFTER", ",".join(heavy))
    anyio.run(main)
""")


def test_light_imports(real_index: Path) -> None:
    """Listing tools loads no torch or tree-sitter; querying with the ONNX model loads no torch,
    and an embedded index is read without chromadb's Python layer (~0.5-1 s of import)."""
    out = subprocess.run([sys.executable, "-c", LIGHT, str(real_index)], capture_output=True,
                         text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) if " " in line else (line, "")
                 for line in out.stdout.splitlines())
    assert lines["BEFORE"] == "" and lines["AFTER"] == ""
