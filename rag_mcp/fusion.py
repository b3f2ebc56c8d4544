"""How dense and lexical evidence become one calibrated score in [0, 1].

For every candidate (the union of the dense and the lexical top lists) we know:
  * ``cos`` — cosine similarity of the query and span vectors (exact for every candidate: the
    vectors of lexical-only candidates are fetched from the store), and
  * ``lex`` — the span's BM25 divided by the highest BM25 any span could reach for this query,
    ``(k1 + 1) * sum(idf)`` over the query's terms (``LexicalIndex.upper_bound``): the share of
    the query's information the span matches, on the same absolute [0, 1] scale for every query
    (0 beyond BM25's top 4 x pool, which the retriever reads so that a dense candidate the
    lexical top list just missed gets its own BM25, as lexical-only ones get their cosine).

The default fusion ("convex") is the weighted sum ``raw = alpha * cos + (1 - alpha) * lex``
(a convex combination with theoretical normalisation, Bruch et al., 2023). Dividing BM25 by its
best hit instead (the usual min-max) hands the full lexical weight to the best keyword match
of every query, even when that match is weak; equal-weight reciprocal rank fusion ignores the
scores altogether. Measured on the evaluation sets (docs/RETRIEVAL.md): RRF scored below the
convex fusion on every set; min-max came within noise on average but ranks a weak keyword match
like a perfect one, so its fused score could not carry one tau for all queries.

The cosine's weight depends on the query's length. For a query of ``n`` distinct lexical terms,
more than ``terms`` (12), the weight that orders the spans shrinks to ``a_q = alpha * terms / n``.
Two reasons, both general: the upper bound sums the idf of every query term and no span matches
a hundred of them, so a long query's ``lex`` is compressed towards 0 (the best span of a
SWE-bench issue scores ~0.08) and a fixed alpha hands the order to the cosine exactly when BM25
has the most evidence; and MiniLM reads only the first 256 word pieces and mean-pools them,
so a long text's vector is a blur of its beginning. Short queries (every docs and CoSQA query
and 715 of the 815 docstring queries of the evaluation kit) keep ``alpha``. The weight
taken from the span's cosine goes to the query's best cosine, a constant within the query:
``raw = a_q * cos + (1 - a_q) * lex + (alpha - a_q) * best_cos``. The constant changes no order;
it keeps a long query's scores on the scale the calibration below was fitted on (without it, a
curve fitted without the long queries dropped most of their hits at tau = 0.02). On the kit's
30 SWE-bench issues MRR@10 goes from 0.136 with a fixed alpha to 0.236 (BM25 alone: 0.224); the
other sets lose at most 0.002 (docs/RETRIEVAL.md, "Query-adaptive weight").

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
    #: distinct query terms beyond which the cosine's weight falls as ``terms / n``
    terms: float = math.inf


# Fitted by `bench/calibrate.py` on the four sets of ../shared/eval with the onnx-int8 backend
# (docs/RETRIEVAL.md shows the fit, the plots and the leave-one-set-out check). alpha and terms:
# the best MRR@10 averaged over the sets (terms from 10 to 15 are within one SWE-bench query of
# each other; the other sets barely have queries that long). tau: the largest threshold that
# keeps hit@5 within 2 points of tau = 0 on every set, also when the curve is fitted without
# that set; the fp32 backend shares the row (same model, cosines within ~0.01).
CALIBRATIONS: dict[str, Calibration] = {
    "all-MiniLM-L6-v2": Calibration(
        alpha=0.6, a=6.562, b=-5.417, tau=0.01, terms=12,
        source="bench/calibrate.py, onnx-int8, docs+cosqa+docstring+swebench_lite"),
}
# Models without a fitted row: the same shape and no threshold (tau = 0 drops nothing), since
# an uncalibrated score means nothing absolute. The length rule stays: BM25's compression on long
# queries does not depend on the model, and every embedding model has a window.
FALLBACK = Calibration(alpha=0.7, a=10.0, b=-5.5, tau=0.0, terms=12,
                       source="uncalibrated default")

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


def query_alpha(cal: Calibration, n_terms: int) -> float:
    """The cosine's weight for a query of ``n_terms`` distinct lexical terms."""
    if n_terms <= cal.terms:
        return cal.alpha
    return cal.alpha * cal.terms / n_terms


def fuse(cos: float, lex: float, cal: Calibration, n_terms: int = 0,
         best_cos: float = 0.0) -> tuple[float, float]:
    """``(raw, calibrated)`` of one candidate with the default (convex) fusion, for a query of
    ``n_terms`` distinct lexical terms whose best candidate has cosine ``best_cos``."""
    a_q = query_alpha(cal, n_terms)
    raw = convex(cos, lex, a_q) + (cal.alpha - a_q) * best_cos
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
