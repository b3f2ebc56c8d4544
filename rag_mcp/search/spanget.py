"""``rag_get_span`` in the core: one span's current text by ID, checked, redacted, capped, from the
repository that holds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated

from pydantic import Field

from rag_mcp.errors import IndexUnavailable, InvalidArgument, NotFound, RagError, Stale
from rag_mcp.index.catalog import Catalog, SpanRow
from rag_mcp.index.spans import Span, SpanId, parse_span_id
from rag_mcp.search.links import where
from rag_mcp.search.reader import SpanText, cap_text, check_relpath, read_joined, read_span
from rag_mcp.search.redact import redact, redact_id, redact_label
from rag_mcp.search.redact.ids import is_masked, unmask_path
from rag_mcp.search.repos import Repo, select

MAX_CONTEXT_LINES = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanResult:
    """One span as it is on disk now: ``rag_get_span``'s result."""

    id: Annotated[str, Field(
        description="The span's current ID (differs from the request if it moved)")]
    requested_id: str
    path: str
    start_line: int
    end_line: int
    kind: str
    language: str
    symbol: str | None = None
    heading: str | None = None
    text: Annotated[str, Field(
        description="Lines start_line-end_line (plus context_lines around them)")]
    context_lines: int
    stale: Annotated[bool, Field(description="The span moved since indexing; use the new id")]
    truncated: Annotated[bool, Field(
        description="Cut at the byte budget; a '[truncated]' line marks it")]
    redactions: Annotated[int, Field(description="Secrets replaced by [REDACTED:<kind>]")]
    repo: Annotated[str, Field(description="The repository the span was read from")]
    page_id: Annotated[str | None, Field(description="DokuWiki page ID of a wiki page")] = None
    anchor: Annotated[str | None, Field(
        description="The section's anchor on its published page")] = None
    page: Annotated[int | None, Field(description="PDF page number, 1-based")] = None
    url: Annotated[str | None, Field(
        description="Web address of the page and section, when the wiki or docs site URL is "
                    "configured")] = None


def find_span(repos: Sequence[Repo], span_id: object, repo: str | Sequence[str] | None = None,
              context_lines: int = 0) -> SpanResult:
    """The span ``span_id`` in the named repository, or in the only one that holds it; the
    result names the repository it was read from.

    Each lookup reads only under its own root, so a span ID can never reach another root's files.
    """
    by_name = {r.name: r for r in repos}
    chosen = [by_name[n] for n in select(list(by_name), repo)]
    if len(chosen) == 1:
        return get_span(chosen[0], span_id, context_lines)
    parse_span_id(span_id)  # a malformed id is the caller's mistake in every repository
    found: list[SpanResult | Stale] = []
    holders: list[str] = []
    unavailable: list[str] = []
    for r in chosen:
        try:
            found.append(get_span(r, span_id, context_lines))
        except Stale as exc:  # the id is this repository's, but its text changed
            found.append(exc)
        except NotFound:
            continue
        except IndexUnavailable:
            unavailable.append(r.name)
            continue
        holders.append(r.name)
    if len(found) > 1:
        raise InvalidArgument(f"span {span_id} is in several repositories "
                              f"({', '.join(holders)}); pass repo to say which")
    if found:
        got = found[0]
        if isinstance(got, RagError):
            raise got
        return got
    if unavailable and len(unavailable) == len(chosen):
        raise IndexUnavailable(f"no usable index in {', '.join(unavailable)}; see rag_health")
    missing = f" (not searched, no usable index: {', '.join(unavailable)})" if unavailable else ""
    raise NotFound(f"no span {span_id} in {', '.join(r.name for r in chosen)}{missing}; use an "
                   "id returned by rag_query (the index may have been rebuilt since)")


