"""The "slow" study of bench/safety/hostile.py: a slowloris against ``rag-mcp serve --http``.

An attacker keeps ``--slow`` half-open requests open (replacing each one the server closes):
a third send nothing, a third a partial head, a third stall their body, and some of each trickle
a byte a second. Meanwhile new clients (an SDK session and a ``rag_health`` call each, one after
another) try to get in. The server runs with its defaults and a 1,024-descriptor limit, the
common one. Figures: attempts (slow connections opened), lock-outs (new clients without an
answer), crashes, hangs (slow connections still open past their read timeout and a margin),
descriptors in use, and each new client's wait, quiet and under attack, side by side.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import socket
import statistics
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from bench._report import md_table
from indexers.pipeline import run_index
from rag_mcp.config import load_settings
from rag_mcp.logjson import LOG_NAME
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.test_crash import write_repo

NOFILE = 1024
KINDS = {"silent": b"",
         "partial head": b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n",
         "stalled body": b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                         b"\r\nAccept: application/json, text/event-stream\r\nContent-Length: "
                         b"1000\r\n\r\n{"}
#: seconds past a read timeout before a slow connection still open counts as a hang
MARGIN = 30.0


class Attacker:
    """Keeps ``n`` slow requests open until stopped; records how long each one lived. Runs in
    a process of its own (``attack``), so that it does not slow the new clients' GIL."""

    def __init__(self, url: str, n: int, stop: Any) -> None:
        parts = urlsplit(url)
        self.addr = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.n = n
        self.open: dict[socket.socket, tuple[str, float]] = {}
        self.attempts: Counter[str] = Counter()
        self.lived: dict[str, list[float]] = {k: [] for k in KINDS}
        self.refused = 0
        self.stop = stop

    def _one(self, i: int) -> None:
        kind = list(KINDS)[i % len(KINDS)]
        try:
            sock = socket.create_connection(self.addr, timeout=5)
            sock.setblocking(False)
            sock.send(KINDS[kind])
        except OSError:
            self.refused += 1
            return
        self.attempts[kind] += 1
        self.open[sock] = (kind, time.monotonic())

    def _closed(self) -> list[socket.socket]:
        ready = select.select(list(self.open), [], [], 0.2)[0] if self.open else []
        gone = []
        for sock in ready:
            try:
                if not sock.recv(65536):
                    gone.append(sock)
            except BlockingIOError:
                pass
            except OSError:
                gone.append(sock)
        return gone

    def run(self) -> None:
        i, last_trickle = 0, time.monotonic()
        while not self.stop.is_set():
            for sock in self._closed():
                kind, since = self.open.pop(sock)
                self.lived[kind].append(time.monotonic() - since)
                sock.close()
            while len(self.open) < self.n and not self.stop.is_set():
                self._one(i)
                i += 1
            if time.monotonic() - last_trickle >= 1.0:  # every fourth one trickles a byte
                last_trickle = time.monotonic()
                for j, (sock, (kind, _)) in enumerate(list(self.open.items())):
                    if j % 4 == 0 and kind != "silent":
                        try:
                            sock.send(b"x")
                        except OSError:
                            pass

    def drain(self, ceiling: float) -> int:
        """After ``stop``: wait up to ``ceiling`` for the server to close the rest; the hangs."""
        deadline = time.monotonic() + ceiling
        while self.open and time.monotonic() < deadline:
            for sock in self._closed():
                kind, since = self.open.pop(sock)
                self.lived[kind].append(time.monotonic() - since)
                sock.close()
        hangs = len(self.open)
        for sock in self.open:
            sock.close()
        return hangs


def attack(url: str, n: int, ready: Any, stop: Any, out: Any) -> None:
    """The attacker's process: ``ready`` once ``n`` are open, then until ``stop``, then the
    drain; puts its figures on ``out``."""
    attacker = Attacker(url, n, stop)
    thread = threading.Thread(target=attacker.run, daemon=True)
    thread.start()
    while sum(attacker.attempts.values()) < n and thread.is_alive():
        time.sleep(0.1)
    ready.set()
    thread.join()
    hangs = attacker.drain(30 + MARGIN)  # the body timeout (30 s) and the margin
    out.put({"attempts": dict(attacker.attempts), "lived": attacker.lived,
             "refused": attacker.refused, "hangs": hangs})


