"""How dense and lexical evidence become one calibrated score in [0, 1].

For every candidate (the union of the dense and the lexical top lists) we know:
  * ``cos`` — cosine similarity of the query and span vectors (exact for every candidate: the
    vectors of lexical-only candidates are fetched from the store), and
  * ``lex`` — the span's BM25 divided by the highest BM25 any span could reach for this query,
    ``(k1 + 1) * sum(idf)`` over the query's terms (``LexicalIndex.upper_bound``): the share of
    the query's information the span matches, on the same absolute [0, 1] scale for every query
    (0 when BM25 did not retrieve it).

The default fusion ("convex") is the weighted sum ``raw = alpha * cos + (1 - alpha) * lex``
(a convex combination with theoretical normalisation, Bruch et al., 2023). Dividing BM25 by its
best hit instead (the usual min-max) hands the full lexical weight to the best keyword match
of every query, even when that match is weak; equal-weight reciprocal rank fusion ignores the
scores altogether. Measured on the evaluation sets (docs/RETRIEVAL.md): RRF scored below the
convex fusion on every set; min-max came within noise on average but ranks a weak keyword match
like a perfect one, so its fused score could not carry one tau for all queries.

``raw`` is mapped to a probability of relevance by a logistic curve fitted per embedding model
on labelled queries (Platt scaling, ``bench/calibrate.py``):
``score = 1 / (1 + exp(-(a * raw + b)))``. The mapping is monotone, so it never changes the
ranking; it makes ``tau`` mean the same thing across queries and models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FUSIONS = ("convex", "rrf", "dense", "lexical")


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fusion weight, logistic mapping and default tau of one embedding model."""

    alpha: float
    a: float
    b: float
    tau: float
    #: where the numbers came from (shown in docs and rag_health)
    source: str


# Fitted by `bench/calibrate.py` on the four sets of ../shared/eval with the onnx-int8 backend
# (docs/RETRIEVAL.md shows the fit, the plots and the leave-one-set-out check). alpha: the best
# MRR@10 averaged over the sets. tau: the largest threshold that keeps hit@5 within 2 points of
# tau = 0 on every set; the fp32 backend shares the row (same model, cosines within ~0.01).
CALIBRATIONS: dict[str, Calibration] = {
    "all-MiniLM-L6-v2": Calibration(
        alpha=0.6, a=6.838, b=-5.489, tau=0.01,
        source="bench/calibrate.py, onnx-int8, docs+cosqa+docstring+swebench_lite"),
}
# Models without a fitted row: the same shape and no threshold (tau = 0 drops nothing), since
# an uncalibrated score means nothing absolute.
FALLBACK = Calibration(alpha=0.7, a=10.0, b=-5.5, tau=0.0, source="uncalibrated default")

RRF_K = 60.0


def calibration_for(model: str) -> Calibration:
    name = model.split("/")[-1]
    return CALIBRATIONS.get(name, FALLBACK)


def logistic(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def convex(cos: float, lex: float, alpha: float) -> float:
    return alpha * cos + (1.0 - alpha) * lex


def fuse(cos: float, lex: float, cal: Calibration) -> tuple[float, float]:
    """``(raw, calibrated)`` for one candidate with the default (convex) fusion."""
    raw = convex(cos, lex, cal.alpha)
    return raw, logistic(cal.a * raw + cal.b)


def rrf(dense_rank: int | None, lex_rank: int | None, w_dense: float = 1.0,
        w_lex: float = 1.0) -> float:
    """Reciprocal rank fusion (ranks are 0-based; None = not retrieved by that leg)."""
    s = 0.0
    if dense_rank is not None:
        s += w_dense / (RRF_K + dense_rank + 1)
    if lex_rank is not None:
        s += w_lex / (RRF_K + lex_rank + 1)
    return s
