"""``local_llm_rag_query`` in the core: retrieve (or take given spans), then ask the local model."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rag_mcp.deps import Deps
from rag_mcp.errors import InvalidArgument, LLMUnavailable, RagError
from rag_mcp.llm import SYSTEM_PROMPT, build_prompt
from rag_mcp.search.query import QueryParams
from rag_mcp.search.redact import redact

MAX_SPAN_IDS = 20
_CITE = re.compile(r"\[([^\[\]\s]+:\d+-\d+:[0-9a-f]{12})\]")


@dataclass(frozen=True, slots=True)
class LocalAnswer:
    answer: str
    model: str
    span_ids: list[str]  # cited by the answer (or all given to the model, if it cited none)
    spans_in_prompt: list[str]
    prompt_tokens: int
    completion_tokens: int
    took_ms: float
    llm_ms: float
    redactions: int


def answer_locally(deps: Deps, question: str, *, k: int = 5, span_ids: list[str] | None = None,
                   model: str | None = None, max_tokens: int = 512) -> LocalAnswer:
    if deps.llm is None:
        raise LLMUnavailable("the local LLM is disabled; set RAG_LOCAL_LLM=1 to enable it")
    t0 = time.perf_counter()
    q = question.strip() if isinstance(question, str) else ""
    if not q:
        raise InvalidArgument("question is empty")
    if len(q) > deps.settings.max_query_chars:
        raise InvalidArgument(f"question is too long (max {deps.settings.max_query_chars:,} "
                              "characters)")
    spans: list[tuple[str, str]] = []
    redactions = 0
    if span_ids:
        if len(span_ids) > MAX_SPAN_IDS:
            raise InvalidArgument(f"at most {MAX_SPAN_IDS} span_ids")
        for sid in span_ids:
            _, r = deps.find_span(sid)  # redacted already; looked up in every served repo
            spans.append((r.id, r.text))
            redactions += r.redactions
    else:
        ans = deps.queries.query(QueryParams(query=q, k=k, include_text=True))
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
    user, used = build_prompt(asked, cleaned, context_tokens=deps.llm.context_tokens,
                              max_tokens=max_tokens)
    try:
        reply = deps.llm.chat(SYSTEM_PROMPT, user, model=model, max_tokens=max_tokens)
    except RagError:
        raise
    answer, n = redact(reply.answer)
    redactions += sum(n.values())
    cited = [c for c in dict.fromkeys(_CITE.findall(answer)) if c in used]
    return LocalAnswer(
        answer=answer, model=reply.model, span_ids=cited or used, spans_in_prompt=used,
        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
        took_ms=(time.perf_counter() - t0) * 1000, llm_ms=reply.took_ms, redactions=redactions,
    )
