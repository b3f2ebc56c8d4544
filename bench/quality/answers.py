"""What an assistant reads in a rag_query answer: how wide the hits are, what the previews say,
and whether a joined hit names what it spans.

Every question of the evaluation kit's sets is asked through rag_query's path (``QueryService``,
default k, tau and budgets) against its own corpus, once per setting of ``query.focus_lines``
(side by side in one run; 0 answers every hit whole, as before focusing), and for each:

- lines: the lines of each returned hit (median and 90th percentile over all hits of a set),
  and the share of hits that are joined ranges;
- MRR@10 at tau = 0 (the kit's measure; joining changes which ranges are scored);
- previews: the share that says nothing about the span: empty, a bare comment marker (``/**``,
  ``#``, ``\"\"\"``), a directive (``'use strict';``, a shebang), or a documentation section's
  own heading repeated; for the preview stored at indexing (what rag_query showed before) and
  the one served now;
- joined hits that name every symbol and section of their parts.

    .venv/bin/python -m bench.quality.answers [--sets docs,cosqa,...] [--focus-lines 0,30]

Indexes come from bench/quality/sets.py (int8, the default model unless ``--model``,
bench/.work/index); a missing one is built, or with ``--built-only`` skipped (and one copied
in from another checkout read as it is).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace

from bench._report import md_table, write_section
from bench.quality.sets import (
    EvalSet,
    add_kit_arg,
    is_built,
    load_set,
    settings_for,
    use_kit,
)
from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.deps import build_deps
from rag_mcp.embed.pool import EmbedderPool
from rag_mcp.eval.metrics import LineSpan, score_query
from rag_mcp.eval.run import eval_settings
from rag_mcp.index.generation import read_manifest, read_pointer
from rag_mcp.search.preview import says_nothing
from rag_mcp.search.records import QueryParams
from rag_mcp.search.retrieve import QueryVectors

BACKEND = "onnx-int8"
SETS = ("docs", "cosqa", "docstring", "swebench_lite")
CODE_SETS = ("cosqa", "docstring", "swebench_lite")
#: the product's defaults (configs/default.toml): its embedding model and focus_lines
MODEL_SETTINGS = load_settings({}, environ={})
MODEL = MODEL_SETTINGS.embed_model


@dataclass
class Tally:
    """What one setting returned for one set."""

    lines: list[int] = field(default_factory=list)
    joined: int = 0
    rr: list[float] = field(default_factory=list)
    weak_stored: int = 0
    weak_served: int = 0
    joined_named: int = 0


def weak(preview: str, heading: str | None) -> bool:
    """A preview that says nothing about its span."""
    s = preview.strip()
    if says_nothing(s):
        return True
    return heading is not None and s.strip("#= ").lower() == heading.rsplit(" > ", 1)[-1].lower()


def ask(settings: Settings, ev: EvalSet, sub: str, tally: Tally, pool: EmbedderPool,
        qvec: QueryVectors) -> None:
    deps = build_deps(settings, models=pool)
    ranked = build_deps(eval_settings(settings, 10), models=pool)
    for d in (deps, ranked):  # one model and one query-vector cache for every setting
        d.repo().retriever.qvec = qvec
    try:
        repo = deps.repo()
        catalog = repo.retriever.handle.get().catalog
        assert catalog is not None
        for q in ev.queries:
            if q.get("corpus", "") != sub:
                continue
            ans = deps.queries.query(QueryParams(query=q["query"]))
            for h in ans.hits:
                tally.lines.append(h.end_line - h.start_line + 1)
                lead = catalog.by_id(h.parts[0] if h.parts else h.id)
                if h.parts:
                    tally.joined += 1
                    parts = [catalog.by_id(p) for p in h.parts]
                    labels = {p.span.symbol or p.span.heading for p in parts if p is not None}
                    shown = f"{h.symbol or ''}, {h.heading or ''}"
                    tally.joined_named += all(label in shown for label in labels if label)
                heading = lead.span.heading if lead is not None else None
                tally.weak_stored += weak(lead.span.preview if lead is not None else "", heading)
                tally.weak_served += weak(h.preview, heading)
            got = ranked.queries.query(QueryParams(query=q["query"], k=10, tau=0.0))
            results = [LineSpan(h.path, h.start_line, h.end_line) for h in got.hits]
            tally.rr.append(score_query([LineSpan.of(g) for g in q["gold"]],
                                        results)["MRR@10"])
    finally:
        deps.close()
        ranked.close()


def built_here(settings: Settings) -> bool:
    """Whether the index was built from this corpus folder: one copied in from another checkout
    (``--built-only``) is read as it is, as bringing it up to date could mean embedding anew."""
    at = read_pointer(settings.index_path)
    return at is not None and read_manifest(at.dir).get("root") == settings.root


def measure(sets: list[str], limits: list[int], built_only: bool = False,
            skipped: list[str] | None = None, model: str = MODEL
            ) -> dict[tuple[str, int], Tally]:
    skipped = skipped if skipped is not None else []
    out: dict[tuple[str, int], Tally] = defaultdict(Tally)
    pool: EmbedderPool | None = None
    qvec = QueryVectors()
    for name in sets:
        ev = load_set(name)
        for sub in ev.corpora:
            base = settings_for(ev, sub, BACKEND, model=model)
            if built_only and not is_built(base):
                skipped.append(sub.split("/")[0] or name)
                continue
            if not built_only or built_here(base):
                run_index(base)  # nothing to do when the index is current
            pool = pool or EmbedderPool(base)
            for limit in limits:
                ask(replace(base, focus_lines=limit), ev, sub, out[(name, limit)], pool, qvec)
        print(f"{name}: asked", flush=True)
    return out


def _pct(values: list[int], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else 0.0


def report(tallies: dict[tuple[str, int], Tally], limits: list[int]) -> tuple[str, bool]:
    rows: list[list[object]] = []
    met = True
    for (name, limit), t in tallies.items():
        n = len(t.lines) or 1
        median = statistics.median(t.lines) if t.lines else 0.0
        if limit == limits[-1] and name in CODE_SETS:
            met &= median <= 30
        rows.append([name, limit, len(t.lines), median, _pct(t.lines, 90), max(t.lines or [0]),
                     f"{t.joined / n:.1%}", sum(t.rr) / len(t.rr) if t.rr else 0.0,
                     f"{t.weak_stored / n:.1%}", f"{t.weak_served / n:.1%}",
                     f"{t.joined_named}/{t.joined}"])
    table = md_table(["set", "focus_lines", "hits returned", "median lines", "p90 lines",
                      "most lines", "joined", "MRR@10 (tau 0)", "weak previews, stored",
                      "weak previews, served", "joined hits naming every part"], rows)
    return table, met


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--focus-lines", default=f"0,{MODEL_SETTINGS.focus_lines}",
                    help="settings compared side by side, the default last (0: answers whole)")
    ap.add_argument("--model", default=MODEL, help="embedding model of the indexes")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--built-only", action="store_true",
                    help="skip the corpora that have no index yet instead of building them "
                         "(SWE-bench's 30 snapshots take hours on a busy machine)")
    add_kit_arg(ap)
    args = ap.parse_args(argv)
    use_kit(args.kit)
    sets = args.sets.split(",")
    limits = [int(x) for x in args.focus_lines.split(",")]
    skipped: list[str] = []
    table, met = report(measure(sets, limits, args.built_only, skipped, args.model), limits)
    text = (f"{table}\n\nMedian returned hit at most 30 lines on every code set with "
            f"focus_lines = {limits[-1]}: {'met' if met else 'missed'}.")
    if skipped:
        text += (f" Not indexed on this machine, so not asked: {len(skipped)} corpora ("
                 + ", ".join(sorted(skipped)) + ").")
    print(text)
    if not args.no_write:
        write_section("answers", "## What an answer holds: hit widths, previews, joined labels"
                      "\n\n`python -m bench.quality.answers`\n\nEvery question of the kit's sets "
                      f"through rag_query's path ({args.model}, default k, tau and budgets), "
                      "once per focus_lines setting (0: every answer whole; otherwise a code "
                      "answer after the first three that runs over focus_lines is narrowed to "
                      "it unless the question names the definition it holds). A weak preview "
                      "is empty, a "
                      "bare comment marker, a directive or the section's own heading; "
                      "\"stored\" is the line the index "
                      "keeps (what rag_query showed before), \"served\" what it shows now. Goal: "
                      "median returned hit at most 30 lines on the code sets with MRR@10 "
                      "unchanged.\n\n" + text
                      + ("" if set(sets) == set(SETS) else
                         "\n\nThis run measured " + ", ".join(sets) + " only."))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
