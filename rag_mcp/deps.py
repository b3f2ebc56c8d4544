"""Everything a tool needs, built once per server: the ``Deps`` object tools receive."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_mcp import __version__
from rag_mcp.config import Settings
from rag_mcp.embed.core import Embedder, load_embedder
from rag_mcp.index.handle import IndexHandle
from rag_mcp.llm import LocalLLM
from rag_mcp.logjson import ToolLog
from rag_mcp.search.query import QueryService, Source
from rag_mcp.search.repos import find_span, repo_names
from rag_mcp.search.rerank import CrossEncoderReranker, load_cross_encoder
from rag_mcp.search.retrieve import QueryVectors, Retriever
from rag_mcp.search.spanget import SpanResult

log = logging.getLogger(__name__)


class EmbedderPool:
    """Query-side models, loaded once per (model, backend) named by the index manifest."""

    def __init__(self, settings: Settings,
                 factory: Callable[[str, str], Embedder] | None = None) -> None:
        self.settings = settings
        self._factory = factory
        self._models: dict[tuple[str, str], Embedder] = {}
        self._lock = threading.Lock()
        self.load_seconds: float | None = None

    def for_manifest(self, manifest: dict[str, Any]) -> Embedder:
        model = str(manifest.get("model") or self.settings.embed_model)
        backend = str(manifest.get("backend") or self.settings.embed_backend)
        key = (model, backend)
        got = self._models.get(key)
        if got is not None:
            return got
        with self._lock:
            got = self._models.get(key)
            if got is None:
                t0 = time.perf_counter()
                if self._factory is not None:
                    got = self._factory(model, backend)
                else:
                    got = load_embedder(model, backend, cache_dir=self.settings.model_cache_path,
                                        threads=self.settings.embed_threads,
                                        batch_size=self.settings.embed_batch)
                self.load_seconds = time.perf_counter() - t0
                self._models[key] = got
                log.info("loaded embedding model %s (%s) in %.2f s", model, backend,
                         self.load_seconds)
        return got

    @property
    def loaded(self) -> list[str]:
        return [f"{m} ({b})" for m, b in self._models]


class Freshness:
    """Files changed since the last generation, recomputed in the background at most every
    ``ttl`` seconds so a query never waits for a repository walk."""

    def __init__(self, compute: Callable[[], int | None], ttl: float = 10.0) -> None:
        self._compute = compute
        self.ttl = ttl
        self._value: int | None = None
        self._at = 0.0
        self._running = False
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        try:
            value = self._compute()
        except Exception:  # informative only: an unreadable tree must not break queries
            log.debug("freshness check failed", exc_info=True)
            value = None
        with self._lock:
            self._value, self._at, self._running = value, time.monotonic(), False

    def get(self) -> int | None:
        with self._lock:
            stale = time.monotonic() - self._at > self.ttl
            if stale and not self._running:
                self._running = True
                threading.Thread(target=self._refresh, daemon=True).start()
            return self._value

    def now(self, max_age: float = 2.0) -> int | None:
        """A value at most ``max_age`` seconds old, computed here if need be (health checks)."""
        known, value = self.recent(max_age)
        if known:
            return value
        self._refresh()
        return self._value

    def recent(self, max_age: float = 2.0) -> tuple[bool, int | None]:
        """``(True, value)`` when the value is at most ``max_age`` seconds old; never computes."""
        with self._lock:
            if self._at and time.monotonic() - self._at <= max_age:
                return True, self._value
        return False, None

    def set(self, value: int) -> None:
        """A watcher that knows the exact number pushes it here."""
        with self._lock:
            self._value, self._at = value, time.monotonic()


@dataclass
class Repo:
    """One served repository: its own settings (root, index), index handle and retriever."""

    name: str
    settings: Settings
    handle: IndexHandle
    retriever: Retriever
    freshness: Freshness | None = None


@dataclass
class Deps:
    """What every tool receives. ``handle``, ``retriever`` and ``freshness`` are the first served
    repository's (the only one, by default); ``repos`` holds every served repository by name."""

    settings: Settings
    handle: IndexHandle
    models: EmbedderPool
    retriever: Retriever
    queries: QueryService
    log: ToolLog
    llm: LocalLLM | None
    freshness: Freshness | None
    repos: dict[str, Repo] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    version: str = __version__
    client: dict[str, str] = field(default_factory=dict)

    @property
    def multi(self) -> bool:
        """Several repositories are served: results name their repository."""
        return len(self.repos) > 1

    def find_span(self, span_id: object, repo: str | list[str] | None = None,
                  context_lines: int = 0, *, max_bytes: int | None = None
                  ) -> tuple[Repo, SpanResult]:
        """A span by ID in the named repository, or in the only served one that holds it."""
        where, got = find_span(list(self.repos.values()), span_id, repo, context_lines,
                               max_bytes=max_bytes)
        return self.repos[where.name], got

    def warm_up(self) -> None:
        """Load the indexes and the query model in the background, so the first query is fast."""

        def run() -> None:
            for r in self.repos.values():
                try:
                    idx = r.handle.get()
                    self.models.for_manifest(idx.manifest).embed_query("warm up")
                except Exception:  # no index yet, or a broken one: the first query will say so
                    log.debug("warm-up of %s skipped", r.name, exc_info=True)

        threading.Thread(target=run, name="rag-warm-up", daemon=True).start()

    def close(self) -> None:
        for r in self.repos.values():
            r.handle.close()


def build_deps(settings: Settings, *,
               stale_count: Callable[[Settings, IndexHandle], int | None] | None = None,
               embedder_factory: Callable[[str, str], Embedder] | None = None) -> Deps:
    """Everything the tools need, for every root in ``settings.roots``: one index handle,
    retriever and freshness count per repository; one model pool, query-vector cache, log and
    LLM client for all of them."""
    models = EmbedderPool(settings, embedder_factory)
    qvec = QueryVectors()
    # One cross-encoder for every repository: each reranker loads it through this shared cache.
    load_once = functools.cache(load_cross_encoder)
    repos: dict[str, Repo] = {}
    sources: list[Source] = []
    for name, root in zip(repo_names(settings.roots), settings.roots, strict=True):
        rs = settings.for_root(root) if len(settings.roots) > 1 else settings
        handle = IndexHandle(rs)
        retriever = Retriever(handle, models.for_manifest, query_vectors=qvec)
        freshness = (Freshness(functools.partial(stale_count, rs, handle))
                     if stale_count is not None else None)
        # The cross-encoder loads on the first reranked query; without a model, rerank=true is
        # an E_INVALID_ARGUMENT that says how to configure one.
        reranker = (CrossEncoderReranker(settings.reranker_model, handle, loader=load_once)
                    if settings.reranker_model else None)
        repos[name] = Repo(name, rs, handle, retriever, freshness)
        sources.append(Source(name, Path(root), retriever,
                              freshness=freshness.get if freshness is not None else None,
                              reranker=reranker))
    queries = QueryService(settings, sources)
    tool_log = ToolLog(settings.log_path, max_bytes=settings.log_max_bytes,
                       backups=settings.log_backups, queries=settings.log_queries)
    llm = (LocalLLM(settings.llm_host, settings.llm_model, timeout=settings.llm_timeout,
                    context_tokens=settings.llm_context_tokens)
           if settings.local_llm else None)
    first = next(iter(repos.values()))
    return Deps(settings=settings, handle=first.handle, models=models,
                retriever=first.retriever, queries=queries, log=tool_log, llm=llm,
                freshness=first.freshness, repos=repos)
