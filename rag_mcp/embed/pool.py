"""The query-side model pool: each (model, backend) an index names, loaded once per process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rag_mcp.config import Settings
from rag_mcp.embed import Embedder, load_embedder

log = logging.getLogger(__name__)


class EmbedderPool:
    """Query-side models, loaded once per (model, backend) named by the index manifest; shared
    by every served repository and, with ``--watch``, by their watchers (the embedders are
    thread-safe)."""

    def __init__(self, settings: Settings,
                 factory: Callable[[str, str], Embedder] | None = None) -> None:
        self.settings = settings
        self._factory = factory
        self._models: dict[tuple[str, str], Embedder] = {}
        self._lock = threading.Lock()

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
                self._models[key] = got
                log.info("loaded embedding model %s (%s) in %.2f s", model, backend,
                         time.perf_counter() - t0)
        return got

    def for_settings(self, settings: Settings) -> Embedder:
        """The model ``settings`` index with (what a watcher of that repository embeds with)."""
        return self.for_manifest({"model": settings.embed_model,
                                  "backend": settings.embed_backend})

    @property
    def loaded(self) -> list[str]:
        return [f"{m} ({b})" for m, b in self._models]
