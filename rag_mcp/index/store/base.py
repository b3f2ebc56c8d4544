"""What every vector store does: add, delete and query vectors by key in one Chroma collection.

The collection is chromadb's (``chromadb.Collection``) or, for an embedded store that already
exists, the Rust bindings' stand-in (``rag_mcp.index.store.rust``); both answer the same calls.
numpy is imported where vectors are handled, so that importing the store costs nothing to a run
that has nothing to write.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rag_mcp.errors import IndexUnavailable

if TYPE_CHECKING:
    import numpy as np

    from rag_mcp.config import Settings

log = logging.getLogger(__name__)

_ADD_BATCH = 4096


class VectorStore(ABC):
    """One Chroma collection of span vectors, keyed by content key.

    A subclass per mode (``EmbeddedStore``, ``ServerStore``) opens it and answers the questions
    whose answer depends on where the vectors live; callers never ask which mode they are in.
    """

    #: what the manifest records as ``store``: a generation is extended only in the same mode
    kind: ClassVar[str] = ""
    #: the vectors outlive a generation and other indexers add to them: a key the previous
    #: generation did not list may be stored already, and readers of the previous generation
    #: still use its vectors
    shared: ClassVar[bool] = False

    def __init__(self, client: Any, collection: Any) -> None:
        self._client = client
        self._col = collection

    def _failure(self, what: str, exc: BaseException) -> IndexUnavailable:
        return IndexUnavailable(f"the vector store failed to {what} ({type(exc).__name__}); "
                                "re-run `rag-index` to rebuild it")

    @contextlib.contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Chroma and its HTTP transport raise many types: one coded error, with the fix."""
        try:
            yield
        except Exception as exc:
            raise self._failure(what, exc) from exc

    # -- operations --------------------------------------------------------------------------
    def add(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        import numpy as np

        if not len(keys):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self._translate("store vectors"):
            for i in range(0, len(keys), _ADD_BATCH):
                self._col.upsert(ids=list(keys[i : i + _ADD_BATCH]),
                                 embeddings=vectors[i : i + _ADD_BATCH])

    def delete(self, keys: Sequence[str]) -> None:
        keys = list(keys)
        with self._translate("delete vectors"):
            for i in range(0, len(keys), _ADD_BATCH):
                self._col.delete(ids=keys[i : i + _ADD_BATCH])

    def existing(self, keys: Sequence[str]) -> set[str]:
        """The subset of ``keys`` stored in the collection."""
        found: set[str] = set()
        keys = list(keys)
        with self._translate("look up vectors"):
            for i in range(0, len(keys), _ADD_BATCH):
                got = self._col.get(ids=keys[i : i + _ADD_BATCH], include=[])
                found.update(got["ids"])
        return found

    def all_keys(self) -> set[str]:
        total = self.count()
        found: set[str] = set()
        with self._translate("list vectors"):
            for offset in range(0, total, 10_000):
                found.update(self._col.get(include=[], limit=10_000, offset=offset)["ids"])
        return found

    def vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        import numpy as np

        with self._translate("read vectors"):
            got = self._col.get(ids=list(keys), include=["embeddings"])
        pairs = zip(got["ids"], got["embeddings"], strict=True)
        return {k: np.asarray(v, dtype=np.float32) for k, v in pairs}

    def query(self, vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        """Nearest keys with cosine similarity, best first."""
        import numpy as np

        if n <= 0:
            return []
        with self._translate("answer"):
            res = self._col.query(
                query_embeddings=np.asarray(vector, dtype=np.float32).reshape(1, -1),
                n_results=n, include=["distances"],
            )
        ids = res["ids"][0]
        dists = res["distances"][0] if res.get("distances") else [1.0] * len(ids)
        return [(k, 1.0 - float(d)) for k, d in zip(ids, dists, strict=True)]

    def count(self) -> int:
        with self._translate("count vectors"):
            return int(self._col.count())

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing a half-opened client must never mask the real error
                log.debug("closing the Chroma client failed", exc_info=True)
            self._client = None

    # -- what depends on the mode ------------------------------------------------------------
    @classmethod
    @abstractmethod
    def open_reader(cls, settings: Settings, gen_dir: Path, name: str) -> VectorStore:
        """The vectors of a published generation, to query."""

    @classmethod
    @abstractmethod
    def open_writer(cls, settings: Settings, gen_dir: Path, name: str, *,
                    update: bool) -> VectorStore:
        """The vectors of a generation being written into ``gen_dir``; ``update``: it starts
        from the previous generation (``carry_over``), else from nothing."""

    @classmethod
    @abstractmethod
    def carry_over(cls, src_gen: Path, dst_gen: Path) -> None:
        """Copy what a new generation starts from, besides the catalog and lexical index."""

    @abstractmethod
    def stored_already(self, keys: Sequence[str]) -> set[str]:
        """Of ``keys`` the previous generation did not list, those the store holds anyway."""

    @abstractmethod
    def drop_orphans(self, orphans: Sequence[str], earlier: Sequence[str],
                     live: Collection[str]) -> list[str]:
        """Delete vectors no span uses any more (``orphans`` of this run, ``earlier`` ones the
        previous run recorded); returns the orphans the manifest is to record for the next."""

    @abstractmethod
    def seal(self, live: Collection[str]) -> int:
        """Make what was written durable for readers; returns the vector count the manifest
        records (and readers check, where the store holds one generation only)."""

    @abstractmethod
    def holds(self, recorded: object) -> bool:
        """Whether the store agrees with the vector count a generation's manifest recorded."""