def newcomers(url: str, until: float, at_least: int) -> tuple[list[float], int]:
    """New clients one after another: an SDK session and a rag_health answer each."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    waits: list[float] = []
    failed = 0

    async def one() -> None:
        with anyio.fail_after(60):
            async with Client(streamable_http_client(url), mode="legacy") as s:
                assert not (await s.call_tool("rag_health", {})).is_error

    while time.monotonic() < until or len(waits) + failed < at_least:
        t0 = time.perf_counter()
        try:
            anyio.run(one)
            waits.append((time.perf_counter() - t0) * 1000)
        except Exception:  # a lock-out, whatever form it takes
            failed += 1
    return waits, failed


def study_slow(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 40, 0)
    run_index(load_settings({"root": str(root), "embed_model": hc.HASH,
                             "log_dir": str(work / "logs")}))
    server = hio.HttpProc(root, work / "logs", work / "http.err", nofile=NOFILE)
    fds: list[int] = []
    try:
        quiet, quiet_failed = newcomers(server.url, 0, 10)
        mp = multiprocessing.get_context("spawn")
        ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
        proc = mp.Process(target=attack, args=(server.url, args.slow, ready, stop, out))
        proc.start()
        ready.wait(600)
        until = time.monotonic() + min(args.seconds, 60)
        watcher = threading.Thread(target=_count_fds, args=(server.proc.pid, fds, until),
                                   daemon=True)
        watcher.start()
        loud, loud_failed = newcomers(server.url, until, 10)
        stop.set()
        got = out.get(timeout=600)
        proc.join(60)
        crashes = int(server.proc.poll() is not None)
    finally:
        server.close()
    logged = sum(p.read_text().count('"rag_health"') for p in (work / "logs").glob(
        f"{LOG_NAME}*"))
    traces = server.stderr.read_text().count("Traceback")
    rows = [["quiet", len(quiet) + quiet_failed, len(quiet), quiet_failed,
             statistics.median(quiet) if quiet else 0.0],
            [f"{args.slow} slow requests held open", len(loud) + loud_failed, len(loud),
             loud_failed, statistics.median(loud) if loud else 0.0]]
    attempts, hangs = got["attempts"], got["hangs"]
    lived = [[kind, attempts.get(kind, 0), len(v), round(max(v, default=0.0), 1)]
             for kind, v in got["lived"].items()]
    return "\n".join([
        "### Slow requests (slowloris)", "",
        f"`rag-mcp serve --http` with its defaults (head within 10 s, body progress every 30 s, "
        f"at most 256 connections) and a {NOFILE:,}-descriptor limit. An attacker holds "
        f"{args.slow} half-open requests open, opening a new one for each the server closes; "
        "some trickle a byte a second. Meanwhile new MCP clients (an SDK session and a "
        "`rag_health` call each) come one after another.", "",
        md_table(["while", "new clients", "answered", "lock-outs", "median ms to an answer"],
                 rows), "",
        md_table(["slow request", "opened", "closed by the server", "longest open (s)"],
                 lived), "",
        f"Attempts: {sum(attempts.values()):,} slow connections "
        f"({got['refused']} refused at connect). Crashes: {crashes}. Hangs (still open "
        f"{MARGIN:.0f} s past the body timeout after the attack stopped): {hangs}. Stack traces "
        f"in the server log: {traces}. Descriptors in use: at most {max(fds, default=0)} of "
        f"{NOFILE:,}. `rag_health` calls in the tool log: {logged} of "
        f"{len(quiet) + len(loud)} answered."])


def _count_fds(pid: int, out: list[int], until: float) -> None:
    while time.monotonic() < until:
        try:
            out.append(len(os.listdir(f"/proc/{pid}/fd")))
        except OSError:
            return
        time.sleep(0.5)
