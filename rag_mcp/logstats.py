"""Query statistics from the JSONL tool log: what was asked, how it went, what was returned.

Reads ``rag-mcp.jsonl`` and its rotated copies (``.1`` … oldest first) in a log folder and
counts: calls by tool, client and repository root, errors, rag_query calls that came back with
low confidence or no hit, the most frequent queries (their text, or their sha256 when the log
keeps hashes only), latency percentiles per tool, and the spans returned most often. Lines that
are not JSON records (a torn write, another program's output) are counted and skipped.
Used by ``rag-mcp stats`` and the opt-in ``rag_stats`` tool.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import Field

from rag_mcp.errors import InvalidArgument
from rag_mcp.logjson import LOG_NAME

#: the tools whose calls are searches (their query text is logged)
QUERY_TOOLS = ("rag_query", "search", "local_llm_rag_query")
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])\Z")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?Z?\Z")


@dataclass(frozen=True, slots=True)
class Counted:
    key: Annotated[str, Field(description="A query (or its sha256), a span ID, a name")]
    count: int


@dataclass(frozen=True, slots=True)
class Latency:
    calls: int
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LogStats:
    log_dir: str
    files: Annotated[list[str], Field(description="Log files read, oldest first")]
    since: Annotated[str | None, Field(description="Only calls at or after this UTC time")]
    first: Annotated[str | None, Field(description="Time of the first call counted")] = None
    last: Annotated[str | None, Field(description="Time of the last call counted")] = None
    calls: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    by_client: dict[str, int] = field(default_factory=dict)
    by_root: Annotated[dict[str, int], Field(
        description="Calls by repository root (and by repo name where a call named one)")] = (
        field(default_factory=dict))
    errors: Annotated[dict[str, int], Field(description="Failed calls by error code")] = (
        field(default_factory=dict))
    queries: Annotated[int, Field(
        description="Calls of rag_query, search and local_llm_rag_query")] = 0
    low_confidence: Annotated[int, Field(
        description="rag_query calls where no span reached the confidence threshold")] = 0
    zero_hits: Annotated[int, Field(description="Searches that returned nothing")] = 0
    cache_hits: int = 0
    latency: Annotated[dict[str, Latency], Field(description="By tool, milliseconds")] = (
        field(default_factory=dict))
    top_queries: list[Counted] = field(default_factory=list)
    low_confidence_queries: list[Counted] = field(default_factory=list)
    zero_hit_queries: list[Counted] = field(default_factory=list)
    top_spans: Annotated[list[Counted], Field(
        description="Span IDs rag_query returned most often")] = field(default_factory=list)
    skipped_lines: Annotated[int, Field(description="Log lines that were not records")] = 0


def parse_since(text: str | None, now: float | None = None) -> str | None:
    """An ISO UTC timestamp from ``2026-11-27``, ``2026-11-27T08:00`` or a span back from now
    (``30m``, ``24h``, ``7d``, ``2w``); None for None or ""."""
    if not text:
        return None
    t = text.strip()
    m = _RELATIVE.match(t.lower())
    if m:
        back = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        when = (time.time() if now is None else now) - back
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when))
    if _DATE.match(t):
        return t.rstrip("Z").replace(" ", "T")
    raise InvalidArgument(f"since {text!r} is not a time: use a date (2026-11-27), a UTC time "
                          "(2026-11-27T08:00) or a span back from now (30m, 24h, 7d, 2w)")


def log_files(log_dir: Path) -> list[Path]:
    """The log and its rotated copies, oldest first."""
    rotated = []
    for p in log_dir.glob(f"{LOG_NAME}.*"):
        suffix = p.name[len(LOG_NAME) + 1:]
        if suffix.isdigit():
            rotated.append((int(suffix), p))
    out = [p for _, p in sorted(rotated, reverse=True)]
    current = log_dir / LOG_NAME
    if current.is_file():
        out.append(current)
    return out


def read_records(files: Iterable[Path], skipped: list[int]) -> Iterator[dict[str, Any]]:
    """The JSON objects of the files' lines; ``skipped[0]`` counts the lines that are not."""
    for path in files:
        try:
            fh = path.open("rb")
        except OSError:
            continue
        with fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    skipped[0] += 1
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("tool"), str):
                    yield rec
                else:
                    skipped[0] += 1


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of non-empty ascending values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _client(rec: dict[str, Any]) -> str:
    c = rec.get("client")
    if isinstance(c, dict) and c.get("name"):
        return f"{c['name']} {c.get('version', '')}".strip()
    return "(unknown)"


def _query_key(rec: dict[str, Any]) -> str | None:
    if isinstance(rec.get("query"), str):
        return str(rec["query"])
    if isinstance(rec.get("query_sha256"), str):
        return "sha256:" + str(rec["query_sha256"])[:16]
    return None


