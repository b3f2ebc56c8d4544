"""The MCP Inspector's command-line mode (from npm) against spawned rag-mcp servers.

The Inspector is installed once into ``<repo>/.cache/inspector`` (``make test`` does it first;
this module does it when run alone). Major version 1 is pinned: 2.x needs Node >= 22.19, and
1.x runs on the Node 20 of our CI machines (npm warns about its engines field; it works).
Keep INSPECTOR in step with the Makefile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
PREFIX = REPO / ".cache" / "inspector"
INSPECTOR = "@modelcontextprotocol/inspector@^1.0.3"
BIN = PREFIX / "node_modules" / ".bin" / "mcp-inspector"
PKG = PREFIX / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
HASH = "test-hash-64"

pytestmark = pytest.mark.slow


def _installed() -> bool:
    try:
        return BIN.exists() and json.loads(PKG.read_text())["version"].startswith("1.")
    except (OSError, ValueError, KeyError):
        return False


@pytest.fixture(scope="session")
def inspector() -> Path:
    if _installed():
        return BIN
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the MCP Inspector CLI (from npm) cannot run here")
    done = subprocess.run([npm, "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund",
                           "--loglevel=error", INSPECTOR], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0 and _installed(), (
        f"npm install {INSPECTOR} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return BIN


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = load_settings({"root": str(sample_repo), "embed_model": HASH})
    run_index(s)
    return s


def rag_mcp_command() -> list[str]:
    script = Path(sys.executable).with_name("rag-mcp")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rag_mcp"]


def inspect(inspector: Path, target: list[str], *args: str) -> Any:
    done = subprocess.run([str(inspector), "--cli", *target, *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=False)
    assert done.returncode == 0, f"inspector failed:\n{done.stdout}\n{done.stderr}"
    start = done.stdout.index("{")  # v1 may print a deprecation banner first
    return json.loads(done.stdout[start:])


def test_inspector_over_stdio_lists_tools_and_calls_rag_query(inspector: Path,
                                                              indexed: Settings) -> None:
    server = [*rag_mcp_command(), "serve", "--root", indexed.root]
    listed = inspect(inspector, server, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == {"rag_query", "rag_get_span", "rag_health"}
    called = inspect(inspector, server, "--method", "tools/call", "--tool-name", "rag_query",
                     "--tool-arg", "query=retry with exponential backoff", "--tool-arg", "k=2")
    assert not called.get("isError")
    hits = called["structuredContent"]["hits"]
    assert hits and hits[0]["path"] == "src/app/retry.py" and len(hits) <= 2
    assert "src/app/retry.py" in called["content"][0]["text"]


@pytest.fixture
def http_server(indexed: Settings, tmp_path: Path) -> Iterator[str]:
    err = tmp_path / "server.err"
    with err.open("wb") as fh:
        proc = subprocess.Popen([*rag_mcp_command(), "serve", "--http", "--root", indexed.root,
                                 "--port", "0"], stdout=subprocess.DEVNULL, stderr=fh,
                                env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while not (m := re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", err.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_inspector_over_streamable_http(inspector: Path, http_server: str) -> None:
    target = [http_server, "--transport", "http"]
    listed = inspect(inspector, target, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == {"rag_query", "rag_get_span", "rag_health",
                                                    "search", "fetch"}
    called = inspect(inspector, target, "--method", "tools/call", "--tool-name", "rag_query",
                     "--tool-arg", "query=ApiClient fetchUser")
    assert called["structuredContent"]["hits"][0]["path"] == "web/client.ts"
    found = inspect(inspector, target, "--method", "tools/call", "--tool-name", "search",
                    "--tool-arg", "query=checksum of bytes")
    assert len(found["content"]) == 1 and found["content"][0]["type"] == "text"
    results = json.loads(found["content"][0]["text"])["results"]
    assert results[0]["id"].startswith("src/app/spans.py:")
