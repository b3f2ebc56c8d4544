"""The ONNX backends at run time: an ONNX Runtime session, right-padded batches and
sentence-transformers' pooling, with only onnxruntime, tokenizers and numpy imported.

The model file comes from ``rag_mcp.embed.onnx_export`` (exported once per model and recipe).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag_mcp.embed.batching import TokenCounter, plan_batches
from rag_mcp.embed.models import ModelSpec
from rag_mcp.embed.protocol import normalise
from rag_mcp.errors import Internal


def session(path: Path, threads: int) -> Any:
    """An ONNX Runtime CPU session: ``threads`` for one call (0: one per physical core)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads  # 0: ORT picks one thread per physical core
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only: ORT's warnings are not the user's business
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feed(seqs: Sequence[Sequence[int]], pad_id: int, names: Sequence[str]
         ) -> dict[str, np.ndarray]:
    """Right-padded input arrays for one batch."""
    width = max(len(s) for s in seqs)
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        out["token_type_ids"] = np.zeros_like(ids)
    return out


def pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """sentence-transformers' pooling, then L2 normalisation."""
    if mode == "cls":
        return normalise(hidden[:, 0])
    m = mask[..., None].astype(hidden.dtype)
    if mode == "max":
        return normalise(np.where(m > 0, hidden, -1e9).max(axis=1))
    total = (hidden * m).sum(axis=1)
    count = np.maximum(m.sum(axis=1), 1e-9)
    return normalise(total / (np.sqrt(count) if mode == "mean_sqrt_len" else count))


class OnnxEmbedder:
    """Embeds with an exported ONNX model; imports neither torch nor sentence-transformers.

    ``embed_query`` and ``embed_documents`` may be called from several threads at once: the ORT
    session's ``run`` and the tokenizer are thread-safe and nothing else is shared.
    """

    def __init__(self, model: str, backend: str, spec: ModelSpec, onnx_file: Path, *,
                 threads: int = 0, batch_size: int = 32) -> None:
        self.name, self.backend = model, backend
        self.max_tokens = spec.max_tokens
        self.path = onnx_file
        self._pooling = spec.pooling
        self._batch = batch_size
        self._tok = TokenCounter(spec)
        self._query_prefix, self._passage_prefix = spec.query_prefix, spec.passage_prefix
        self._prefix_tokens = self._tok.prefix_tokens(spec.passage_prefix)
        try:
            self._sess = session(onnx_file, threads)
        except Exception as exc:  # ORT raises its own untyped errors
            raise Internal(
                f"cannot load the exported model {onnx_file}: {exc.__class__.__name__}; delete "
                f"{onnx_file.parent} to export it again") from None
        self._names = [i.name for i in self._sess.get_inputs()]
        # the first run allocates and plans; doing it here keeps it off the first query
        self.dim = int(self._run([self._tok.encode(["warm up"])[0]]).shape[1])

    def _run(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        inputs = feed(seqs, self._tok.pad_id, self._names)
        hidden = self._sess.run(None, inputs)[0]
        return pool(hidden, inputs["attention_mask"], self._pooling)

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._passage_prefix:
            texts = [self._passage_prefix + t for t in texts]
        seqs = self._tok.encode(texts, max_tokens + self._prefix_tokens if max_tokens else 0)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for idx in plan_batches([len(s) for s in seqs], self._batch):
            out[idx] = self._run([seqs[i] for i in idx])
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._run(self._tok.encode([self._query_prefix + text]))[0]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._tok.count(texts)
