"""Page evidence on prose: each model's hybrid with and without it, beside whole-file BM25.

For each embedding model, the kit's docs set and the DokuWiki set's same-language questions
(bench/quality/wiki_languages.py: en>en, de>de, fr>fr) through rag-eval's path (k = 10,
tau = 0): the default hybrid as it ships (its calibration row's page weight) and with the page
weight at 0 (``search.pages`` off; everything else the same), scored by the kit's rule, with the
tokens the top 5 return. The kit's BM25 over whole files is the reference the docs target names
(its MRR@10, at the tokens of the whole files it returns).

    .venv/bin/python -m bench.quality.pages --kit ../shared/eval \\
        [--models bge-small-en-v1.5,multilingual-e5-small,all-MiniLM-L6-v2] [--no-write]

Indexes are (re)built first (bench/quality/sets.py; vectors come from the embedding cache).
Prints markdown and rewrites the "pages" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from bench._report import md_table, write_section
from bench.quality import wiki_languages
from bench.quality.runs import Run, score_run, service_run
from bench.quality.sets import add_kit_arg, index_all, load_set, use_kit
from bench.quality.windows import bm25_windows_run
from rag_mcp.search.retrieve import Retriever

BACKEND = "onnx-int8"
MODELS = ("bge-small-en-v1.5", "multilingual-e5-small", "all-MiniLM-L6-v2")
SAME = ("en>en", "de>de", "fr>fr")


@contextlib.contextmanager
def page_weight(weight: float | None) -> Iterator[None]:
    """Every retriever's calibration with ``weight`` as its page weight (None: as it ships)."""
    if weight is None:
        yield
        return
    ships = Retriever.calibration
    Retriever.calibration = lambda self, idx: replace(ships(self, idx), page=weight)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Retriever.calibration = ships  # type: ignore[method-assign]


def measure(model: str) -> dict[str, dict[str, float]]:
    """"docs|on", "docs|off", "en>en|on", ... -> MRR@10, hit@5, tok@5."""
    out: dict[str, dict[str, float]] = {}
    docs, wiki = load_set("docs"), wiki_languages.load()
    index_all(["docs", wiki.name], [BACKEND], quiet=True, model=model)
    for tag, weight in (("on", None), ("off", 0.0)):
        with page_weight(weight):
            run = service_run(docs, BACKEND, f"pages-{tag} ({model})", model=model)
            out[f"docs|{tag}"] = _keep(score_run(docs, run))
            wrun = service_run(wiki, BACKEND, f"pages-{tag} ({model})", model=model)
        for pair in (*SAME, *wiki_languages.CROSS):
            qs = [q for q in wiki.queries if q["pair"] == pair]
            out[f"{pair}|{tag}"] = _keep(score_run(wiki, wrun, queries=qs))
    return out


def _keep(m: dict[str, float]) -> dict[str, float]:
    return {k: m[k] for k in ("MRR@10", "hit@5", "tok@5")}


def _cross(r: dict[str, dict[str, float]], tag: str) -> float:
    """The mean hit@5 over the DokuWiki set's six cross-lingual pairs."""
    return sum(r[f"{p}|{tag}"]["hit@5"] for p in wiki_languages.CROSS) / len(wiki_languages.CROSS)


def _cell(m: dict[str, float]) -> str:
    return f"{m['MRR@10']:.3f} / {m['hit@5']:.3f}"


def report(models: list[str], res: dict[str, dict[str, dict[str, float]]],
           file_bm25: dict[str, float]) -> str:
    head = ["model", "docs: without / with page evidence", "docs tok@5 (with)",
            *(f"{p}: without / with" for p in SAME), "cross-lingual hit@5: without / with"]
    rows: list[list[Any]] = []
    for m in models:
        r = res[m]
        rows.append([m, f"{_cell(r['docs|off'])} -> {_cell(r['docs|on'])}",
                     f"{r['docs|on']['tok@5']:,.0f}",
                     *(f"{r[f'{p}|off']['MRR@10']:.3f} -> {r[f'{p}|on']['MRR@10']:.3f}"
                       for p in SAME),
                     " -> ".join(f"{_cross(r, tag):.3f}" for tag in ("off", "on"))])
    budget = 0.15 * file_bm25["tok@5"]
    return f"""## Page evidence on prose

`python -m bench.quality.pages --models {",".join(models)}`

Each model's default hybrid without the page evidence (page weight 0) and with it (as it ships),
through rag-eval's path (k = 10, tau = 0). Docs cells: MRR@10 / hit@5 on the kit's docs set
(206 section headings asked, the heading blanked in the corpus); wiki cells: MRR@10 of the
DokuWiki set's same-language questions (bench/quality/wiki_languages.py), and the mean
hit@5 of its six cross-lingual pairs. The reference is the kit's BM25 over whole files:
MRR@10 {file_bm25['MRR@10']:.3f}, hit@5 {file_bm25['hit@5']:.3f}, at {file_bm25['tok@5']:,.0f}
tokens in its top 5 (15% of that: {budget:,.0f}).

{md_table(head, rows)}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--no-write", action="store_true", help="print only")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    models = a.models.split(",")
    docs = load_set("docs")
    file_bm25 = _keep(score_run(docs, Run(docs.name, "bm25-file",
                                          bm25_windows_run(docs, unit="file"))))
    res = {m: measure(m) for m in models}
    body = report(models, res, file_bm25)
    print(body)
    if not a.no_write:
        write_section("pages", body)


if __name__ == "__main__":
    main()
