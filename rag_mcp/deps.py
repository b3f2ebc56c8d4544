"""Everything a tool needs, built once per server: the ``Deps`` object tools receive."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rag_mcp import __version__
from rag_mcp.config import Settings
from rag_mcp.embed.pool import EmbedderPool
from rag_mcp.index.handle import IndexHandle
from rag_mcp.llm import LocalLLM
from rag_mcp.logjson import ToolLog
from rag_mcp.search.freshness import Freshness
from rag_mcp.search.query import QueryService
from rag_mcp.search.repos import Repo, repo_names
from rag_mcp.search.rerank import CrossEncoderReranker, load_cross_encoder
from rag_mcp.search.retrieve import QueryVectors, Retriever
from rag_mcp.search.spanget import SpanResult, find_span

log = logging.getLogger(__name__)


@dataclass
class Deps:
    """What every tool receives: the served repositories by name (one by default), and what
    they share: the query models, the query service, the tool log and the local LLM."""

    settings: Settings
    repos: dict[str, Repo]
    models: EmbedderPool
    queries: QueryService
    log: ToolLog
    llm: LocalLLM | None
    started: float = field(default_factory=time.monotonic)
    version: str = __version__
    _warming: threading.Thread | None = field(default=None, repr=False)
    _stop_warming: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def multi(self) -> bool:
        """Several repositories are served: results name their repository."""
        return len(self.repos) > 1

    def repo(self, name: str | None = None) -> Repo:
        """The repository ``name``, or the only one served (rag-eval and the benches serve
        one); with several, a name is required."""
        if name is not None:
            return self.repos[name]
        if self.multi:
            raise ValueError(f"several repositories are served ({', '.join(self.repos)}); "
                             "name one")
        return next(iter(self.repos.values()))

    def find_span(self, span_id: object, repo: str | list[str] | None = None,
                  context_lines: int = 0) -> SpanResult:
        """A span by ID in the named repository, or in the only served one that holds it."""
        return find_span(list(self.repos.values()), span_id, repo, context_lines)

    def warm_up(self) -> None:
        """Load the indexes and the query model in the background, so the first query is fast."""

        def run() -> None:
            for r in self.repos.values():
                if self._stop_warming.is_set():
                    return
                try:
                    idx = r.handle.get()
                    self.models.for_manifest(idx.manifest).embed_query("warm up")
                except Exception:  # no index yet, or a broken one: the first query will say so
                    log.debug("warm-up of %s skipped", r.name, exc_info=True)

        self._warming = threading.Thread(target=run, name="rag-warm-up", daemon=True)
        self._warming.start()

    def close(self) -> None:
        # The warm-up may be inside the model runtime's native code: a process that exits under
        # it is aborted ("terminate called without an active exception", exit 134), which is
        # what a client closing stdin during start-up saw. Let it finish its step first.
        self._stop_warming.set()
        if self._warming is not None:
            self._warming.join(timeout=120)
        for r in self.repos.values():
            r.handle.close()


def build_deps(settings: Settings, *, models: EmbedderPool | None = None,
               stale_count: Callable[[Settings, IndexHandle], int | None] | None = None) -> Deps:
    """Everything the tools need, for every root in ``settings.roots``: one ``Repo`` (index
    handle, retriever, freshness count, reranker) per repository; one model pool (``models``,
    or a new one), query-vector cache, query service, log and LLM client for all of them.
    ``stale_count(settings, handle)`` counts one repository's changed files (the server passes
    the walker's; without it there is no freshness count)."""
    models = models or EmbedderPool(settings)
    qvec = QueryVectors()
    # One cross-encoder for every repository: each reranker loads it through this shared cache.
    load_once = functools.cache(load_cross_encoder)
    repos: dict[str, Repo] = {}
    for name, root in zip(repo_names(settings.roots), settings.roots, strict=True):
        rs = settings.for_root(root) if len(settings.roots) > 1 else settings
        handle = IndexHandle(rs)
        # The cross-encoder loads on the first reranked query; without a model, rerank=true is
        # an E_INVALID_ARGUMENT that says how to configure one.
        reranker = (CrossEncoderReranker(settings.reranker_model, handle, loader=load_once)
                    if settings.reranker_model else None)
        repos[name] = Repo(
            name, rs, handle, Retriever(handle, models.for_manifest, query_vectors=qvec),
            freshness=(Freshness(functools.partial(stale_count, rs, handle))
                       if stale_count is not None else None),
            reranker=reranker)
    tool_log = ToolLog(settings.log_path, max_bytes=settings.log_max_bytes,
                       backups=settings.log_backups, queries=settings.log_queries)
    llm = (LocalLLM(settings.llm_host, settings.llm_model, timeout=settings.llm_timeout,
                    context_tokens=settings.llm_context_tokens)
           if settings.local_llm else None)
    return Deps(settings=settings, repos=repos, models=models,
                queries=QueryService(settings, list(repos.values())), log=tool_log, llm=llm)
