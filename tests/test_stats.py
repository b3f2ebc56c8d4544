"""Query statistics: what the log records of each rag_query, ``rag-mcp stats`` over the JSONL
log (rotated files, --since, --json), and the opt-in rag_stats tool."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import InvalidArgument
from rag_mcp.logjson import LOG_NAME, ToolLog
from rag_mcp.logstats import parse_since, percentile, render, summarize
from rag_mcp.serve.__main__ import main
from rag_mcp.serve.server import build_server
from tests.mcp_helpers import connect, hash_deps, in_process, text

HASH = "test-hash-64"


def write_log(log_dir: Path, records: list[dict[str, object]], *, name: str = LOG_NAME) -> None:
    """Records as the server's ToolLog writes them (its ``ts`` replaced where given)."""
    log = ToolLog(log_dir, max_bytes=1 << 20, backups=2)
    for rec in records:
        log.write(rec)
    if name != LOG_NAME:
        (log_dir / LOG_NAME).rename(log_dir / name)
    lines = (log_dir / name).read_bytes().splitlines()
    fixed = []
    for line, rec in zip(lines, records, strict=True):
        d = orjson.loads(line)
        if "ts" in rec:
            d["ts"] = rec["ts"]
        fixed.append(orjson.dumps(d))
    (log_dir / name).write_bytes(b"\n".join(fixed) + b"\n")


def q(query: str, took: float, *, spans: tuple[str, ...] = (), low: bool = False,
      ts: str = "2026-11-20T10:00:00.000Z", client: str = "claude-code",
      **extra: object) -> dict[str, object]:
    return {"ts": ts, "tool": "rag_query", "client": {"name": client, "version": "1.0"},
            "root": "/src/app", "query": query, "returned": len(spans), "spans": list(spans),
            "low_confidence": low, "took_ms": took, **extra}


