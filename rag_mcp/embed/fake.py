"""``test-hash-64``: a deterministic fake embedder for fast tests, loaded like any model.

Each lower-cased word adds +-1 to a hashed dimension: no model files, no runtime, the same
vectors on every machine, and words shared by a query and a text still bring them closer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag_mcp.embed.batching import doc_window
from rag_mcp.embed.protocol import normalise

if TYPE_CHECKING:
    import numpy as np

HASH_MODEL = "test-hash-64"


class HashEmbedder:
    """Deterministic fake: each lower-cased word adds ±1 to a hashed dimension. No model files."""

    name = HASH_MODEL
    backend = "hash"
    dim = 64
    max_tokens = 256
    _word = re.compile(r"[^\W_]+")  # letters and digits, so parse_args and "parse args" overlap

    @classmethod
    def identity(cls, max_tokens: int = 0) -> str:
        """The manifest's record of the fake (``rag_mcp.embed.model_identity``)."""
        cut = f"|w{max_tokens}" if 0 < max_tokens < cls.max_tokens else ""
        return f"{HASH_MODEL}|hash-v1{cut}"

    def _tokens(self, text: str) -> list[str]:
        return self._word.findall(text.lower())

    def _one(self, text: str, max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        v = np.zeros(self.dim, dtype=np.float32)
        for tok in self._tokens(text)[: doc_window(self.max_tokens, max_tokens) - 2]:
            h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        if not v.any():
            v[0] = 1.0  # empty text still gets a unit vector, like a real model
        return normalise(v)

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t, max_tokens) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self._tokens(t)) + 2 for t in texts]  # + [CLS] and [SEP], like BERT
