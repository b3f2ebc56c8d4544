"""Transport overhead: the same server over stdio and over streamable HTTP, side by side.

    .venv/bin/python -m bench.speed.transport [--calls 500] [--rounds 5] [--baseline REV]

Indexes this repository once into bench/.work/transport (the deterministic test-hash-64 model:
the timed rag_query calls are memo-cache hits, so the model never runs in them), starts two
server processes (``rag-mcp serve`` over stdio and ``rag-mcp serve --http`` on a free loopback
port), opens one official-SDK client session to each, and times ``rag_health`` and a cached
``rag_query`` round trip. The calls alternate between the transports in --rounds blocks so
that load from the other engineers on this machine hits both alike.

Round trips are ``ClientSession.send_request(CallToolRequest)``: the wire, the JSON-RPC framing
and the server. ``ClientSession.call_tool`` also validates the result against the tool's output
schema with ``jsonschema`` (rebuilding the validator each call); that client-side cost is shown
in its own rows, over fewer calls. "server ms" is the time the server's tool wrapper logged for
the same calls (the tool, on the event loop for these memo hits and health checks, rendering,
the JSONL log line). Then the official TypeScript SDK client (bench/speed/transport_client.mjs, what
Node-based assistants embed; installed by `make test` with the MCP Inspector, skipped with a
note when missing) makes the same calls through ``Client.callTool`` to servers of its own, over
both transports, in as many alternating blocks. ``--baseline REV`` also starts the servers of
an older commit (its source exported with ``git archive``, run on the installed dependencies of
``--baseline-python``, e.g. an older MCP SDK) and times them in the same rounds, from both
clients: the ratio of the two is what the change bought, whatever the machine's load.
Writes the "transport" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from bench._report import ROOT, WORK, md_table, pct, write_section
from rag_mcp.logjson import LOG_NAME

HASH = "test-hash-64"
QUERY = "where are span IDs parsed and validated?"
#: the issue's published reference (a Raspberry Pi) and this project's targets, rag_health P50
REFERENCE_MS = {"stdio": 17.9, "http": 113.0}
TARGET_MS = {"stdio": 2.0, "http": 5.0}


#: the official TypeScript SDK's client (what Node-based assistants embed), installed by
#: `make test` with the MCP Inspector 2.x (tests/test_inspector.py); an older checkout's 1.x
#: single package (Inspector 0.x) when only that one is there
_NODE_MODULES = ROOT / ".cache" / "inspector2" / "node_modules" / "@modelcontextprotocol"
TS_SDK = next((p for p in (_NODE_MODULES / "client",
                           ROOT / ".cache" / "inspector" / "node_modules" / "@modelcontextprotocol"
                           / "sdk") if (p / "package.json").is_file()), _NODE_MODULES / "client")
TS_CLIENT = ROOT / "bench" / "speed" / "transport_client.mjs"


#: floors: the same client stacks against a process that only echoes (no MCP, no tools)
ECHO_STDIO = ("import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n"
              "    sys.stdout.flush()\n")
ECHO_HTTP = """
import socket, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
async def echo(request):
    return Response(await request.body(), media_type="application/json")
