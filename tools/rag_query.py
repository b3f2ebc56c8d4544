"""``rag_query``: find the few spans of code or docs that answer a question."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.search.links import describe
from rag_mcp.search.query import QueryAnswer, QueryParams
from tools._base import ToolSpec

DESCRIPTION = (
    "Search this repository's code and docs; returns the best few spans (file, lines, symbol, "
    "score, one-line preview) with IDs, neighbouring spans of one file joined into one range. "
    "Use it before grep or reading whole files, then call rag_get_span on the IDs worth "
    "reading (or pass include_text=true to get them at once)."
)


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
) -> QueryAnswer:
    return deps.queries.query(QueryParams(
        query=query, k=k, tau=tau, kind=kind, path=path, language=language,
        include_text=include_text, rerank=rerank,
        repo=tuple(repo) if isinstance(repo, list) else repo))


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
                     + (f"  (joins {len(h.parts)} spans)" if h.parts else "")
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
    if r.hits and not any(h.text for h in r.hits):
        lines.append("Next: rag_get_span(span_id, repo) on the spans worth reading." if several
                     else "Next: rag_get_span(span_id) on the spans worth reading.")
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
        out["spans"] = [f"{h.repo}:{h.id}" if r.generations is not None else h.id
                        for h in r.hits]
    return out


SPEC = ToolSpec(name="rag_query", title="Search code and docs", fn=rag_query,
                result=QueryAnswer, render=render, log_fields=log_fields)
rag_query.__doc__ = DESCRIPTION
