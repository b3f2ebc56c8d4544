"""``local_llm_rag_query``: an answer from a local Ollama model over retrieved spans (opt-in)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.search.answer import MAX_SPAN_IDS, LocalAnswer, answer_locally
from rag_mcp.search.records import MAX_K
from tools._base import ToolSpec

DESCRIPTION = (
    "Answer a question with the local Ollama model from retrieved spans (or the span_ids you "
    "give), citing span IDs. Slower than rag_query; use it only when asked for a local answer."
)


def local_llm_rag_query(
    deps: Deps,
    question: Annotated[str, Field(description="The question to answer", min_length=1,
                                   max_length=8192)],
    k: Annotated[int, Field(ge=1, le=MAX_K, description="Spans to retrieve")] = 5,
    span_ids: Annotated[list[str] | None, Field(
        description="Use these spans (IDs from rag_query) instead of retrieving",
        max_length=MAX_SPAN_IDS)] = None,
    model: Annotated[str | None, Field(description="Ollama model; omit for the configured one",
                                       max_length=200)] = None,
    max_tokens: Annotated[int, Field(ge=16, le=8192, description="Longest answer")] = 512,
) -> LocalAnswer:
    return answer_locally(deps.queries, deps.llm, question, k=k, span_ids=span_ids, model=model,
                          max_tokens=max_tokens)


def render(r: LocalAnswer) -> str:
    cites = ", ".join(r.span_ids) if r.span_ids else "none"
    return (f"{r.answer}\n\n— {r.model}, {r.took_ms / 1000:.1f} s, {r.prompt_tokens} prompt + "
            f"{r.completion_tokens} answer tokens; spans: {cites}")


def log_fields(params: dict[str, Any], r: LocalAnswer | None) -> dict[str, Any]:
    out: dict[str, Any] = {"k": params.get("k", 5), "model": params.get("model")}
    if params.get("span_ids"):
        out["span_ids"] = len(params["span_ids"])
    if r is not None:
        out.update(returned=len(r.span_ids), prompt_tokens=r.prompt_tokens,
                   completion_tokens=r.completion_tokens, redactions=r.redactions)
    return out


SPEC = ToolSpec(name="local_llm_rag_query", title="Answer with the local LLM",
                fn=local_llm_rag_query, result=LocalAnswer, render=render,
                log_fields=log_fields, enabled=lambda settings: settings.local_llm)
local_llm_rag_query.__doc__ = DESCRIPTION