sock = socket.create_server(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
app = Starlette(routes=[Route("/", echo, methods=["POST"])])
uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
"""
FLOOR_MESSAGE = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "rag_health", "arguments": {}}}


def server_args(index_dir: Path) -> list[str]:
    return ["serve", "--root", str(ROOT), "--index-dir", str(index_dir)]


def baseline_tree(rev: str) -> Path:
    """The source of ``rev`` (``git archive``) under bench/.work, exported once."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = WORK / f"baseline-{sha}"
    if not (tree / "rag_mcp").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "rag_mcp", "tools",
                                  "indexers", "configs"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


#: the interpreter whose installed packages run the baseline tree (--baseline-python)
BASELINE_PYTHON: list[str] = []


def server_command(tree: Path | None) -> list[str]:
    """``python -m rag_mcp`` of this checkout, or of ``tree`` with the installed dependencies
    of ``BASELINE_PYTHON`` (default: this interpreter's): ``-S`` skips the .pth file of an
    editable install, which would otherwise import rag_mcp from there whatever ``sys.path``
    says."""
    if tree is None:
        return [sys.executable, "-m", "rag_mcp"]
    python = BASELINE_PYTHON[0] if BASELINE_PYTHON else sys.executable
    if python == sys.executable:
        site = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    else:
        site = subprocess.run([python, "-c", "import sysconfig; p = sysconfig.get_paths(); "
                               "print(p['purelib']); print(p['platlib'])"], check=True,
                              capture_output=True, text=True).stdout.split()
    paths = [str(tree), *dict.fromkeys(site)]
    return [python, "-S", "-c", f"import sys; sys.path[:0] = {paths!r}; "
            "from rag_mcp.serve.__main__ import main; sys.exit(main())"]


def ensure_index(index_dir: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(ROOT), "--index-dir",
                    str(index_dir), "--model", HASH, "--quiet"], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def start_http(index_dir: Path, env: dict[str, str], log: Path, command: list[str]
               ) -> tuple[subprocess.Popen, str]:
    with log.open("wb") as fh:
        proc = subprocess.Popen([*command, *server_args(index_dir), "--http", "--port", "0"],
                                env=env, stdout=subprocess.DEVNULL, stderr=fh)
    deadline = time.monotonic() + 120
    while not (m := re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the HTTP server did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return proc, m.group(1)


async def timed(session: Any, tool: str, args: dict[str, Any], n: int,
                out: dict[str, list[float]], *, validate: bool = False) -> None:
    import mcp.types as mt

    request = mt.CallToolRequest(params=mt.CallToolRequestParams(name=tool, arguments=args))
    key = f"{tool}+validate" if validate else tool
    for _ in range(n):
        t0 = time.perf_counter()
        if validate:
            r = await session.call_tool(tool, args)
        else:
            r = await session.send_request(request, mt.CallToolResult)
        out.setdefault(key, []).append((time.perf_counter() - t0) * 1000)
        # cache_hit: in _meta's diagnostics since the lean results, in the structured
        # content before (a --baseline server)
        diag = (r.meta or {}).get("rag-mcp/diagnostics") or r.structured_content or {}
        if r.is_error or (tool == "rag_query" and not diag.get("cache_hit")):
            raise SystemExit(f"{tool} failed or missed the cache: {r.content}")


class Floors:
    """Round trips to echo processes: a pipe line, and a POST to a bare Starlette endpoint."""

    async def __aenter__(self) -> Floors:
        from anyio.streams.buffered import BufferedByteReceiveStream

        self.pipe = await anyio.open_process([sys.executable, "-c", ECHO_STDIO])
        assert self.pipe.stdout is not None
        self.lines = BufferedByteReceiveStream(self.pipe.stdout)
        self.web = subprocess.Popen([sys.executable, "-c", ECHO_HTTP], stdout=subprocess.PIPE,
                                    text=True)
        assert self.web.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.web.stdout.readline())}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.pipe.terminate()
        await self.pipe.wait()
        self.web.terminate()
        self.web.wait(timeout=30)

    async def time_pipe(self, n: int, out: list[float]) -> None:
        assert self.pipe.stdin is not None
        line = (json.dumps(FLOOR_MESSAGE) + "\n").encode()
        for _ in range(n):
            t0 = time.perf_counter()
            await self.pipe.stdin.send(line)
            await self.lines.receive_until(b"\n", 1 << 20)
            out.append((time.perf_counter() - t0) * 1000)

    async def time_http(self, client: Any, n: int, out: list[float]) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            r = await client.post(self.url, json=FLOOR_MESSAGE)
            r.raise_for_status()
            out.append((time.perf_counter() - t0) * 1000)


def server_times(log_dir: Path, tool: str, last: int) -> list[float]:
    rows = [json.loads(x) for x in (log_dir / LOG_NAME).read_text().splitlines()]
    return [float(r["took_ms"]) for r in rows if r.get("tool") == tool][-last:]


def ts_client_ready() -> bool:
    return shutil.which("node") is not None and (TS_SDK / "package.json").is_file()


def ts_version() -> str:
    """``name version`` of the TypeScript SDK package the client loads."""
    pkg = json.loads((TS_SDK / "package.json").read_text())
    return f"{pkg['name']} {pkg['version']}"


