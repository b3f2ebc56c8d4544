"""How fast a stdio server exits when its client stops it, as an assistant sees it.

    .venv/bin/python -m bench.speed.stop [--rounds 5]

Clients stop a stdio server with SIGINT (Claude Code sends SIGTERM 100 ms later and kills it
after that), with SIGTERM, or by closing its input. Each round spawns `rag-mcp serve` for this
repository (indexed first, default model), answers the MCP handshake, and stops it in one of
three states: right after the handshake (the embedding model still loading in the background),
while a `rag_query` waits for the model, and after a `rag_query` has been answered. The time is
from sending the signal (or closing stdin) to the process having exited; the exit status and
stderr are checked (0 and empty). Writes the "stop" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

from bench._report import ROOT, WORK, md_table, median, pct, write_section
from bench.speed.transport import server_command

QUERY = "how is a span ID built from path, lines and digest?"
STATES = ("model loading", "query waiting for the model", "after a query")
WAYS = ("SIGINT", "SIGTERM", "stdin closed")
CLAUDE_CODE_GRACE = 0.100  # seconds from SIGINT to SIGTERM in Claude Code


def _send(stdin: IO[bytes], message: dict[str, object]) -> None:
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()


def _spawn(state: str, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
    """A server in ``state``, past its handshake; its stderr goes to a file (a pipe nobody
    reads could fill up and block it)."""
    env = {**os.environ, "RAG_LOG_DIR": str(WORK / "stop-logs")}
    proc = subprocess.Popen([*server_command(None), "serve", "--root", str(ROOT)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=env)
    assert proc.stdin is not None and proc.stdout is not None
    _send(proc.stdin, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "stop-bench", "version": "1"}}})
    if b'"id":1' not in proc.stdout.readline():
        raise SystemExit("the server did not answer initialize")
    _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    if state != STATES[0]:
        _send(proc.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "rag_query", "arguments": {"query": QUERY}}})
        if state == STATES[2] and b'"id":2' not in proc.stdout.readline():
            raise SystemExit("the server did not answer rag_query")
        if state == STATES[1]:
            time.sleep(0.05)  # the request is read and waiting on the model
    return proc


def one_stop(state: str, way: str) -> float:
    """Seconds from the stop to the exit of a server in ``state``."""
    with tempfile.TemporaryFile() as stderr:
        elapsed, code = _stop(_spawn(state, stderr), way)
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    if code != 0 or err:
        raise SystemExit(f"{way} in state {state!r}: exit {code}, stderr:\n{err[-2000:]}")
    return elapsed


def _stop(proc: subprocess.Popen[bytes], way: str) -> tuple[float, int | None]:
    assert proc.stdin is not None
    t0 = time.perf_counter()
    if way == "stdin closed":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGINT if way == "SIGINT" else signal.SIGTERM)
    try:
        code: int | None = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None  # reported as a failure, with its stderr
    finally:
        proc.kill()
    return time.perf_counter() - t0, code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(ROOT), "-q"], check=True)
    times: dict[tuple[str, str], list[float]] = {(s, w): [] for s in STATES for w in WAYS}
    load0 = os.getloadavg()[0]
    one_stop(STATES[2], WAYS[0])  # warms the page cache and the ONNX export: not kept
    for i in range(args.rounds):
        for key in times:  # interleaved, so load spikes spread over every cell
            times[key].append(one_stop(*key))
        print(f"round {i + 1}: " + " · ".join(f"{s}/{w} {t[-1] * 1000:.0f}"
                                              for (s, w), t in times.items()), flush=True)
    rows: list[list[object]] = []
    for (state, way), t in times.items():
        within = sum(x <= CLAUDE_CODE_GRACE for x in t)
        rows.append([state, way, f"{median(t) * 1000:.0f}", f"{pct(t, 90) * 1000:.0f}",
                     f"{max(t) * 1000:.0f}", f"{within}/{len(t)}"])
    cmd = "python -m bench.speed.stop" + (f" --rounds {args.rounds}" if args.rounds != 5 else "")
    body = (
        "## Stopping a stdio server\n\n"
        f"`{cmd}`\n\n"
        "How long a client waits for `rag-mcp serve` to exit once it asks it to stop. Claude "
        "Code sends SIGINT, then SIGTERM 100 ms later; other clients close the server's input "
        "or send SIGTERM. Each round spawns the server for this repository (indexed, default "
        "model), completes the handshake and stops it in one of three states: right after the "
        "handshake while the embedding model loads in the background, while a `rag_query` "
        "waits for the model, and after a `rag_query` was answered. Milliseconds from the "
        "signal (or closing stdin) to the process having exited with status 0 and an empty "
        f"stderr; {args.rounds} rounds, all cells interleaved, after one warm-up stop. The "
        "last column counts the stops that were over within Claude Code's 100 ms. Load "
        f"average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on "
        f"{os.cpu_count()} cores shared with other work.\n\n"
        + md_table(["state", "stopped by", "median ms", "p90 ms", "max ms", "within 100 ms"],
                   rows))
    print(body)
    if not args.no_write:
        write_section("stop", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
