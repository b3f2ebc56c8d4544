"""Running hostile cases: MCP client sessions, raw stdio and HTTP transports, and the checks.

Shared by the tests and bench/safety/hostile.py, next to the case lists of
``tests/hostile_cases.py``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from mcp import Client
from mcp.types import CallToolResult
from pydantic import TypeAdapter

from rag_mcp.config import Settings
from rag_mcp.deps import Deps
from rag_mcp.serve.sdk import ERROR_META, RagServer
from rag_mcp.serve.server import build_server
from tests.hostile_cases import FOLLOW_UP_ID, follow_up, traffic_cases
from tests.mcp_helpers import error_code, hash_deps, text

# --- running cases through a real MCP client session ---------------------------------------------


@contextlib.asynccontextmanager
async def session(settings: Settings, *, connector_tools: bool = True,
                  deps: Deps | None = None) -> AsyncIterator[tuple[Client, RagServer]]:
    """An in-process client session on the server with every tool (ChatGPT's too)."""
    server = build_server(settings, lambda: deps or hash_deps(settings),
                          connector_tools=connector_tools)
    async with Client(server, mode="legacy") as s:
        yield s, server


def everything(result: CallToolResult) -> str:
    """All a client receives from a tool call: its text items and its structured content."""
    return (text(result) + "\n" + orjson.dumps(result.structured_content or {}).decode()
            + "\n" + orjson.dumps(result.meta or {}).decode())


def answer_code(result: CallToolResult) -> str:
    """The error code of a tool result, or "ok"."""
    return error_code(result) or "ok"


def direct(deps: Deps, tool: str, **args: Any) -> tuple[str, str]:
    """(code, everything a client would receive) for one call made without the MCP layer: the
    tool function, then the same rendering and structured dump the server sends."""
    from rag_mcp.errors import RagError
    from rag_mcp.serve.server import CONNECTOR_SPECS, SPECS

    spec = next(s for s in SPECS + CONNECTOR_SPECS if s.name == tool)
    try:
        result = spec.fn(deps, **args)
    except RagError as exc:
        return exc.code, f"{exc.code}: {exc.message}"
    return "ok", spec.render(result) + "\n" + TypeAdapter(spec.result).dump_json(result).decode()


# --- raw transports: bytes in, every line or body out -------------------------------------------

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "hostile", "version": "0"}}}
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def server_env(log_dir: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_LOG_DIR": str(log_dir)}


class RawStdio:
    """``rag-mcp serve`` over stdio with a client that writes raw lines and reads every line."""

    def __init__(self, root: Path, log_dir: Path, stderr: Path) -> None:
        self._err = stderr.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "rag_mcp", "serve", "--root",
                                      str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env=server_env(log_dir))
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def until(self, rid: int, timeout: float = 120.0) -> tuple[dict[str, Any] | None,
                                                                list[bytes]]:
        """Read lines until the response to ``rid``; (it or None on timeout, every line read)."""
        seen: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(msg, dict) and msg.get("id") == rid and "method" not in msg:
                return msg, seen
        return None, seen

    def start(self) -> RawStdio:
        self.send(orjson.dumps(INIT))
        first, _ = self.until(0)
        assert first is not None and "result" in first, first
        self.send(INITIALIZED)
        return self

    def close(self) -> int:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._err.close()
        return code


