"""Hybrid retrieval: dense (Chroma) and lexical (tantivy) candidates, fused and filtered.

Filters are applied to an over-fetched candidate pool from our own catalog rather than as a Chroma
``where`` clause (50-100 ms measured against ~5 ms unfiltered); when a filter is selective the
pool is widened once. Timings of every stage are returned so the server can report its split.
"""

from __future__ import annotations

import fnmatch
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rag_mcp.embed import Embedder
from rag_mcp.errors import IndexUnavailable, InvalidArgument
from rag_mcp.index.catalog import SpanRow
from rag_mcp.index.handle import IndexHandle, OpenIndex, index_command
from rag_mcp.index.lexical import BM25_K1, LexicalIndex, tokenize
from rag_mcp.index.spans import TEST_WORDS, Span, is_test_code, query_embedding_text
from rag_mcp.search.fusion import (
    FUSIONS,
    Calibration,
    calibration_for,
    coverage_shift,
    fuse,
    lexical_trust,
    rrf,
    shift_score,
)
from rag_mcp.search.pages import with_page_evidence
from rag_mcp.search.rank import ranked

LANGUAGE_ALIASES = {
    "py": "python", "js": "javascript", "ts": "typescript", "md": "markdown", "c#": "c_sharp",
    "cs": "c_sharp", "csharp": "c_sharp", "c++": "cpp", "cxx": "cpp", "sh": "bash",
    "shell": "bash", "rb": "ruby", "rs": "rust", "golang": "go", "jsx": "javascript",
    "yml": "yaml", "restructuredtext": "rst", "wiki": "dokuwiki", "txt": "text",
}
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True, slots=True)
class Filters:
    kind: str = "any"
    path: str | None = None
    language: str | None = None

    @staticmethod
    def build(kind: str = "any", path: str | None = None,
              language: str | None = None) -> Filters:
        kind = (kind or "any").lower()
        if kind not in ("any", "code", "doc", "text"):
            raise InvalidArgument(f"kind must be code, doc or any, got {kind!r}")
        if path is not None:
            path = path.strip().replace("\\", "/")
            if not path or path in (".", "./", "*", "**", "**/*"):
                path = None
            elif path.startswith("/") or re.match(r"^[A-Za-z]:", path) or ".." in path.split("/"):
                raise InvalidArgument(
                    "path must be a glob or prefix relative to the repository root "
                    "(no '..', no absolute paths), e.g. 'src/' or '**/*.py'")
            elif "\x00" in path or len(path) > 512:
                raise InvalidArgument("path filter is malformed")
            else:
                path = path.removeprefix("./")
        if language:
            language = language.strip().lower()
            language = LANGUAGE_ALIASES.get(language, language)
        return Filters(kind, path, language or None)

    @property
    def active(self) -> bool:
        return self.kind != "any" or self.path is not None or self.language is not None

    def matches(self, span: Span) -> bool:
        if self.kind == "code" and span.kind != "code":
            return False
        if self.kind in ("doc", "text") and span.kind not in ("doc", "text"):
            return False
        if self.language is not None and span.language != self.language:
            return False
        if self.path is not None:
            p = self.path
            if _GLOB.search(p):
                if not (fnmatch.fnmatchcase(span.path, p)
                        or (p.startswith("**/") and fnmatch.fnmatchcase(span.path, p[3:]))):
                    return False
            elif not (span.path == p.rstrip("/") or span.path.startswith(p.rstrip("/") + "/")):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Hit:
    row: SpanRow
    score: float  # calibrated, in [0, 1]: the default fusion's, whatever orders the hits
    raw: float  # what orders the hits (the chosen fusion's own scale)
    cos: float
    lex: float  # BM25 over its upper bound for the query, in [0, 1]
    dense_rank: int | None
    lex_rank: int | None
    bm25: float = 0.0  # the span's raw BM25 (0 beyond the lexical leg's deeper lookup)

    @property
    def span(self) -> Span:
        return self.row.span


@dataclass
class Retrieval:
    hits: list[Hit]
    index: OpenIndex
    calibration: Calibration
    timings: dict[str, float] = field(default_factory=dict)
    #: the share of the query's lexical information the corpus has (``lexical_coverage``)
    coverage: float = 1.0


class QueryVectors:
    """Query embeddings, cached by (model, text); the server asks the same thing often."""

    def __init__(self, size: int = 2048) -> None:
        self._lru: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, embedder: Embedder, text: str) -> np.ndarray:
        key = (f"{embedder.name}/{embedder.backend}", text)
        with self._lock:
            vec = self._lru.get(key)
            if vec is not None:
                self._lru.move_to_end(key)
                self.hits += 1
                return vec
        vec = embedder.embed_query(query_embedding_text(text))
        with self._lock:
            self.misses += 1
            self._lru[key] = vec
            if len(self._lru) > self._size:
                self._lru.popitem(last=False)
        return vec

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()


