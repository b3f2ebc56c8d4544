"""``rag_stats``: query statistics from the server's JSONL log (opt-in: queries can be private).

Offered when ``log.stats_tool`` (``RAG_STATS_TOOL``) is ``stdio`` (local clients only) or
``all`` (over HTTP too); ``rag-mcp stats`` prints the same from a shell.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.logstats import LogStats, parse_since, render, summarize
from tools._base import ToolSpec

DESCRIPTION = (
    "Usage statistics of this server from its query log: calls by tool and client, "
    "low-confidence and zero-hit queries, the most frequent queries, p50/p95 latency and the "
    "spans returned most often. Use it when asked how the search is being used or where it "
    "fails."
)


def rag_stats(
    deps: Deps,
    since: Annotated[str | None, Field(
        description="Only calls since then: a date (2026-11-27), a UTC time "
                    "(2026-11-27T08:00) or a span back from now (30m, 24h, 7d)",
        max_length=40)] = None,
    top: Annotated[int, Field(ge=1, le=100, description="Rows of each top list")] = 10,
) -> LogStats:
    return summarize(deps.settings.log_path, since=parse_since(since), top=top)


def log_fields(params: dict[str, Any], r: LogStats | None) -> dict[str, Any]:
    out: dict[str, Any] = {"since": params.get("since"), "top": params.get("top", 10)}
    if r is not None:
        out["calls_counted"] = r.calls
    return out


SPEC = ToolSpec(name="rag_stats", title="Query statistics", fn=rag_stats, result=LogStats,
                render=render, log_fields=log_fields,
                enabled=lambda settings: settings.stats_tool in ("stdio", "all"),
                over_http=lambda settings: settings.stats_tool == "all")
rag_stats.__doc__ = DESCRIPTION
