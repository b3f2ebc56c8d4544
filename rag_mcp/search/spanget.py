"""``rag_get_span`` in the core: one span's current text by ID, checked, redacted, capped."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rag_mcp.config import Settings
from rag_mcp.errors import InvalidArgument, NotFound, Stale
from rag_mcp.index.catalog import Catalog, SpanRow
from rag_mcp.index.handle import IndexHandle
from rag_mcp.index.spans import Span, SpanId, parse_span_id
from rag_mcp.search.reader import SpanText, cap_text, check_relpath, read_joined, read_span
from rag_mcp.search.redact import redact, redact_label

MAX_CONTEXT_LINES = 200


@dataclass(frozen=True, slots=True)
class SpanResult:
    id: str
    requested_id: str
    path: str
    start_line: int
    end_line: int
    kind: str
    language: str
    symbol: str | None
    heading: str | None
    text: str
    stale: bool
    truncated: bool
    redactions: int
    redacted_kinds: dict[str, int]
    context_lines: int
    span: Span


def get_span(handle: IndexHandle, settings: Settings, span_id: object,
             context_lines: int = 0, *, max_bytes: int | None = None) -> SpanResult:
    sid = parse_span_id(span_id)  # shape and length first, before anything touches the index
    assert isinstance(span_id, str)
    check_relpath(sid.path)
    if isinstance(context_lines, bool) or not isinstance(context_lines, int) or not (
            0 <= context_lines <= MAX_CONTEXT_LINES):
        raise InvalidArgument(f"context_lines must be an integer from 0 to {MAX_CONTEXT_LINES}")
    idx = handle.get()
    catalog = idx.catalog
    assert catalog is not None
    row = catalog.by_id(span_id)
    root = Path(settings.root)
    if row is None:
        # An ID handed out earlier as the "moved" ID of a stale span: same path and digest.
        moved = catalog.with_digest(sid.path, sid.digest)
        if not moved:
            return _joined(catalog, root, sid, span_id, context_lines, settings, max_bytes)
        row = min(moved, key=lambda r: abs(r.span.start_line - sid.start_line))
    sp = row.span
    stored = catalog.text(row.sid) or ""
    # The walker never indexes a file over max_file_bytes: one that grew past it has changed.
    result = read_span(root, sp.path, sp.start_line, sp.end_line, sp.digest,
                       stored.split("\n", 1)[0], context_lines=context_lines,
                       max_bytes=settings.max_file_bytes)
    return _result(span_id, sp, result, context_lines, settings, max_bytes)


#: how many candidate ranges a moved joined ID is looked for in (each reads the file once)
MAX_JOIN_CANDIDATES = 8


def _joined(catalog: Catalog, root: Path, sid: SpanId, span_id: str, context_lines: int,
            settings: Settings, max_bytes: int | None) -> SpanResult:
    """A range rag_query joined from two or more adjacent indexed spans (``rag_mcp.search.join``).

    The exact range when indexed spans fill it (its answer is final: reading it already looks
    for the text elsewhere in the file); otherwise, for an ID handed out as the "moved" ID of a
    joined range, the runs of indexed spans with as many lines, nearest first."""
    n = sid.end_line - sid.start_line + 1
    inside = catalog.within(sid.path, sid.start_line, sid.end_line)
    exact = (len(inside) >= 2 and inside[0].span.start_line == sid.start_line
             and max(r.span.end_line for r in inside) == sid.end_line)
    runs = [inside] if exact else _runs(catalog.of_path(sid.path), n, sid.start_line)
    for run in runs[:MAX_JOIN_CANDIDATES]:
        lead = run[0].span
        try:
            text = read_joined(
                root, sid.path, lead.start_line, lead.start_line + n - 1, sid.digest,
                [(r.span.start_line, r.span.end_line, r.span.digest) for r in run],
                (catalog.text(run[0].sid) or "").split("\n", 1)[0],
                context_lines=context_lines, max_bytes=settings.max_file_bytes)
        except (NotFound, Stale):
            if exact:
                raise
            continue
        # labelled by its first part (rag_query labels it by its best-ranked one, which the ID
        # does not record)
        sp = replace(lead, start_line=lead.start_line, end_line=lead.start_line + n - 1,
                     digest=sid.digest)
        return _result(span_id, sp, text, context_lines, settings, max_bytes)
    raise NotFound(f"no span {span_id} in the index; use an id returned by rag_query "
                   "(the index may have been rebuilt since)")


def _runs(of_path: list[SpanRow], n: int, near: int) -> list[list[SpanRow]]:
    """Runs of two or more consecutive spans covering exactly ``n`` lines, nearest first."""
    runs: list[list[SpanRow]] = []
    for i, first in enumerate(of_path):
        end = first.span.end_line
        for j in range(i + 1, len(of_path)):
            end = max(end, of_path[j].span.end_line)
            if end - first.span.start_line + 1 > n:
                break
            if end - first.span.start_line + 1 == n:
                runs.append(of_path[i:j + 1])
    runs.sort(key=lambda run: abs(run[0].span.start_line - near))
    return runs


def _result(span_id: str, sp: Span, result: SpanText, context_lines: int, settings: Settings,
            max_bytes: int | None) -> SpanResult:
    text, counts = redact(result.text)  # redact the whole text, then cap it
    text, truncated = cap_text(text, max_bytes or settings.max_bytes)
    return SpanResult(
        id=result.id, requested_id=span_id, path=sp.path, start_line=result.start_line,
        end_line=result.end_line, kind=sp.kind, language=sp.language,
        symbol=redact_label(sp.symbol), heading=redact_label(sp.heading), text=text,
        stale=result.stale or result.id != span_id,
        truncated=truncated, redactions=sum(counts.values()), redacted_kinds=counts,
        context_lines=context_lines, span=sp,
    )
