"""The dense vector store: a Chroma collection of span embeddings, keyed by content.

Chroma keeps only vectors and their keys. A key is a hash of (model identity, embedded text), so
a span whose lines moved but whose text did not keeps its vector, identical spans share one, and
vectors of two models can never mix. Span text and metadata live in the generation's SQLite file
(``rag_mcp.index.catalog``): measured at 50k spans, text inside Chroma cost ~8x the raw text on
disk,
and a Chroma ``where`` filter took 50-100 ms against ~5 ms unfiltered, so filters are applied to
over-fetched candidates from our own metadata instead.

This is the only module that imports ``chromadb``; its errors are translated here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from rag_mcp.errors import IndexUnavailable, InvalidArgument

log = logging.getLogger(__name__)

# Chroma phones home unless told not to; set before chromadb is first imported.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

_ADD_BATCH = 4096
#: chromadb's own default tenant and database, where the embedded client keeps collections
_TENANT, _DATABASE = "default_tenant", "default_database"
#: the chromadb release whose Python layer ``_RustCollection`` stands in for (pyproject pins it)
_BINDINGS_RELEASE = "1.5.9"


def _chroma() -> Any:
    import chromadb

    return chromadb


@functools.cache
def _settings_prototype() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


def _settings() -> Any:
    # A copy of one prototype: constructing Settings makes pydantic-settings read the environment
    # and .env files (~0.15 s measured), which a watcher would pay per run and a server per new
    # generation. A deep copy each time, because the clients write into the object they get
    # (PersistentClient its path, HttpClient its API class, host and headers): a shared object
    # made every embedded store opened later in the same process try to reach the last Chroma
    # server ("Could not connect to a Chroma server"; tests/test_chroma_server.py).
    return _settings_prototype().model_copy(deep=True)


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status behind a Chroma client error, if any (it wraps httpx's in plain types)."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        response = getattr(seen, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        code = getattr(seen, "code", None)  # ChromaError.code() is the HTTP status it maps to
        if callable(code) and type(seen).__name__ in ("ChromaAuthError", "AuthorizationError"):
            value = code()
            return value if isinstance(value, int) else None
        seen = seen.__cause__ or seen.__context__
    return None


def _server_error(server: str, what: str, exc: BaseException) -> IndexUnavailable:
    status = _http_status(exc)
    if status in (401, 403):
        return IndexUnavailable(
            f"the Chroma server at {server} refused the credentials (HTTP {status}); check "
            "RAG_CHROMA_TOKEN (and RAG_CHROMA_TENANT / RAG_CHROMA_DATABASE)")
    return IndexUnavailable(
        f"the Chroma server at {server} failed to {what} ({type(exc).__name__}); is `chroma run` "
        "up? (RAG_CHROMA_URL)")


class _NoFastPath(Exception):
    """The Rust bindings cannot stand in here; use chromadb's Python client."""


class _RustCollection:
    """An existing collection of an embedded store, read and written through chromadb's Rust
    core alone.

    Importing chromadb's Python layer costs ~0.5-1 s, and tearing it down at exit ~0.2 s more:
    a writer paid it out of ~2.5 s for a whole ``rag-index`` run after a one-file edit, and a
    server for every session an assistant starts; the Rust bindings load in ~0.03 s. Writers
    upsert, delete and count, readers get vectors by key and query nearest neighbours, in a
    collection that already exists; these are the very bindings calls chromadb's
    ``RustBindingsAPI`` makes (chromadb/api/rust.py of 1.5.9), with the settings its
    ``PersistentClient`` passes (md5 migration hashes, migrations applied, no reset, an HNSW
    cache of RLIMIT_NOFILE / 5), and ``get``/``query`` answer in the shape of chromadb's
    ``Collection`` for what ``VectorStore`` reads. Skipping the Python layer's conversions also
    makes a read of 40 vectors ~0.5 ms shorter (1.8 -> 1.3 ms). Anything unexpected while
    opening (another chromadb release, a store made with other settings) raises
    ``_NoFastPath`` and the caller uses the Python client instead. Collections are still
    created by the Python client.
    """

    def __init__(self, path: Path, name: str) -> None:
        try:
            import chromadb_rust_bindings as rb

            # Bindings.get_version() imports all of chromadb, importlib.metadata scans every
            # installed distribution (0.04 s): the wheel's own record, beside the bindings, is
            # one stat
            site = Path(rb.__file__).resolve().parent.parent
            if not (site / f"chromadb-{_BINDINGS_RELEASE}.dist-info").is_dir():
                raise _NoFastPath(f"chromadb is not {_BINDINGS_RELEASE}")
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
        except _NoFastPath:
            raise
        except Exception as exc:  # ImportError, a changed signature, a store it cannot open
            raise _NoFastPath(f"{type(exc).__name__}: {exc}") from exc

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


def _fast_path(path: Path, name: str, what: str) -> _RustCollection | None:
    """The existing collection through the Rust bindings, or None (logged) when they cannot
    stand in for chromadb's Python client."""
    try:
        return _RustCollection(path, name)
    except _NoFastPath as exc:
        log.debug("%s %s through chromadb's Python client: %s", what, path, exc)
        return None


