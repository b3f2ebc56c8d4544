"""Fusion rules scored offline on every evaluation query's candidates, as the retriever fuses them.

bench/quality/features.py records, per query, the dense top 200, the BM25 top 200 on the span
body and on the name field and the cosine of every candidate. ``Q`` replays the retriever on
them: the candidates are the dense top ``POOL`` and the lexical top ``POOL`` (BM25 of body +
w * name), every candidate's BM25 is read from the lexical top ``LOOKUP`` (``Retriever``'s
deeper lookup; ``exact=False`` gives the BM25 of the lexical top list only, as before it), and
the cosine's weight per query and candidate kind comes from
``rag_mcp.search.fusion.query_alpha``, the
product's own code. At alpha = 0.6, w = 0.25 and the lexical top list only, this reproduced
rag_query's MRR@10 on every set (bench/quality/retrieval.py, "Retrieval quality"); at the
per-kind default it is within 0.001 of rag_query's on every set.

``grid`` scores every (alpha for code spans, alpha for prose spans, name weight, terms) setting
on every set and ``choose`` picks the default among them: the best MRR@10 averaged over the
sets among the settings that beat both single legs on every set (the fused default's requirement,
used
as a constraint), else the best mean.

``rule_families`` holds the query-adaptive weights that were tried (length, the model's window,
each leg's confidence, agreement, identifier share); ``compare`` scores one against the legs
and today's default with paired bootstrap intervals.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.quality.features import collect_legs
from bench.quality.sets import load_set
from rag_mcp.index.lexical import LexicalIndex
from rag_mcp.search.fusion import PROSE_KINDS, Calibration, query_alpha
from rag_mcp.search.retrieve import Retriever

POOL = Retriever.POOL
LOOKUP = Retriever.POOL * Retriever.LEX_LOOKUP
BIG = 10**6
TODAY = {"alpha": 0.6, "w": 0.25}  # the default before the query-length rule
ONE_ALPHA = {"alpha": 0.6, "w": 0.25, "terms": 12.0}  # before the weight per span kind
ALPHAS = tuple(round(x, 2) for x in np.arange(0.3, 0.851, 0.05))
NAME_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
TERMS = (8.0, 10.0, 12.0, 15.0, 20.0, 30.0, math.inf)
Setting = tuple[float, float, float, float]  # alpha (code), name weight, terms, alpha (prose)
_IDENT = re.compile(r"\w*(?:_\w|[a-z][A-Z]|\.\w)\w*")

Score = Callable[["Q"], np.ndarray]


@dataclass
class Q:
    """One query's candidates as arrays, and the per-query numbers rules may use."""

    id: str
    lib: str
    cos: np.ndarray
    body: np.ndarray
    name: np.ndarray
    ub_body: float
    ub_name: float
    dr: np.ndarray
    rel: np.ndarray
    bytes: np.ndarray
    nterms: int
    text: str
    #: candidates that are documentation or plain-text spans (weighted by alpha_prose)
    prose: np.ndarray
    _lex: dict[tuple[float, bool], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def legs(self, w: float, exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(candidate mask, normalised BM25) as the retriever sees them with name weight w."""
        key = (w, exact)
        if key not in self._lex:
            bm = self.body + w * self.name
            order = np.argsort(-bm, kind="stable")
            rank = np.empty(len(bm), dtype=int)
            rank[order] = np.arange(len(bm))
            found = bm > 0
            keep = (self.dr < POOL) | (found & (rank < POOL))
            read = found & (rank < (LOOKUP if exact else POOL))
            bound = self.ub_body + w * self.ub_name
            lex = np.where(read, np.minimum(1.0, bm / bound), 0.0) if bound > 0 else bm * 0
            self._lex[key] = (keep, lex)
        return self._lex[key]

    def fused(self, alpha: float, w: float, terms: float = math.inf,
              prose: float | None = None, exact: bool = True) -> np.ndarray:
        """``raw`` of rag_mcp.search.fusion.fuse for every candidate (-inf outside the pool), with
        ``alpha`` for code spans and ``prose`` (None: alpha) for doc/text spans."""
        cal = rule(alpha, terms, prose)
        keep, lex = self.legs(w, exact)
        best = float(self.cos[keep].max())
        a_k = np.where(self.prose, cal.alpha_for("doc"), cal.alpha)
        a_q = np.where(self.prose, query_alpha(cal, self.nterms, "doc"),
                       query_alpha(cal, self.nterms, "code"))
        return np.where(keep, a_q * self.cos + (1 - a_q) * lex + (a_k - a_q) * best, -np.inf)

    def convex(self, a: float, w: float, exact: bool = True) -> np.ndarray:
        """The fused score of every candidate, -inf for those outside the candidate pool."""
        keep, lex = self.legs(w, exact)
        return np.where(keep, a * self.cos + (1 - a) * lex, -np.inf)

    def dense(self, w: float) -> np.ndarray:
        return np.where(self.legs(w)[0], self.cos, -np.inf)

    def lexical(self, w: float) -> np.ndarray:
        keep, lex = self.legs(w, exact=False)
        return np.where(keep, lex, -np.inf)

    def top(self, score: np.ndarray, k: int) -> np.ndarray:
        order = np.argsort(-score, kind="stable")[:k]
        return order[np.isfinite(score[order])]


def rule(alpha: float, terms: float = math.inf, prose: float | None = None) -> Calibration:
    return Calibration(alpha=alpha, a=0.0, b=0.0, tau=0.0, source="search", terms=terms,
                       alpha_prose=prose)


def load(name: str, backend: str) -> list[Q]:
    texts = {q["id"]: " ".join(q["query"].split()) for q in load_set(name).queries}
    out = []
    for r in collect_legs(load_set(name), backend):
        c = r["cands"]
        if not c:
            continue

        def col(key: str, default: float = 0.0, cands: list = c) -> np.ndarray:
            return np.array([default if x[key] is None else x[key] for x in cands], dtype=float)

        out.append(Q(r["id"], r["lib"], col("cos"), col("body"), col("name"),
                     float(r["ub_body"]), float(r["ub_name"]), col("dr", BIG), col("rel"),
                     col("bytes"), int(r["nterms"]), texts[r["id"]],
                     np.array([x["kind"] in PROSE_KINDS for x in c], dtype=bool)))
    return out


def reciprocal_ranks(qs: list[Q], score: Score, n_queries: int) -> np.ndarray:
    """1 / rank of the first relevant hit in the top 10 per query (0 if none; queries without
    candidates count as misses)."""
    rr = np.zeros(n_queries)
    for i, q in enumerate(qs):
        first = np.flatnonzero(q.rel[q.top(score(q), 10)])
        rr[i] = 1 / (first[0] + 1) if len(first) else 0.0
    return rr


def ranking(qs: list[Q], score: Score, n_queries: int) -> dict[str, float]:
    rr = reciprocal_ranks(qs, score, n_queries)
    return {"MRR@10": float(rr.mean()), "hit@1": float((rr >= 1).mean()),
            "hit@5": float((rr >= 1 / 5).mean()), "hit@10": float((rr > 0).mean())}


def paired_ci(a: np.ndarray, b: np.ndarray, reps: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of mean(a - b) over the same queries."""
    d = a - b
    idx = np.random.default_rng(0).integers(0, len(d), (reps, len(d)))
    lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def _features(q: Q, w: float) -> dict[str, float]:
    """Per-query signals the confidence rules use (exact lexical leg, name weight w)."""
    keep, lex = q.legs(w)
    c = np.where(keep, q.cos, -np.inf)
    lo, co = np.argsort(-np.where(keep, lex, -1)), np.argsort(-c)
    words = re.findall(r"\S+", q.text)
    return {"lextop": float(lex[lo[0]]), "cosmargin": float(c[co[0]] - c[co[1]]),
            "overlap": len(set(lo[:10]) & set(co[:10])) / 10,
            "ident": sum(bool(_IDENT.fullmatch(x.strip(".,:;()`'\""))) for x in words)
            / max(len(words), 1)}


def rule_families(data: dict[str, list[Q]], w: float, alphas: tuple[float, ...],
                  terms: tuple[float, ...], t_kind: float = 12.0
                  ) -> dict[str, list[tuple[str, Score]]]:
    """Each family: (label, score) settings, all at name weight ``w``."""
    from rag_mcp.embed.batching import TokenCounter
    from rag_mcp.embed.models import model_spec, resolve_model

    spec = model_spec(resolve_model("all-MiniLM-L6-v2"))
    counter, window = TokenCounter(spec), spec.max_tokens
    qs = [q for s in data.values() for q in s]
    share = dict(zip((q.id for q in qs), (min(1.0, window / n) for n in
                                           counter.count([q.text for q in qs])), strict=True))
    feats = {q.id: _features(q, w) for q in qs}

    def clip(x: float) -> float:
        return min(1.0, max(0.0, x))

    def per_query(fn: Callable[[Q], float], exact: bool = True) -> Score:
        return lambda q: q.convex(fn(q), w, exact)

    return {
        "fixed alpha, BM25 of the lexical top list (before)": [
            (f"{a:g}", per_query(lambda q, a=a: a, exact=False)) for a in alphas],
        "fixed alpha": [(f"{a:g}", per_query(lambda q, a=a: a)) for a in alphas],
        f"alpha x (share of the query in the model's {window}-token window)^g": [
            (f"{a:g}, g={g:g}", per_query(lambda q, a=a, g=g: a * share[q.id] ** g))
            for a in alphas for g in (0.5, 1, 2, 4)],
        "alpha - b x lexical top score (BM25 confidence)": [
            (f"{a:g}, b={b:g}", per_query(lambda q, a=a, b=b: clip(a - b * feats[q.id]["lextop"])))
            for a in (*alphas, 0.9, 1.0, 1.1) for b in (-0.5, 0.25, 0.5, 1.0, 1.5)],
        "alpha + b x dense top-1/top-2 margin": [
            (f"{a:g}, b={b:g}", per_query(
                lambda q, a=a, b=b: clip(a + b * feats[q.id]["cosmargin"])))
            for a in alphas for b in (-4, -2, 2, 4)],
        "alpha + b x (top-10 overlap of the legs - 0.3)": [
            (f"{a:g}, b={b:g}", per_query(
                lambda q, a=a, b=b: clip(a + b * (feats[q.id]["overlap"] - 0.3))))
            for a in alphas for b in (-1, -0.5, 0.5, 1)],
        "alpha - b x identifier share of the query words": [
            (f"{a:g}, b={b:g}", per_query(lambda q, a=a, b=b: clip(a - b * feats[q.id]["ident"])))
            for a in alphas for b in (0.25, 0.5)],
        "alpha x min(1, t / distinct terms), BM25 of the lexical top list": [
            (f"{a:g}, t={t:g}", lambda q, a=a, t=t: q.fused(a, w, t, exact=False))
            for a in alphas for t in terms],
        "alpha x min(1, t / distinct terms)": [
            (f"{a:g}, t={t:g}", lambda q, a=a, t=t: q.fused(a, w, t))
            for a in alphas for t in terms],
        f"the same, alpha for code / alpha_prose for doc and text spans, t={t_kind:g} (default)": [
            # alpha_prose = alpha first: a tie (no prose set to choose it) means no split
            (f"{a:g} / {p:g}", lambda q, a=a, p=p: q.fused(a, w, t_kind, p))
            for a in alphas for p in sorted(alphas, key=lambda p, a=a: abs(p - a))],
    }


def family_table(data: dict[str, list[Q]], n: dict[str, int],
                 families: dict[str, list[tuple[str, Score]]],
                 best_leg: dict[str, float]) -> list[list[object]]:
    """Per family: the best setting on all sets (mean MRR@10) and, per set, the MRR@10 of the
    setting chosen on the other three; '*' marks a set where it beats both legs."""
    sets = list(data)
    rows: list[list[object]] = []
    for family, settings in families.items():
        m = [[float(reciprocal_ranks(data[s], score, n[s]).mean()) for s in sets]
             for _, score in settings]
        grid = np.array(m)
        best = int(np.argmax(grid.mean(axis=1)))
        held = []
        for j, s in enumerate(sets):
            others = [i for i in range(len(sets)) if i != j]
            pick = int(np.argmax(grid[:, others].mean(axis=1)))
            held.append(f"{grid[pick, j]:.3f}{'*' if grid[pick, j] > best_leg[s] else ''}")
        rows.append([family, settings[best][0],
                     *(f"{v:.3f}{'*' if v > best_leg[s] else ''}"
                       for v, s in zip(grid[best], sets, strict=True)),
                     *held])
    return rows


def compare(data: dict[str, list[Q]], n: dict[str, int], w: float,
            systems: dict[str, Callable[[str], Score]]) -> list[list[object]]:
    """Per set and system: MRR@10, hit@5, hit@10, and the paired difference in MRR@10 against
    the better single leg (95 % bootstrap interval; x n = the difference in queries' reciprocal
    ranks: 1.0 is one query moving from a miss to rank 1)."""
    rows: list[list[object]] = []
    for s, qs in data.items():
        dense = reciprocal_ranks(qs, lambda q: q.dense(w), n[s])
        lexical = reciprocal_ranks(qs, lambda q: q.lexical(w), n[s])
        best = dense if dense.mean() >= lexical.mean() else lexical
        name = "dense" if best is dense else "lexical"
        for label, make in {"dense": lambda _s: (lambda q: q.dense(w)),
                            "lexical": lambda _s: (lambda q: q.lexical(w)),
                            **systems}.items():
            rr = reciprocal_ranks(qs, make(s), n[s])
            lo, hi = paired_ci(rr, best)
            d = float(rr.mean() - best.mean())
            rows.append([f"{s} (n={n[s]})", label, f"{rr.mean():.3f}",
                         f"{(rr >= 0.2).mean():.3f}", f"{(rr > 0).mean():.3f}",
                         "" if label in ("dense", "lexical") else
                         f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}] vs {name}, {d * n[s]:+.1f} q"])
    return rows


def legs(data: dict[str, list[Q]], n: dict[str, int], w: float) -> dict[str, tuple[float, float]]:
    """MRR@10 of (dense leg, lexical leg) per set at name weight ``w``."""
    return {s: (ranking(qs, lambda q: q.dense(w), n[s])["MRR@10"],
                ranking(qs, lambda q, w=w: q.lexical(w), n[s])["MRR@10"])
            for s, qs in data.items()}


def grid(data: dict[str, list[Q]], n: dict[str, int]) -> list[dict]:
    """Every (alpha, name weight, terms, alpha_prose) setting scored on every set. A set's score
    depends on alpha_prose only if it has prose candidates and on alpha only if it has code
    ones, so each set is scored once per setting of the weights it can see."""
    rows = []
    leg_by_w = {w: legs(data, n, w) for w in NAME_WEIGHTS}
    sees = {s: (any((~q.prose).any() for q in qs), any(q.prose.any() for q in qs))
            for s, qs in data.items()}
    seen: dict[tuple, dict[str, float]] = {}
    for alpha, prose, w, t in itertools.product(ALPHAS, ALPHAS, NAME_WEIGHTS, TERMS):
        row: dict = {"alpha": alpha, "prose": prose, "w": w, "terms": t, "sets": {}}
        for s, qs in data.items():
            code_on, prose_on = sees[s]
            key = (s, alpha if code_on else None, prose if prose_on else None, w, t)
            if key not in seen:
                m = ranking(qs, lambda q, a=alpha, w=w, t=t, p=prose: q.fused(a, w, t, p), n[s])
                dense, lex = leg_by_w[w][s]
                m["gain"] = m["MRR@10"] / max(dense, lex, 1e-9)
                seen[key] = m
            row["sets"][s] = seen[key]
        rows.append(row)
    return rows


def mean_mrr(r: dict, sets: list[str]) -> float:
    return float(np.mean([r["sets"][s]["MRR@10"] for s in sets]))


def beats_legs(r: dict, sets: list[str]) -> bool:
    return all(r["sets"][s]["gain"] > 1.0 for s in sets)


def choose(rows: list[dict], sets: list[str]) -> dict:
    """The setting with the best MRR@10 averaged over ``sets`` (each set weighs the same) among
    those that beat both single legs on every one of ``sets`` (else among all), at the lexical
    index's name weight.

    The name weight is ``LexicalIndex.NAME_BOOST`` (0.25), not chosen here: the kit's queries
    are all natural language, but assistants also ask for bare identifiers ("retry",
    "parse_span_id"), where matching the symbol's name is what finds the definition rather than
    a line that merely uses it; the grid still reports the other weights.
    """
    ok = [r for r in rows if r["w"] == LexicalIndex.NAME_BOOST]
    ok = [r for r in ok if beats_legs(r, sets)] or ok
    # ties: one weight for both kinds (what sets without prose or code cannot tell apart),
    # then the alpha nearer an equal mix, then the longer query before the rule acts
    return max(ok, key=lambda r: (round(mean_mrr(r, sets), 9), -abs(r["prose"] - r["alpha"]),
                                  -abs(r["alpha"] - 0.5), r["terms"]))


def setting(r: dict) -> Setting:
    return r["alpha"], r["w"], r["terms"], r["prose"]
