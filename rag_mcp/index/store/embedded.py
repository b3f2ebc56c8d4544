"""The embedded store: a Chroma collection in each generation's own ``chroma/`` folder.

Chroma's embedded store is single-process and an open client does not see another process's
writes, so a generation's vectors are a private copy (rag_mcp.index.generation): a writer copies
the previous generation's folder and updates the copy, readers open the published one.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rag_mcp.errors import IndexUnavailable
from rag_mcp.index.generation import CHROMA
from rag_mcp.index.store import chroma
from rag_mcp.index.store.base import VectorStore
from rag_mcp.index.store.rust import open_fast

if TYPE_CHECKING:
    from rag_mcp.config import Settings

log = logging.getLogger(__name__)


class EmbeddedStore(VectorStore):
    """One generation's collection, in its folder."""

    kind: ClassVar[str] = "embedded"
    shared: ClassVar[bool] = False

    def __init__(self, client: Any, collection: Any, path: Path, name: str, *,
                 created: bool = False) -> None:
        super().__init__(client, collection)
        self.path, self.name = path, name
        self._created = created  # a new collection, whose graph ``seal`` saves whole

    @classmethod
    def open(cls, path: Path, name: str, *, create: bool, rust: bool = True) -> EmbeddedStore:
        """The collection in the folder ``path``; an existing one through the Rust bindings when
        they can stand in (``rag_mcp.index.store.rust``), unless ``rust`` is False."""
        if not create and not path.is_dir():
            raise IndexUnavailable(f"vector store folder {path.name} is missing")
        if not create and rust and (fast := open_fast(path, name, "reading")) is not None:
            return cls(fast, fast, path, name)
        try:
            client = chroma.chromadb().PersistentClient(path=str(path),
                                                        settings=chroma.client_settings())
            col = chroma.collection(client, name, create)
        except IndexUnavailable:
            raise
        except Exception as exc:  # chromadb raises many types (Rust bindings, sqlite, pickle)
            raise IndexUnavailable(f"cannot open the vector store: {type(exc).__name__}") from exc
        return cls(client, col, path, name, created=create)

    @classmethod
    def open_update(cls, path: Path, name: str, *, rust: bool = True) -> EmbeddedStore:
        """The existing collection of a writer's private copy of a generation, to update it.

        Opened through the Rust bindings when they can stand in, else (or with ``rust=False``)
        through chromadb's Python client. Either way the collection is switched to persist its
        HNSW graph after every write: Chroma otherwise saves the graph every 1,000 records only,
        and every later process that opens the generation (the next writer, each reader) first
        replays up to 999 records of its log, 0.13 s at 1.8k vectors and 0.25 s at 18k measured
        here. A write then saves the whole graph (N x 1.7 kB); an incremental run makes one or
        two, and copies the generation whole anyway. A reader never meets the switch without its
        effect: with it, the first write or count applies and saves whatever log an older
        generation left, and every later write saves too, so nothing is left to replay when the
        generation is published (a reader that replayed would save, and change a published
        generation's files).
        """
        if not path.is_dir():
            raise IndexUnavailable(f"vector store folder {path.name} is missing")
        if rust and (fast := open_fast(path, name, "updating")) is not None:
            try:
                fast.set_sync_threshold(1)
                return cls(fast, fast, path, name)
            except Exception as exc:
                fast.close()
                log.debug("updating %s through chromadb's Python client: %s: %s", path,
                          type(exc).__name__, exc)
        store = cls.open(path, name, create=False, rust=False)
        with store._translate("configure the vector store"):
            hnsw = (store._col.configuration_json or {}).get("hnsw") or {}
            if hnsw and hnsw.get("sync_threshold") != 1:
                store._col.modify(configuration={"hnsw": {"sync_threshold": 1}})
        return store

    # -- the mode's answers ------------------------------------------------------------------
    @classmethod
    def open_reader(cls, settings: Settings, gen_dir: Path, name: str) -> EmbeddedStore:
        return cls.open(gen_dir / CHROMA, name, create=False)

    @classmethod
    def open_writer(cls, settings: Settings, gen_dir: Path, name: str, *,
                    update: bool) -> EmbeddedStore:
        if update:  # the copy of the previous generation's collection: see open_update
            return cls.open_update(gen_dir / CHROMA, name)
        return cls.open(gen_dir / CHROMA, name, create=True)

    @classmethod
    def carry_over(cls, src_gen: Path, dst_gen: Path) -> None:
        shutil.copytree(src_gen / CHROMA, dst_gen / CHROMA)

    def stored_already(self, keys: Sequence[str]) -> set[str]:
        return set()  # a private copy holds only what its generation's catalog lists

    def drop_orphans(self, orphans: Sequence[str], earlier: Sequence[str],
                     live: Collection[str]) -> list[str]:
        self.delete(orphans)  # no reader shares this copy
        return []

    def seal(self, live: Collection[str]) -> int:
        if self._created:
            # A new collection saves its HNSW graph every 1,000 records only: the rest stays in
            # its log, and every reader that opens the generation would replay it, at a cost
            # (0.08-0.13 s at 2.2k vectors) and into a graph that differs from one opening to
            # the next (inserted by several threads), so the same query could get other
            # neighbours after a restart. Reopened for updating, the count below applies the
            # log once and saves the whole graph with it.
            self.close()
            again = self.open_update(self.path, self.name)
            self._client, self._col, self._created = again._client, again._col, False
        return self.count()

    def holds(self, recorded: object) -> bool:
        return self.count() == recorded
