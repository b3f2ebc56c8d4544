"""The ``torch`` backend: sentence-transformers on PyTorch, fed length-sorted batches.

The only module of rag-mcp that imports sentence-transformers (and torch for it), and only when
a ``TorchEmbedder`` is built.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag_mcp.embed.batching import TokenCounter, doc_window, plan_batches
from rag_mcp.embed.models import ModelSpec, offline

if TYPE_CHECKING:
    import numpy as np


class TorchEmbedder:
    """sentence-transformers on PyTorch, fed length-sorted batches."""

    def __init__(self, model: str, spec: ModelSpec, threads: int, batch_size: int) -> None:
        offline()
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            import torch

            torch.set_num_threads(threads)  # process-wide: torch has no per-model setting
        self.name, self.backend = model, "torch"
        self._st = SentenceTransformer(str(spec.path), device="cpu")
        # renamed in sentence-transformers 6, where the old name warns; 3.x-5.x have only that
        dim = getattr(self._st, "get_embedding_dimension", None)
        self.dim = int((dim or self._st.get_sentence_embedding_dimension)() or 0)
        self.max_tokens = int(self._st.max_seq_length or spec.max_tokens)
        self._tok = TokenCounter(spec)
        self._batch = batch_size
        self._query_prefix, self._passage_prefix = spec.query_prefix, spec.passage_prefix
        self._prefix_tokens = self._tok.prefix_tokens(spec.passage_prefix)
        # the window is a setting of the model object, so a call that reads less holds the lock
        self._window_lock = threading.Lock()

    def _encode(self, texts: Sequence[str], batch_size: int, window: int) -> np.ndarray:
        import numpy as np

        with self._window_lock:
            self._st.max_seq_length = window
            try:
                out = self._st.encode(list(texts), batch_size=batch_size,
                                      normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)
            finally:
                self._st.max_seq_length = self.max_tokens
        return np.asarray(out, dtype=np.float32)

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        window = doc_window(self.max_tokens,
                            max_tokens + self._prefix_tokens if max_tokens else 0)
        if self._passage_prefix:
            texts = [self._passage_prefix + t for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = [min(n, window) for n in self._tok.count(texts)]
        for idx in plan_batches(lengths, self._batch):
            out[idx] = self._encode([texts[i] for i in idx], len(idx), window)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([self._query_prefix + text], 1, self.max_tokens)[0]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._tok.count(texts)