class VectorStore:
    """One Chroma collection: add, delete and query vectors by key."""

    def __init__(self, client: Any, collection: Any, *, owns_client: bool,
                 server: str = "") -> None:
        self._client = client
        self._col = collection
        self._owns_client = owns_client
        self.server = server  # "http://host:port" of a Chroma server, "" when embedded

    @contextlib.contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Chroma and its HTTP transport raise many types: one coded error, with the fix."""
        try:
            yield
        except Exception as exc:
            if self.server:
                raise _server_error(self.server, what, exc) from exc
            raise IndexUnavailable(
                f"the vector store failed to {what} ({type(exc).__name__}); "
                "re-run `rag-index` to rebuild it"
            ) from exc

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def embedded(cls, path: Path, name: str, *, create: bool, rust: bool = True) -> VectorStore:
        """A persistent store in the folder ``path`` (one per index generation); an existing
        one through the Rust bindings when they can stand in (``_RustCollection``), unless
        ``rust`` is False."""
        if not create and not path.is_dir():
            raise IndexUnavailable(f"vector store folder {path.name} is missing")
        if not create and rust and (fast := _fast_path(path, name, "reading")) is not None:
            return cls(fast, fast, owns_client=True)
        try:
            client = _chroma().PersistentClient(path=str(path), settings=_settings())
            col = cls._collection(client, name, create)
        except IndexUnavailable:
            raise
        except Exception as exc:  # chromadb raises many types (Rust bindings, sqlite, pickle)
            raise IndexUnavailable(f"cannot open the vector store: {type(exc).__name__}") from exc
        return cls(client, col, owns_client=True)

    @classmethod
    def embedded_update(cls, path: Path, name: str, *, rust: bool = True) -> VectorStore:
        """The existing collection of a writer's private copy of a generation, to update it.

        Opened through the Rust bindings when they can stand in for chromadb's Python layer
        (``_RustCollection``), else (or with ``rust=False``) like ``embedded``. Either way the
        collection is switched to persist its HNSW graph after every write: Chroma otherwise
        saves the graph every 1,000 records only, and every later process that opens the
        generation (the next writer, each reader) first replays up to 999 records of its log,
        0.13 s at 1.8k vectors and 0.25 s at 18k measured here. A write then saves the whole
        graph (N x 1.7 kB); an incremental run makes one or two, and copies the generation whole
        anyway. A reader never meets the switch without its effect: with it, the first write or
        count applies and saves whatever log an older generation left, and every later write
        saves too, so nothing is left to replay when the generation is published (a reader that
        replayed would save, and change a published generation's files).
        """
        if not path.is_dir():
            raise IndexUnavailable(f"vector store folder {path.name} is missing")
        if rust and (fast := _fast_path(path, name, "updating")) is not None:
            try:
                fast.set_sync_threshold(1)
                return cls(fast, fast, owns_client=True)
            except Exception as exc:
                fast.close()
                log.debug("updating %s through chromadb's Python client: %s: %s", path,
                          type(exc).__name__, exc)
        store = cls.embedded(path, name, create=False, rust=False)
        with store._translate("configure the vector store"):
            hnsw = (store._col.configuration_json or {}).get("hnsw") or {}
            if hnsw and hnsw.get("sync_threshold") != 1:
                store._col.modify(configuration={"hnsw": {"sync_threshold": 1}})
        return store

    @classmethod
    def http(cls, url: str, name: str, *, tenant: str, database: str, token: str,
             create: bool) -> VectorStore:
        """A collection on a Chroma server (``RAG_CHROMA_URL``)."""
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidArgument(
                "store.chroma_url must look like http://host:8000 (env RAG_CHROMA_URL), "
                f"got {url!r}"
            )
        # A token goes out both ways Chroma deployments read it: a proxy in front of the 1.x
        # server (which has no check of its own) usually wants a bearer token, Chroma Cloud and
        # distributed Chroma's gateway read X-Chroma-Token.
        headers = ({"Authorization": f"Bearer {token}", "X-Chroma-Token": token}
                   if token else None)
        port = parsed.port or (443 if parsed.scheme == "https" else 8000)
        server = f"{parsed.scheme}://{parsed.hostname}:{port}"
        settings = _settings()
        if parsed.scheme == "http":
            # Plain HTTP verifies no certificate; left at its default, httpx loads the CA bundle
            # for every client (~0.16 s measured), i.e. per index run and per new generation.
            settings.chroma_server_ssl_verify = False
        try:
            client = _chroma().HttpClient(
                host=parsed.hostname, port=port, ssl=parsed.scheme == "https", headers=headers,
                tenant=tenant, database=database, settings=settings,
            )
            col = cls._collection(client, name, create)
        except IndexUnavailable:
            raise
        except Exception as exc:
            raise _server_error(server, "answer", exc) from exc
        return cls(client, col, owns_client=True, server=server)

    @staticmethod
    def _collection(client: Any, name: str, create: bool) -> Any:
        if create:
            return client.get_or_create_collection(
                name, metadata={"hnsw:space": "cosine"}, embedding_function=None
            )
        try:
            return client.get_collection(name, embedding_function=None)
        except Exception as exc:
            if _http_status(exc) in (401, 403):
                raise  # a refused token is not a missing collection
            raise IndexUnavailable(f"the vector collection {name} does not exist") from exc

    # -- operations --------------------------------------------------------------------------
    def add(self, keys: Sequence[str], vectors: np.ndarray) -> None:
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
        """The subset of ``keys`` already stored (a server shared by several indexers)."""
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
        with self._translate("read vectors"):
            got = self._col.get(ids=list(keys), include=["embeddings"])
        pairs = zip(got["ids"], got["embeddings"], strict=True)
        return {k: np.asarray(v, dtype=np.float32) for k, v in pairs}

    def query(self, vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        """Nearest keys with cosine similarity, best first."""
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
        if self._owns_client and self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing a half-opened client must never mask the real error
                log.debug("closing the Chroma client failed", exc_info=True)
            self._client = None


def delete_collection(url: str, name: str, *, tenant: str, database: str, token: str) -> None:
    """Drop a collection on a Chroma server (``rag-index --rebuild`` in server mode)."""
    store = VectorStore.http(url, name, tenant=tenant, database=database, token=token, create=True)
    try:
        store._client.delete_collection(name)
    finally:
        store.close()
