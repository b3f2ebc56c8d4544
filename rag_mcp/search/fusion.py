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
more than ``terms`` (10), the weight that orders the spans shrinks to ``a_q = alpha * terms / n``.
Two reasons, both general: the upper bound sums the idf of every query term and no span matches
a hundred of them, so a long query's ``lex`` is compressed towards 0 (the best span of a
SWE-bench issue scores ~0.08) and a fixed alpha hands the order to the cosine exactly when BM25
has the most evidence; and MiniLM reads only the first 256 word pieces and mean-pools them,
so a long text's vector is a blur of its beginning. Short queries (every docs query, 499 of
the 500 CoSQA queries and 648 of the 815 docstring queries of the evaluation kit) keep
``alpha``. The weight taken from the span's cosine goes to the query's best cosine, a constant
within the query: ``raw = a_q * cos + (1 - a_q) * lex + (alpha - a_q) * best_cos``. The
constant changes no order among spans of one kind; it keeps a long query's scores on the scale
the calibration below was fitted on (without it, a curve fitted without the long queries
dropped most of their hits at tau = 0.02). On the kit's 30 SWE-bench issues MRR@10 goes from
0.136 with a fixed alpha to 0.236 (BM25 alone: 0.224); the other sets lose at most 0.002
(docs/RETRIEVAL.md, "Query-adaptive weight").

