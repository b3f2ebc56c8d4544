"""``rag_query``: find the few spans of code or docs that answer a question."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.errors import InvalidArgument
from rag_mcp.index.spans import parse_span_id
from rag_mcp.search.links import describe
from rag_mcp.search.records import MAX_K, QueryAnswer, QueryHit, QueryParams
from rag_mcp.search.repos import qualify
from tools._base import ToolSpec

DESCRIPTION = (
    "Search this repository's code and docs; returns the best few spans (file, lines, symbol, "
    "score, one-line preview) with IDs, neighbouring spans of one file joined into one range. "
    "Use it before grep or reading whole files, then call rag_get_span on the IDs worth "
    "reading (or pass include_text=true to get them at once)."
)


# What an assistant reads of rag_query (its structured content): the hits and what to do next,
# nothing it cannot act on. Fields at their defaults are left out of each result, and timings,
# budgets and token counts travel in the result's _meta (``meta``). A comment, not a docstring:
# pydantic would send a docstring to every client inside the output schema.
@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    id: Annotated[str, Field(
        description="Span ID 'path:start-end:digest' (path relative to the repository root, "
                    "lines 1-based and inclusive); pass it to rag_get_span")]
    kind: Annotated[str, Field(description="code, doc or text")]
    language: str
    symbol: Annotated[str | None, Field(description="Definition name, e.g. 'Indexer.run'")] = None
    heading: Annotated[str | None, Field(
        description="Heading path of a doc span, 'A > B > C'")] = None
    score: Annotated[float, Field(description="Calibrated confidence in [0, 1]")]
    preview: Annotated[str, Field(description="What the span is: a signature or heading")] = ""
    text: Annotated[str | None, Field(
        description="Span text when include_text=true (secrets redacted)")] = None
    stale: Annotated[bool, Field(description="The file changed since indexing")] = False
    truncated: Annotated[bool, Field(description="Text cut by the byte budget")] = False
    repo: Annotated[str | None, Field(
        description="The repository of the span, when several are served; pass it to "
                    "rag_get_span")] = None
    joins: Annotated[int, Field(
        description="How many indexed spans of one file this hit's range joins or cuts")] = 0
    page_id: Annotated[str | None, Field(description="Wiki page ID, e.g. 'wiki:syntax'")] = None
    anchor: Annotated[str | None, Field(description="Section anchor in the page")] = None
    page: Annotated[int | None, Field(description="PDF page of the span (1-based)")] = None
    url: Annotated[str | None, Field(
        description="Web address of the page or section, when the site is configured")] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RagQueryResult:
    hits: Annotated[list[Hit], Field(description="Best first")]
    low_confidence: Annotated[bool, Field(
        description="No hit reached the confidence threshold; the best guess is shown")] = False
    message: Annotated[str | None, Field(
        description="Why confidence is low, or what was cut")] = None
    next: Annotated[str | None, Field(description="What to call next")] = None
    stale_files: Annotated[int | None, Field(
        description="Files changed since the index was built: re-run rag-index")] = None
    unavailable: Annotated[dict[str, str] | None, Field(
        description="Repositories asked but without a usable index, and why")] = None


def next_step(r: QueryAnswer) -> str | None:
    """The hint after the hits, in the text and the structured result alike."""
    if not r.hits or any(h.text for h in r.hits):
        return None
    return ("rag_get_span(span_id, repo) on the spans worth reading." if r.generations is not None
            else "rag_get_span(span_id) on the spans worth reading.")


def to_output(r: QueryAnswer) -> RagQueryResult:
    several = r.generations is not None
    return RagQueryResult(
        hits=[Hit(id=h.id, kind=h.kind, language=h.language, symbol=h.symbol,
                  heading=None if h.symbol else h.heading, score=round(h.score, 2),
                  preview=h.preview, text=h.text, stale=h.stale, truncated=h.truncated,
                  repo=h.repo if several else None, joins=len(h.parts or ()),
                  page_id=h.page_id, anchor=h.anchor, page=h.page, url=h.url) for h in r.hits],
        low_confidence=r.low_confidence, message=r.message, next=next_step(r),
        stale_files=r.stale_files or None, unavailable=r.unavailable)


def meta(r: QueryAnswer) -> dict[str, Any]:
    """Diagnostics for programs and benchmarks: timings, budgets, token counts."""
    out: dict[str, Any] = {
        "took_ms": r.took_ms, "cache_hit": r.cache_hit, "tau": r.tau, "returned": r.returned,
        "dropped_by_tau": r.dropped_by_tau, "cut_by_budget": r.cut_by_budget,
        "tokens_returned": r.tokens_returned, "tokens_whole_files": r.tokens_whole_files,
        "redactions": r.redactions, "index_generation": r.index_generation,
        "timings": r.timings}
    if r.generations is not None:
        out["generations"] = r.generations
    return out


def rag_query(
    deps: Deps,
    query: Annotated[str, Field(
        description="What you are looking for: a question, a description of behaviour, or exact "
                    "identifiers (e.g. 'where are span IDs parsed', 'HTTPError')",
        min_length=1, max_length=8192)],
    k: Annotated[int, Field(ge=1, le=MAX_K, description=f"How many spans to return (max "
                                                        f"{MAX_K}; the server's budget may "
                                                        "return fewer)")] = 5,
    tau: Annotated[float | None, Field(
        ge=0.0, le=1.0, description="Confidence threshold in [0, 1]; omit for the calibrated "
                                    "default")] = None,
    kind: Annotated[Literal["code", "doc", "any"], Field(
        description="Only code spans, only docs/wiki spans, or both")] = "any",
    path: Annotated[str | None, Field(
        description="Only under this path prefix or glob, relative to the root, e.g. 'src/' or "
                    "'**/*.py'; 'tests/' to search tests, which otherwise rank after the code "
                    "they test unless the query mentions tests", max_length=512)] = None,
    language: Annotated[str | None, Field(
        description="Only this language, e.g. python, typescript, markdown", max_length=40)] = None,
    include_text: Annotated[bool, Field(
        description="Also return each span's text (redacted, within the byte budget)")] = False,
    rerank: Annotated[bool | None, Field(
        description="Rerank with the configured cross-encoder (slower); omit for the "
                    "server default")] = None,
    repo: Annotated[str | list[str] | None, Field(
        description="Only this repository, or these, when the server serves several (names in "
                    "rag_health); omit to search all of them")] = None,
) -> QueryAnswer:
    return deps.queries.query(QueryParams(
        query=query, k=k, tau=tau, kind=kind, path=path, language=language,
        include_text=include_text, rerank=rerank,
        repo=tuple(repo) if isinstance(repo, list) else repo))


def _extent(h: QueryHit) -> str:
    """What a joined or narrowed hit's range is made of, for the text rendering."""
    if not h.parts:
        return ""
    try:
        ids = [parse_span_id(p) for p in h.parts]
    except InvalidArgument:
        return f"  (joins {len(h.parts)} spans)"
    lo, hi = min(i.start_line for i in ids), max(i.end_line for i in ids)
    if lo <= h.start_line and h.end_line <= hi and (lo, hi) != (h.start_line, h.end_line):
        return f"  (lines {h.start_line}-{h.end_line} of {lo}-{hi}; context_lines widens it)"
    return f"  (joins {len(h.parts)} spans)"