def test_summary_counts_tools_clients_failures_latency_and_spans(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_log(logs, [  # the older, rotated file
        q("where is retry configured", 10.0, spans=("a.py:1-5:aaaaaaaaaaaa",)),
        q("where is retry configured", 30.0, spans=("a.py:1-5:aaaaaaaaaaaa",
                                                    "b.py:3-9:bbbbbbbbbbbb")),
    ], name=f"{LOG_NAME}.1")
    write_log(logs, [
        q("where is retry configured", 20.0, spans=("a.py:1-5:aaaaaaaaaaaa",), client="cursor",
          ts="2026-11-25T09:00:00.000Z"),
        q("quantum flux capacitor", 40.0, spans=("c.md:1-2:cccccccccccc",), low=True,
          ts="2026-11-25T09:01:00.000Z"),
        q("zzz nothing", 1000.0, ts="2026-11-25T09:02:00.000Z"),
        {"ts": "2026-11-25T09:03:00.000Z", "tool": "rag_get_span", "took_ms": 2.0,
         "error": "E_NOT_FOUND", "span_id": "x"},
    ])
    with (logs / LOG_NAME).open("ab") as fh:
        fh.write(b'{"torn": tr\n')  # a torn line is counted, not fatal
    s = summarize(logs, top=5)
    assert s.files == [f"{LOG_NAME}.1", LOG_NAME]
    assert s.calls == 6 and s.by_tool == {"rag_query": 5, "rag_get_span": 1}
    assert s.by_client == {"claude-code 1.0": 4, "cursor 1.0": 1, "(unknown)": 1}
    assert s.by_root == {"/src/app": 5} and s.errors == {"E_NOT_FOUND": 1}
    assert (s.queries, s.low_confidence, s.zero_hits, s.skipped_lines) == (5, 1, 1, 1)
    assert s.top_queries[0].key == "where is retry configured" and s.top_queries[0].count == 3
    assert [c.key for c in s.low_confidence_queries] == ["quantum flux capacitor"]
    assert [c.key for c in s.zero_hit_queries] == ["zzz nothing"]
    assert (s.top_spans[0].key, s.top_spans[0].count) == ("a.py:1-5:aaaaaaaaaaaa", 3)
    lat = s.latency["rag_query"]
    assert (lat.calls, lat.p50_ms, lat.p95_ms) == (5, 30.0, 1000.0)  # nearest rank
    shown = render(s)
    assert "p50 30.0 ms" in shown and "quantum flux capacitor" in shown
    # --since keeps the later calls only
    later = summarize(logs, since="2026-11-25")
    assert later.calls == 4 and later.first == "2026-11-25T09:00:00.000Z"


def test_hashed_queries_are_counted_by_their_hash(tmp_path: Path) -> None:
    log = ToolLog(tmp_path, max_bytes=1 << 20, backups=1, queries="hash")
    for _ in range(2):
        log.write({"tool": "rag_query", **log.query_field("private words"), "returned": 1})
    s = summarize(tmp_path)
    assert len(s.top_queries) == 1 and s.top_queries[0].key.startswith("sha256:")
    assert "private" not in render(s)


def test_since_and_percentiles() -> None:
    assert parse_since("24h", now=86400 * 3) == "1970-01-03T00:00:00"
    assert parse_since("2026-11-27T08:00Z") == "2026-11-27T08:00"
    with pytest.raises(InvalidArgument, match="30m, 24h"):
        parse_since("yesterday")
    assert percentile([1.0], 95) == 1.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


def test_rag_mcp_stats_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "somewhere"
    logs.mkdir()
    write_log(logs, [q("how are spans cut", 12.5, spans=("a.py:1-5:aaaaaaaaaaaa",))])
    assert main(["stats", "--root", str(tmp_path), "--log-dir", str(logs), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calls"] == 1 and got["top_queries"] == [{"key": "how are spans cut", "count": 1}]
    assert main(["stats", "--root", str(tmp_path), "--log-dir", str(logs)]) == 0
    assert "how are spans cut" in capsys.readouterr().out
    assert main(["stats", "--root", str(tmp_path), "--log-dir", str(logs),
                 "--since", "soon"]) != 0
    assert "E_INVALID_ARGUMENT" in capsys.readouterr().err
    assert main(["stats", "--root", str(tmp_path), "--log-dir", str(tmp_path / "none")]) == 0
    assert "no tool log" in capsys.readouterr().out


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, **kw})


@pytest.mark.anyio
async def test_rag_query_is_logged_with_root_and_spans_and_rag_stats_reads_it(
        sample_repo: Path) -> None:
    s = settings_for(sample_repo, stats_tool="stdio")
    run_index(s)
    async with in_process(s) as (session, _):
        names = {t.name for t in (await session.list_tools()).tools}
        assert "rag_stats" in names
        r = await session.call_tool("rag_query", {"query": "parse_span_id", "k": 3})
        assert r.structured_content is not None
        ids = [h["id"] for h in r.structured_content["hits"]]
        await session.call_tool("rag_query", {"query": "parse_span_id", "k": 3})
        line = orjson.loads((s.log_path / LOG_NAME).read_bytes().splitlines()[0])
        assert line["root"] == s.root and line["spans"] == ids
        st = await session.call_tool("rag_stats", {"top": 3})
        assert not st.is_error and st.structured_content is not None
        assert st.structured_content["by_tool"] == {"rag_query": 2}
        top = st.structured_content["top_spans"]
        assert len(top) == min(3, len(ids))
        assert all(c["key"] in ids and c["count"] == 2 for c in top)  # each returned twice
        assert "parse_span_id" in text(st)


@pytest.mark.anyio
async def test_rag_stats_is_opt_in_and_off_over_http_unless_all(sample_repo: Path) -> None:
    
    async def listed(settings: Settings, http: bool) -> set[str]:
        server = build_server(settings, lambda: hash_deps(settings), http=http)
        async with connect(server) as session:
            return {t.name for t in (await session.list_tools()).tools}

    assert "rag_stats" not in await listed(settings_for(sample_repo), http=False)
    assert "rag_stats" not in await listed(settings_for(sample_repo, stats_tool="stdio"), True)
    assert "rag_stats" in await listed(settings_for(sample_repo, stats_tool="all"), True)
