"""How a stdio server ends: clients stop it by closing stdin, or with SIGINT then SIGTERM
(Claude Code sends SIGTERM 100 ms after SIGINT). Each way it exits 0 at once, with nothing on
stderr, whether the model is still loading or a query has run. How fast is measured by
bench/speed/stop.py, not asserted here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import load_settings

HASH = "test-hash-64"


def _send(stdin: IO[bytes], message: dict[str, object]) -> None:
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()


def start(root: Path, *, query: bool) -> subprocess.Popen[bytes]:
    """A stdio server past its handshake (and one rag_query when ``query``)."""
    proc = subprocess.Popen([sys.executable, "-m", "rag_mcp", "serve", "--root", str(root)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ))
    assert proc.stdin is not None and proc.stdout is not None
    _send(proc.stdin, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "stop-test", "version": "1"}}})
    assert b'"id":1' in proc.stdout.readline()
    _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    if query:
        _send(proc.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "rag_query", "arguments": {"query": "retry with backoff"}}})
        assert b'"id":2' in proc.stdout.readline()
    return proc


@pytest.mark.parametrize("query", [False, True], ids=["loading", "after-a-query"])
@pytest.mark.parametrize("how", ["sigint", "sigterm", "close-stdin"])
def test_the_server_stops_cleanly(sample_repo: Path, how: str, query: bool) -> None:
    run_index(load_settings({"root": str(sample_repo), "embed_model": HASH}))
    proc = start(sample_repo, query=query)
    assert proc.stdin is not None and proc.stderr is not None
    if how == "close-stdin":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert code == 0 and err == "", (code, err)
