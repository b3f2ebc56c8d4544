"""Malformed traffic over stdio and HTTP: the server answers every valid request that follows.

Each of ~100 hostile messages (invalid JSON, wrong types, missing and extra fields, unknown tools
and methods, 10 MB arguments, deep nesting, control characters, invalid UTF-8) is followed by a
valid ``rag_query``; it must be answered, the process must live on, error responses must carry
codes and no output may show a stack trace.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.serve.guard import MAX_JSON_DEPTH, json_problem
from tests import hostile_cases as hc
from tests import hostile_io as hio


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = load_settings({"root": str(sample_repo), "embed_model": hc.HASH})
    run_index(s)
    return s


def check(report: hio.TrafficReport) -> None:
    assert report.cases >= 100
    assert report.crashes == 0
    assert report.answered == report.cases, report
    assert report.traces == [] and report.uncoded == [] and report.server_errors == []


@pytest.mark.slow
def test_stdio_survives_malformed_traffic(indexed: Settings, tmp_path: Path) -> None:
    report = hio.stdio_traffic(Path(indexed.root), tmp_path)
    check(report)
    # Refusals come as JSON-RPC errors or coded tool errors (the SDK's stdio transport drops a
    # line it cannot parse without answering; the follow-up shows the server lived on).
    assert report.replies.get("error", 0) + report.replies.get("tool_error", 0) >= 40


@pytest.mark.slow
def test_http_survives_malformed_traffic(indexed: Settings, tmp_path: Path) -> None:
    report = hio.http_traffic(Path(indexed.root), tmp_path)
    check(report)
    assert report.replies.get("error", 0) + report.replies.get("tool_error", 0) >= 60
    err = (tmp_path / "http.err").read_text()
    assert "Traceback" not in err  # malformed bodies are refused before the SDK logs a trace


@pytest.mark.parametrize("body,problem", [
    (b"{", "not valid JSON"), (b'{"q":"\xff"}', "UTF-8"), (b"[" * 100_000 + b"]" * 100_000,
                                                          "nested"),
    (b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1), "nested"),
    (b'{"id":' + b"9" * 5000 + b"}", "number"), (b'{"id":"\\ud800"}', "surrogate"),
    (b'{"\\udc00":1}', "surrogate"), (b'{"q":"\\ud83d\\ude00 ok"}', None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"}', None),
    (b'{"a":' * (MAX_JSON_DEPTH - 1) + b"1" + b"}" * (MAX_JSON_DEPTH - 1), None),
])
def test_json_problem(body: bytes, problem: str | None) -> None:
    found = json_problem(body)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.slow
def test_sessions_keep_working_while_others_misbehave(indexed: Settings, tmp_path: Path) -> None:
    """A small CI version of the load study: HTTP clients and a stdio client at once, with
    hostile messages mixed in; every valid call succeeds (bench/safety/hostile.py runs 8 + 1 for
    60 s)."""
    server = hio.HttpProc(Path(indexed.root), tmp_path / "logs", tmp_path / "http.err")
    stdio = hio.RawStdio(Path(indexed.root), tmp_path / "logs", tmp_path / "stdio.err").start()
    failures: list[str] = []
    small = [payload for _, payload in hc.traffic_cases() if len(payload) < 100_000]
    try:
        def http_client(n: int) -> None:
            headers = server.start_session()
            for i in range(15):
                server.client.post(server.url, content=small[(n * 15 + i) % len(small)],
                                   headers=headers)
                r = server.client.post(server.url, content=hc.follow_up(), headers=headers)
                if r.status_code != 200 or "hits" not in r.text:
                    failures.append(f"http {n}: {r.status_code}")

        def stdio_client() -> None:
            for i in range(15):
                stdio.send(small[i * 5 % len(small)])
                stdio.send(hc.follow_up())
                msg, _ = stdio.until(hc.FOLLOW_UP_ID)
                if not hio.follow_up_ok(msg):
                    failures.append(f"stdio: {msg}")

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                for n in range(3):
                    tg.start_soon(anyio.to_thread.run_sync, http_client, n)
                tg.start_soon(anyio.to_thread.run_sync, stdio_client)

        anyio.run(run)
        assert server.proc.poll() is None and stdio.proc.poll() is None
    finally:
        server.close()
        stdio.close()
    assert failures == []
