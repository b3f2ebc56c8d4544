"""Everything a tool needs, built once per server: the ``Deps`` object tools receive."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rag_mcp import __version__
from rag_mcp.config import Settings
from rag_mcp.embed import Embedder, load_embedder
from rag_mcp.index import IndexHandle
from rag_mcp.llm import LocalLLM
from rag_mcp.logjson import ToolLog
from rag_mcp.query import QueryService
from rag_mcp.rerank import CrossEncoderReranker
from rag_mcp.retrieve import Retriever

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
        with self._lock:
            if self._at and time.monotonic() - self._at <= max_age:
                return self._value
        self._refresh()
        return self._value

    def set(self, value: int) -> None:
        """A watcher that knows the exact number pushes it here."""
        with self._lock:
            self._value, self._at = value, time.monotonic()


@dataclass
class Deps:
    settings: Settings
    handle: IndexHandle
    models: EmbedderPool
    retriever: Retriever
    queries: QueryService
    log: ToolLog
    llm: LocalLLM | None
    freshness: Freshness | None
    started: float = field(default_factory=time.monotonic)
    version: str = __version__
    client: dict[str, str] = field(default_factory=dict)

    def warm_up(self) -> None:
        """Load the index and the query model in the background, so the first query is fast."""

        def run() -> None:
            try:
                idx = self.handle.get()
                self.models.for_manifest(idx.manifest).embed_query("warm up")
            except Exception:  # no index yet, or a broken one: the first query will say so
                log.debug("warm-up skipped", exc_info=True)

        threading.Thread(target=run, name="rag-warm-up", daemon=True).start()

    def close(self) -> None:
        self.handle.close()


def build_deps(settings: Settings, *,
               stale_count: Callable[[IndexHandle], int | None] | None = None,
               embedder_factory: Callable[[str, str], Embedder] | None = None) -> Deps:
    handle = IndexHandle(settings)
    models = EmbedderPool(settings, embedder_factory)
    retriever = Retriever(handle, models.for_manifest)
    freshness = (Freshness(functools.partial(stale_count, handle))
                 if stale_count is not None else None)
    # The cross-encoder loads on the first reranked query; without a model, rerank=true is an
    # E_INVALID_ARGUMENT that says how to configure one.
    reranker = (CrossEncoderReranker(settings.reranker_model, handle)
                if settings.reranker_model else None)
    queries = QueryService(settings, retriever,
                           freshness=freshness.get if freshness is not None else None,
                           reranker=reranker)
    tool_log = ToolLog(settings.log_path, max_bytes=settings.log_max_bytes,
                       backups=settings.log_backups, queries=settings.log_queries)
    llm = (LocalLLM(settings.llm_host, settings.llm_model, timeout=settings.llm_timeout,
                    context_tokens=settings.llm_context_tokens)
           if settings.local_llm else None)
    return Deps(settings=settings, handle=handle, models=models, retriever=retriever,
                queries=queries, log=tool_log, llm=llm, freshness=freshness)