def render(r: QueryAnswer) -> str:
    head = (f"{r.returned} span{'s' if r.returned != 1 else ''} for {r.query!r} "
            f"({r.took_ms:.0f} ms{', cached' if r.cache_hit else ''}; ~{r.tokens_returned:,} "
            f"tokens instead of ~{r.tokens_whole_files:,} for the whole files)")
    lines = [head]
    if r.low_confidence or r.message:
        lines.append(f"note: {r.message}")
    several = r.generations is not None
    for i, h in enumerate(r.hits, 1):
        label = h.symbol or h.heading or ""
        where = f"{h.repo}: " if several else ""
        lines.append(f"{i}. {where}{h.id}  [{h.kind} {h.language}] {label}  score {h.score:.2f}"
                     + _extent(h)
                     + ("  (stale)" if h.stale else ""))
        if h.preview:
            lines.append(f"   {h.preview}")
        at = describe(h.page_id, h.anchor, h.page, h.url)
        if at:
            lines.append(f"   {at}")
        if h.text is not None:
            lines.append(f"```{h.language}\n{h.text}\n```")
    if r.stale_files:
        lines.append(f"index: {r.stale_files} file(s) changed since it was built; "
                     "re-run rag-index for fresh results")
    step = next_step(r)
    if step:
        lines.append(f"Next: {step}")
    return "\n".join(lines)


def log_fields(params: dict[str, Any], r: QueryAnswer | None) -> dict[str, Any]:
    out: dict[str, Any] = {"k": params.get("k", 5), "tau": params.get("tau")}
    for name in ("kind", "path", "language", "include_text"):
        if params.get(name) not in (None, "any", False):
            out[name] = params[name]
    repo = params.get("repo")
    if repo is not None:  # names only, bounded: an unknown one is logged as the caller sent it
        out["repo"] = ([str(x)[:100] for x in repo[:10]] if isinstance(repo, list)
                       else str(repo)[:100])
    if r is not None:
        scores = [h.score for h in r.hits]
        out.update(returned=r.returned, top_score=max(scores, default=None),
                   low_score=min(scores, default=None), cache_hit=r.cache_hit,
                   dropped_by_tau=r.dropped_by_tau, cut_by_budget=r.cut_by_budget,
                   tokens_returned=r.tokens_returned, low_confidence=r.low_confidence,
                   redactions=r.redactions)
        if r.unavailable:
            out["unavailable"] = sorted(r.unavailable)
        # with several repositories an ID names its repository first, as search's IDs do
        out["spans"] = [qualify(h.repo, h.id) if r.generations is not None else h.id
                        for h in r.hits]
    return out


SPEC = ToolSpec(name="rag_query", title="Search code and docs", fn=rag_query,
                result=QueryAnswer, render=render, log_fields=log_fields,
                output=RagQueryResult, to_output=to_output, meta=meta, lean=True)
rag_query.__doc__ = DESCRIPTION
