"""A stdio client that misbehaves: never reads, closes stdin early, or gives no stdin at all.

``rag-mcp serve`` runs as MCP clients launch it (a subprocess on pipes); each test is the
reproduction recipe of a finding: a client that never read its answers grew the server without
bound, stdin closed during start-up aborted the process (exit 134), and ``< /dev/null`` left it
waiting forever.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.serve import stdio as stdio_module
from rag_mcp.serve.inflight import MAX_IN_FLIGHT
from tests import hostile_cases as hc
from tests import hostile_io as hio


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = load_settings({"root": str(sample_repo), "embed_model": hc.HASH})
    run_index(s)
    return s


def serve(root: str, tmp_path: Path, stdin: int | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "rag_mcp", "serve", "--root", root],
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=hio.server_env(tmp_path / "logs"))


def ended_cleanly(proc: subprocess.Popen[bytes]) -> bool:
    """Wait for the process (a hang fails the test): did it exit 0 without an abort or trace?"""
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("rag-mcp serve did not exit after its stdin ended")
    text = err.decode(errors="replace")
    clean = "Traceback" not in text and "terminate called" not in text
    if proc.returncode != 0 or not clean:
        print(f"exit {proc.returncode}; stderr ends:\n{text[-2000:]}")
    return proc.returncode == 0 and clean


def test_dev_null_is_not_watched_by_the_event_loop() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        assert not stdio_module._pipe_like(fd)  # epoll refuses it (EPERM)
    finally:
        os.close(fd)


@pytest.mark.slow
def test_serve_with_stdin_from_dev_null_exits(indexed: Settings, tmp_path: Path) -> None:
    assert ended_cleanly(serve(indexed.root, tmp_path, subprocess.DEVNULL))


@pytest.mark.slow
@pytest.mark.parametrize("after", ["nothing", "initialize"])
def test_stdin_closed_during_start_up_exits_zero(indexed: Settings, tmp_path: Path,
                                                 after: str) -> None:
    """Closed before any tool call, while the warm-up may still be loading the model."""
    proc = serve(indexed.root, tmp_path, subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    if after == "initialize":
        proc.stdin.write(orjson.dumps(hio.INIT) + b"\n")
        proc.stdin.flush()
        assert b'"id":0' in proc.stdout.readline()
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it again
    assert ended_cleanly(proc)


def ping(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i


@pytest.mark.slow
def test_a_client_that_never_reads_cannot_grow_the_server(indexed: Settings,
                                                          tmp_path: Path) -> None:
    """Pings written without reading an answer: the server stops reading once its bounded
    number of requests are unanswered (the pipes fill and the client's writes block), and
    answers every one once the client reads."""
    n = 30_000
    proc = serve(indexed.root, tmp_path, subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(orjson.dumps(hio.INIT) + b"\n")
    proc.stdin.flush()
    assert b'"id":0' in proc.stdout.readline()
    proc.stdin.write(hio.INITIALIZED + b"\n")
    written = 0

    def flood() -> None:
        nonlocal written
        assert proc.stdin is not None
        for i in range(1, n + 1):
            proc.stdin.write(ping(i))
            proc.stdin.flush()
            written = i

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    last, still = -1, 0
    while writer.is_alive() and still < 10:  # 10 polls of 0.5 s without progress: blocked
        time.sleep(0.5)
        still = still + 1 if written == last else 0
        last = written
    # What the pipes and one read chunk hold, plus the bound: far from all of them.
    assert writer.is_alive(), "the server read every request while none was answered"
    assert written < n // 2
    assert written > MAX_IN_FLIGHT
    answered = 0
    while answered < n:
        line = proc.stdout.readline()
        assert line, "the server stopped before answering every ping"
        if b'"result"' in line:
            answered += 1
    writer.join(timeout=60)
    assert not writer.is_alive()
    proc.stdin.close()
    proc.stdin = None
    assert ended_cleanly(proc)


def rag_mcp_ask(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rag_mcp", "ask", *args], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_ask_logs_where_told_and_exits_with_the_codes_status(indexed: Settings,
                                                             tmp_path: Path) -> None:
    """``--log-dir`` reaches the server it spawns, and a refusal exits with its code's status
    (it was 1 for all of them)."""
    logs = tmp_path / "ask-logs"
    ok = rag_mcp_ask("--root", indexed.root, "--log-dir", str(logs), "function")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert b"rag_query" in b"".join(p.read_bytes() for p in logs.glob("*.jsonl"))
    bad_k = rag_mcp_ask("--root", indexed.root, "--k", "50", "function")
    assert bad_k.returncode == 2 and "E_INVALID_ARGUMENT" in bad_k.stderr, bad_k.stderr[-2000:]
    no_index = rag_mcp_ask("--root", indexed.root, "--index-dir", str(tmp_path / "none"),
                           "function")
    assert no_index.returncode == 5 and "E_INDEX_UNAVAILABLE" in no_index.stderr
    for p in (ok, bad_k, no_index):
        assert "Traceback" not in p.stderr
