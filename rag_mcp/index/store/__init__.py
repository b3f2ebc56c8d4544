"""The dense vector store: a Chroma collection of span embeddings, keyed by content.

Chroma keeps only vectors and their keys. A key is a hash of (model identity, embedded text), so
a span whose lines moved but whose text did not keeps its vector, identical spans share one, and
vectors of two models can never mix. Span text and metadata live in the generation's SQLite file
(``rag_mcp.index.catalog``): measured at 50k spans, text inside Chroma cost ~8x the raw text on
disk, and a Chroma ``where`` filter took 50-100 ms against ~5 ms unfiltered, so filters are
applied to over-fetched candidates from our own metadata instead.

One class per mode, behind ``VectorStore``: ``EmbeddedStore`` (a collection in each
generation's folder) and ``ServerStore`` (a Chroma server's collection, shared). This package is
the only importer of ``chromadb`` and the only code that knows its files; its errors are
translated here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_mcp.index.store.base import VectorStore
from rag_mcp.index.store.embedded import EmbeddedStore
from rag_mcp.index.store.server import ServerStore

if TYPE_CHECKING:
    from rag_mcp.config import Settings

__all__ = ["EmbeddedStore", "ServerStore", "VectorStore", "store_class"]


def store_class(settings: Settings) -> type[VectorStore]:
    """The store of the configured mode: a Chroma server when ``store.chroma_url`` is set."""
    return ServerStore if settings.chroma_url else EmbeddedStore
