"""``local_llm_rag_query`` in the core: retrieve (or take given spans), then ask the local model."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from rag_mcp.errors import InvalidArgument, LLMUnavailable
from rag_mcp.llm import SYSTEM_PROMPT, LocalLLM, build_prompt
from rag_mcp.search.query import QueryService
from rag_mcp.search.records import QueryParams
from rag_mcp.search.redact import redact
from rag_mcp.search.spanget import find_span

MAX_SPAN_IDS = 20
_CITE = re.compile(r"\[([^\[\]\s]+:\d+-\d+:[0-9a-f]{12})\]")


@dataclass(frozen=True, slots=True)
class LocalAnswer:
    """``local_llm_rag_query``'s result: the local model's answer and the spans it had."""

    answer: str
    model: str
    span_ids: Annotated[list[str], Field(
        description="Spans the answer cites")]
    spans_in_prompt: list[str]
    prompt_tokens: int
    completion_tokens: int
    took_ms: float
    redactions: int


def answer_locally(queries: QueryService, llm: LocalLLM | None, question: str, *, k: int = 5,
                   span_ids: list[str] | None = None, model: str | None = None,
                   max_tokens: int = 512) -> LocalAnswer:
    """Retrieve spans for ``question`` (or read ``span_ids``); ``llm`` answers from them."""
    if llm is None:
        raise LLMUnavailable("the local LLM is disabled; set RAG_LOCAL_LLM=1 to enable it")
    t0 = time.perf_counter()
    q = question.strip() if isinstance(question, str) else ""
    if not q:
        raise InvalidArgument("question is empty; ask about the code or docs in a sentence")
    max_chars = queries.s.max_query_chars
    if len(q) > max_chars:
        raise InvalidArgument(f"question is too long ({len(q):,} characters, max {max_chars:,}); "
                              "shorten it to the key names and words")
    spans: list[tuple[str, str]] = []
    redactions = 0
    if span_ids:
        if len(span_ids) > MAX_SPAN_IDS:
            raise InvalidArgument(f"at most {MAX_SPAN_IDS} span_ids; pass the ones worth reading")
        for sid in span_ids:
            r = find_span(list(queries.repos.values()), sid)  # redacted; in every served repo
            spans.append((r.id, r.text))
            redactions += r.redactions
    else:
        ans = queries.query(QueryParams(query=q, k=k, include_text=True))
        for h in ans.hits:
            if h.text is not None:
                spans.append((h.id, h.text))
        redactions += ans.redactions
    # Defence in depth: whatever path the text came by, nothing unredacted reaches the prompt.
    cleaned = []
    for sid, text in spans:
        text, counts = redact(text)
        redactions += sum(counts.values())
        cleaned.append((sid, text))
    # Retrieval ran on the question as asked (it is local); the model (perhaps remote, see
    # OLLAMA_HOST) gets it with any pasted secret masked.
    asked, counts = redact(q)
    redactions += sum(counts.values())
    user, used = build_prompt(asked, cleaned, context_tokens=llm.context_tokens,
                              max_tokens=max_tokens)
    reply = llm.chat(SYSTEM_PROMPT, user, model=model, max_tokens=max_tokens)
    answer, n = redact(reply.answer)
    redactions += sum(n.values())
    cited = [c for c in dict.fromkeys(_CITE.findall(answer)) if c in used]
    return LocalAnswer(
        answer=answer, model=reply.model, span_ids=cited or used, spans_in_prompt=used,
        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
        took_ms=round((time.perf_counter() - t0) * 1000, 1), redactions=redactions,
    )
