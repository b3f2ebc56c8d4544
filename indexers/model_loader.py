"""The embedding model of one index run, loaded in a thread from the moment a span needs it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from indexers.progress import Progress
from rag_mcp.config import Settings
from rag_mcp.embed import Embedder, load_embedder


class ModelLoader:
    """Loads the model once, in a thread of its own, and hands it to whoever asks first.

    Building the ONNX Runtime session (~0.25 s) runs mostly without the GIL, so after a one-file
    edit it overlaps storing the spans and opening the vector store instead of adding to them. A
    run whose vectors are all in the embedding cache never loads it.
    """

    def __init__(self, settings: Settings, progress: Progress,
                 factory: Callable[[], Embedder] | None = None) -> None:
        self.s = settings
        self.p = progress
        self._factory = factory
        self._embedder: Embedder | None = None
        self._thread: threading.Thread | None = None
        self._loaded: Embedder | BaseException | None = None

    @property
    def started(self) -> bool:
        return self._embedder is not None or self._thread is not None

    def start(self) -> None:
        if self.started:
            return
        if self._factory is None:
            self.p.log(f"loading embedding model {self.s.embed_model} ({self.s.embed_backend})")
        self._thread = threading.Thread(target=self._load, name="rag-index-model", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            if self._factory is not None:
                self._loaded = self._factory()
            else:
                self._loaded = load_embedder(
                    self.s.embed_model, self.s.embed_backend, cache_dir=self.s.model_cache_path,
                    threads=self.s.embed_threads, batch_size=self.s.embed_batch)
        except BaseException as exc:  # raised again in the thread that asks for the model
            self._loaded = exc

    def join(self) -> None:
        # A model still being built must not outlive the run: a watcher would keep a stray
        # thread, and a CLI would tear the interpreter down under ONNX Runtime's feet.
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def get(self) -> Embedder:
        """The model, loading it now if no thread has started yet; raises what loading raised."""
        if self._embedder is None:
            self.start()
            self.join()
            got, self._loaded = self._loaded, None
            if isinstance(got, BaseException):
                raise got
            assert got is not None
            self._embedder = got
        return self._embedder
