"""Where the DokuWiki set's same-language questions are lost: each question not answered first,
by cause.

A question counts as lost when rag_query's first answer (rag-eval's path, k = 10, tau = 0, the
answers joined as rag_query joins them) does not hold the gold lines. For each one the spans are
retrieved again with the ranking stage off, and with each leg alone, and the loss is put in the
first row that fits:

* the ranking stage moved a fused-first answer down (and which of its rules alone, set to 0,
  would give it back: ``search.rank.Weights``);
* another section of the right page ranks first;
* the dense leg ranks the answer first, and BM25 and the page evidence lift another page;
* BM25 ranks it first, and the dense leg lifts another page;
* neither leg ranks it first: another page wins on both.

    .venv/bin/python -m bench.quality.wiki_misses [--model bge-small-en-v1.5]
        [--pairs en>en,de>de,fr>fr]

Prints markdown: the cause table, then every lost question with its answer's rank, the fused,
dense and BM25 ranks of its span, and the page ranked first. ``bm25 -`` means BM25 finds no word
of the question in the answer (a paraphrase, or an inflected form).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from bench._report import md_table
from bench.quality.runs import service_run
from bench.quality.sets import EvalSet, index_all, settings_for
from bench.quality.wiki_languages import BACKEND, load
from rag_mcp.deps import build_deps
from rag_mcp.eval.metrics import LineSpan, score_query
from rag_mcp.search.rank import DEFAULT, Weights, candidate, rank
from rag_mcp.search.retrieve import Filters, Hit

PAIRS = ("en>en", "de>de", "fr>fr")
CAUSES = (
    "the ranking stage moved a fused-first answer down",
    "another section of the right page first",
    "dense leg first; BM25 and page evidence lift another page",
    "BM25 first; the dense leg lifts another page",
    "neither leg first: another page wins on both",
)


@dataclass(frozen=True, slots=True)
class Loss:
    qid: str
    pair: str
    answer: int | None  # rank of the first answer holding the gold lines (None: not in 10)
    fused: int | None  # the gold span's rank with the ranking stage off
    dense: int | None
    lexical: int | None
    top: str  # the page ranked first (ranking stage off, or on when the fusion had it first)
    cause: str
    rules: tuple[str, ...] = ()  # ranking rules that, set to 0 alone, give the first place back


def _is_gold(h: Hit, q: dict[str, Any]) -> bool:
    sp = h.span
    return any(sp.path == g["path"] and sp.start_line <= g["end_line"]
               and sp.end_line >= g["start_line"] for g in q["gold"])


def _pos(hits: list[Hit], q: dict[str, Any]) -> int | None:
    return next((i + 1 for i, h in enumerate(hits) if _is_gold(h, q)), None)


def _page(path: str) -> str:
    return path.removeprefix("data/pages/").removesuffix(".txt").replace("/", ":")


def answer_ranks(ev: EvalSet, model: str) -> dict[str, int | None]:
    """qid -> rank of rag_query's first answer holding the gold lines (None beyond 10)."""
    run = service_run(ev, BACKEND, f"misses ({model})", model=model)
    out: dict[str, int | None] = {}
    for q in ev.queries:
        mrr = score_query([LineSpan.of(g) for g in q["gold"]], run.results.get(q["id"], []))
        out[q["id"]] = round(1 / mrr["MRR@10"]) if mrr["MRR@10"] else None
    return out


def _restoring(query: str, hits: list[Hit], q: dict[str, Any], terms: float,
               gap: int, max_lines: int) -> tuple[str, ...]:
    """The ranking rules that, each set to 0 alone, put the gold span first again."""
    cands = [candidate(h) for h in hits]
    out = []
    for f in Weights.__dataclass_fields__:
        if getattr(DEFAULT, f):
            order = rank(query, cands, replace(DEFAULT, **{f: 0.0}), gap=gap,
                         max_lines=max_lines, terms=terms)
            if order and _is_gold(hits[order[0]], q):
                out.append(f)
    return tuple(out)


