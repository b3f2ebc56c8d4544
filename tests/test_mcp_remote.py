"""A real client's OAuth sign-in with ``serve --http --auth oauth``, start to finish: mcp-remote
(from npm, pinned; the stdio-to-HTTP bridge that Claude Desktop, Cursor and Windsurf users put in
front of remote servers) registers itself, opens the authorization URL in "the browser", takes
the code at its own callback address, exchanges it with PKCE, and then forwards a tool call.

The browser is tests/consent_browser.py, set as ``$BROWSER``: mcp-remote opens URLs with the
``open`` package, whose xdg-open runs ``$BROWSER`` when no desktop is found. It does what the user
does: reads the one-time code the server printed on its terminal and types it into the consent
page. Nothing leaves the loopback interface.

mcp-remote and the Node it runs on are installed once into ``<repo>/.cache/mcp-remote`` (``make
test`` does it first; this module does it when run alone); skipped with the reason when npm is
absent. Keep the pins in step with the Makefile.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from indexers.pipeline import run_index
from rag_mcp.config import Settings
from tests.npm_tools import npm_tool
from tests.test_http import serving, settings_for

REPO = Path(__file__).resolve().parent.parent
PREFIX = REPO / ".cache" / "mcp-remote"
MCP_REMOTE = "mcp-remote@0.15.1"
BIN = PREFIX / "node_modules" / ".bin"
BROWSER = Path(__file__).resolve().parent / "consent_browser.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def mcp_remote() -> Path:
    npm_tool("mcp-remote", MCP_REMOTE, "mcp-remote", node=True)
    return PREFIX / "node_modules" / "mcp-remote" / "dist" / "proxy.js"


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


def test_mcp_remote_signs_in_with_oauth_and_calls_a_tool(
        mcp_remote: Path, indexed: Settings, tmp_path: Path) -> None:
    plans: list[Any] = []
    terminal = tmp_path / "server-terminal.txt"
    bridge_log = tmp_path / "mcp-remote-stderr.txt"
    browser = tmp_path / "browser"  # $BROWSER is run as a command: one word, no arguments
    browser.write_text(f"#!/bin/sh\nexec {sys.executable} {BROWSER} \"$1\"\n")
    browser.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth"), "BROWSER": str(browser),
           "RAG_TEST_TERMINAL": str(terminal), "PYTHONPATH": str(REPO)}
    with serving(indexed, auth="oauth", plan_out=plans) as url, \
            terminal.open("w", encoding="utf-8") as say, \
            bridge_log.open("w", encoding="utf-8") as errlog:
        plans[0].provider.say = say  # the server's terminal, which the "user" reads

        async def through_the_bridge() -> tuple[set[str], dict[str, Any]]:
            params = StdioServerParameters(command=str(BIN / "node"),
                                           args=[str(mcp_remote), url], env=env)
            with anyio.fail_after(180):
                async with Client(stdio_client(params, errlog=errlog)) as session:
                    tools = {t.name for t in (await session.list_tools()).tools}
                    health = await session.call_tool("rag_health", {})
                    assert not health.is_error and health.structured_content, health
                    return tools, health.structured_content

        try:
            tools, health = anyio.run(through_the_bridge)
        except BaseException as exc:  # the bridge's own account says why
            errlog.flush()
            pytest.fail(f"{exc!r}\nmcp-remote:\n{bridge_log.read_text(errors='replace')}"
                        f"\nserver terminal:\n{terminal.read_text()}")
        say.flush()
        printed = terminal.read_text()
    assert {"rag_query", "rag_get_span", "rag_health"} <= tools
    assert health["status"] == "ok", health
    assert "'MCP CLI Proxy' asks to use this server (OAuth)" in printed, printed
    assert "approved 'MCP CLI Proxy'" in printed, printed
    # the bridge kept what it was issued: its registration and a refresh token
    saved = "".join(p.read_text() for p in (tmp_path / "mcp-auth").rglob("*.json"))
    assert "refresh_token" in saved and "client_id" in saved
