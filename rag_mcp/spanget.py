"""``rag_get_span`` in the core: one span's current text by ID, checked, redacted, capped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rag_mcp.config import Settings
from rag_mcp.errors import InvalidArgument, NotFound
from rag_mcp.index import IndexHandle
from rag_mcp.reader import cap_text, check_relpath, read_span
from rag_mcp.redact import redact, redact_label
from rag_mcp.spans import Span, parse_span_id

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
    if row is None:
        # An ID handed out earlier as the "moved" ID of a stale span: same path and digest.
        moved = [r for r in catalog.of_path(sid.path) if r.span.digest == sid.digest]
        if not moved:
            raise NotFound(
                f"no span {span_id} in the index; use an id returned by rag_query "
                "(the index may have been rebuilt since)")
        row = min(moved, key=lambda r: abs(r.span.start_line - sid.start_line))
    sp = row.span
    stored = catalog.text(row.sid) or ""
    # The walker never indexes a file over max_file_bytes: one that grew past it has changed.
    result = read_span(Path(settings.root), sp.path, sp.start_line, sp.end_line, sp.digest,
                       stored.split("\n", 1)[0], context_lines=context_lines,
                       max_bytes=settings.max_file_bytes)
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
