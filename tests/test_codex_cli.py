"""Codex CLI (from npm, pinned; it runs these commands offline and without signing in to OpenAI)
against what rag-mcp writes and serves:

* ``codex mcp list --json`` reads the stdio entry ``rag-mcp config --client codex --write`` puts
  in ``~/.codex/config.toml`` (Codex does not connect for it: this checks the file it parses);
* ``codex mcp login`` completes Codex's own OAuth sign-in against ``serve --http --auth oauth``,
  with tests/consent_browser.py as ``$BROWSER`` (Codex opens URLs with the platform opener, which
  runs ``$BROWSER`` when no desktop is found) typing the code the server printed;
* against a static-token server, ``codex mcp login`` prints the server's "static bearer token"
  message, and ``bearer_token_env_var`` is what Codex then reports as its way in.

Installed once into ``<repo>/.cache/codex`` (``make test`` does it first); skipped with the reason
when npm is absent. Keep the pin in step with the Makefile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings
from rag_mcp.serve.__main__ import main
from tests.npm_tools import npm_tool
from tests.test_http import TOKEN, serving, settings_for

REPO = Path(__file__).resolve().parent.parent
CODEX = "@openai/codex@0.171.0"
BROWSER = Path(__file__).resolve().parent / "consent_browser.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def codex() -> Path:
    return npm_tool("codex", CODEX, "Codex CLI") / "node_modules" / ".bin" / "codex"


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


def _home(tmp_path: Path, config: str = "") -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    if config:  # OAuth credentials in a file of the test's home, not a desktop keyring
        (home / ".codex" / "config.toml").write_text(
            'mcp_oauth_credentials_store = "file"\n' + config)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "CODEX_HOME": str(home / ".codex"), "RUST_BACKTRACE": "0"}


def _codex(codex: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(codex), "mcp", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _listed(codex: Path, env: dict[str, str]) -> dict[str, Any]:
    done = _codex(codex, env, "list", "--json")
    assert done.returncode == 0, done.stderr
    return {s["name"]: s for s in json.loads(done.stdout)}


def test_codex_reads_the_written_config(codex: Path, sample_repo: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    env = _home(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])
    assert main(["config", "--client", "codex", "--root", str(sample_repo), "--write"]) == 0
    (entry,) = _listed(codex, env).values()  # named after the repository
    assert entry["enabled"] and entry["transport"]["type"] == "stdio"
    assert entry["transport"]["args"][:3] == ["serve", "--root", str(sample_repo)]
    assert Path(entry["transport"]["command"]).name == "rag-mcp"


def test_codex_signs_in_with_oauth(codex: Path, indexed: Settings, tmp_path: Path) -> None:
    plans: list[Any] = []
    terminal = tmp_path / "server-terminal.txt"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nexec {sys.executable} {BROWSER} \"$1\"\n")
    browser.chmod(0o755)
    with serving(indexed, auth="oauth", plan_out=plans) as url, \
            terminal.open("w", encoding="utf-8") as say:
        plans[0].provider.say = say
        env = {**_home(tmp_path, f'[mcp_servers.rag]\nurl = "{url}"\n'),
               "BROWSER": str(browser), "RAG_TEST_TERMINAL": str(terminal),
               "PYTHONPATH": str(REPO)}
        assert _listed(codex, env)["rag"]["auth_status"] == "not_logged_in"
        done = _codex(codex, env, "login", "rag")
        say.flush()
        assert done.returncode == 0, (done.stdout, done.stderr, terminal.read_text())
        assert "Successfully logged in to MCP server 'rag'" in done.stdout + done.stderr
        assert _listed(codex, env)["rag"]["auth_status"] == "o_auth"
    assert "approved 'Codex'" in terminal.read_text()


def test_codex_login_against_a_token_server_says_what_to_do(codex: Path, indexed: Settings,
                                                            tmp_path: Path) -> None:
    with serving(settings_for(Path(indexed.root), http_token=TOKEN)) as url:
        env = _home(tmp_path, f'[mcp_servers.rag]\nurl = "{url}"\n')
        assert _listed(codex, env)["rag"]["auth_status"] == "unsupported"
        done = _codex(codex, env, "login", "rag")
        assert done.returncode != 0
        assert "this server uses a static bearer token, not OAuth" in done.stderr, done.stderr
        env = {**_home(tmp_path, f'[mcp_servers.rag]\nurl = "{url}"\n'
                                 'bearer_token_env_var = "RAG_HTTP_TOKEN"\n'),
               "RAG_HTTP_TOKEN": TOKEN}
        assert _listed(codex, env)["rag"]["auth_status"] == "bearer_token"