class HttpProc:
    """``rag-mcp serve --http`` as a process on a free loopback port, with an MCP session."""

    def __init__(self, root: Path, log_dir: Path, stderr: Path,
                 extra_env: dict[str, str] | None = None, nofile: int | None = None) -> None:
        """``nofile``: the server's open-file limit (RLIMIT_NOFILE), if not inherited."""
        import httpx

        def limit() -> None:
            import resource

            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.stderr = stderr
        with stderr.open("wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rag_mcp", "serve", "--http", "--root", str(root),
                 "--port", "0"], stdout=subprocess.DEVNULL, stderr=fh,
                env={**server_env(log_dir), **(extra_env or {})},
                preexec_fn=limit if nofile is not None else None)
        deadline = time.monotonic() + 120
        url = None
        while url is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start: {stderr.read_text()[-2000:]}")
            m = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", stderr.read_text())
            url = m.group(1) if m else None
            time.sleep(0.1)
        self.url = url
        self.client = httpx.Client(timeout=httpx.Timeout(60, read=120))
        self.headers = {"Accept": "application/json, text/event-stream",
                        "Content-Type": "application/json"}

    def start_session(self) -> dict[str, str]:
        r = self.client.post(self.url, content=orjson.dumps(INIT), headers=self.headers)
        r.raise_for_status()
        headers = {**self.headers, "mcp-session-id": r.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-06-18"}
        self.client.post(self.url, content=INITIALIZED, headers=headers)
        return headers

    def close(self) -> int:
        self.client.close()
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def rss_kb(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class TrafficReport:
    channel: str
    cases: int = 0
    answered: int = 0  # follow-up requests answered correctly
    crashes: int = 0
    traces: list[str] = field(default_factory=list)  # outputs showing a stack trace
    uncoded: list[str] = field(default_factory=list)  # error responses without a code
    server_errors: list[str] = field(default_factory=list)  # HTTP 5xx
    replies: dict[str, int] = field(default_factory=dict)  # how the hostile ones were answered


def _judge(report: TrafficReport, name: str, payload: Any) -> None:
    """Check one JSON-RPC message the server sent: coded errors, no stack trace."""
    shown = orjson.dumps(payload).decode() if not isinstance(payload, str) else payload
    if "Traceback" in shown or 'File "/' in shown:
        report.traces.append(name)
    if not isinstance(payload, dict):
        return
    err = payload.get("error")
    if isinstance(err, dict) and not isinstance(err.get("code"), int):
        report.uncoded.append(name)
    result = payload.get("result")
    if isinstance(result, dict) and result.get("isError"):
        content = result.get("content") or [{}]
        # the code travels in _meta and starts the text; an error has no structured content,
        # which could not match the tool's output schema
        code = (result.get("_meta") or {}).get(ERROR_META, {}).get("code")
        if not (isinstance(code, str) and str(content[0].get("text", "")).startswith(code)
                and "structuredContent" not in result):
            report.uncoded.append(name)
    if payload.get("id") == FOLLOW_UP_ID:
        return
    kind = ("error" if isinstance(err, dict) else "tool_error" if isinstance(result, dict)
            and result.get("isError") else "result" if "result" in payload
            else "notification" if "method" in payload else "other")
    report.replies[kind] = report.replies.get(kind, 0) + 1


def follow_up_ok(msg: dict[str, Any] | None) -> bool:
    result = (msg or {}).get("result") or {}
    return bool(result.get("structuredContent", {}).get("hits")) and not result.get("isError")


def stdio_traffic(root: Path, work: Path) -> TrafficReport:
    report = TrafficReport("stdio")
    client = RawStdio(root, work / "logs", work / "stdio.err").start()
    try:
        for name, payload in traffic_cases():
            report.cases += 1
            if client.proc.poll() is not None:
                report.crashes += 1
                break
            client.send(payload)
            client.send(follow_up())
            msg, lines = client.until(FOLLOW_UP_ID)
            for line in lines:
                try:
                    _judge(report, name, orjson.loads(line))
                except orjson.JSONDecodeError:
                    report.traces.append(f"{name}: non-JSON on stdout")
            report.answered += follow_up_ok(msg)
    finally:
        if client.close() not in (0, None) and report.cases:
            report.crashes += 1
    return report


def http_traffic(root: Path, work: Path) -> TrafficReport:
    report = TrafficReport("http")
    server = HttpProc(root, work / "logs", work / "http.err")
    try:
        headers = server.start_session()
        for name, payload in traffic_cases():
            report.cases += 1
            if server.proc.poll() is not None:
                report.crashes += 1
                break
            r = server.client.post(server.url, content=payload, headers=headers)
            if r.status_code >= 500:
                report.server_errors.append(f"{name}: {r.status_code}")
            body: Any = r.text
            with contextlib.suppress(ValueError):
                body = r.json()
            _judge(report, name, body)
            f = server.client.post(server.url, content=follow_up(), headers=headers)
            report.answered += f.status_code == 200 and follow_up_ok(f.json())
    finally:
        if server.proc.poll() is not None:
            report.crashes += 1
        server.close()
    return report


# --- index consistency, after a crash or under a writer ----------------------------------------


def consistency(settings: Settings) -> tuple[int, list[str]]:
    """(spans, problems) of the published generation: the manifest agrees with the catalog, the
    lexical index and the vectors (OpenIndex checks the counts), no span ID twice, every stored
    text has its ID's digest, every vector key is in the store, and every span of a file that
    is unchanged on disk reads back exactly."""
    import hashlib

    from rag_mcp.errors import RagError
    from rag_mcp.index import generation as gen
    from rag_mcp.index.handle import OpenIndex
    from rag_mcp.index.spans import digest
    from rag_mcp.search.reader import read_span

    pointer = gen.read_pointer(settings.index_path)
    if pointer is None:
        return 0, []
    try:
        idx = OpenIndex(settings, pointer)
    except RagError as exc:
        return 0, [f"cannot open generation {pointer.generation}: {exc.message}"]
    problems: list[str] = []
    try:
        assert idx.catalog is not None and idx.vectors is not None
        rows = idx.catalog.all_spans()
        ids = [r.id for r in rows]
        if len(ids) != len(set(ids)):
            problems.append(f"{len(ids) - len(set(ids))} duplicate span IDs")
        texts = idx.catalog.texts([r.sid for r in rows])
        bad = [r.id for r in rows if digest(texts.get(r.sid, "")) != r.span.digest]
        if bad:
            problems.append(f"{len(bad)} stored texts do not match their IDs, e.g. {bad[0]}")
        keys = {r.emb_key for r in rows}
        missing = keys - idx.vectors.existing(sorted(keys))
        if missing:
            problems.append(f"{len(missing)} vectors missing from the store")
        files = idx.catalog.files()
        root = Path(settings.root)
        for r in rows:
            rec = files.get(r.span.path)
            if rec is None:
                problems.append(f"{r.id}: its file is not in the catalog")
                continue
            try:
                data = (root / r.span.path).read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() != rec.content_hash:
                continue  # changed on disk since: stale, not inconsistent
            try:
                got = read_span(root, r.span.path, r.span.start_line, r.span.end_line,
                                r.span.digest, texts[r.sid].split("\n", 1)[0])
                if got.stale or got.text != texts[r.sid]:
                    problems.append(f"{r.id} does not read back")
            except RagError as exc:
                problems.append(f"{r.id} does not read back: {exc.code}")
        return len(rows), problems
    finally:
        idx.close()


def reader_main(root: str, queries: int, seed: int, pause: float = 0.0) -> dict[str, Any]:
    """One reader process of the concurrency study: ``queries`` rag_query calls, each answer
    checked against the catalog of the generation that answered it."""
    import random

    from rag_mcp.config import load_settings
    from rag_mcp.index import generation as gen
    from rag_mcp.index.catalog import Catalog
    from rag_mcp.index.spans import digest
    from rag_mcp.search.records import QueryParams

    s = load_settings({"root": root, "embed_model": "test-hash-64"})
    deps = hash_deps(s)
    rng = random.Random(seed)
    catalogs: dict[int, Catalog] = {}
    ok = failed = half = 0
    gens: set[int] = set()
    errors: list[str] = []
    for _ in range(queries):
        time.sleep(pause)
        q = f"function {rng.randrange(12)} of module {rng.randrange(200)} variant"
        try:
            a = deps.queries.query(QueryParams(query=q, k=5, tau=0.0))
            if a.index_generation not in catalogs:
                catalogs[a.index_generation] = Catalog(
                    s.index_path / gen.gen_dir_name(a.index_generation) / gen.CATALOG,
                    readonly=True)
            cat = catalogs[a.index_generation]
            gens.add(a.index_generation)
            for h in a.hits:
                # a joined hit answers for its parts, each a span of that generation
                rows = [cat.by_id(i) for i in (h.parts or (h.id,))]
                if any(row is None or digest(cat.text(row.sid) or "") != row.span.digest
                       for row in rows):
                    half += 1
                    errors.append(f"generation {a.index_generation} answered {h.id} it does "
                                  "not hold")
                    break
            else:
                ok += 1 if a.hits else 0
                failed += 0 if a.hits else 1
        except Exception as exc:  # every failure is counted and reported, none is fatal
            failed += 1
            if "inconsistent" in str(exc) or "manifest" in str(exc):
                half += 1
            errors.append(f"{type(exc).__name__}: {exc}")
    deps.close()
    return {"ok": ok, "failed": failed, "half": half, "generations": sorted(gens),
            "errors": errors[:5]}


READER = ("import sys, orjson; from tests.hostile_io import reader_main; "
          "print(orjson.dumps(reader_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "
          "float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)).decode())")


def catalog_ids(settings: Settings) -> list[str]:
    """Every span ID of the published generation, by path and line."""
    from rag_mcp.index import generation as gen
    from rag_mcp.index.catalog import Catalog

    pointer = gen.read_pointer(settings.index_path)
    assert pointer is not None, "no index"
    cat = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    try:
        return [r.id for r in cat.all_spans()]
    finally:
        cat.close()
