"""Page evidence: a section of documentation is found through the page it belongs to.

A question about documentation is usually about a page's subject, and the words that name that
subject are spread over the page: its title, its other sections, its examples. One section alone
often holds only a few of them (a short section, or one whose heading carries the words), so
span-level evidence ranks a section of another page that happens to share more words above it.
Whole-page BM25 sees the page as the reader does. On the evaluation kit's docs set (a section
heading asked, the heading blanked), BM25 over whole files finds the right page first more often
than our fused spans do, and adding each prose span's page BM25 (the generation's ``pages/``
index, one document per page of prose) to its fused score lifts MRR@10 from 0.645 to about 0.72
(docs/RETRIEVAL.md, "Page evidence"). Code spans are left alone: a source file is not about one
subject the way a page is, and the ranking stage (``search.rank``) has its own file evidence.

The page's BM25 is taken over its bound for the query (``LexicalIndex.upper_bound``), the same
absolute scale as the span's own ``lex``, and counted from the best page among the hits, so
that it never lifts prose over code (``with_page_evidence``). It changes the order only
(``Hit.raw``), not the calibrated score, like the ranking stage. The retriever scales its weight
by the query's coverage and the lexical leg's trust (``fusion.lexical_trust``): it is keyword
evidence, and a question in another language than the pages holds few of their words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rag_mcp.index.lexical import PAGE_KINDS

if TYPE_CHECKING:
    from rag_mcp.index.handle import OpenIndex
    from rag_mcp.search.retrieve import Hit

#: pages read from the page index per query (a page beyond them adds nothing)
PAGE_POOL = 100


def page_shares(idx: OpenIndex, tokens: Sequence[str]) -> dict[str, float]:
    """Path -> the page's BM25 over its bound for ``tokens``, in [0, 1], for the best pages."""
    pages = idx.pages
    if pages is None or idx.catalog is None or not tokens:
        return {}
    found = pages.search(tokens, PAGE_POOL)
    bound = pages.upper_bound(tokens) if found else 0.0
    if bound <= 0.0:
        return {}
    rows = idx.catalog.by_sids([sid for sid, _ in found])
    return {rows[sid].span.path: min(1.0, bm / bound) for sid, bm in found if sid in rows}


def with_page_evidence(hits: list[Hit], idx: OpenIndex, tokens: Sequence[str],
                       weight: float) -> list[Hit]:
    """``hits`` reordered with each prose span's ``raw`` moved by ``weight`` times its page's
    share less the best share among the hits' pages; code spans stay as they are.

    Measured from the best page, the evidence only ever lowers: the sections of the page that
    matches the question best keep their fused scores and those of weaker pages fall behind
    them. Code files have no pages to add evidence from, so a gain would lift prose over code
    (a README that restates a code question over the code that answers it); a loss cannot."""
    if weight <= 0.0 or not any(h.span.kind in PAGE_KINDS for h in hits):
        return hits
    shares = page_shares(idx, tokens)
    if not shares:
        return hits
    best = max(shares.get(h.span.path, 0.0) for h in hits if h.span.kind in PAGE_KINDS)
    out = [replace(h, raw=h.raw + weight * (shares.get(h.span.path, 0.0) - best))
           if h.span.kind in PAGE_KINDS else h for h in hits]
    out.sort(key=lambda h: (-h.raw, h.span.path, h.span.start_line))
    return out
