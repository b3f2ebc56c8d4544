"""``rag_get_span``: the text of one span by ID, as it is in the repository now."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.index.spans import MAX_ID_LEN
from rag_mcp.search.links import describe
from rag_mcp.search.spanget import MAX_CONTEXT_LINES, SpanResult
from tools._base import ToolSpec

DESCRIPTION = (
    "Read one span by the ID rag_query returned: its current text (secrets redacted, size "
    "capped), optionally with surrounding lines. If the file changed, says so and gives the "
    "span's new ID when it only moved."
)


def rag_get_span(
    deps: Deps,
    span_id: Annotated[str, Field(
        description="A span ID from rag_query, 'path:start-end:digest'",
        min_length=1, max_length=MAX_ID_LEN)],
    context_lines: Annotated[int, Field(
        ge=0, le=MAX_CONTEXT_LINES, description="Extra lines before and after the span")] = 0,
    repo: Annotated[str | None, Field(
        description="The repository of the span (the hit's repo field) when the server serves "
                    "several; omit to look in all of them", max_length=200)] = None,
) -> SpanResult:
    return deps.find_span(span_id, repo, context_lines)


def render(r: SpanResult) -> str:
    label = r.symbol or r.heading or ""
    first = r.start_line - r.context_lines if r.context_lines else r.start_line
    head = f"{r.id}  [{r.kind} {r.language}] {label}".rstrip()
    notes = []
    if r.stale:
        notes.append(f"moved since indexing (asked for {r.requested_id})")
    if r.truncated:
        notes.append("truncated at the byte budget")
    if r.redactions:
        notes.append(f"{r.redactions} secret(s) redacted")
    body = f"```{r.language}\n{r.text}\n```"
    at = describe(r.page_id, r.anchor, r.page, r.url)
    return "\n".join([head] + ([at] if at else [])
                     + ([f"note: {'; '.join(notes)}"] if notes else [])
                     + [f"(from line {max(1, first)})", body])


def log_fields(params: dict[str, Any], r: SpanResult | None) -> dict[str, Any]:
    out: dict[str, Any] = {"span_id": str(params.get("span_id", ""))[:300]}
    if params.get("context_lines"):
        out["context_lines"] = params["context_lines"]
    if params.get("repo") is not None:
        out["repo"] = str(params["repo"])[:100]
    if r is not None:
        out.update(stale=r.stale, truncated=r.truncated, redactions=r.redactions)
    return out


SPEC = ToolSpec(name="rag_get_span", title="Read a span", fn=rag_get_span,
                result=SpanResult, render=render, log_fields=log_fields)
rag_get_span.__doc__ = DESCRIPTION