class Retriever:
    """Turns a query into fused, filtered hits over the current index generation."""

    #: candidates from each leg (x4 under a filter); between 20 and 100 MRR@10 moved by at most
    #: 0.02 on the evaluation sets (docs/RETRIEVAL.md, "Ablations"): headroom, not a tuned value
    POOL = 50
    #: BM25 is read this many times deeper than the pool, so that a dense candidate the lexical
    #: top list just missed gets its own BM25 instead of 0: the fusion compares like with like,
    #: as the exact cosine of lexical-only candidates does (CoSQA +0.011 MRR@10; < 1 ms a query)
    LEX_LOOKUP = 4

    def __init__(self, handle: IndexHandle, embedder_for: Callable[[dict[str, Any]], Embedder],
                 *, query_vectors: QueryVectors | None = None) -> None:
        self.handle = handle
        self.embedder_for = embedder_for
        self.qvec = query_vectors or QueryVectors()

    def calibration(self, idx: OpenIndex) -> Calibration:
        """The model's calibration, with the user's query.tau (RAG_TAU) when it is not "auto"."""
        cal = calibration_for(str(idx.manifest.get("model", "")))
        tau = getattr(self.handle.settings, "tau", None)
        return cal if tau is None else replace(cal, tau=float(tau))

    def retrieve(self, text: str, filters: Filters, *, fusion: str = "convex",
                 pool: int | None = None) -> Retrieval:
        if fusion not in FUSIONS:
            raise InvalidArgument(f"fusion must be one of {', '.join(FUSIONS)}")
        idx = self.handle.get()
        assert idx.catalog is not None and idx.vectors is not None
        cal = self.calibration(idx)
        timings: dict[str, float] = {}
        n = pool or self.POOL
        if filters.active:
            n *= 4
        t0 = time.perf_counter()
        dense: list[tuple[str, float]] = []
        qv: np.ndarray | None = None
        if fusion != "lexical":
            qv = self.qvec.get(self.embedder_for(idx.manifest), text)
            timings["embed_ms"] = (time.perf_counter() - t0) * 1000
            t1 = time.perf_counter()
            dense = idx.vectors.query(qv, n)
            if not all(math.isfinite(sc) for _, sc in dense):
                # NaN vectors in the store: a damaged generation, not a client-side schema error
                raise IndexUnavailable(
                    f"generation {idx.generation} is damaged: its vectors hold non-numbers; "
                    f"rebuild it with `{index_command(self.handle.settings, rebuild=True)}`")
            timings["dense_ms"] = (time.perf_counter() - t1) * 1000
        t2 = time.perf_counter()
        lexical: list[tuple[int, float]] = []
        bound = 0.0
        tokens = tokenize(text)
        if fusion != "dense":
            lexical = idx.lexical.search(tokens, n * self.LEX_LOOKUP)
            bound = idx.lexical.upper_bound(tokens) if lexical else 0.0
        timings["lexical_ms"] = (time.perf_counter() - t2) * 1000

        t3 = time.perf_counter()
        n_terms = len(set(tokens))
        # a path filter chose the files to search: tests there are what was asked for
        penalty = 0.0 if filters.path is not None else self.test_penalty(tokens, n_terms, cal)
        trust = lexical_trust(known_share(idx.lexical, tokens))
        hits = self._fuse(idx, qv, dense, lexical, n, bound, n_terms, filters, fusion, cal,
                          penalty, trust)
        coverage = lexical_coverage(idx.lexical, tokens) if tokens else 1.0
        if fusion == "convex":
            # words the corpus lacks (a question in another language) count as unmatched, and
            # a query whose words the index mostly lacks leaves the pages' BM25 unread as well
            hits = with_page_evidence(hits, idx, tokens, cal.page * coverage * trust)
        hits = with_coverage(hits, cal, coverage)
        s = self.handle.settings
        if fusion == "convex" and s.rank:
            # order only, after the fusion (rag_mcp/search/rank.py); several repositories'
            # hits are still merged by their calibrated scores (QueryService)
            hits = ranked(text, hits, gap=s.join_gap, max_lines=s.join_max_lines,
                          terms=cal.terms)
        timings["fusion_ms"] = (time.perf_counter() - t3) * 1000
        return Retrieval(hits, idx, cal, timings, coverage)

    def test_penalty(self, tokens: list[str], n_terms: int, cal: Calibration) -> float:
        """``query.test_penalty``, or 0 for a question-sized query that mentions tests (an
        issue-sized one says "test" in passing: it still wants the code under test)."""
        penalty = self.handle.settings.test_penalty
        if penalty and n_terms <= cal.terms and not TEST_WORDS.isdisjoint(tokens):
            return 0.0
        return penalty

    def _fuse(self, idx: OpenIndex, qv: np.ndarray | None, dense: list[tuple[str, float]],
              lexical: list[tuple[int, float]], n: int, bound: float, n_terms: int,
              filters: Filters, fusion: str, cal: Calibration, test_penalty: float = 0.0,
              trust: float = 1.0) -> list[Hit]:
        """Fuse the dense top list with the first ``n`` of ``lexical`` (read deeper, for the BM25
        of dense candidates); code spans of test files lose ``test_penalty`` (convex only);
        ``trust`` is the lexical leg's share of its weight (``fusion.lexical_trust``)."""
        catalog = idx.catalog
        assert catalog is not None and idx.vectors is not None
        deep = dict(lexical)
        lexical = lexical[:n]
        by_key = catalog.by_emb_keys([k for k, _ in dense]) if dense else {}
        by_sid = catalog.by_sids([s for s, _ in lexical]) if lexical else {}
        cands: dict[int, SpanRow] = {}
        cos: dict[int, float] = {}
        d_rank: dict[int, int] = {}
        for rank, (key, sim) in enumerate(dense):
            for row in by_key.get(key, ()):
                if filters.matches(row.span):
                    cands.setdefault(row.sid, row)
                    cos[row.sid] = sim
                    d_rank.setdefault(row.sid, rank)
        l_rank: dict[int, int] = {}
        for rank, (sid, _) in enumerate(lexical):
            lrow = by_sid.get(sid)
            if lrow is None or not filters.matches(lrow.span):
                continue
            cands.setdefault(sid, lrow)
            l_rank[sid] = rank
        missing = [sid for sid in cands if sid not in cos]
        if missing and qv is not None:
            # Exact cosine for lexical-only candidates, so the fusion compares like with like.
            vecs = idx.vectors.vectors(list({cands[s].emb_key for s in missing}))
            for sid in missing:
                v = vecs.get(cands[sid].emb_key)
                cos[sid] = float(np.dot(v, qv)) if v is not None else 0.0
        best_cos = max(cos.values(), default=0.0)
        hits: list[Hit] = []
        for sid, row in cands.items():
            c, bm = cos.get(sid, 0.0), deep.get(sid, 0.0)
            lx = min(1.0, bm / bound) if bound > 0 else 0.0
            dr, lr = d_rank.get(sid), l_rank.get(sid)
            prior = -test_penalty if test_penalty and row.span.kind == "code" \
                and is_test_code(row.span.path, row.span.symbol) else 0.0
            raw, score = fuse(c, lx, cal, n_terms, best_cos, row.span.kind, prior, trust)
            if fusion == "rrf":
                raw = rrf(dr, lr)
            elif fusion == "dense":
                raw = c
            elif fusion == "lexical":
                raw = bm
            hits.append(Hit(row, score, raw, c, lx, dr, lr, bm))
        hits.sort(key=lambda h: (-h.raw, h.span.path, h.span.start_line))
        return hits


