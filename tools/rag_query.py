"""``rag_query``: find the few spans of code or docs that answer a question."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from rag_mcp.deps import Deps
from rag_mcp.search.query import QueryAnswer, QueryHit, QueryParams
from tools._base import ToolSpec

DESCRIPTION = (
    "Search this repository's code and docs; returns the best few spans (file, lines, symbol, "
    "score, one-line preview) with IDs, neighbouring spans of one file joined into one range. "
    "Use it before grep or reading whole files, then call rag_get_span on the IDs worth "
    "reading (or pass include_text=true to get them at once)."
)


class SpanHit(BaseModel):
    id: str = Field(description="Span ID 'path:start-end:digest'; pass it to rag_get_span")
    path: str = Field(description="File path relative to the repository root")
    start_line: int = Field(description="First line, 1-based")
    end_line: int = Field(description="Last line, inclusive")
    kind: str = Field(description="code, doc or text")
    language: str
    symbol: str | None = Field(None, description="Definition name, e.g. 'Indexer.run'")
    parent: str | None = Field(None, description="Enclosing class or type, if any")
    heading: str | None = Field(None, description="Heading path of a doc span, 'A > B > C'")
    score: float = Field(description="Calibrated confidence in [0, 1]")
    preview: str = Field(description="One-line signature or heading (secrets redacted)")
    text: str | None = Field(None, description="Span text when include_text=true (redacted)")
    stale: bool = Field(False, description="The file changed since indexing")
    truncated: bool = Field(False, description="Text cut by the byte budget")
    repo: str = Field(description="The repository the span is in (see rag_health for names)")
    parts: list[str] | None = Field(
        None, description="Adjacent spans of one file returned as this one range: their IDs "
                          "(the hit's own ID reads the whole range)")


class RagQueryResult(BaseModel):
    query: str
    hits: list[SpanHit] = Field(description="Best first")
    low_confidence: bool = Field(description="No hit reached tau; the single best guess is shown")
    message: str | None = Field(None, description="What was cut or why confidence is low")
    tau: float = Field(description="Confidence threshold applied")
    returned: int
    dropped_by_tau: int
    cut_by_budget: int
    tokens_returned: int = Field(description="~tokens of the returned spans")
    tokens_whole_files: int = Field(description="~tokens of reading their whole files instead")
    redactions: int = Field(0, description="Secrets replaced by [REDACTED:<kind>]")
    took_ms: float
    cache_hit: bool
    index_generation: int
    stale_files: int | None = Field(None, description="Files changed since the index was built")
    timings: dict[str, float] = Field(default_factory=dict)
    generations: dict[str, int] | None = Field(
        None, description="Several repositories: the index generation each one answered from")
    unavailable: dict[str, str] | None = Field(
        None, description="Several repositories: those asked but without a usable index, and "
                          "why (the others still answered)")


def rag_query(
    deps: Deps,
    query: Annotated[str, Field(
        description="What you are looking for: a question, a description of behaviour, or exact "
                    "identifiers (e.g. 'where are span IDs parsed', 'HTTPError')",
        min_length=1, max_length=8192)],
    k: Annotated[int, Field(ge=1, le=20, description="How many spans to return (max 20; the "
                                                     "server's budget may return fewer)")] = 5,
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
) -> RagQueryResult:
    ans = deps.queries.query(_params(query, k, tau, kind, path, language, include_text,
                                     rerank, repo))
    return to_result(ans, several=deps.multi)


def _params(query: str, k: int = 5, tau: float | None = None, kind: str = "any",
            path: str | None = None, language: str | None = None, include_text: bool = False,
            rerank: bool | None = None, repo: str | list[str] | None = None) -> QueryParams:
    return QueryParams(query=query, k=k, tau=tau, kind=kind, path=path, language=language,
                       include_text=include_text, rerank=rerank,
                       repo=tuple(repo) if isinstance(repo, list) else repo)


def quick(deps: Deps, **params: Any) -> RagQueryResult | None:
    """A memoised answer for the open index generations, or None (``QueryService.cached``)."""
    ans = deps.queries.cached(_params(**params))
    return None if ans is None else to_result(ans, several=deps.multi)


#: QueryHit's fields, all plain values: copied one level (``asdict`` deep-copies each value and
#: was most of a memo hit's time in the server)
_HIT_FIELDS = tuple(f.name for f in fields(QueryHit))


def to_hit(h: QueryHit) -> SpanHit:
    # Previews, texts and labels (a heading is repository text) come redacted from the core.
    return SpanHit(**{name: getattr(h, name) for name in _HIT_FIELDS})


def to_result(ans: QueryAnswer, *, several: bool = False) -> RagQueryResult:
    """The tool's result; ``several`` repositories add which generation and which repository
    was unavailable."""
    return RagQueryResult(
        query=ans.query, hits=[to_hit(h) for h in ans.hits],
        low_confidence=ans.low_confidence, message=ans.message, tau=ans.tau,
        returned=ans.returned, dropped_by_tau=ans.dropped_by_tau, cut_by_budget=ans.cut_by_budget,
        tokens_returned=ans.tokens_returned, tokens_whole_files=ans.tokens_whole_files,
        redactions=ans.redactions, took_ms=round(ans.took_ms, 2), cache_hit=ans.cache_hit,
        index_generation=ans.generation,
        stale_files=ans.stale_files, timings=ans.timings,
        generations=dict(ans.generations) if several else None,
        unavailable=dict(ans.unavailable) if several and ans.unavailable else None,
    )


def render(r: RagQueryResult) -> str:
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
                     + (f"  (joins {len(h.parts)} spans)" if h.parts else "")
                     + ("  (stale)" if h.stale else ""))
        if h.preview:
            lines.append(f"   {h.preview}")
        if h.text is not None:
            lines.append(f"```{h.language}\n{h.text}\n```")
    if r.stale_files:
        lines.append(f"index: {r.stale_files} file(s) changed since it was built; "
                     "re-run rag-index for fresh results")
    if r.hits and not any(h.text for h in r.hits):
        lines.append("Next: rag_get_span(span_id, repo) on the spans worth reading." if several
                     else "Next: rag_get_span(span_id) on the spans worth reading.")
    return "\n".join(lines)


def log_fields(params: dict[str, Any], r: RagQueryResult | None) -> dict[str, Any]:
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
    return out


SPEC = ToolSpec(name="rag_query", title="Search code and docs", fn=rag_query,
                result=RagQueryResult, render=render, log_fields=log_fields, quick=quick)
rag_query.__doc__ = DESCRIPTION
