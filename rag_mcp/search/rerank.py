"""The optional rerank stage: a cross-encoder reads (query, span) pairs and reorders the top hits.

Off by default (``query.rerank``), and only possible when ``query.reranker_model`` names a
sentence-transformers CrossEncoder on this machine (a local folder, or a name in the offline
Hugging Face cache): nothing is downloaded. The model loads on the first reranked query, so a
server that never reranks never imports torch.

The cross-encoder decides the order only. Each hit keeps its calibrated fusion score, so ``tau``
means the same with and without reranking (docs/RETRIEVAL.md, "Rerank").

This is the one module besides rag_mcp/embed/torch_backend.py that imports sentence-transformers:
the cross-encoder is a different model family with its own loader, and keeping it here keeps
rag_mcp/embed about vectors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rag_mcp.embed.catalog import require_torch
from rag_mcp.embed.models import offline, resolve_model
from rag_mcp.errors import InvalidArgument, RagError
from rag_mcp.index.handle import IndexHandle
from rag_mcp.search.retrieve import Hit

log = logging.getLogger(__name__)

MAX_PAIR_CHARS = 2000  # ~512 tokens of code: what a MiniLM-sized cross-encoder reads anyway
SEED = 1234


class PairScorer(Protocol):
    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = ...) -> Any: ...


def load_cross_encoder(model: str, *, max_length: int = 512) -> PairScorer:
    """A CrossEncoder from a local folder or the offline cache, or a clear InvalidArgument."""
    try:
        path = resolve_model(model)
    except InvalidArgument:
        if Path(model).expanduser().is_dir():
            raise InvalidArgument(
                f"reranker model {model!r} is not a sentence-transformers model folder (no "
                "modules.json or config.json); point query.reranker_model (env "
                "RAG_RERANKER_MODEL) at a CrossEncoder folder") from None
        raise InvalidArgument(
            f"reranker model {model!r} is not on this machine and nothing is downloaded: set "
            "query.reranker_model (env RAG_RERANKER_MODEL) to a local CrossEncoder folder, or "
            "call rag_query without rerank") from None
    require_torch("rag_query with rerank (a cross-encoder)")
    offline()
    import torch
    from sentence_transformers import CrossEncoder

    # A checkpoint without a classification head (say, the bundled embedding model) gets a
    # randomly initialised one; a fixed seed makes that at least repeatable run to run.
    torch.manual_seed(SEED)
    try:
        return CrossEncoder(str(path), num_labels=1, max_length=max_length, device="cpu",
                            local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InvalidArgument(
            f"reranker model {model!r} could not be loaded as a cross-encoder "
            f"({type(exc).__name__}); point query.reranker_model at a CrossEncoder folder"
        ) from None


def pair_text(hit: Hit, text: str) -> str:
    """What the cross-encoder reads for a span: where it is, what it is, then its text."""
    sp = hit.span
    head = sp.path + (f" {sp.symbol or sp.heading}" if (sp.symbol or sp.heading) else "")
    return f"{head}\n{text}"[:MAX_PAIR_CHARS]


class CrossEncoderReranker:
    """``reranker(query, hits) -> hits`` for QueryService; thread-safe, loads on first use."""

    def __init__(self, model: str, handle: IndexHandle, *,
                 loader: Callable[[str], PairScorer] = load_cross_encoder,
                 batch_size: int = 32) -> None:
        self.model = model
        self.handle = handle
        self._loader = loader
        self._scorer: PairScorer | None = None
        self._error: RagError | None = None
        self._lock = threading.Lock()
        self.batch_size = batch_size

    def scorer(self) -> PairScorer:
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._scorer is None:
                t0 = time.perf_counter()
                try:
                    self._scorer = self._loader(self.model)
                except RagError as exc:
                    self._error = exc  # a missing model stays missing: do not retry per query
                    raise
                log.info("loaded reranker %s in %.1f s", self.model, time.perf_counter() - t0)
            return self._scorer

    def texts(self, hits: Sequence[Hit]) -> list[str]:
        """The span texts, looked up by span ID so a generation swap cannot mix them up."""
        catalog = self.handle.get().catalog
        assert catalog is not None
        rows = catalog.by_sids([h.row.sid for h in hits])
        texts = catalog.texts([h.row.sid for h in hits])
        out = []
        for h in hits:
            row = rows.get(h.row.sid)
            if row is not None and row.id == h.span.id:
                out.append(texts.get(h.row.sid, h.span.preview))
                continue
            moved = catalog.by_id(h.span.id)
            out.append((catalog.text(moved.sid) if moved is not None else None)
                       or h.span.preview)
        return out

    def __call__(self, query: str, hits: list[Hit]) -> list[Hit]:
        if len(hits) < 2:
            return list(hits)
        scorer = self.scorer()
        pairs = [(query, pair_text(h, t)) for h, t in zip(hits, self.texts(hits), strict=True)]
        with self._lock:  # one model, one forward pass at a time
            scores = [float(s) for s in scorer.predict(pairs, batch_size=self.batch_size)]
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
        return [hits[i] for i in order]
