"""Gemini CLI's own MCP health check (``gemini mcp list``, from npm, pinned; it runs offline and
without signing in) against the ``.gemini/settings.json`` that ``rag-mcp config --write`` puts
in a project: disabled while the folder is untrusted (and it says so), connected once trusted.

Installed once into ``<repo>/.cache/gemini`` (``make test`` does it first); skipped with the
reason when npm is absent. Keep the pin in step with the Makefile.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import load_settings
from rag_mcp.serve.__main__ import main
from tests.npm_tools import npm_tool

GEMINI = "@google/gemini-cli@0.61.0"
HASH = "test-hash-64"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def gemini() -> Path:
    return npm_tool("gemini", GEMINI, "Gemini CLI") / "node_modules" / ".bin" / "gemini"


def test_gemini_cli_connects_with_the_written_config(gemini: Path, sample_repo: Path,
                                                     tmp_path: Path) -> None:
    run_index(load_settings({"root": str(sample_repo), "embed_model": HASH}))
    assert main(["config", "--client", "gemini", "--root", str(sample_repo), "--write"]) == 0
    settings = sample_repo / ".gemini" / "settings.json"
    written = json.loads(settings.read_text())
    # `gemini mcp list` gives a server 5 s to start unless it has a timeout of its own; a busy
    # test machine needs more (what CLIENTS.md tells a user whose server shows Disconnected)
    written["mcpServers"]["rag"]["timeout"] = 120_000
    settings.write_text(json.dumps(written))
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "GEMINI_CLI_HOME": str(home)}

    def listed() -> str:
        done = subprocess.run([str(gemini), "mcp", "list"], cwd=sample_repo, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    out = listed()
    assert "disabled because this folder is untrusted" in out and "- Disabled" in out, out
    # the user's "trust this folder", as Gemini CLI records it
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(sample_repo): "TRUST_FOLDER"}))
    out = listed()
    line = next((x for x in out.splitlines() if " rag:" in x or x.startswith("rag:")), "")
    assert "Connected" in line and "Disconnected" not in line, out
