"""A real assistant's own MCP health check against the configuration ``rag-mcp config`` writes:
Claude Code's ``claude mcp list`` (from npm, pinned; it runs offline and without signing in)
starts the server from the project's .mcp.json and reports whether it connected.

Installed once into ``<repo>/.cache/claude-code``; skipped with the reason when npm is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import load_settings
from rag_mcp.serve.__main__ import main
from tests.conftest import SAMPLE_REPO
from tests.npm_tools import npm_tool

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
HASH = "test-hash-64"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def claude() -> Path:
    return npm_tool("claude-code", CLAUDE_CODE, "Claude Code") / "node_modules" / ".bin" / "claude"


def test_claude_code_connects_with_the_written_config(claude: Path, tmp_path: Path) -> None:
    root = tmp_path / "project"
    for rel, text in SAMPLE_REPO.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text), encoding="utf-8")
    run_index(load_settings({"root": str(root), "embed_model": HASH}))
    assert main(["config", "--client", "claude-code", "--root", str(root), "--write"]) == 0
    assert "rag" in json.loads((root / ".mcp.json").read_text())["mcpServers"]
    # The user's approval of the project's server, as Claude Code records it in the project
    # (which it finds by its git root).
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.local.json").write_text('{"enabledMcpjsonServers": ["rag"]}')
    env = {**os.environ, "HOME": str(tmp_path / "home"), "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           # the server's start is not what is tested, and the machine may be busy
           "MCP_TIMEOUT": "120000"}
    done = subprocess.run([str(claude), "mcp", "list"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("rag:")), "")
    assert done.returncode == 0 and "Connected" in line and "Failed" not in line, (
        done.stdout, done.stderr)


def test_claude_code_over_http_by_authentication(claude: Path, sample_repo: Path,
                                                 tmp_path: Path) -> None:
    """What ``claude mcp list`` says about HTTP servers: with the bearer header, connected; an
    OAuth server before sign-in, "Needs authentication"; a token server without the header,
    failed, with the server's "static bearer token" message in Claude Code's MCP log."""
    from tests.test_http import TOKEN, serving, settings_for

    token_settings = settings_for(sample_repo, http_token=TOKEN)
    run_index(token_settings)
    oauth_settings = settings_for(sample_repo)
    root = tmp_path / "project"
    (root / ".claude").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    with serving(token_settings) as token_url, serving(oauth_settings, auth="oauth") as oauth_url:
        servers = {"bearer": {"type": "http", "url": token_url,
                              "headers": {"Authorization": f"Bearer {TOKEN}"}},
                   "oauth": {"type": "http", "url": oauth_url},
                   "tokenless": {"type": "http", "url": token_url}}
        (root / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
        (root / ".claude" / "settings.local.json").write_text(
            json.dumps({"enabledMcpjsonServers": list(servers)}))
        home = tmp_path / "home"
        env = {**os.environ, "HOME": str(home), "DISABLE_TELEMETRY": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "MCP_TIMEOUT": "120000"}
        done = subprocess.run([str(claude), "mcp", "list"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    lines = {x.split(":", 1)[0]: x for x in done.stdout.splitlines() if ": http" in x}
    assert "Connected" in lines.get("bearer", ""), done.stdout
    assert "Needs authentication" in lines.get("oauth", ""), done.stdout
    assert "Failed to connect" in lines.get("tokenless", ""), done.stdout
    logs = "".join(p.read_text() for p in home.rglob("mcp-logs-tokenless/*.jsonl"))
    assert "this server uses a static bearer token, not OAuth" in logs, logs[-2000:]
