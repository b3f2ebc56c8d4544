"""The query service behind ``rag_query`` (and ``rag-eval``, which must measure the same path).

Retrieval, then confidence threshold, budgets, redaction and the memo cache. Everything here takes
values and returns values; the MCP tool only validates and renders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from rag_mcp.config import Settings
from rag_mcp.errors import IndexUnavailable, InvalidArgument, NotFound, Stale
from rag_mcp.index.spans import Span, digest
from rag_mcp.search.join import Placed, plan_joins
from rag_mcp.search.reader import cap_text, join_parts, read_span
from rag_mcp.search.redact import redact, redact_label
from rag_mcp.search.repos import select
from rag_mcp.search.retrieve import Filters, Hit, Retrieval, Retriever

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
    #: one repository name or several; None searches every served repository
    repo: str | tuple[str, ...] | None = None


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
    repo: str = ""
    #: the indexed spans a joined hit covers (None: the hit is one indexed span)
    parts: tuple[str, ...] | None = None


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
    #: the generation each searched repository answered from
    generations: dict[str, int] = field(default_factory=dict)
    #: served repositories that were asked but have no usable index, with the reason
    unavailable: dict[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class Source:
    """One repository the service searches: its name, root and retriever."""

    name: str
    root: Path
    retriever: Retriever
    freshness: Callable[[], int | None] | None = None
    reranker: Callable[[str, list[Hit]], list[Hit]] | None = None


@dataclass(frozen=True, slots=True)
class _Joined:
    """Adjacent hits of one file answered as one range (``rag_mcp.search.join``)."""

    span: Span  # the lead hit's record over the joined range, with that range's digest
    text: str  # read from the file when every part still matched it
    parts: tuple[str, ...]  # the indexed spans' IDs, in line order


@dataclass(frozen=True, slots=True)
class _Found:
    """A hit and where it came from (its repository and the generation it was read from)."""

    source: Source
    hit: Hit
    retrieval: Retrieval
    joined: _Joined | None = None

    @property
    def span(self) -> Span:
        return self.joined.span if self.joined is not None else self.hit.span


class QueryService:
    """Answers ``rag_query`` over one or several repositories: thread-safe, memoised per index
    generation. Several repositories are searched one after the other and their hits merged by
    the calibrated score, which means the same in every index built with the same model."""

    def __init__(self, settings: Settings, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("QueryService needs at least one repository")
        self.s = settings
        self.sources = {src.name: src for src in sources}
        self._cache: TTLCache[tuple[Any, ...], QueryAnswer] | None = (
            TTLCache(maxsize=settings.cache_size, ttl=settings.cache_ttl)
            if settings.cache_size > 0 and settings.cache_ttl > 0 else None)
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self.cache_hits = 0
        self.cache_misses = 0

    @property
    def retriever(self) -> Retriever:
        """The first repository's retriever (the only one by default)."""
        return next(iter(self.sources.values())).retriever

    @property
    def reranker(self) -> Callable[[str, list[Hit]], list[Hit]] | None:
        return next(iter(self.sources.values())).reranker

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
        repo = select(list(self.sources), p.repo)
        return replace(p, query=q, repo=None if len(repo) == len(self.sources) else tuple(repo))

    def query(self, params: QueryParams) -> QueryAnswer:
        t0 = time.perf_counter()
        p = self.validate(params)
        filters = Filters.build(p.kind, p.path, p.language)
        chosen = [self.sources[n] for n in select(list(self.sources), p.repo)]
        live, unavailable = self._open(chosen)
        key = self._key(p, filters, live, unavailable)
        cached = self._lookup(key, live)
        if cached is not None:
            return self._hit(cached, live, t0)
        self.cache_misses += 1
        answer = self._answer(p, filters, [s for s, _ in live], unavailable)
        if self._cache is not None and not answer.unavailable:
            with self._lock:
                self._cache[key] = answer
        return replace(answer, took_ms=(time.perf_counter() - t0) * 1000,
                       stale_files=self._fresh([s for s, _ in live]))

    def cached(self, params: QueryParams) -> QueryAnswer | None:
        """The memoised answer when there is one for the open generations, else None; never
        opens an index, reads a file or runs the model, so the server can answer a repeated
        question on its event loop. Invalid parameters raise as in ``query``."""
        if self._cache is None:
            return None
        t0 = time.perf_counter()
        p = self.validate(params)
        filters = Filters.build(p.kind, p.path, p.language)
        live: list[tuple[Source, int]] = []
        for name in select(list(self.sources), p.repo):
            idx = self.sources[name].retriever.handle.current()
            if idx is None:  # not open yet, failing, or a newer generation to open
                return None
            live.append((self.sources[name], idx.generation))
        cached = self._lookup(self._key(p, filters, live, {}), live)
        return None if cached is None else self._hit(cached, live, t0)

    @staticmethod
    def _key(p: QueryParams, filters: Filters, live: list[tuple[Source, int]],
             unavailable: dict[str, str]) -> tuple[Any, ...]:
        return (tuple((src.name, gen) for src, gen in live), tuple(unavailable), p.query, p.k,
                p.tau, filters, p.include_text, p.rerank, p.fusion)

    def _lookup(self, key: tuple[Any, ...], live: list[tuple[Source, int]]
                ) -> QueryAnswer | None:
        with self._lock:
            if self._cache is not None and any(self._generations.get(src.name) not in (None, g)
                                               for src, g in live):
                self._cache.clear()  # a new generation invalidates every memo at once
            self._generations.update((src.name, g) for src, g in live)
            cached = self._cache.get(key) if self._cache is not None else None
            if cached is not None:
                self.cache_hits += 1
        return cached

    def _hit(self, cached: QueryAnswer, live: list[tuple[Source, int]], t0: float
             ) -> QueryAnswer:
        return replace(cached, took_ms=(time.perf_counter() - t0) * 1000, cache_hit=True,
                       stale_files=self._fresh([s for s, _ in live]))

    @staticmethod
    def _open(chosen: list[Source]) -> tuple[list[tuple[Source, int]], dict[str, str]]:
        """The repositories with a usable index, and why the others have none. One repository
        without an index must not take the others down; with none usable the error stands."""
        live: list[tuple[Source, int]] = []
        unavailable: dict[str, str] = {}
        first: IndexUnavailable | None = None
        for src in chosen:
            try:
                live.append((src, src.retriever.handle.get().generation))
            except IndexUnavailable as exc:
                first = first or exc
                unavailable[src.name] = exc.message
        if not live:
            assert first is not None
            if len(chosen) == 1:
                raise first
            raise IndexUnavailable("no usable index in any of "
                                   + "; ".join(f"{n}: {m}" for n, m in unavailable.items()))
        return live, unavailable

    def _fresh(self, sources: list[Source]) -> int | None:
        counts = []
        for src in sources:
            if src.freshness is None:
                continue
            try:
                counts.append(src.freshness())
            except Exception:  # freshness is informative; it must never fail a query
                continue
        known = [c for c in counts if c is not None]
        return sum(known) if known else None

    def _answer(self, p: QueryParams, filters: Filters, sources: list[Source],
                unavailable: dict[str, str]) -> QueryAnswer:
        timings: dict[str, float] = {}
        found: list[_Found] = []
        taus: list[float] = []
        retrievals: dict[str, Retrieval] = {}
        for src in sources:
            try:
                r = src.retriever.retrieve(p.query, filters, fusion=p.fusion)
            except IndexUnavailable as exc:  # it went away since _open: answer from the rest
                if len(sources) == 1:
                    raise
                unavailable[src.name] = exc.message
                continue
            for name, ms in r.timings.items():
                timings[name] = timings.get(name, 0.0) + ms
            retrievals[src.name] = r
            taus.append(r.calibration.tau if p.tau is None else float(p.tau))
            found.extend(_Found(src, h, r) for h in r.hits)
        if len(sources) > 1:
            # Stable: equal scores keep the serving order of repositories, then each one's rank.
            found.sort(key=lambda f: -f.hit.score)
        found = self._rerank(p, found, timings)
        tau = max(taus) if taus else 0.0

        def tau_of(f: _Found) -> float:
            return f.retrieval.calibration.tau if p.tau is None else float(p.tau)

        wanted = self._join(found, p.k, tau_of)
        kept = [f for f in wanted if f.hit.score >= tau_of(f)]
        dropped = len(wanted) - len(kept)
        low = False
        notes: list[str] = []
        if not kept and wanted:
            kept, low = wanted[:1], True
            notes.append(f"no span reached the confidence threshold tau={tau:.2f}; this is the "
                         "best guess. Rephrase with names from the code, or pass a lower tau.")
        elif not wanted:
            notes.append("nothing matched; check the filters or rephrase")
        t = time.perf_counter()
        out, cut, nbytes, nred = self._render(kept, p)
        timings["format_ms"] = (time.perf_counter() - t) * 1000
        if cut and not notes:
            notes.append(f"{cut} more hit(s) cut by the response budget "
                         f"({self.s.max_spans} spans, {self.s.max_bytes:,} bytes); "
                         "narrow the query or fetch spans with rag_get_span")
        if unavailable:
            notes.append("not searched, no usable index: " + ", ".join(unavailable)
                         + "; see rag_health")
        whole = 0
        for name, r in retrievals.items():
            mine = [h.path for h in out if h.repo == name]
            if mine and r.index.catalog is not None:
                whole += sum(r.index.catalog.path_bytes(mine).values())
        gens = {name: r.index.generation for name, r in retrievals.items()}
        return QueryAnswer(
            query=p.query, hits=out, low_confidence=low,
            message="; ".join(notes) if notes else None, tau=tau,
            returned=len(out), dropped_by_tau=dropped, cut_by_budget=cut,
            tokens_returned=sum(f.span.byte_len for f in kept[: len(out)]) // TOKEN_BYTES,
            tokens_whole_files=whole // TOKEN_BYTES,
            bytes_out=nbytes, redactions=nred, generation=next(iter(gens.values()), 0),
            timings={k: round(v, 3) for k, v in timings.items()},
            generations=gens, unavailable=dict(unavailable),
        )

    def _join(self, found: list[_Found], k: int, tau_of: Callable[[_Found], float]
              ) -> list[_Found]:
        """The first ``k`` answers, adjacent hits of one file joined (``search.join``); a hit
        under tau never joins. When a part no longer matches its file, the parts stay apart.

        The groups are planned for the most rag_query ever returns (``MAX_K``) whatever ``k``
        asks, so a smaller k is always the beginning of a larger one's answer."""
        placed = [Placed((id(f.source), f.hit.span.path), f.hit.span.start_line,
                         f.hit.span.end_line, f.hit.score >= tau_of(f)) for f in found]
        groups = plan_joins(placed, MAX_K, gap=self.s.join_gap, max_lines=self.s.join_max_lines)
        out: list[_Found] = []
        for group in groups[:k]:
            members = [found[i] for i in group]
            joined = self._joined(members) if len(members) > 1 else None
            if joined is not None:
                out.append(replace(members[0], joined=joined))
            else:
                out.extend(members)
        return out[:k]

    def _joined(self, members: list[_Found]) -> _Joined | None:
        lead = members[0]
        spans = sorted((f.hit.span for f in members), key=lambda sp: sp.start_line)
        got = join_parts(lead.source.root, lead.hit.span.path,
                         [(sp.start_line, sp.end_line, sp.digest) for sp in spans],
                         max_bytes=self.s.max_file_bytes)
        if got is None:
            return None
        start, end, text = got
        span = replace(lead.hit.span, start_line=start, end_line=end, digest=digest(text),
                       byte_len=len(text.encode("utf-8", "surrogatepass")))
        return _Joined(span, text, tuple(sp.id for sp in spans))

    def _rerank(self, p: QueryParams, found: list[_Found], timings: dict[str, float]
                ) -> list[_Found]:
        """Let each repository's cross-encoder reorder its own hits among the top candidates;
        where the repositories interleave stays decided by the calibrated score."""
        use_rerank = self.s.rerank if p.rerank is None else p.rerank
        if not use_rerank:
            return found
        top = found[: self.s.rerank_candidates]
        t = time.perf_counter()
        for src in dict.fromkeys(f.source for f in top) or self.sources.values():
            if src.reranker is None:
                raise InvalidArgument(
                    "rerank needs a cross-encoder: set query.reranker_model (RAG_RERANKER_MODEL) "
                    "to a local model folder")
            slots = [i for i, f in enumerate(top) if f.source is src]
            mine = {id(top[i].hit): top[i] for i in slots}
            ranked = src.reranker(p.query, [top[i].hit for i in slots])
            for i, h in zip(slots, ranked, strict=True):
                top[i] = mine[id(h)]
        timings["rerank_ms"] = (time.perf_counter() - t) * 1000
        return top  # as before several repositories: only the reranked candidates compete

    def _render(self, kept: list[_Found], p: QueryParams
                ) -> tuple[list[QueryHit], int, int, int]:
        """Apply the span and byte budgets; redact previews and texts."""
        out: list[QueryHit] = []
        used = 0
        redactions = 0
        limit = min(p.k, self.s.max_spans)
        cut = max(0, len(kept) - limit)
        for i, f in enumerate(kept[:limit]):
            h = f.hit
            sp = f.span
            preview, n1 = redact(sp.preview)  # redact the stored line whole, then shorten it
            if len(preview) > PREVIEW_CHARS:
                preview = preview[: PREVIEW_CHARS - 1] + "…"
            text: str | None = None
            stale = truncated = False
            n2 = 0
            if p.include_text:
                raw, stale = ((f.joined.text, False) if f.joined is not None
                              else self._text(f.source.root, h, f.retrieval.index))
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
                kind=sp.kind, language=sp.language, symbol=redact_label(sp.symbol),
                parent=redact_label(sp.parent), heading=redact_label(sp.heading),
                score=round(h.score, 4), preview=preview, text=text,
                stale=stale, truncated=truncated, repo=f.source.name,
                parts=f.joined.parts if f.joined is not None else None))
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
