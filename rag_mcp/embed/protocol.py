"""What an embedding model is to the rest of rag-mcp: the ``Embedder`` protocol.

Vectors are float32, L2-normalised (``normalise``) and in input order. Every embedder is safe
to share between threads: ``embed_query`` may run concurrently (ONNX Runtime sessions and the
Rust tokenizer are read-only after construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where vectors are made, not here: ``model_identity`` is all a ``rag-index``
# run with nothing to update needs from this package, and importing numpy is ~0.1 s of such a run.


class Embedder(Protocol):
    """What the indexer and the server need from an embedding model."""

    name: str
    backend: str
    dim: int
    max_tokens: int

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        """Vectors of span texts, each read up to ``max_tokens`` (0: the model's window)."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as float32."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
