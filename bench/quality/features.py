"""Candidate features of every evaluation query, for fitting the fusion offline.

For each query, the union of the dense top ``pool`` and the lexical top ``pool`` from our real
retriever (``Retriever.retrieve``, the path ``rag_query`` uses), with each candidate's cosine,
raw BM25, ranks in both legs, size and relevance under the kit's rule. Fusions, weights and
calibrations are then compared on the same candidates without re-running retrieval. Cached in
``bench/.work/features/``.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench._report import WORK
from bench.quality.sets import EvalSet, settings_for
from rag_mcp.deps import Deps, build_deps
from rag_mcp.eval.metrics import LineSpan, is_match
from rag_mcp.eval.run import eval_settings
from rag_mcp.index.lexical import tokenize
from rag_mcp.search.retrieve import Filters

FEATURES = WORK / "features"
#: the embedding model whose indexes the features come from (``use_model``)
MODEL = "all-MiniLM-L6-v2"


def use_model(model: str) -> None:
    """Collect (and cache) features from ``model``'s indexes from now on in this process."""
    global MODEL
    MODEL = model


def _tag(backend: str) -> str:
    return backend if MODEL == "all-MiniLM-L6-v2" else f"{backend}-{MODEL}"


def open_deps(ev: EvalSet, sub: str, backend: str, **extra: object) -> Deps:
    return build_deps(eval_settings(settings_for(ev, sub, backend, model=MODEL, **extra), 10))


def by_corpus(ev: EvalSet) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for sub in ev.corpora:
        yield sub, [q for q in ev.queries if q.get("corpus", "") == sub]


def _cached_rows(path: Path, label: str, ev: EvalSet, backend: str,
                 row: Callable[[Deps, dict[str, Any]], dict[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The saved features at ``path``, or one ``row(deps, query)`` per query, saved there."""
    if path.exists():
        return list(orjson.loads(gzip.decompress(path.read_bytes())))
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for sub, qs in by_corpus(ev):
        deps = open_deps(ev, sub, backend)
        try:
            rows += [row(deps, q) for q in qs]
        finally:
            deps.close()
    FEATURES.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(orjson.dumps(rows)))
    print(f"{label} {ev.name} {backend}: {len(rows)} queries in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def collect(ev: EvalSet, backend: str, pool: int = 200) -> list[dict[str, Any]]:
    path = feature_path(ev, backend, pool)
    return _cached_rows(path, "features", ev, backend,
                        lambda deps, q: _fused_row(deps, q, pool))


def _fused_row(deps: Deps, q: dict[str, Any], pool: int) -> dict[str, Any]:
    gold = [LineSpan.of(g) for g in q["gold"]]
    gold_files = set(q.get("gold_files") or [g.path for g in gold])
    r = deps.repo().retriever.retrieve(" ".join(q["query"].split()), Filters(), fusion="convex",
                                pool=pool)
    cands = []
    for h in r.hits:
        sp = h.span
        ls = LineSpan(sp.path, sp.start_line, sp.end_line)
        cands.append({
            "path": sp.path, "s": sp.start_line, "e": sp.end_line,
            "cos": round(h.cos, 5), "bm25": round(h.bm25, 4),
            "dr": h.dense_rank, "lr": h.lex_rank, "bytes": sp.byte_len,
            "kind": sp.kind,
            "rel": int(any(is_match(ls, g) for g in gold)),
            "relf": int(sp.path in gold_files),
        })
    return {"id": q["id"], "lib": q.get("lib") or q.get("repo") or "",
            "ngold": len(gold), "cands": cands}


def collect_legs(ev: EvalSet, backend: str, pool: int = 200) -> list[dict[str, Any]]:
    """Like ``collect`` but with the legs apart: dense top ``pool``, BM25 on the span body and
    BM25 on the name field (path + symbol/heading), each its own top ``pool``; the cosine of
    every candidate. Lets the name weight and the normalisations be chosen offline."""
    path = FEATURES / f"{ev.name}-{_tag(backend)}-legs-p{pool}.json.gz"
    return _cached_rows(path, "leg features", ev, backend,
                        lambda deps, q: _legs_row(deps, q, pool))


def _legs_row(deps: Deps, q: dict[str, Any], pool: int) -> dict[str, Any]:
    idx = deps.repo().handle.get()
    assert idx.catalog is not None and idx.vectors is not None
    emb = deps.models.for_manifest(idx.manifest)
    text = " ".join(q["query"].split())
    toks = tokenize(text)
    qv = deps.repo().retriever.qvec.get(emb, text)  # the query text rag_query embeds
    dense = idx.vectors.query(qv, pool)
    body = idx.lexical.search(toks, pool, field="body")
    name = idx.lexical.search(toks, pool, field="name")
    by_key = idx.catalog.by_emb_keys([k for k, _ in dense])
    cands: dict[int, dict[str, Any]] = {}
    for rank, (key, sim) in enumerate(dense):
        for row in by_key.get(key, ()):
            cands.setdefault(row.sid, {"row": row})["cos"] = sim
            cands[row.sid].setdefault("dr", rank)
    sids = [sid for sid, _ in body] + [sid for sid, _ in name]
    by_sid = idx.catalog.by_sids(sids)
    for leg, hits in (("body", body), ("name", name)):
        for rank, (sid, bm) in enumerate(hits):
            c = cands.setdefault(sid, {"row": by_sid[sid]})
            c[leg] = bm
            c[leg[0] + "r"] = rank
    missing = [c for c in cands.values() if "cos" not in c]
    vecs = (idx.vectors.vectors(list({c["row"].emb_key for c in missing}))
            if missing else {})
    for c in missing:
        v = vecs.get(c["row"].emb_key)
        c["cos"] = float(np.dot(v, qv)) if v is not None else 0.0
    gold = [LineSpan.of(g) for g in q["gold"]]
    gold_files = set(q.get("gold_files") or [g.path for g in gold])
    out = []
    for c in cands.values():
        sp = c["row"].span
        ls = LineSpan(sp.path, sp.start_line, sp.end_line)
        out.append({
            "path": sp.path, "s": sp.start_line, "e": sp.end_line,
            "cos": round(float(c["cos"]), 5), "body": round(c.get("body", 0.0), 4),
            "name": round(c.get("name", 0.0), 4), "dr": c.get("dr"),
            "br": c.get("br"), "nr": c.get("nr"), "bytes": sp.byte_len,
            "kind": sp.kind, "rel": int(any(is_match(ls, g) for g in gold)),
            "relf": int(sp.path in gold_files),
        })
    ub_body = idx.lexical.upper_bound(toks, name_boost=0.0)
    ub_name = idx.lexical.upper_bound(toks, name_boost=1.0) - ub_body
    return {"id": q["id"], "lib": q.get("lib") or q.get("repo") or "",
                 "ngold": len(gold), "nterms": len(set(toks)),
                 "ub_body": ub_body, "ub_name": ub_name, "cands": out}


def feature_path(ev: EvalSet, backend: str, pool: int = 200) -> Path:
    return FEATURES / f"{ev.name}-{_tag(backend)}-p{pool}.json.gz"