def get_span(repo: Repo, span_id: object, context_lines: int = 0, *,
             max_bytes: int | None = None) -> SpanResult:
    """The span ``span_id`` of one repository."""
    sid = parse_span_id(span_id)  # shape and length first, before anything touches the index
    assert isinstance(span_id, str)
    check_relpath(sid.path)
    if isinstance(context_lines, bool) or not isinstance(context_lines, int) or not (
            0 <= context_lines <= MAX_CONTEXT_LINES):
        raise InvalidArgument(f"context_lines must be an integer from 0 to {MAX_CONTEXT_LINES}")
    catalog = repo.handle.get().catalog
    assert catalog is not None
    asked = span_id
    if is_masked(sid.path):  # an ID we showed with a secret in its path masked
        for real in unmask_path(catalog, sid.path):
            sid = SpanId(real, sid.start_line, sid.end_line, sid.digest)
            if catalog.with_digest(real, sid.digest):
                break
        span_id = str(sid)
    row = catalog.by_id(span_id)
    if row is None:
        # An ID handed out earlier as the "moved" ID of a stale span: same path and digest.
        moved = catalog.with_digest(sid.path, sid.digest)
        if not moved:
            return _joined(repo, catalog, sid, asked, context_lines, max_bytes)
        row = min(moved, key=lambda r: abs(r.span.start_line - sid.start_line))
    sp = row.span
    stored = catalog.text(row.sid) or ""
    # The walker never indexes a file over max_file_bytes: one that grew past it has changed.
    result = read_span(repo.root, sp.path, sp.start_line, sp.end_line, sp.digest,
                       stored.split("\n", 1)[0], context_lines=context_lines,
                       max_bytes=repo.settings.max_file_bytes)
    return _result(repo, asked, span_id, sp, result, context_lines, max_bytes)


#: how many candidate ranges a moved joined ID is looked for in (each reads the file once)
MAX_JOIN_CANDIDATES = 8


def _joined(repo: Repo, catalog: Catalog, sid: SpanId, span_id: str, context_lines: int,
            max_bytes: int | None) -> SpanResult:
    """A range rag_query joined from adjacent indexed spans, or narrowed to some of their lines
    (``rag_mcp.search.join``).

    The exact range when the indexed spans it covers or cuts hold it (its answer is final:
    reading it already looks for the text elsewhere in the file); otherwise, for an ID handed
    out as the "moved" ID of a joined range, the runs of indexed spans with as many lines,
    nearest first."""
    n = sid.end_line - sid.start_line + 1
    of_path = catalog.of_path(sid.path)
    cut = [r for r in of_path
           if r.span.start_line <= sid.end_line and r.span.end_line >= sid.start_line]
    exact = (bool(cut) and cut[0].span.start_line <= sid.start_line
             and max(r.span.end_line for r in cut) >= sid.end_line)
    runs = [cut] if exact else _runs(of_path, n, sid.start_line)
    for run in runs[:MAX_JOIN_CANDIDATES]:
        lead = run[0].span
        start = sid.start_line if exact else lead.start_line
        try:
            text = read_joined(
                repo.root, sid.path, start, start + n - 1, sid.digest,
                [(r.span.start_line, r.span.end_line, r.span.digest) for r in run],
                (catalog.text(run[0].sid) or "").split("\n", 1)[0],
                context_lines=context_lines, max_bytes=repo.settings.max_file_bytes)
        except (NotFound, Stale):
            if exact:
                raise
            continue
        # labelled by its first part (rag_query labels it by its best-ranked one, which the ID
        # does not record)
        sp = replace(lead, start_line=start, end_line=start + n - 1, digest=sid.digest)
        return _result(repo, span_id, str(sid), sp, text, context_lines, max_bytes)
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


def _result(repo: Repo, span_id: str, real_id: str, sp: Span, result: SpanText,
            context_lines: int, max_bytes: int | None) -> SpanResult:
    text, counts = redact(result.text)  # redact the whole text, then cap it
    text, truncated = cap_text(text, max_bytes or repo.settings.max_bytes)
    # ID and path as shown: a secret in a file name is masked (redact.ids finds them again).
    shown_id = redact_id(result.id)
    at = where(repo.settings, sp)
    return SpanResult(
        id=shown_id, requested_id=redact_id(span_id), path=redact_label(sp.path) or sp.path,
        start_line=result.start_line,
        end_line=result.end_line, kind=sp.kind, language=sp.language,
        symbol=redact_label(sp.symbol), heading=redact_label(sp.heading), text=text,
        context_lines=context_lines, stale=result.stale or result.id != real_id,
        truncated=truncated, redactions=sum(counts.values()), repo=repo.name,
        page_id=at.page_id, anchor=at.anchor, page=at.page, url=at.url,
    )