def _top(c: Counter[str], n: int) -> list[Counted]:
    return [Counted(k, v) for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def summarize(log_dir: Path, *, since: str | None = None, top: int = 10) -> LogStats:
    """Statistics of the calls logged in ``log_dir`` (at or after ``since``, an ISO time)."""
    files = log_files(log_dir)
    skipped = [0]
    by_tool: Counter[str] = Counter()
    by_client: Counter[str] = Counter()
    by_root: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    queries: Counter[str] = Counter()
    low_q: Counter[str] = Counter()
    zero_q: Counter[str] = Counter()
    spans: Counter[str] = Counter()
    took: dict[str, list[float]] = {}
    n_queries = n_low = n_zero = n_cached = 0
    first = last = None
    for rec in read_records(files, skipped):
        ts = str(rec.get("ts", ""))
        if since and ts[: len(since)] < since:
            continue
        first = first or ts
        last = ts
        tool = str(rec["tool"])
        by_tool[tool] += 1
        by_client[_client(rec)] += 1
        if isinstance(rec.get("root"), str):
            by_root[rec["root"]] += 1
        if rec.get("error"):
            errors[str(rec["error"])] += 1
        if isinstance(rec.get("took_ms"), (int, float)):
            took.setdefault(tool, []).append(float(rec["took_ms"]))
        if tool not in QUERY_TOOLS:
            continue
        n_queries += 1
        key = _query_key(rec)
        if key is not None:
            queries[key] += 1
        n_cached += rec.get("cache_hit") is True
        if rec.get("low_confidence") is True:
            n_low += 1
            if key is not None:
                low_q[key] += 1
        if rec.get("returned") == 0 and not rec.get("error"):
            n_zero += 1
            if key is not None:
                zero_q[key] += 1
        got = rec.get("spans")
        if isinstance(got, list):
            spans.update(str(s) for s in got)
    latency = {t: Latency(len(v), round(percentile(sorted(v), 50), 2),
                          round(percentile(sorted(v), 95), 2))
               for t, v in sorted(took.items())}
    return LogStats(
        log_dir=str(log_dir), files=[p.name for p in files], since=since, first=first, last=last,
        calls=sum(by_tool.values()), by_tool=dict(by_tool.most_common()),
        by_client=dict(by_client.most_common()), by_root=dict(by_root.most_common()),
        errors=dict(errors.most_common()), queries=n_queries, low_confidence=n_low,
        zero_hits=n_zero, cache_hits=n_cached, latency=latency,
        top_queries=_top(queries, top), low_confidence_queries=_top(low_q, top),
        zero_hit_queries=_top(zero_q, top), top_spans=_top(spans, top),
        skipped_lines=skipped[0])


def _pct(n: int, of: int) -> str:
    return f"{n:,} ({n / of:.0%})" if of else f"{n:,}"


def render(s: LogStats) -> str:
    """The statistics as text for a terminal (or a tool's text content)."""
    if not s.files:
        return f"no tool log in {s.log_dir} yet (rag-mcp writes {LOG_NAME} there as it serves)"
    span = f"{s.first} .. {s.last}" if s.first else "no calls"
    lines = [f"Tool calls logged in {s.log_dir} ({', '.join(s.files)}): {span}"
             + (f", since {s.since}" if s.since else ""),
             f"  calls           {s.calls:,}"
             + (f" · errors {', '.join(f'{k} {v}' for k, v in s.errors.items())}"
                if s.errors else "")]

    def counts(title: str, d: dict[str, int]) -> None:
        if d:
            lines.append(f"  {title:<15} " + " · ".join(f"{k} {v:,}" for k, v in d.items()))

    counts("by tool", s.by_tool)
    counts("by client", s.by_client)
    counts("by root", s.by_root)
    if s.queries:
        lines.append(f"  queries         {s.queries:,} · low confidence "
                     f"{_pct(s.low_confidence, s.queries)} · no hit {_pct(s.zero_hits, s.queries)}"
                     f" · answered from cache {_pct(s.cache_hits, s.queries)}")
    for tool, lat in s.latency.items():
        lines.append(f"  latency         {tool}: p50 {lat.p50_ms:,.1f} ms · "
                     f"p95 {lat.p95_ms:,.1f} ms ({lat.calls:,} calls)")
    for title, rows in (("most frequent queries", s.top_queries),
                        ("low-confidence queries", s.low_confidence_queries),
                        ("queries with no hit", s.zero_hit_queries),
                        ("spans returned most often", s.top_spans)):
        if rows:
            lines.append(f"  {title}:")
            lines.extend(f"    {r.count:>5}  {r.key}" for r in rows)
    if s.skipped_lines:
        lines.append(f"  ({s.skipped_lines:,} log lines were not records and were skipped)")
    return "\n".join(lines)
