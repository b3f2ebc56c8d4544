"""The vectors of one index run: embed only text the index, the cache and the store lack.

A span's vector is keyed by (model identity, embedded text). For each span the writer stores,
``VectorWriter`` decides: the previous generation (or this run) already has that key, so the
vector is reused; or the key waits in ``pending`` for a flush. A flush takes what the embedding
cache holds, asks the store which of the rest it holds already (a server shared by indexers
may), embeds the rest in slices of similar length (each slice lands in the cache at once, so a
stopped run loses at most one) and writes the batch to the store in one call. At the end it
drops the vectors no span uses any more and seals the store for readers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING

from indexers.model_loader import ModelLoader
from indexers.progress import Progress

if TYPE_CHECKING:
    import numpy as np

    from indexers.embcache import EmbeddingCache
    from rag_mcp.index.store import VectorStore

EMBED_FLUSH = 512  # texts gathered before embedding: larger pools batch by length better
EMBED_SLICE = 128  # texts per model call, taken in length order from the pool


class RunCancelled(Exception):
    """The run was asked to stop (``cancel`` set); nothing was published."""


class VectorWriter:
    """Which keys need vectors, where each comes from, and the store they go to.

    ``present``: the keys the previous generation's store holds. ``open_store`` is called once,
    when the store is first needed (after the model started loading, so the two overlap).
    ``shared``: the store may hold keys ``present`` does not list (a server shared by
    indexers); only a flush asks it, so new keys wait for the flush before deciding whether
    the model must load.
    """

    def __init__(self, *, present: set[str], open_store: Callable[[], VectorStore],
                 shared: bool, cache: EmbeddingCache, model: ModelLoader, progress: Progress,
                 cancel: threading.Event, max_tokens: int, dim: int = 0) -> None:
        self.present = present
        self.added: set[str] = set()  # keys this run stored, or found stored
        self.pending: dict[str, str] = {}  # key -> embedded text, waiting for the model
        self._looked_up: dict[str, np.ndarray] = {}  # cache vectors of pending keys
        self._open_store = open_store
        self._store: VectorStore | None = None
        self._shared = shared
        self.cache = cache
        self.model = model
        self.p = progress
        self.cancel = cancel
        self.max_tokens = max_tokens
        self.dim = dim  # of the vectors written; from the previous generation, else the first
        self.reused = 0
        self.embedded = 0
        self.embed_seconds = 0.0
        self._fresh: list[str] = []  # pending keys added since the last ``file_stored``

    def open(self) -> VectorStore:
        """The store, opened on first use."""
        if self._store is None:
            self._store = self._open_store()
        return self._store

    def want(self, key: str, text: str) -> None:
        """A stored span needs the vector of ``key`` (its embedded ``text``)."""
        if key in self.present or key in self.added:
            self.reused += 1
        elif key not in self.pending:
            self.pending[key] = text
            self._fresh.append(key)

    def file_stored(self) -> None:
        """One file's spans are stored: look their keys up, flush a full pool."""
        fresh, self._fresh = self._fresh, []
        if fresh and not self.model.started and not self._shared:
            # Until the model is loading, look each new key up at once: the first one the cache
            # lacks starts the model (a shared store may still hold it, which only a flush asks,
            # so that store waits for the flush)
            got = self.cache.get(fresh)
            self._looked_up.update(got)
            if len(got) < len(fresh):
                self.model.start()
        if len(self.pending) >= EMBED_FLUSH:
            self.flush()

    def drain(self) -> None:
        """The last flush of the run."""
        self.flush()

    def flush(self) -> None:
        """Vectors for every pending key: from the cache, the store, else the model."""
        if not self.pending:
            return
        keys = list(self.pending)
        cached = {k: self._looked_up.pop(k) for k in keys if k in self._looked_up}
        cached.update(self.cache.get([k for k in keys if k not in cached]))
        stored = self.open().stored_already([k for k in keys if k not in cached])
        self.added.update(stored)
        self.reused += len(stored)
        keys = [k for k in keys if k not in stored]
        out_keys = [k for k in keys if k in cached]
        out_vecs = [cached[k] for k in out_keys]
        self.reused += len(out_keys)
        if cached and not self.dim:
            self.dim = int(next(iter(cached.values())).shape[0])
        todo = [k for k in keys if k not in cached]
        for part, vecs in self._embed(todo):
            out_keys += part
            out_vecs.extend(vecs)
        # One write per flush: each write to an updated store saves its whole HNSW graph
        # (EmbeddedStore.open_update), and the generation is thrown away on a crash anyway
        if out_keys:
            import numpy as np

            self.open().add(out_keys, np.stack(out_vecs))
            self.added.update(out_keys)
        self.pending.clear()

    def _embed(self, todo: list[str]) -> Iterator[tuple[list[str], np.ndarray]]:
        # Slices of similar length: each keeps the model's length batching, lands in the cache
        # at once (a stopped run loses at most one slice) and is a point where cancel is seen.
        todo.sort(key=lambda k: len(self.pending[k]))
        for i in range(0, len(todo), EMBED_SLICE):
            if self.cancel.is_set():
                raise RunCancelled("the index run was stopped")
            part = todo[i : i + EMBED_SLICE]
            model = self.model.get()
            self.dim = model.dim
            t0 = time.perf_counter()
            vecs = model.embed_documents([self.pending[k] for k in part], self.max_tokens)
            self.embed_seconds += time.perf_counter() - t0
            self.cache.put(part, vecs)
            self.embedded += len(part)
            self.p.advance(embedded=len(part))
            yield part, vecs

    def finish(self, live: Collection[str], earlier_orphans: list[str]) -> tuple[int, list[str]]:
        """After the last flush: drop the vectors no span uses (``live``: the keys the new
        catalog holds), seal the store and trim the cache; returns the vector count and the
        orphans to record for the next run."""
        orphans = sorted((self.present | self.added).difference(live))
        recorded = self.open().drop_orphans(orphans, earlier_orphans, live)
        count = self.open().seal(live)
        self.cache.prune(live)
        return count, recorded

    def close(self) -> None:
        """Close the store and the cache (the writer owns both)."""
        try:
            if self._store is not None:
                self._store.close()
        finally:
            self.cache.close()
