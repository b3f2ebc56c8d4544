"""The query service behind ``rag_query`` (and ``rag-eval``, which must measure the same path).

Retrieval, then confidence threshold, budgets, redaction and the memo cache. Everything here takes
values and returns values; the MCP tool only validates and renders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from rag_mcp.config import Settings
from rag_mcp.errors import InvalidArgument, NotFound, Stale
from rag_mcp.reader import cap_text, read_span
from rag_mcp.redact import redact
from rag_mcp.retrieve import Filters, Hit, Retriever

MAX_K = 20
TOKEN_BYTES = 4  # the shared scorer's token estimate: ~4 characters a token
PREVIEW_CHARS = 200


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


@dataclass(frozen=True, slots=True)
class QueryHit:
    id: str
    path: str
    start_line: int
    end_line: int
    kind: str
    language: str
    symbol: str | None
    parent: str | None
    heading: str | None
    score: float
    preview: str
    text: str | None = None
    stale: bool = False
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    query: str
    hits: list[QueryHit]
    low_confidence: bool
    message: str | None
    tau: float
    returned: int
    dropped_by_tau: int
    cut_by_budget: int
    tokens_returned: int
    tokens_whole_files: int
    bytes_out: int
    redactions: int
    generation: int
    took_ms: float = 0.0
    cache_hit: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    stale_files: int | None = None


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


class QueryService:
    """Answers ``rag_query``: thread-safe, memoised per index generation."""

    def __init__(self, settings: Settings, retriever: Retriever, *,
                 freshness: Callable[[], int | None] | None = None,
                 reranker: Callable[[str, list[Hit]], list[Hit]] | None = None) -> None:
        self.s = settings
        self.retriever = retriever
        self.freshness = freshness
        self.reranker = reranker
        self._cache: TTLCache[tuple[Any, ...], QueryAnswer] | None = (
            TTLCache(maxsize=settings.cache_size, ttl=settings.cache_ttl)
            if settings.cache_size > 0 and settings.cache_ttl > 0 else None)
        self._lock = threading.Lock()
        self._generation: int | None = None
        self.cache_hits = 0
        self.cache_misses = 0

    def cache_stats(self) -> dict[str, int]:
        with self._lock:
            size = len(self._cache) if self._cache is not None else 0
        return {"entries": size, "hits": self.cache_hits, "misses": self.cache_misses,
                "query_vectors_cached": self.retriever.qvec.hits}

    def validate(self, p: QueryParams) -> QueryParams:
        q = normalize_query(p.query, self.s.max_query_chars)
        if isinstance(p.k, bool) or not isinstance(p.k, int) or not 1 <= p.k <= MAX_K:
            raise InvalidArgument(f"k must be an integer from 1 to {MAX_K}")
        if p.tau is not None and not (0.0 <= float(p.tau) <= 1.0):
            raise InvalidArgument("tau must be between 0 and 1 (or omitted for the default)")
        Filters.build(p.kind, p.path, p.language)  # raises on a bad filter
        return replace(p, query=q)

    def query(self, params: QueryParams) -> QueryAnswer:
        t0 = time.perf_counter()
        p = self.validate(params)
        filters = Filters.build(p.kind, p.path, p.language)
        gen_now = self.retriever.handle.get().generation
        key = (gen_now, p.query, p.k, p.tau, filters, p.include_text, p.rerank, p.fusion)
        with self._lock:
            if self._generation != gen_now and self._cache is not None:
                self._cache.clear()  # a new generation invalidates every memo at once
            self._generation = gen_now
            cached = self._cache.get(key) if self._cache is not None else None
            if cached is not None:
                self.cache_hits += 1
        if cached is not None:
            return replace(cached, took_ms=(time.perf_counter() - t0) * 1000, cache_hit=True,
                           stale_files=self._fresh())
        self.cache_misses += 1
        answer = self._answer(p, filters)
        if self._cache is not None:
            with self._lock:
                self._cache[key] = answer
        return replace(answer, took_ms=(time.perf_counter() - t0) * 1000,
                       stale_files=self._fresh())

    def _fresh(self) -> int | None:
        if self.freshness is None:
            return None
        try:
            return self.freshness()
        except Exception:  # freshness is informative; it must never fail a query
            return None

    def _answer(self, p: QueryParams, filters: Filters) -> QueryAnswer:
        r = self.retriever.retrieve(p.query, filters, fusion=p.fusion)
        hits = r.hits
        use_rerank = self.s.rerank if p.rerank is None else p.rerank
        if use_rerank:
            if self.reranker is None:
                raise InvalidArgument(
                    "rerank needs a cross-encoder: set query.reranker_model (RAG_RERANKER_MODEL) "
                    "to a local model folder")
            t = time.perf_counter()
            hits = self.reranker(p.query, hits[: self.s.rerank_candidates])
            r.timings["rerank_ms"] = (time.perf_counter() - t) * 1000
        tau = r.calibration.tau if p.tau is None else float(p.tau)
        wanted = hits[: p.k]
        kept = [h for h in wanted if h.score >= tau]
        dropped = len(wanted) - len(kept)
        low = False
        message = None
        if not kept and wanted:
            kept, low = wanted[:1], True
            message = (f"no span reached the confidence threshold tau={tau:.2f}; this is the best "
                       "guess. Rephrase with names from the code, or pass a lower tau.")
        elif not wanted:
            message = "nothing matched; check the filters or rephrase"
        t = time.perf_counter()
        out, cut, nbytes, nred = self._render(kept, p, r.index)
        r.timings["format_ms"] = (time.perf_counter() - t) * 1000
        if cut and message is None:
            message = (f"{cut} more hit(s) cut by the response budget "
                       f"({self.s.max_spans} spans, {self.s.max_bytes:,} bytes); "
                       "narrow the query or fetch spans with rag_get_span")
        catalog = r.index.catalog
        assert catalog is not None
        file_bytes = catalog.path_bytes(h.path for h in out)
        return QueryAnswer(
            query=p.query, hits=out, low_confidence=low, message=message, tau=tau,
            returned=len(out), dropped_by_tau=dropped, cut_by_budget=cut,
            tokens_returned=sum(h.span.byte_len for h in kept[: len(out)]) // TOKEN_BYTES,
            tokens_whole_files=sum(file_bytes.values()) // TOKEN_BYTES,
            bytes_out=nbytes, redactions=nred, generation=r.index.generation,
            timings={k: round(v, 3) for k, v in r.timings.items()},
        )

    def _render(self, kept: list[Hit], p: QueryParams, idx: Any
                ) -> tuple[list[QueryHit], int, int, int]:
        """Apply the span and byte budgets; redact previews and texts."""
        out: list[QueryHit] = []
        used = 0
        redactions = 0
        limit = min(p.k, self.s.max_spans)
        cut = max(0, len(kept) - limit)
        root = Path(self.s.root)
        for i, h in enumerate(kept[:limit]):
            sp = h.span
            preview, n1 = redact(sp.preview)  # redact the stored line whole, then shorten it
            if len(preview) > PREVIEW_CHARS:
                preview = preview[: PREVIEW_CHARS - 1] + "…"
            text: str | None = None
            stale = truncated = False
            n2 = 0
            if p.include_text:
                raw, stale = self._text(root, h, idx)
                text, counts = redact(raw)  # the whole text first, then the cap
                n2 = sum(counts.values())
                text, truncated = cap_text(text, max(256, self.s.max_bytes - used - 300))
            size = len(preview) + len(text or "") + 200  # ~200 bytes of fields per hit
            if out and used + size > self.s.max_bytes:
                cut += len(kept[:limit]) - i
                break
            used += size
            redactions += sum(n1.values()) + n2
            out.append(QueryHit(
                id=sp.id, path=sp.path, start_line=sp.start_line, end_line=sp.end_line,
                kind=sp.kind, language=sp.language, symbol=sp.symbol, parent=sp.parent,
                heading=sp.heading, score=round(h.score, 4), preview=preview, text=text,
                stale=stale, truncated=truncated))
        return out, cut, used, redactions

    def _text(self, root: Path, h: Hit, idx: Any) -> tuple[str, bool]:
        sp = h.span
        stored = idx.catalog.text(h.row.sid) or ""
        try:
            st = read_span(root, sp.path, sp.start_line, sp.end_line, sp.digest,
                           stored.split("\n", 1)[0])
            return st.text, st.stale
        except (NotFound, Stale):
            # The file moved on since indexing; the indexed text is still the best evidence.
            return stored, True

