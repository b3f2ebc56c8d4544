"""What ``rag_query`` is asked and what it answers: the records the query service takes and
returns (``rag_mcp.search.query``), which ``rag-eval`` and the MCP tool read as they are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from rag_mcp.errors import InvalidArgument

MAX_K = 20


@dataclass(frozen=True, slots=True)
class QueryParams:
    query: str
    k: int = 5
    tau: float | None = None
    kind: str = "any"
    path: str | None = None
    language: str | None = None
    include_text: bool = False
    rerank: bool | None = None
    fusion: str = "convex"
    #: one repository name or several; None searches every served repository
    repo: str | tuple[str, ...] | None = None


# One answer of rag_query: a span, or adjacent spans of one file joined into a range; previews,
# texts and labels (a heading is repository text) are redacted. (A comment, not a docstring:
# pydantic would send a docstring to every client inside rag_query's output schema.)
@dataclass(frozen=True, slots=True, kw_only=True)
class QueryHit:
    id: Annotated[str, Field(
        description="Span ID 'path:start-end:digest'; pass it to rag_get_span")]
    path: Annotated[str, Field(description="File path relative to the repository root")]
    start_line: Annotated[int, Field(description="First line, 1-based")]
    end_line: Annotated[int, Field(description="Last line, inclusive")]
    kind: Annotated[str, Field(description="code, doc or text")]
    language: str
    symbol: Annotated[str | None, Field(
        description="Definition name, e.g. 'Indexer.run' (a joined range: each, ', ')")] = None
    parent: Annotated[str | None, Field(description="Enclosing class or type, if any")] = None
    heading: Annotated[str | None, Field(
        description="Heading path of a doc span, 'A > B > C' (a joined range: each, '; ')")] = None
    score: Annotated[float, Field(description="Calibrated confidence in [0, 1]")]
    preview: Annotated[str, Field(
        description="One-line signature or heading (secrets redacted)")]
    text: Annotated[str | None, Field(
        description="Span text when include_text=true (redacted)")] = None
    stale: Annotated[bool, Field(description="The file changed since indexing")] = False
    truncated: Annotated[bool, Field(description="Text cut by the byte budget")] = False
    repo: Annotated[str, Field(
        description="The repository the span is in (see rag_health for names)")]
    parts: Annotated[tuple[str, ...] | None, Field(
        description="The indexed spans of one file this range joins, or cuts when it was "
                    "narrowed to the lines that matched: their IDs (the hit's own ID reads "
                    "the range)")] = None
    page_id: Annotated[str | None, Field(
        description="DokuWiki page ID of a wiki page, e.g. 'wiki:syntax'")] = None
    anchor: Annotated[str | None, Field(
        description="The section's anchor on its published page, e.g. 'tables'")] = None
    page: Annotated[int | None, Field(description="PDF page number, 1-based")] = None
    url: Annotated[str | None, Field(
        description="Web address of the page and section, when the wiki or docs site URL is "
                    "configured")] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryAnswer:
    """``rag_query``'s result: the hits and what was cut, dropped or not searched, and why."""

    query: str
    hits: Annotated[list[QueryHit], Field(description="Best first")]
    low_confidence: Annotated[bool, Field(
        description="The best hit is under the model's confidence bar: the corpus may not "
                    "answer this (when no hit reached tau, the single best guess is shown)")]
    message: Annotated[str | None, Field(
        description="What was cut or why confidence is low")] = None
    tau: Annotated[float, Field(description="Confidence threshold applied")]
    returned: int
    dropped_by_tau: int
    cut_by_budget: int
    tokens_returned: Annotated[int, Field(description="~tokens of the returned spans")]
    tokens_whole_files: Annotated[int, Field(
        description="~tokens of reading their whole files instead")]
    redactions: Annotated[int, Field(description="Secrets replaced by [REDACTED:<kind>]")] = 0
    took_ms: float
    cache_hit: bool
    index_generation: int
    stale_files: Annotated[int | None, Field(
        description="Files changed since the index was built")] = None
    timings: dict[str, float] = field(default_factory=dict)
    generations: Annotated[dict[str, int] | None, Field(
        description="Several repositories: the index generation each one answered from")] = None
    unavailable: Annotated[dict[str, str] | None, Field(
        description="Several repositories: those asked but without a usable index, and why "
                    "(the others still answered)")] = None


def normalize_query(text: object, max_chars: int) -> str:
    if not isinstance(text, str):
        raise InvalidArgument("query must be a string")
    q = " ".join(text.replace("\x00", " ").split())
    if not q:
        raise InvalidArgument("query is empty; describe the code or doc you are looking for")
    if len(q) > max_chars:
        raise InvalidArgument(
            f"query is too long ({len(q):,} characters, max {max_chars:,}); "
            "shorten it to the key names and words")
    return q
