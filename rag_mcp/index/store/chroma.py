"""chromadb's Python client, imported only when a store needs it (~0.5-1 s of import)."""

from __future__ import annotations

import functools
import os
from typing import Any

from rag_mcp.errors import IndexUnavailable

# Chroma phones home unless told not to; set before chromadb is first imported.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def chromadb() -> Any:
    import chromadb as module

    return module


@functools.cache
def _settings_prototype() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


def client_settings() -> Any:
    # A copy of one prototype: constructing Settings makes pydantic-settings read the environment
    # and .env files (~0.15 s measured), which a watcher would pay per run and a server per new
    # generation. A deep copy each time, because the clients write into the object they get
    # (PersistentClient its path, HttpClient its API class, host and headers): a shared object
    # made every embedded store opened later in the same process try to reach the last Chroma
    # server ("Could not connect to a Chroma server"; tests/test_chroma_server.py).
    return _settings_prototype().model_copy(deep=True)


def collection(client: Any, name: str, create: bool, refused: Any = None) -> Any:
    """The collection ``name`` of ``client``, created (cosine space) when ``create``.

    ``refused(exc)`` tells a refused credential, which is raised as is, from a missing
    collection."""
    if create:
        return client.get_or_create_collection(
            name, metadata={"hnsw:space": "cosine"}, embedding_function=None
        )
    try:
        return client.get_collection(name, embedding_function=None)
    except Exception as exc:
        if refused is not None and refused(exc):
            raise
        raise IndexUnavailable(f"the vector collection {name} does not exist") from exc
