"""The query service behind ``rag_query`` (and ``rag-eval``, which must measure the same path).

Retrieval, then confidence threshold, budgets, redaction and the memo cache. Everything here takes
values and returns values; the MCP tool only validates and renders.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from rag_mcp.config import Settings
from rag_mcp.errors import IndexUnavailable, InvalidArgument, NotFound, Stale
from rag_mcp.index.spans import Span, digest
from rag_mcp.search.join import (
    Placed,
    best_window,
    defines,
    focus,
    head_members,
    joined_label,
    plan_joins,
)
from rag_mcp.search.links import where
from rag_mcp.search.preview import describe
from rag_mcp.search.rank import intent
from rag_mcp.search.reader import cap_text, join_parts, read_span
from rag_mcp.search.records import (
    MAX_K,
    QueryAnswer,
    QueryHit,
    QueryParams,
    normalize_query,
)
from rag_mcp.search.redact import redact, redact_id, redact_label
from rag_mcp.search.repos import Repo, select
from rag_mcp.search.retrieve import Filters, Hit, Retrieval

TOKEN_BYTES = 4  # the shared scorer's token estimate: ~4 characters a token
PREVIEW_CHARS = 200
#: the first answers, the likeliest right, come whole; code answers after them longer than
#: query.focus_lines are narrowed to it. Measured with bench.quality.answers (bge-small-en-v1.5):
#: narrowing from the third answer on cost the docstring set about 0.002 MRR@10, mostly
#: functions of over 60 lines it ranked third, which no 30-line window stands for (the kit
#: credits a range covering half the gold lines); from the fourth on, 0.0008, with SWE-bench's
#: median still 30.
WHOLE_ANSWERS = 3


@dataclass(frozen=True, slots=True)
class _Joined:
    """Adjacent hits of one file answered as one range (``rag_mcp.search.join``)."""

    span: Span  # the lead hit's record over the joined range, with that range's digest
    text: str  # read from the file when every part still matched it
    parts: tuple[str, ...]  # the indexed spans' IDs, in line order


@dataclass(frozen=True, slots=True)
class _Found:
    """A hit and where it came from (its repository and the generation it was read from)."""

    repo: Repo
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

    def __init__(self, settings: Settings, repos: Sequence[Repo]) -> None:
        if not repos:
            raise ValueError("QueryService needs at least one repository")
        self.s = settings
        self.repos = {r.name: r for r in repos}
        self._cache: TTLCache[tuple[Any, ...], QueryAnswer] | None = (
            TTLCache(maxsize=settings.cache_size, ttl=settings.cache_ttl)
            if settings.cache_size > 0 and settings.cache_ttl > 0 else None)
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self.cache_hits = 0
        self.cache_misses = 0

    def cache_stats(self) -> dict[str, int]:
        with self._lock:
            size = len(self._cache) if self._cache is not None else 0
        # the query-vector cache is shared by the repositories' retrievers (``build_deps``)
        vectors = {id(r.retriever.qvec): r.retriever.qvec for r in self.repos.values()}
        return {"entries": size, "hits": self.cache_hits, "misses": self.cache_misses,
                "query_vectors_cached": sum(q.hits for q in vectors.values())}

    def _validate(self, p: QueryParams) -> tuple[QueryParams, Filters, list[Repo]]:
        """The parameters normalised (the memo key), their filters and the repositories named."""
        q = normalize_query(p.query, self.s.max_query_chars)
        if isinstance(p.k, bool) or not isinstance(p.k, int) or not 1 <= p.k <= MAX_K:
            raise InvalidArgument(f"k must be an integer from 1 to {MAX_K}")
        if p.tau is not None and not (0.0 <= float(p.tau) <= 1.0):
            raise InvalidArgument("tau must be between 0 and 1 (or omitted for the default)")
        filters = Filters.build(p.kind, p.path, p.language)
        names = select(list(self.repos), p.repo)
        p = replace(p, query=q, repo=None if len(names) == len(self.repos) else tuple(names))
        return p, filters, [self.repos[n] for n in names]

    def query(self, params: QueryParams) -> QueryAnswer:
        t0 = time.perf_counter()
        p, filters, chosen = self._validate(params)
        live, unavailable = self._open(chosen)
        key = self._key(p, filters, live, unavailable)
        answer = self._lookup(key, live)
        cache_hit = answer is not None
        if answer is None:
            self.cache_misses += 1
            answer = self._answer(p, filters, [r for r, _ in live], unavailable)
            if self._cache is not None and not answer.unavailable:
                with self._lock:
                    self._cache[key] = answer
        return replace(answer, took_ms=round((time.perf_counter() - t0) * 1000, 2),
                       cache_hit=cache_hit, stale_files=self._fresh([r for r, _ in live]))

    @staticmethod
    def _key(p: QueryParams, filters: Filters, live: list[tuple[Repo, int]],
             unavailable: dict[str, str]) -> tuple[Any, ...]:
        return (tuple((repo.name, gen) for repo, gen in live), tuple(unavailable), p.query, p.k,
                p.tau, filters, p.include_text, p.rerank, p.fusion)

    def _lookup(self, key: tuple[Any, ...], live: list[tuple[Repo, int]]
                ) -> QueryAnswer | None:
        with self._lock:
            if self._cache is not None and any(self._generations.get(repo.name) not in (None, g)
                                               for repo, g in live):
                self._cache.clear()  # a new generation invalidates every memo at once
            self._generations.update((repo.name, g) for repo, g in live)
            cached = self._cache.get(key) if self._cache is not None else None
            if cached is not None:
                self.cache_hits += 1
        return cached

    @staticmethod
    def _open(chosen: list[Repo]) -> tuple[list[tuple[Repo, int]], dict[str, str]]:
        """The repositories with a usable index, and why the others have none. One repository
        without an index must not take the others down; with none usable the error stands."""
        live: list[tuple[Repo, int]] = []
        unavailable: dict[str, str] = {}
        first: IndexUnavailable | None = None
        for repo in chosen:
            try:
                live.append((repo, repo.retriever.handle.get().generation))
            except IndexUnavailable as exc:
                first = first or exc
                unavailable[repo.name] = exc.message
        if not live:
            assert first is not None
            if len(chosen) == 1:
                raise first
            raise IndexUnavailable("no usable index in any of "
                                   + "; ".join(f"{n}: {m}" for n, m in unavailable.items()))
        return live, unavailable

    def _fresh(self, repos: list[Repo]) -> int | None:
        # Freshness.get never waits and never raises: the count is informative
        known = [c for c in (r.freshness.get() for r in repos if r.freshness is not None)
                 if c is not None]
        return sum(known) if known else None

    def _answer(self, p: QueryParams, filters: Filters, repos: list[Repo],
                unavailable: dict[str, str]) -> QueryAnswer:
        timings: dict[str, float] = {}
        found: list[_Found] = []
        taus: list[float] = []
        retrievals: dict[str, Retrieval] = {}
        for repo in repos:
            try:
                r = repo.retriever.retrieve(p.query, filters, fusion=p.fusion)
            except IndexUnavailable as exc:  # it went away since _open: answer from the rest
                if len(repos) == 1:
                    raise
                unavailable[repo.name] = exc.message
                continue
            for name, ms in r.timings.items():
                timings[name] = timings.get(name, 0.0) + ms
            retrievals[repo.name] = r
            taus.append(r.calibration.tau if p.tau is None else float(p.tau))
            found.extend(_Found(repo, h, r) for h in r.hits)
        if len(repos) > 1:
            # Stable: equal scores keep the serving order of repositories, then each one's rank.
            found.sort(key=lambda f: -f.hit.score)
        found = self._rerank(p, found, timings)
        tau = max(taus) if taus else 0.0

        def tau_of(f: _Found) -> float:
            return f.retrieval.calibration.tau if p.tau is None else float(p.tau)

        wanted = self._join(found, p.k, tau_of, p.query)
        kept = [f for f in wanted if f.hit.score >= tau_of(f)]
        dropped = len(wanted) - len(kept)
        low = bool(wanted) and not any(
            f.hit.score >= (f.retrieval.calibration.flag_threshold if p.tau is None
                            else float(p.tau)) for f in wanted)
        notes: list[str] = []
        if low:
            prose = mostly_prose([r.index.manifest for r in retrievals.values()])
            best = max(f.hit.score for f in wanted)
            notes.append(low_confidence_note(best, tau, bool(kept), prose))
        if not kept and wanted:
            kept = wanted[:1]
        elif not wanted:
            notes.append("nothing matched; check the filters or rephrase")
        t = time.perf_counter()
        out, cut, nred = self._render(kept, p)
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
            redactions=nred, took_ms=0.0, cache_hit=False,
            index_generation=next(iter(gens.values()), 0),
            timings={k: round(v, 3) for k, v in timings.items()},
            # which generation, and which repository could not answer, when several are served
            generations=gens if len(self.repos) > 1 else None,
            unavailable=dict(unavailable) if len(self.repos) > 1 and unavailable else None,
        )

    def _join(self, found: list[_Found], k: int, tau_of: Callable[[_Found], float],
              query: str) -> list[_Found]:
        """The first ``k`` answers, adjacent hits of one file joined (``search.join``); a hit
        under tau never joins. When a part no longer matches its file, the parts stay apart.
        A code answer after the first three is narrowed to ``query.focus_lines`` when its range
        is longer, unless the question names what it defines (``_narrows``, ``join.focus``).

        The groups are planned for the most rag_query ever returns (``MAX_K``) whatever ``k``
        asks, so a smaller k is always the beginning of a larger one's answer."""
        # spans of two pages of a PDF never join: a hit cites one page
        placed = [Placed((id(f.repo), f.hit.span.path, dict(f.hit.span.meta).get("page")),
                         f.hit.span.start_line, f.hit.span.end_line, f.hit.score >= tau_of(f))
                  for f in found]
        groups = plan_joins(placed, MAX_K, gap=self.s.join_gap, max_lines=self.s.join_max_lines)
        out: list[_Found] = []
        names = intent(query).names
        taken = {found[i].hit.span.id for group in groups[:k] for i in group}
        for group in groups[:k]:
            members = [found[i] for i in group]
            narrow = len(out) >= WHOLE_ANSWERS and self._narrows(members, names)
            if narrow:  # the best span, narrowed or grown (whole when unreadable)
                joined = self._joined(members, query)
                out.append(replace(members[0], joined=joined) if joined else members[0])
                continue
            more = head_members(members[0].hit.span, max(f.hit.span.end_line for f in members),
                                names, members[0].retrieval.index.catalog, taken,
                                self.s.focus_lines)  # a type the question names: its members
            joined = self._joined(members, more=more) if len(members) > 1 or more else None
            if joined is not None:
                out.append(replace(members[0], joined=joined))
            else:
                out.extend(members)
        return out[:k]

    def _narrows(self, members: list[_Found], names: frozenset[str]) -> bool:
        """Whether a group (best first) is a code answer longer than ``query.focus_lines`` whose
        best span does not define an identifier the question names (asked for by name, a
        definition comes whole)."""
        lead = members[0].hit.span
        lines = (max(f.hit.span.end_line for f in members)
                 - min(f.hit.span.start_line for f in members) + 1)
        return (0 < self.s.focus_lines < lines and lead.kind == "code"
                and not defines(lead.symbol, names))

    def _joined(self, members: list[_Found], focus_on: str | None = None,
                more: Sequence[Span] = ()) -> _Joined | None:
        """The range covering ``members`` (best first) and the spans in ``more``, read from the
        file now; ``focus_on`` (the query) narrows it to ``query.focus_lines`` lines
        (``join.focus``)."""
        lead = members[0]
        parts = [f.hit.span for f in members] + list(more)
        start, end = min(sp.start_line for sp in parts), max(sp.end_line for sp in parts)
        width = self.s.focus_lines
        if focus_on is not None:
            start, end = focus([Placed(None, f.hit.span.start_line, f.hit.span.end_line)
                                for f in members], gap=self.s.join_gap, max_lines=width)
        spans = sorted((sp for sp in parts if sp.start_line <= end and sp.end_line >= start),
                       key=lambda sp: sp.start_line)
        got = join_parts(lead.repo.root, lead.hit.span.path,
                         [(sp.start_line, sp.end_line, sp.digest) for sp in spans],
                         max_bytes=self.s.max_file_bytes)
        if got is None:
            return None
        first, _, text = got
        lines = text.split("\n")[start - first:end - first + 1]
        if focus_on is not None and len(lines) > width:  # the best span alone is longer
            at = best_window(lines, focus_on, width)
            lines = lines[at:at + width]
            start += at
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        while len(lines) > 1 and not lines[0].strip():
            lines.pop(0)
            start += 1
        end = start + len(lines) - 1
        text = "\n".join(lines)
        if focus_on is not None and (start, end) == (lead.hit.span.start_line,
                                                     lead.hit.span.end_line):
            return None  # the best span, whole: answered as itself
        spans = [sp for sp in spans if sp.start_line <= end and sp.end_line >= start]
        first_label = [lead.hit.span] if lead.hit.span in spans else []
        parents = {sp.parent for sp in spans}
        span = replace(lead.hit.span, start_line=start, end_line=end, digest=digest(text),
                       byte_len=len(text.encode("utf-8", "surrogatepass")),
                       symbol=joined_label([sp.symbol for sp in [*first_label, *spans]], ", "),
                       heading=joined_label([sp.heading for sp in [*first_label, *spans]],
                                            "; "),
                       parent=lead.hit.span.parent if len(parents) == 1 else None)
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
        for repo in dict.fromkeys(f.repo for f in top) or self.repos.values():
            if repo.reranker is None:
                raise InvalidArgument(
                    "rerank needs a cross-encoder: set query.reranker_model (RAG_RERANKER_MODEL) "
                    "to a local model folder")
            slots = [i for i, f in enumerate(top) if f.repo is repo]
            mine = {id(top[i].hit): top[i] for i in slots}
            ranked = repo.reranker(p.query, [top[i].hit for i in slots])
            for i, h in zip(slots, ranked, strict=True):
                top[i] = mine[id(h)]
        timings["rerank_ms"] = (time.perf_counter() - t) * 1000
        return top  # as before several repositories: only the reranked candidates compete

    def _render(self, kept: list[_Found], p: QueryParams
                ) -> tuple[list[QueryHit], int, int]:
        """Apply the span and byte budgets; redact previews and texts."""
        out: list[QueryHit] = []
        used = 0
        redactions = 0
        limit = min(p.k, self.s.max_spans)
        cut = max(0, len(kept) - limit)
        for i, f in enumerate(kept[:limit]):
            h = f.hit
            sp = f.span
            preview, n1 = redact(self._preview(f))  # redact the line whole, then shorten it
            if len(preview) > PREVIEW_CHARS:
                preview = preview[: PREVIEW_CHARS - 1] + "…"
            text: str | None = None
            stale = truncated = False
            n2 = 0
            if p.include_text:
                raw, stale = ((f.joined.text, False) if f.joined is not None
                              else self._text(f.repo.root, h, f.retrieval.index))
                text, counts = redact(raw)  # the whole text first, then the cap
                n2 = sum(counts.values())
                text, truncated = cap_text(text, max(256, self.s.max_bytes - used - 300))
            size = len(preview) + len(text or "") + 200  # ~200 bytes of fields per hit
            if out and used + size > self.s.max_bytes:
                cut += len(kept[:limit]) - i
                break
            used += size
            redactions += sum(n1.values()) + n2
            at = where(f.repo.settings, sp)
            out.append(QueryHit(  # a secret in a file name is masked in IDs and paths too
                id=redact_id(sp.id), path=redact_label(sp.path) or sp.path,
                start_line=sp.start_line, end_line=sp.end_line,
                kind=sp.kind, language=sp.language, symbol=redact_label(sp.symbol),
                parent=redact_label(sp.parent), heading=redact_label(sp.heading),
                score=round(h.score, 4), preview=preview, text=text,
                stale=stale, truncated=truncated, repo=f.repo.name,
                parts=tuple(map(redact_id, f.joined.parts)) if f.joined is not None else None,
                page_id=at.page_id, anchor=at.anchor, page=at.page, url=at.url))
        return out, cut, redactions

    @staticmethod
    def _preview(f: _Found) -> str:
        """What the hit is (``search.preview``), from its best span's stored text."""
        catalog = f.retrieval.index.catalog
        stored = catalog.text(f.hit.row.sid) if catalog is not None else None
        return describe(f.hit.span, stored)

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


def mostly_prose(manifests: Sequence[dict[str, Any]]) -> bool:
    """Whether the searched indexes hold more documentation and text spans than code spans."""
    prose = code = 0
    for m in manifests:
        for kind, n in (m.get("by_kind") or {}).items():
            if kind in ("doc", "text"):
                prose += int(n)
            else:
                code += int(n)
    return prose > code


def low_confidence_note(best: float, tau: float, reached_tau: bool, prose: bool) -> str:
    """The note of a low-confidence answer, with advice that fits the corpus: names from the code
    for a code repository, the pages' own words for a wiki or documentation."""
    advice = ("Rephrase with words the pages use (a page title, a section heading, a term they "
              "define)" if prose else
              "Rephrase with names from the code (a function, class or file name)")
    if not reached_tau:
        return (f"no span reached the confidence threshold tau={tau:.2f}; this is the best "
                f"guess. {advice}, or pass a lower tau.")
    return (f"low confidence: the best hit scores {best:.3f}, under this model's bar; this "
            "corpus may not answer the question (its words are rare or absent here). "
            f"{advice}, or check the hits before relying on them.")
