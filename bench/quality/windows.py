"""The fixed-window baselines of the quality bench.

* BM25 over fixed 40-line windows: the kit's own ``bm25_baseline.py`` (imported from the work
  copy of the evaluation kit), so the keyword baseline is exactly the one its README lists,
  measured in the same run.
* Dense only over fixed 1,000-character windows with 200 characters of overlap, the design
  documents' "current indexer": the raw window text is embedded with the same model and backend
  as our pipeline, and searched exactly (all vectors in memory). Its vectors have their own
  cache, ``bench/.work/windows/embcache.sqlite``, keyed like the index's (model identity + text).
  bench.quality.retrieval scores only the corpora whose windows are all embedded; embedding them
  is slow and done apart (SWE-bench's 30 snapshots: ~43k windows, hours on 2 cores):

    .venv/bin/python -m bench.quality.windows --kit ../shared/eval [--sets docs,cosqa,docstring]
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import re
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bench._report import WORK
from bench.quality.sets import EvalSet, add_kit_arg, load_set, use_kit
from indexers.embcache import EmbeddingCache
from rag_mcp.embed import Embedder, load_embedder, model_identity
from rag_mcp.eval.metrics import LineSpan
from rag_mcp.index.spans import embedding_key

WINDOW_CHARS = 1000
OVERLAP_CHARS = 200
CACHE = WORK / "windows" / "embcache.sqlite"

Unit = tuple[str, int, int, str]  # path, start_line, end_line, text


@cache
def kit_bm25() -> ModuleType:
    """The kit's bm25_baseline.py, loaded from the work copy."""
    path = WORK / "eval" / "bm25_baseline.py"
    spec = importlib.util.spec_from_file_location("kit_bm25_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def bm25_windows_run(ev: EvalSet, *, window: int = 40, unit: str = "window", topk: int = 10
                     ) -> dict[str, list[LineSpan]]:
    """The kit's BM25 baseline (``--unit window`` or ``file``) on every query of ``ev``."""
    kit = kit_bm25()
    run: dict[str, list[LineSpan]] = {}
    for sub in ev.corpora:
        units = kit.make_units(str(ev.corpus_dir(sub)), window, window, unit, None)
        index = kit.BM25([kit.tokenize(u[3]) for u in units])
        for q in ev.queries:
            if q.get("corpus", "") != sub:
                continue
            scores = index.score(kit.tokenize(q["query"]))
            top = heapq.nsmallest(topk, scores.items(), key=lambda kv: (-kv[1], kv[0]))
            run[q["id"]] = [LineSpan(units[i][0], units[i][1], units[i][2]) for i, _ in top]
    return run


def char_windows(rel: str, text: str, size: int = WINDOW_CHARS,
                 overlap: int = OVERLAP_CHARS) -> list[Unit]:
    """Windows of ``size`` characters starting every ``size - overlap``, as line ranges."""
    if not text.strip():
        return []
    starts_of_lines = [0, *(m.end() for m in re.finditer("\n", text))]
    out: list[Unit] = []
    step = size - overlap
    pos = 0
    while True:
        end = min(pos + size, len(text))
        piece = text[pos:end]
        if piece.strip():
            first = int(np.searchsorted(starts_of_lines, pos, side="right"))
            last = int(np.searchsorted(starts_of_lines, max(pos, end - 1), side="right"))
            out.append((rel, first, last, piece))
        if end >= len(text):
            return out
        pos += step


def corpus_windows(root: Path) -> list[Unit]:
    kit = kit_bm25()
    units: list[Unit] = []
    for rel, text in kit.iter_files(str(root)):
        units.extend(char_windows(rel, text))
    return units


class DenseWindows:
    """Embeds windows once (cached on disk) and answers queries by exact cosine."""

    def __init__(self, model: str, backend: str, embedder: Embedder | None = None) -> None:
        self.embedder = embedder or load_embedder(model, backend, cache_dir=_model_cache())
        self.identity = model_identity(model, backend)
        self.cache = EmbeddingCache(CACHE)
        self.embedded = 0

    def vectors(self, units: Sequence[Unit]) -> np.ndarray:
        keys = [embedding_key(self.identity, u[3]) for u in units]
        have = self.cache.get(list(dict.fromkeys(keys)))
        todo = list(dict.fromkeys(k for k in keys if k not in have))
        text_of = {k: u[3] for k, u in zip(keys, units, strict=True)}
        for i in range(0, len(todo), 256):
            chunk = todo[i : i + 256]
            vecs = self.embedder.embed_documents([text_of[k] for k in chunk])
            self.cache.put(chunk, vecs)
            have.update(zip(chunk, vecs, strict=True))
            self.embedded += len(chunk)
        return np.stack([have[k] for k in keys]) if keys else np.zeros((0, 1), np.float32)

    def embedded_all(self, units: Sequence[Unit]) -> bool:
        keys = list(dict.fromkeys(embedding_key(self.identity, u[3]) for u in units))
        return len(self.cache.get(keys)) == len(keys)

    def run(self, ev: EvalSet, topk: int = 10, *, cached_only: bool = False
            ) -> dict[str, list[LineSpan]]:
        """Top ``topk`` windows per query; ``cached_only`` skips the corpora whose windows are
        not all embedded yet (their queries are then absent from the run)."""
        out: dict[str, list[LineSpan]] = {}
        for sub in ev.corpora:
            units = corpus_windows(ev.corpus_dir(sub))
            if cached_only and not self.embedded_all(units):
                continue
            mat = self.vectors(units)
            for q in ev.queries:
                if q.get("corpus", "") != sub:
                    continue
                sims = mat @ self.embedder.embed_query(" ".join(q["query"].split()))
                top = np.argsort(-sims, kind="stable")[:topk]
                out[q["id"]] = [LineSpan(units[i][0], units[i][1], units[i][2]) for i in top]
        return out

    def close(self) -> None:
        self.cache.close()


def _model_cache() -> Path:
    from rag_mcp.config import load_settings

    return load_settings({"root": str(WORK)}, environ={}).model_cache_path


def embed_all(sets: Sequence[EvalSet], backend: str, model: str = "all-MiniLM-L6-v2"
              ) -> dict[str, Any]:
    """Fill the window cache for ``sets`` (the slow part), returning counts."""
    dw = DenseWindows(model, backend)
    try:
        counts = {}
        for ev in sets:
            n = 0
            for sub in ev.corpora:
                units = corpus_windows(ev.corpus_dir(sub))
                dw.vectors(units)
                n += len(units)
            counts[ev.name] = n
            print(f"windows {ev.name} {backend}: {n} windows, {dw.embedded} embedded so far",
                  flush=True)
        return counts
    finally:
        dw.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="docs,cosqa,docstring")
    ap.add_argument("--backend", default="onnx-int8")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    embed_all([load_set(name) for name in a.sets.split(",")], a.backend)


if __name__ == "__main__":
    main()