def classify(ev: EvalSet, model: str, lost: dict[str, int | None]) -> list[Loss]:
    out: list[Loss] = []
    for corpus in ev.corpora:
        qs = [q for q in ev.queries if q["corpus"] == corpus and q["id"] in lost]
        if not qs:
            continue
        s = settings_for(ev, corpus, BACKEND, model=model, rank=False)
        deps = build_deps(s)
        try:
            retriever = deps.repo().retriever
            for q in qs:
                fused = retriever.retrieve(q["query"], Filters())
                dense = retriever.retrieve(q["query"], Filters(), fusion="dense")
                lexical = retriever.retrieve(q["query"], Filters(), fusion="lexical")
                pf, pd, pl = _pos(fused.hits, q), _pos(dense.hits, q), _pos(lexical.hits, q)
                rules: tuple[str, ...] = ()
                top = fused.hits[0].span.path if fused.hits else ""
                if pf == 1:
                    cause = CAUSES[0]
                    rules = _restoring(q["query"], fused.hits, q, fused.calibration.terms,
                                       s.join_gap, s.join_max_lines)
                    order = rank(q["query"], [candidate(h) for h in fused.hits],
                                 gap=s.join_gap, max_lines=s.join_max_lines,
                                 terms=fused.calibration.terms)
                    top = fused.hits[order[0]].span.path
                elif any(top == g["path"] for g in q["gold"]):
                    cause = CAUSES[1]
                elif pd == 1:
                    cause = CAUSES[2]
                elif pl == 1:
                    cause = CAUSES[3]
                else:
                    cause = CAUSES[4]
                out.append(Loss(q["id"], q["pair"], lost[q["id"]], pf, pd, pl, _page(top),
                                cause, rules))
        finally:
            deps.close()
    return out


def report(losses: list[Loss], totals: dict[str, int], pairs: list[str]) -> str:
    by: dict[str, list[Loss]] = defaultdict(list)
    for x in losses:
        by[x.cause].append(x)
    rows: list[list[object]] = []
    for c in CAUSES:
        xs = by.get(c, [])
        if not xs:
            continue
        ex = ", ".join(f"`{x.qid}` → `{x.top}`" + (f" ({'/'.join(x.rules)})" if x.rules else "")
                       for x in xs[:3])
        rows.append([c, *(sum(x.pair == p for x in xs) for p in pairs), ex])
    rows.append(["BM25 finds no word of the question in the answer (of the above)",
                 *(sum(x.pair == p and x.lexical is None for x in losses) for p in pairs), ""])
    head = ["cause", *(f"{p} ({sum(x.pair == p for x in losses)} of {totals[p]})" for p in pairs),
            "examples (question → page first)"]

    def r(v: int | None) -> str:
        return "-" if v is None else str(v)

    detail = md_table(
        ["question", "answer", "fused", "dense", "bm25", "page first", "cause"],
        [[x.qid, r(x.answer), r(x.fused), r(x.dense), r(x.lexical), x.top,
          CAUSES.index(x.cause) + 1] for x in losses])
    return md_table(head, rows) + "\n\n" + detail + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bge-small-en-v1.5")
    ap.add_argument("--pairs", default=",".join(PAIRS))
    a = ap.parse_args(argv)
    pairs = a.pairs.split(",")
    full = load()
    ev = EvalSet(full.name, full.dir, [q for q in full.queries if q["pair"] in pairs])
    index_all([full.name], [BACKEND], quiet=True, model=a.model)
    ranks = answer_ranks(ev, a.model)
    lost = {qid: r for qid, r in ranks.items() if r != 1}
    totals = {p: sum(q["pair"] == p for q in ev.queries) for p in pairs}
    print(f"## Same-language questions not answered first ({a.model}, hybrid)\n")
    print(report(classify(ev, a.model, lost), totals, pairs))


if __name__ == "__main__":
    main()