def _absent(lexical: LexicalIndex, terms: list[str]) -> int:
    """How many of ``terms`` occur nowhere in the lexical index."""
    return sum(1 for t in terms if lexical.upper_bound([t]) == 0.0)


def known_share(lexical: LexicalIndex, tokens: list[str]) -> float:
    """The share of the query's distinct terms that occur in the lexical index (1 without
    terms: nothing to distrust)."""
    terms = list(dict.fromkeys(tokens))
    if not terms:
        return 1.0
    return (len(terms) - _absent(lexical, terms)) / len(terms)


def lexical_coverage(lexical: LexicalIndex, tokens: list[str]) -> float:
    """How much of the query's lexical information the corpus has, in (0, 1].

    BM25's bound for the query's terms that occur in the corpus, over that bound plus, for each
    term that occurs nowhere, the bound of the rarest term the corpus could hold (in one span of
    its N: idf ``ln(1 + (N + 0.5) / 0.5)``, in the body and the name field). A question the
    corpus can answer uses its words (the kit's on-topic questions: none absent on the docs set,
    at most a third on the code sets, 95th percentile); a question it cannot answer is mostly
    words it lacks, whatever frame ("how do I", "what is the") the corpus happens to share."""
    terms = list(dict.fromkeys(tokens))
    present = lexical.upper_bound(terms)
    absent = _absent(lexical, terms)
    if not absent:
        return 1.0
    n = lexical.num_docs()
    rarest = (1.0 + lexical.NAME_BOOST) * math.log(1.0 + (n + 0.5) / 0.5) * (BM25_K1 + 1.0)
    return present / (present + absent * rarest)


def with_coverage(hits: list[Hit], cal: Calibration, coverage: float) -> list[Hit]:
    """The hits with the query's coverage in their scores (``fusion.coverage_shift``); one shift
    for every hit of the query, so their order stays."""
    shift = coverage_shift(cal, coverage)
    if shift == 0.0:
        return hits
    return [replace(h, score=shift_score(h.score, shift)) for h in hits]
