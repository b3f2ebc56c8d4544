"""An existing embedded collection read and written through chromadb's Rust core alone.

Measured reason for this second path: importing chromadb's Python layer costs ~0.5-1 s, and
tearing it down at exit ~0.2 s more; a writer paid it out of ~2.5 s for a whole ``rag-index``
run after a one-file edit, and a server for every session an assistant starts, while the Rust
bindings load in ~0.03 s (tests/test_incremental_store.py keeps both paths equal). Collections
are still created by the Python client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

#: chromadb's own default tenant and database, where the embedded client keeps collections
_TENANT, _DATABASE = "default_tenant", "default_database"
#: the chromadb release whose Python layer ``RustCollection`` stands in for (pyproject pins it)
_BINDINGS_RELEASE = "1.5.9"


class NoFastPath(Exception):
    """The Rust bindings cannot stand in here; use chromadb's Python client."""


class RustCollection:
    """The calls ``VectorStore`` makes on a collection, made through the Rust bindings.

    Writers upsert, delete and count, readers get vectors by key and query nearest neighbours;
    these are the very bindings calls chromadb's ``RustBindingsAPI`` makes (chromadb/api/rust.py
    of 1.5.9), with the settings its ``PersistentClient`` passes (md5 migration hashes,
    migrations applied, no reset, an HNSW cache of RLIMIT_NOFILE / 5), and ``get``/``query``
    answer in the shape of chromadb's ``Collection``. Skipping the Python layer's conversions
    also makes a read of 40 vectors ~0.5 ms shorter (1.8 -> 1.3 ms). Anything unexpected while
    opening (another chromadb release, a store made with other settings) raises ``NoFastPath``.
    """

    def __init__(self, path: Path, name: str) -> None:
        try:
            import chromadb_rust_bindings as rb

            # Bindings.get_version() imports all of chromadb, importlib.metadata scans every
            # installed distribution (0.04 s): the wheel's own record, beside the bindings, is
            # one stat
            site = Path(rb.__file__).resolve().parent.parent
            if not (site / f"chromadb-{_BINDINGS_RELEASE}.dist-info").is_dir():
                raise NoFastPath(f"chromadb is not {_BINDINGS_RELEASE}")
            import resource

            files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            sqlite = rb.SqliteDBConfig(hash_type=rb.MigrationHash.MD5,
                                       migration_mode=rb.MigrationMode.Apply,
                                       url=str(path / "chroma.sqlite3"))
            self._b: Any = rb.Bindings(allow_reset=False, sqlite_db_config=sqlite,
                                       persist_path=str(path), hnsw_cache_size=files // 5)
            col = self._b.get_collection(name, _TENANT, _DATABASE)
            self._id = str(col.id)
            self.configuration: dict[str, Any] = dict(col.configuration or {})
        except NoFastPath:
            raise
        except Exception as exc:  # ImportError, a changed signature, a store it cannot open
            raise NoFastPath(f"{type(exc).__name__}: {exc}") from exc

    def set_sync_threshold(self, n: int) -> None:
        hnsw = dict(self.configuration.get("hnsw") or {})
        if not hnsw or hnsw.get("sync_threshold") == n:
            return
        # the JSON chromadb's update_collection_configuration_to_json_str writes for this change
        update = {"hnsw": {"sync_threshold": n}, "spann": None, "embedding_function": None}
        self._b.update_collection(self._id, None, None, json.dumps(update))
        self.configuration["hnsw"] = {**hnsw, "sync_threshold": n}

    def upsert(self, *, ids: list[str], embeddings: np.ndarray) -> None:
        # chromadb's Python layer hands its core one float32 row per id, as here
        self._b.upsert(self._id, ids, list(embeddings), None, None, None, _TENANT, _DATABASE)

    def delete(self, *, ids: list[str]) -> None:
        self._b.delete(self._id, ids, None, None, None, _TENANT, _DATABASE)

    def count(self) -> int:
        return int(self._b.count(self._id, _TENANT, _DATABASE))

    def get(self, *, ids: list[str] | None = None, include: Sequence[str] = (),
            limit: int | None = None, offset: int = 0) -> dict[str, Any]:
        got = self._b.get(self._id, ids, None, limit, offset, None, list(include), _TENANT,
                          _DATABASE)
        return {"ids": list(got.ids), "embeddings": got.embeddings}

    def query(self, *, query_embeddings: np.ndarray, n_results: int,
              include: Sequence[str]) -> dict[str, Any]:
        got = self._b.query(self._id, None, list(query_embeddings), n_results, None, None,
                            list(include), _TENANT, _DATABASE)
        return {"ids": got.ids, "distances": got.distances}

    def close(self) -> None:
        # dropping the bindings is all chromadb's System.stop() does for them
        self._b = None


def open_fast(path: Path, name: str, what: str) -> RustCollection | None:
    """The existing collection through the Rust bindings, or None (logged) when they cannot
    stand in for chromadb's Python client."""
    try:
        return RustCollection(path, name)
    except NoFastPath as exc:
        log.debug("%s %s through chromadb's Python client: %s", what, path, exc)
        return None