async def run_ts_client(sessions: dict[str, dict[str, Any]], calls: int, rounds: int
                        ) -> dict[str, list[float]]:
    """bench/speed/transport_client.mjs over ``sessions`` (see there): ms per
    ``"<name> <tool>"``."""
    spec = {"sessions": sessions, "n": max(1, calls // rounds), "rounds": rounds}
    done = await anyio.run_process(["node", str(TS_CLIENT), str(TS_SDK), json.dumps(spec)],
                                   check=False)
    if done.returncode != 0:
        raise SystemExit(f"the TypeScript client failed:\n{done.stderr.decode()[-2000:]}")
    return {k: [float(x) for x in v] for k, v in json.loads(done.stdout).items()}


async def measure_ts(index_dir: Path, env: dict[str, str], calls: int, rounds: int,
                     baseline: Path | None = None) -> dict[str, list[float]]:
    """The TypeScript SDK client's round trips to servers of this tree (and of ``baseline``)
    over both transports, keyed ``"<transport>[@base] <tool>"``; empty when node or the SDK is
    missing."""
    if not ts_client_ready():
        return {}
    todo = [["rag_health", {}], ["rag_query", {"query": QUERY}]]
    sessions: dict[str, dict[str, Any]] = {}
    procs = []
    try:
        for suffix, tree in {"": None, **({"@base": baseline} if baseline else {})}.items():
            command = server_command(tree)
            log_env = {**env, "RAG_LOG_DIR": str(WORK / "transport-logs" / f"ts{suffix}")}
            proc, url = start_http(index_dir, log_env, WORK / f"transport-http-ts{suffix}.log",
                                   command)
            procs.append(proc)
            sessions[f"stdio{suffix}"] = {
                "stdio": {"command": command[0], "args": [*command[1:], *server_args(index_dir)],
                          "env": log_env}, "calls": todo}
            sessions[f"http{suffix}"] = {"http": url, "calls": todo}
        return await run_ts_client(sessions, calls, rounds)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


async def measure(index_dir: Path, env: dict[str, str], calls: int, rounds: int,
                  baseline: Path | None = None) -> dict[str, dict[str, list[float]]]:
    """Times keyed by server name (``stdio``, ``http``, and ``stdio@base``, ``http@base`` for a
    baseline tree), then by tool; ``floor`` under ``stdio`` and ``http``."""
    import httpx2 as httpx  # the HTTP client the MCP SDK 2.x transports take
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    trees: dict[str, Path | None] = {"": None} | ({"@base": baseline} if baseline else {})
    names = [f"{t}{suffix}" for suffix in trees for t in REFERENCE_MS]
    logs = {name: WORK / "transport-logs" / name for name in names}
    for d in logs.values():
        shutil.rmtree(d, ignore_errors=True)
    procs = []
    times: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    per_round = max(1, calls // rounds)
    try:
        async with AsyncExitStack() as stack:
            sessions: dict[str, Any] = {}
            hc = await stack.enter_async_context(
                httpx.AsyncClient(timeout=httpx.Timeout(30, read=300)))
            for suffix, tree in trees.items():
                command = server_command(tree)
                params = StdioServerParameters(
                    command=command[0], args=[*command[1:], *server_args(index_dir)],
                    env={**env, "RAG_LOG_DIR": str(logs[f"stdio{suffix}"])})
                read, write = await stack.enter_async_context(stdio_client(params))
                sessions[f"stdio{suffix}"] = await stack.enter_async_context(
                    ClientSession(read, write))
                http_env = {**env, "RAG_LOG_DIR": str(logs[f"http{suffix}"])}
                proc, url = start_http(index_dir, http_env, WORK / f"transport-http{suffix}.log",
                                       command)
                procs.append(proc)
                read, write = await stack.enter_async_context(
                    streamable_http_client(url, http_client=hc))
                sessions[f"http{suffix}"] = await stack.enter_async_context(
                    ClientSession(read, write))
            floors = await stack.enter_async_context(Floors())
            await floors.time_pipe(20, [])
            await floors.time_http(hc, 20, [])
            for s in sessions.values():
                await s.initialize()
                await s.call_tool("rag_query", {"query": QUERY})  # fills the memo cache
                for _ in range(20):  # warm both paths before timing
                    await s.call_tool("rag_health", {})
                    await s.call_tool("rag_query", {"query": QUERY})
            for _ in range(rounds):
                for name, s in sessions.items():
                    for tool, args in (("rag_health", {}), ("rag_query", {"query": QUERY})):
                        await timed(s, tool, args, per_round, times[name])
                await floors.time_pipe(per_round, times["stdio"].setdefault("floor", []))
                await floors.time_http(hc, per_round, times["http"].setdefault("floor", []))
            for _ in range(rounds):  # the SDK's call_tool, output validation included
                for name in REFERENCE_MS:
                    await timed(sessions[name], "rag_health", {}, max(1, per_round // 5),
                                times[name], validate=True)
            # the TypeScript SDK client, to servers of its own (their logs stay apart)
            times["ts"] = await measure_ts(index_dir, env, calls, rounds, baseline)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    for name, d in logs.items():
        n_valid = len(times[name].get("rag_health+validate", []))
        health = server_times(d, "rag_health", per_round * rounds + n_valid)
        times[name]["server:rag_health"] = health[:per_round * rounds]  # rounds came first
        times[name]["server:rag_query"] = server_times(d, "rag_query", per_round * rounds)
    return times


def baseline_table(times: dict[str, dict[str, list[float]]], rev: str) -> str:
    """The same calls against the server of ``rev``, timed in the same rounds."""
    rows: list[list[object]] = []
    for tool, label in (("rag_health", "`rag_health`"), ("rag_query", "`rag_query` (cached)")):
        for name in REFERENCE_MS:
            old, new = times[f"{name}@base"][tool], times[name][tool]
            rows.append([label, name, round(pct(old, 50), 2), round(pct(new, 50), 2),
                         f"{pct(old, 50) / pct(new, 50):.2f}x", round(pct(old, 95), 2),
                         round(pct(new, 95), 2)])
    return (f"\n\nSide by side with the server of commit `{rev}` (the same index, client and "
            "rounds; its source exported to bench/.work and run on "
            + (f"the installed packages of `{BASELINE_PYTHON[0]}`" if BASELINE_PYTHON
               else "the same installed dependencies") + "):\n\n"
            + md_table(["tool", "transport", f"{rev} P50 ms", "now P50 ms", "speed-up",
                        f"{rev} P95 ms", "now P95 ms"], rows))


def ts_table(ts: dict[str, list[float]], rounds: int, baseline: str | None = None) -> str:
    """The TypeScript SDK client's rows (beside ``baseline``'s server), or why there are none."""
    if not ts:
        return ("\n\nThe TypeScript SDK client was not measured: node or its SDK is missing "
                "(`make test` installs the SDK with the MCP Inspector).")
    base = baseline is not None and "stdio@base rag_health" in ts
    rows: list[list[object]] = []
    for tool, label in (("rag_health", "`rag_health`"), ("rag_query", "`rag_query` (cached)")):
        for name in ("stdio", "http"):
            t = ts[f"{name} {tool}"]
            row: list[object] = [label, name, len(t), round(pct(t, 50), 2), round(pct(t, 95), 2)]
            if base:
                old = ts[f"{name}@base {tool}"]
                row += [round(pct(old, 50), 2), f"{pct(old, 50) / pct(t, 50):.2f}x"]
            rows.append(row + [f"≤ {TARGET_MS[name]:g}" if tool == "rag_health" else ""])
    verdict = "; ".join(
        f"{n} rag_health P50 {pct(ts[f'{n} rag_health'], 50):.2f} ms "
        f"({'meets' if pct(ts[f'{n} rag_health'], 50) <= TARGET_MS[n] else 'misses'} the "
        f"{TARGET_MS[n]:g} ms target)" for n in ("stdio", "http"))
    head = ["tool", "transport", "calls", "P50 ms", "P95 ms"]
    head += [f"{baseline} P50 ms", "speed-up"] if base else []
    return (
        "\n\nThe same calls from the official TypeScript SDK client "
        f"(`{ts_version()}`, the client Node-based assistants embed), "
        "through `Client.callTool` after `listTools`, as a client calls a tool: the result is "
        "checked against the output schema with the validator the SDK compiled once. One "
        "session per transport to servers of this tree started for it (a stdio server spawned "
        "by its transport, an HTTP server on a free port)"
        + (f", and two of commit `{baseline}` beside them" if base else "")
        + f", {rounds} alternating blocks, run right after the Python client's rounds.\n\n"
        + md_table(head + ["target P50 ms"], rows)
        + f"\n\n{verdict}. The difference from the Python rows is the client: the same "
          "server answers both.")


def report(times: dict[str, dict[str, list[float]]], calls: int, rounds: int,
           load: tuple[float, float], baseline: str | None = None) -> str:
    rows: list[list[object]] = []
    for tool, label in (("floor", "echo floor (no MCP)"), ("rag_health", "`rag_health`"),
                        ("rag_query", "`rag_query` (cached)"),
                        ("rag_health+validate", "`rag_health` via `call_tool`")):
        for name in ("stdio", "http"):
            t = times[name][tool]
            server = times[name].get(f"server:{tool}")
            rows.append([label, name, len(t), round(pct(t, 50), 2), round(pct(t, 95), 2),
                         round(pct(server, 50), 2) if server else "",
                         f"≤ {TARGET_MS[name]:g}" if tool == "rag_health" else "",
                         f"{REFERENCE_MS[name]:g}" if tool == "rag_health" else ""])
    p50 = {(n, tool): pct(times[n][tool], 50) for n in REFERENCE_MS for tool in times[n]}
    ratio = {tool: p50["http", tool] / p50["stdio", tool] for tool in ("rag_health", "rag_query")}
    verdict = "; ".join(
        f"{n} rag_health P50 {p50[n, 'rag_health']:.2f} ms "
        f"({'meets' if p50[n, 'rag_health'] <= TARGET_MS[n] else 'misses'} the "
        f"{TARGET_MS[n]:g} ms target)" for n in ("stdio", "http"))
    over = {n: p50[n, "rag_health"] - p50[n, "floor"] for n in ("stdio", "http")}
    return (
        "## Transport overhead: stdio against streamable HTTP\n\n"
        "Round trips from the official Python SDK client, one session per transport to one "
        "server process each, both open at once, calls alternating between the transports in "
        f"{rounds} blocks. `rag_query` repeats one query, so every timed call is a memo-cache "
        "hit. Timed with `ClientSession.send_request`; the `call_tool` rows add the SDK's own "
        "client-side validation of the result against the output schema. "
        "\"server ms\" is what the server's tool wrapper logged for the same calls. The echo "
        "floors are the same client stacks (an anyio pipe; httpx against uvicorn + Starlette) "
        "talking to a process that only echoes the request, measured in the same rounds: what "
        "any round trip costs on this machine at this moment. Reference: "
        "a published measurement of another MCP server (a Raspberry Pi, rag_health).\n\n"
        + md_table(["tool", "transport", "calls", "P50 ms", "P95 ms", "server P50 ms",
                    "target P50 ms", "reference P50 ms"], rows)
        + f"\n\nHTTP/stdio P50 ratio: rag_health {ratio['rag_health']:.2f}x, cached rag_query "
        f"{ratio['rag_query']:.2f}x. Above the echo floor, rag_health costs "
        f"{over['stdio']:.2f} ms over stdio and {over['http']:.2f} ms over HTTP (MCP framing, "
        f"the SDK's session machinery, the tool). {verdict}. Load average during the run: "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} cores: "
        "absolute times on a loaded shared machine are inflated; compare the rows."
        + ts_table(times.get("ts", {}), rounds, baseline)
        + (baseline_table(times, baseline) if baseline else "")
        + "\n\nReproduce: `.venv/bin/python -m bench.speed.transport --calls "
        f"{calls} --rounds {rounds}{f' --baseline {baseline}' if baseline else ''}"
        f"{' --baseline-python ' + BASELINE_PYTHON[0] if BASELINE_PYTHON else ''}`\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500, help="timed calls per tool and transport")
    ap.add_argument("--rounds", type=int, default=5, help="alternating blocks")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--baseline-python", metavar="PYTHON",
                    help="run the --baseline servers with this interpreter's packages (e.g. "
                         "another checkout's .venv/bin/python, for a different MCP SDK)")
    ap.add_argument("--baseline", metavar="REV",
                    help="also time the server of this git revision, side by side")
    args = ap.parse_args(argv)
    index_dir = WORK / "transport"
    WORK.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RAG_HTTP_TOKEN", None)  # loopback, as a local client would use it
    ensure_index(index_dir, env)
    load_start = os.getloadavg()[0]
    base = baseline_tree(args.baseline) if args.baseline else None
    if args.baseline_python:
        BASELINE_PYTHON.append(args.baseline_python)
    times = anyio.run(measure, index_dir, env, args.calls, args.rounds, base)
    text = report(times, args.calls, args.rounds, (load_start, os.getloadavg()[0]),
                  base.name.removeprefix("baseline-") if base else None)
    sys.stdout.write(text)
    if not args.no_write:
        write_section("transport", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