The cosine's weight also depends on the candidate's kind: ``alpha`` for code spans,
``alpha_prose`` for documentation and plain-text spans (``None``: ``alpha`` for every kind), each
with the length rule above and its own best-cosine constant. The reason holds beyond the kit:
prose is found by its words — a question about documentation shares its vocabulary, which is
where BM25 is strong — and code by its meaning, since a question rarely uses the identifiers of
the code that answers it, the vocabulary gap dense retrieval closes. No query-side signal
separated the two (leg confidence, agreement and query length all wanted alpha ~0.4 on the docs
set and ~0.8 on CoSQA in the same bins); the candidate's kind does, and every span has one.
Measured on the kit (docs/RETRIEVAL.md, "Weight per span kind"), against one weight for every
kind: docs MRR@10 0.439 -> 0.458, CoSQA 0.504 -> 0.515 (past the dense leg's 0.511),
docstring 0.474 -> 0.472, SWE-bench 0.236 either way. The limits: the kit has one prose set,
so ``alpha_prose`` rests on it alone, and its sets are each all prose or all code, so how a
doc span and a code span compete in one mixed repository was not measured.

BM25's weight also depends on how much of the query the index can read. ``lex`` is taken over
the bound of the terms the corpus holds, so a question whose words are mostly not in it (German
asked of English pages) is ranked by the few that are — a name, a loanword, an English term —
and a span matching that one word looks like a perfect keyword match. When the index knows less
than half of the query's distinct terms (``KNOWN_FULL``), the lexical leg keeps that share of
its weight times two (``lexical_trust``) and the rest goes to the cosine:
``raw = a_t * cos + (1 - a_t) * lex + (alpha - a_q) * best_cos`` with
``a_t = a_q + (1 - a_q) * (1 - trust)``; at trust 0 the hybrid orders as the dense leg does.
The page evidence (``search.pages``) is scaled by the same trust. Half is where the evaluation
material separates: the kit's docs and CoSQA queries never fall under it, 2 of 815 docstring
queries, 1 of 30 SWE-bench issues and 2 of the DokuWiki set's 113 same-language questions do,
against 205 of its 226 cross-lingual ones (their mean known share: 9-39%). On that set it lifts
the cross-lingual hit@5 (mean of six pairs) of multilingual-e5-small's hybrid from 0.654 to 0.722
(dense leg alone 0.734) and bge-small-en-v1.5's from 0.551 to 0.569, every same-language cell
unchanged; the kit sets move by at most 0.001 MRR@10 (docs/RETRIEVAL.md, "Questions whose words
the index lacks"). A trust proportional to the known share everywhere gained a little more
across languages (0.739) but cost English questions over English pages 0.019 MRR@10.

``raw`` is mapped to a probability of relevance by a logistic curve fitted per embedding model
on labelled queries (Platt scaling, ``bench/quality/calibrate.py``):
``score = 1 / (1 + exp(-(a * raw + b)))``. The mapping is monotone, so it never changes the
ranking; it makes ``tau`` mean the same thing across queries and models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FUSIONS = ("convex", "rrf", "dense", "lexical")
#: span kinds weighted as prose (``Calibration.alpha_prose``); everything else is code
PROSE_KINDS = frozenset({"doc", "text"})


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fusion weights, logistic mapping and default tau of one embedding model."""

    #: the cosine's weight for code spans (and every span when ``alpha_prose`` is None)
    alpha: float
    a: float
    b: float
    tau: float
    #: where the numbers came from (shown in docs and rag_health)
    source: str
    #: distinct query terms beyond which the cosine's weight falls as ``terms / n``
    terms: float = math.inf
    #: the cosine's weight for documentation and plain-text spans; None = ``alpha``
    alpha_prose: float | None = None
    #: how much the query's lexical coverage (``coverage_shift``) lowers every hit's score
    coverage_weight: float = 0.0
    #: the answer is flagged low_confidence when its best hit scores under this (None = tau)
    flag: float | None = None
    #: the weight of a prose span's page evidence in its order (``search.pages``; 0 = none)
    page: float = 0.0

    @property
    def flag_threshold(self) -> float:
        """The score the best hit must reach for the answer not to be flagged (at least tau)."""
        return self.tau if self.flag is None else max(self.flag, self.tau)

    def alpha_for(self, kind: str) -> float:
        """The cosine's weight for a span of ``kind`` (code, doc or text), before the length
        rule."""
        if self.alpha_prose is None or kind not in PROSE_KINDS:
            return self.alpha
        return self.alpha_prose


# One row per model, each fitted by `bench/quality/calibrate.py --model NAME` (BENCHMARKS.md,
# "Fusion weights, calibration and tau"). all-MiniLM-L6-v2: on the four sets of ../shared/eval with
# the onnx-int8 backend (docs/RETRIEVAL.md shows the fit, the plots and the leave-one-set-out
# check). alpha (code spans), alpha_prose (doc/text spans) and terms: the best MRR@10 averaged over
# the sets among the settings that beat both single legs on every set (the fused default's
# requirement, used as a constraint; here the best mean meets it anyway). The docs set is the kit's
# only prose set, so alpha_prose rests on it alone; the code sets choose alpha and terms (each code
# set held out gets the same 0.8 / 8, or 0.85 / 8 without docstring; the ten best settings are
# within 0.001 of each other on the mean). Refitted for the embedded text of EMBED_TEXT_VERSION 2
# (code identifiers split; before: alpha 0.7, terms 10, a 5.739, b -5.233). tau: the largest
# threshold that keeps hit@5 within 2 points of tau = 0 on every set, also when the curve is fitted
# without that set; the fp32 backend shares the row (same model, cosines within ~0.01).
# coverage_weight and flag: fitted by `bench/quality/confidence.py --fit` on the kit's on-topic
# questions and the dev half of the off-topic set (bench/quality/offtopic.jsonl): the most
# off-topic questions flagged while at most 2.5% of each set's on-topic ones are; the holdout
# half is only measured (docs/BENCHMARKS.md, "Low confidence").
# The page evidence's weight (``search.pages``), the same for every model: on the docs set it moved
# MRR@10 from 0.644 to 0.710 with bge-small-en-v1.5 (0.705 at 0.5, 0.707 at 1.0), from 0.594 to
# 0.698 with multilingual-e5-small and from 0.640 to 0.679 with all-MiniLM-L6-v2; the code sets
# have no prose spans, so it leaves them as they were.
PAGE = 0.8
CALIBRATIONS: dict[str, Calibration] = {
    "all-MiniLM-L6-v2": Calibration(
        alpha=0.8, alpha_prose=0.4, a=4.388, b=-4.733, tau=0.02, terms=8,
        coverage_weight=0.75, flag=0.025, page=PAGE,
        source="bench/quality/calibrate.py, onnx-int8, docs+cosqa+docstring+swebench_lite; "
               "coverage_weight and flag: bench/quality/confidence.py --fit"),
    # The default model. Fitted on docs, CoSQA and docstring (SWE-bench's thirty repository
    # snapshots were embedded with it only later, so a refit with them is still to be made;
    # with this row it scores 0.352-0.373 there, level with MiniLM). Its dense leg is
    # strong enough that the best weight is the grid's largest cosine weight for code and prose
    # alike, and no setting beats both legs on docstring (dense alone 0.606, fused 0.598 on the
    # replayed candidates; docs 0.499 -> 0.514, CoSQA 0.504 -> 0.517). The flag: off-topic
    # questions flagged 99.3% (holdout half) against 91.5% without the coverage shift, on-topic
    # ones at most 1.3% per set.
    # tau: 0, not the 0.01 the calibration chose (hit@5 within 2 points, 4% fewer tokens):
    # since the page evidence lifts a right section whose own score is low to the top, 0.01
    # dropped it and cost docs MRR@10 0.710 -> 0.682 and docstring 0.664 -> 0.657 at the default
    # tau (bench/quality/confidence.py); the flag, not tau, says when nothing relevant was found.
    "bge-small-en-v1.5": Calibration(
        alpha=0.85, alpha_prose=0.85, a=18.147, b=-14.573, tau=0.0, terms=12,
        coverage_weight=1.5, flag=0.01, page=PAGE,
        source="bench/quality/calibrate.py, onnx-int8, docs+cosqa+docstring; "
               "coverage_weight and flag: bench/quality/confidence.py --fit, docs+cosqa+docstring"),
    # Fitted on the docs set and the DokuWiki set in three languages (bench/quality/
    # wiki_languages.py: same-language and cross-lingual questions), the material this model is
    # chosen for. Dense-weighted on every kind: BM25 matches words of the question's language,
    # which across languages are the wrong words (with MiniLM's prose weight, 0.4, German
    # questions over English pages lost 0.14 of MRR@10 against the dense leg alone). No code
    # set: alpha for code takes the prose value; for code, choose an English model. The curve was
    # fitted before the lexical trust (``lexical_trust``), which moves the cross-lingual queries'
    # raw scores towards their cosines; with tau 0 and no flag it drops and flags nothing, so the
    # row was not refitted (a refit would replay the trust: bench/quality/calibrate.py does not).
    "multilingual-e5-small": Calibration(
        alpha=0.85, alpha_prose=0.85, a=15.146, b=-14.160, tau=0.0, terms=15, page=PAGE,
        source="bench/quality/calibrate.py, onnx-int8, docs+wiki_languages"),
}
# Models without a fitted row: the same shape and no threshold (tau = 0 drops nothing), since
# an uncalibrated score means nothing absolute. The length rule stays: BM25's compression on long
# queries does not depend on the model, and every embedding model has a window. The split by
# span kind stays too, with the fitted weights: which leg finds a span depends on whether the
# question shares the span's words (prose) or not (code), a property of BM25 and of the
# questions more than of the embedding model; the curve and tau are the model's own.
FALLBACK = Calibration(alpha=0.7, alpha_prose=0.4, a=10.0, b=-5.5, tau=0.0, terms=10,
                       page=PAGE, source="uncalibrated default")

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


def query_alpha(cal: Calibration, n_terms: int, kind: str = "code") -> float:
    """The cosine's weight for a span of ``kind`` and a query of ``n_terms`` distinct lexical
    terms."""
    alpha = cal.alpha_for(kind)
    if n_terms <= cal.terms:
        return alpha
    return alpha * cal.terms / n_terms


#: the share of a query's distinct terms the lexical index must know for BM25 to keep its full
#: weight (``lexical_trust``)
KNOWN_FULL = 0.5


def lexical_trust(known: float) -> float:
    """How much of its weight the lexical leg keeps for a query of which the index knows the
    share ``known`` of distinct terms: all of it from ``KNOWN_FULL`` up, less in proportion
    below.

    BM25 scores a span over the terms the index has, so a question whose words are mostly not
    in the corpus (German asked of English pages) is ranked by the few that are (names,
    loanwords, the odd English word), a near-random choice the cosine does not make. A
    same-language question knows most of its words: the kit's docs, CoSQA and docstring
    queries and the DokuWiki set's same-language ones hold 50% or more of known terms for
    all but a few (at most 3% of a set); its cross-lingual ones 9-39% on average."""
    return min(1.0, max(0.0, known) / KNOWN_FULL)


def fuse(cos: float, lex: float, cal: Calibration, n_terms: int = 0,
         best_cos: float = 0.0, kind: str = "code", prior: float = 0.0,
         trust: float = 1.0) -> tuple[float, float]:
    """``(raw, calibrated)`` of one candidate span of ``kind`` with the default (convex) fusion,
    for a query of ``n_terms`` distinct lexical terms whose best candidate has cosine
    ``best_cos``; ``prior`` is added to the raw score (a test file's penalty is negative);
    ``trust`` (``lexical_trust``) is the share of its weight the lexical leg keeps, the rest
    going to the cosine (0: the dense leg's order)."""
    alpha = cal.alpha_for(kind)
    a_q = query_alpha(cal, n_terms, kind)
    a_t = a_q + (1.0 - a_q) * (1.0 - trust)  # exactly a_q at full trust
    raw = convex(cos, lex, a_t) + (alpha - a_q) * best_cos + prior
    return raw, logistic(cal.a * raw + cal.b)


#: the least coverage the shift counts (ln 0 is -inf; a query with no known term is then far under
#: any threshold anyway)
MIN_COVERAGE = 1e-4


def coverage_shift(cal: Calibration, coverage: float) -> float:
    """What the query's lexical ``coverage`` adds to the logit of every hit's score:
    ``coverage_weight * ln(coverage)``, 0 when every query term occurs in the corpus.

    The same for every hit of the query, so it never changes their order; it lowers a question
    whose words the corpus lacks ("bake sourdough bread" asked of a web framework) as a whole,
    which the hit-level evidence cannot: BM25's share is taken over the terms the corpus has, so
    a frame word ("how do I") fills it, and a cosine of 0.2 is what any text gets from MiniLM."""
    if cal.coverage_weight <= 0.0 or coverage >= 1.0:
        return 0.0
    return cal.coverage_weight * math.log(max(coverage, MIN_COVERAGE))


def shift_score(score: float, shift: float) -> float:
    """A calibrated score with ``shift`` added to its logit."""
    if shift == 0.0:
        return score
    score = min(max(score, 1e-12), 1.0 - 1e-12)
    return logistic(math.log(score / (1.0 - score)) + shift)


def rrf(dense_rank: int | None, lex_rank: int | None, w_dense: float = 1.0,
        w_lex: float = 1.0) -> float:
    """Reciprocal rank fusion (ranks are 0-based; None = not retrieved by that leg)."""
    s = 0.0
    if dense_rank is not None:
        s += w_dense / (RRF_K + dense_rank + 1)
    if lex_rank is not None:
        s += w_lex / (RRF_K + lex_rank + 1)
    return s
