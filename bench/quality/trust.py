"""The lexical leg's trust (``rag_mcp.search.fusion.lexical_trust``): the default hybrid with it
and without it, on the kit's sets and the DokuWiki set's same-language and cross-lingual pairs.

Without it, BM25 keeps its full weight however few of the query's words the index knows (what
the retriever did before the rule). Through rag-eval's path (k = 10, tau = 0); each row also
counts the questions the rule touches (the index knows fewer than half of their distinct terms).

    .venv/bin/python -m bench.quality.trust --kit ../shared/eval \\
        [--sets docs,cosqa,docstring] [--models bge-small-en-v1.5,...] [--no-write]

The kit sets are measured with the default model (their indexes are built first if missing);
the DokuWiki set with every model given. Prints markdown and rewrites the "lexical-trust"
section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import rag_mcp.search.retrieve as retrieve
from bench._report import md_table, write_section
from bench.quality import wiki_languages
from bench.quality.runs import score_run, service_run
from bench.quality.sets import (
    EvalSet,
    add_kit_arg,
    index_all,
    is_built,
    load_set,
    settings_for,
    use_kit,
)
from rag_mcp.deps import build_deps
from rag_mcp.embed.catalog import DEFAULT
from rag_mcp.index.lexical import tokenize

BACKEND = "onnx-int8"
KIT = ("docs", "cosqa", "docstring")
MODELS = ("bge-small-en-v1.5", "multilingual-e5-small", "all-MiniLM-L6-v2")
SAME = ("en>en", "de>de", "fr>fr", "de>mix(same)", "en>mix(same)")


@contextlib.contextmanager
def without_trust() -> Iterator[None]:
    """The retriever with the lexical leg's full weight for every query."""
    ships = retrieve.lexical_trust
    retrieve.lexical_trust = lambda known: 1.0
    try:
        yield
    finally:
        retrieve.lexical_trust = ships


def touched(ev: EvalSet, model: str) -> dict[str, bool]:
    """Query id -> whether the rule lowers its lexical weight."""
    out: dict[str, bool] = {}
    for sub in ev.corpora:
        deps = build_deps(settings_for(ev, sub, BACKEND, model=model))
        try:
            lexical = deps.repo().handle.get().lexical
            for q in ev.queries:
                if q.get("corpus", "") == sub:
                    out[q["id"]] = retrieve.lexical_trust(
                        retrieve.known_share(lexical, tokenize(q["query"]))) < 1.0
        finally:
            deps.close()
    return out


def measure(ev: EvalSet, model: str) -> dict[str, Any]:
    """"on"/"off" -> the set's run, and "touched" -> the query ids the rule touches."""
    if not all(is_built(settings_for(ev, sub, BACKEND, model=model)) for sub in ev.corpora):
        index_all([ev.name], [BACKEND], quiet=True, model=model)
    on = service_run(ev, BACKEND, f"trust-on ({model})", model=model)
    with without_trust():
        off = service_run(ev, BACKEND, f"trust-off ({model})", model=model)
    return {"on": on, "off": off, "touched": touched(ev, model)}


def rows_for(ev: EvalSet, model: str, m: dict[str, Any]) -> list[list[object]]:
    def cell(qs: list[dict], key: str) -> str:
        off, on = (score_run(ev, m[t], queries=qs)[key] for t in ("off", "on"))
        return f"{off:.4f} -> {on:.4f}"

    def n_touched(qs: list[dict]) -> str:
        return f"{sum(m['touched'][q['id']] for q in qs)} of {len(qs)}"

    if ev.name != wiki_languages.NAME:
        return [[ev.name, model, cell(ev.queries, "MRR@10"), cell(ev.queries, "hit@5"),
                 n_touched(ev.queries)]]
    out: list[list[object]] = []
    groups = (("wiki same-language", SAME), ("wiki cross-lingual", wiki_languages.CROSS))
    for label, pairs in groups:
        by_pair = {p: [q for q in ev.queries if q["pair"] == p] for p in pairs}
        mean = {t: sum(score_run(ev, m[t], queries=qs)["hit@5"] for qs in by_pair.values())
                / len(pairs) for t in ("off", "on")}
        everyone = [q for qs in by_pair.values() for q in qs]
        out.append([label, model, cell(everyone, "MRR@10"),
                    f"{mean['off']:.4f} -> {mean['on']:.4f} (mean of pairs)",
                    n_touched(everyone)])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(KIT), help="kit sets, with the default model")
    ap.add_argument("--models", default=",".join(MODELS), help="models for the DokuWiki set")
    ap.add_argument("--no-write", action="store_true", help="print only")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    rows: list[list[object]] = []
    for name in filter(None, a.sets.split(",")):
        ev = load_set(name)
        rows += rows_for(ev, DEFAULT, measure(ev, DEFAULT))
    wiki = wiki_languages.load()
    for model in filter(None, a.models.split(",")):
        rows += rows_for(wiki, model, measure(wiki, model))
    head = ["set", "model", "MRR@10 without -> with", "hit@5 without -> with",
            "questions touched"]
    body = f"""## The lexical leg's trust: questions whose words the index lacks

`python -m bench.quality.trust --sets {a.sets} --models {a.models}`

The default hybrid without the rule (BM25 at full weight for every query) and with it (BM25's
weight and the page evidence scaled by twice the share of the query's distinct terms the index
knows, when under half), through rag-eval's path (k = 10, tau = 0). Kit sets with the default
model; the DokuWiki set (bench/quality/wiki_languages.py) with each model: its same-language
questions (en>en, de>de, fr>fr and the bilingual wiki's) and its six cross-lingual pairs, hit@5
as the mean over the pairs. "Touched": questions under the threshold, the only ones it changes.

{md_table(head, rows)}
"""
    print(body)
    if not a.no_write:
        write_section("lexical-trust", body)


if __name__ == "__main__":
    main()
