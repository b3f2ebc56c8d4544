"""Documentation and code in one index: how the weight per span kind ranks them against each other.

    .venv/bin/python -m bench.quality.mixed [--model NAME] [--backend onnx-int8] [--no-write]

Every set of the kit is all prose (docs) or all code (the others), so the fused score of a doc
span never competes with a code span's there; in a real repository a README section and a
function meet in one ranking. This bench copies the docs corpus (FastAPI's documentation) and
the docstring corpus (requests, click, lodash) into one folder (bench/.work/mixed; no path is
in both, so every gold path holds), indexes it with the default pipeline, and asks each set's
queries against its own index and against the mixed one, through rag-eval's path (k = 10,
tau = 0): hybrid (the default), each leg alone, and two variants: page evidence held above the
code a section outranked in the fusion (``held_pages``), and, for all-MiniLM-L6-v2 whose
candidates bench/quality/features.py recorded, the hybrid with a Platt curve per span kind (code
fitted on the three code sets, prose on docs) so that a doc and a code span of equal calibrated
probability rank equal. The model is the user's default unless ``--model`` names another.
Writes the "quality-mixed" section of docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any
from unittest import mock

from bench._report import WORK, md_table, write_section
from bench.quality.runs import Run, score_run, service_run
from bench.quality.semble import user_default
from bench.quality.sets import (
    EvalSet,
    add_kit_arg,
    collection,
    index_all,
    load_set,
    settings_for,
    use_kit,
)
from indexers.pipeline import run_index
from rag_mcp.search import fusion, pages

SETS = ("docs", "docstring")
CODE_SETS = ("cosqa", "docstring", "swebench_lite")
MIXED = WORK / "mixed"
COLS = ("MRR@10", "hit@5", "hit@10", "tok@5")


def mixed_corpus() -> EvalSet:
    """The union of the two corpora under bench/.work/mixed/corpus (copied once)."""
    corpus = MIXED / "corpus"
    if not corpus.is_dir():
        tmp = MIXED / "corpus.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for name in SETS:
            src = load_set(name).corpus_dir("")
            shutil.copytree(src, tmp, dirs_exist_ok=True)
        tmp.rename(corpus)
    return EvalSet("mixed", MIXED, [])


def from_other_corpus(ev: EvalSet, run: Run, k: int = 5) -> float:
    """The share of the top-k hits that come from the other set's files."""
    own = ev.corpus_dir("")
    hits = [h.path for spans in run.results.values() for h in spans[:k]]
    return sum(not (own / p).is_file() for p in hits) / max(len(hits), 1)


def kind_curves(backend: str) -> dict[str, tuple[float, float]]:
    """Platt curves fitted per span kind on the recorded candidates, at the default weights."""
    from bench.quality.calibrate import platt
    from bench.quality.fusion_search import load

    cal = fusion.calibration_for("all-MiniLM-L6-v2")
    setting = (cal.alpha, 0.25, cal.terms, cal.alpha_for("doc"))
    code = platt({s: load(s, backend) for s in CODE_SETS}, setting)
    prose = platt({"docs": load("docs", backend)}, setting)
    return {"code": code, "prose": prose}


@contextmanager
def curves_per_kind(curves: dict[str, tuple[float, float]]) -> Iterator[None]:
    """The retriever fuses as by default, then scores with its span kind's curve and ranks by
    that score (its logit stands in for ``raw``, which the retriever sorts on)."""
    import rag_mcp.search.retrieve as retrieve

    def fuse(cos: float, lex: float, cal: fusion.Calibration, n_terms: int = 0,
             best_cos: float = 0.0, kind: str = "code", prior: float = 0.0
             ) -> tuple[float, float]:
        raw, _ = fusion.fuse(cos, lex, cal, n_terms, best_cos, kind, prior)
        a, b = curves["prose" if kind in fusion.PROSE_KINDS else "code"]
        z = a * raw + b
        return z, fusion.logistic(z)

    with mock.patch.object(retrieve, "fuse", fuse):
        yield


@contextmanager
def held_pages() -> Iterator[None]:
    """Page evidence that lowers a section at most to just above the best code span the
    section outranked in the fusion: pages are ranked against pages, never against code."""
    import rag_mcp.search.retrieve as retrieve

    def lowered(raw: float, delta: float, code: list[float]) -> float:
        floor = next((c for c in code if c < raw), None)
        if floor is None or raw + delta >= floor:
            return raw + delta
        return floor + 1e-6 * max(0.0, 1.0 + raw + delta - floor)  # still in its own order

    def evidence(hits: list[Any], idx: Any, tokens: Any, weight: float) -> list[Any]:
        if weight <= 0.0 or not any(h.span.kind in pages.PAGE_KINDS for h in hits):
            return hits
        shares = pages.page_shares(idx, tokens)
        if not shares:
            return hits
        best = max(shares.get(h.span.path, 0.0) for h in hits if h.span.kind in pages.PAGE_KINDS)
        code = sorted((h.raw for h in hits if h.span.kind not in pages.PAGE_KINDS), reverse=True)
        out = [replace(h, raw=lowered(h.raw, weight * (shares.get(h.span.path, 0.0) - best),
                                      code)) if h.span.kind in pages.PAGE_KINDS else h
               for h in hits]
        out.sort(key=lambda h: (-h.raw, h.span.path, h.span.start_line))
        return out

    with mock.patch.object(retrieve, "with_page_evidence", evidence):
        yield


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    model, _backend = user_default()
    ap.add_argument("--model", default=model, help=f"embedding model (default: {model})")
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--no-write", action="store_true")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    coll = collection("mixed", "", a.backend, a.model)
    mix = mixed_corpus()
    t0 = time.perf_counter()
    stats = run_index(settings_for(mix, "", a.backend, model=a.model, collection=coll))
    print(f"mixed index: {stats.spans_total:,} spans ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    index_all(list(SETS), [a.backend], quiet=True, model=a.model)  # each set's own index
    per_kind = a.model == "all-MiniLM-L6-v2"  # the recorded candidates are that model's
    curves = kind_curves(a.backend) if per_kind else {}
    systems: list[tuple[str, str | None, Any]] = [
        ("hybrid (default)", None, nullcontext), ("dense", "dense", nullcontext),
        ("lexical", "lexical", nullcontext),
        ("hybrid, page evidence held above code", None, held_pages)]
    if per_kind:
        systems.append(("hybrid, a curve per kind", None, lambda: curves_per_kind(curves)))
    rows: list[list[object]] = []
    for name in SETS:
        ev = load_set(name)
        where: dict[str, tuple[EvalSet, dict[str, Any]]] = {
            "alone": (ev, {}), "mixed": (EvalSet(name, MIXED, ev.queries), {"collection": coll})}
        for system, fuse_as, ctx in systems:
            scores, other = {}, 0.0
            for label, (e, extra) in where.items():
                with ctx():
                    run = service_run(e, a.backend, f"mixed study {label} {system}",
                                      fusion=fuse_as, model=a.model, **extra)
                scores[label] = score_run(e, run)
                if label == "mixed":
                    other = from_other_corpus(ev, run)
            alone, mixed = scores["alone"], scores["mixed"]
            rows.append([f"{name} (n={len(ev.queries)})", system,
                         *(f"{alone[c]:.3f} → {mixed[c]:.3f}" if c != "tok@5"
                           else f"{alone[c]:,.0f} → {mixed[c]:,.0f}" for c in COLS),
                         f"{mixed['MRR@10'] - alone['MRR@10']:+.3f}", f"{other:.0%}"])
            print(rows[-1], flush=True)
    curve_note = ""
    if per_kind:
        (cc, pc) = curves["code"], curves["prose"]
        curve_note = (f" The last variant scores each span with a Platt curve fitted on its kind "
                      f"alone (code: the three code sets, a = {cc[0]:.3f}, b = {cc[1]:.3f}; "
                      f"prose: docs, a = {pc[0]:.3f}, b = {pc[1]:.3f}; the default is one curve "
                      "for both) and ranks by that probability.")
    body = f"""## Documentation and code in one index ({a.model}, {a.backend})

`python -m bench.quality.mixed --model {a.model}`

The docs corpus (FastAPI's documentation) and the docstring corpus (requests, click, lodash) in
one index of {stats.spans_total:,} spans; each set's queries asked of its own index, then of the
mixed one (rag-eval's path, k = 10, tau = 0). Cells read "own index → mixed index". "Page
evidence held above code" is the default except that a section's page evidence lowers it at
most to just above the best code span it outranked in the fusion (the default may carry a
section past code, when another page of the pool matches the question better).{curve_note}

"Other corpus" is the share of the mixed index's top 5 that comes from the other set's files
(code for a docs question, documentation for a docstring question).

{md_table(["set", "system", *COLS, "MRR@10 change", "top 5 from the other corpus"], rows)}"""
    print(body)
    if not a.no_write:
        write_section("quality-mixed", body)


if __name__ == "__main__":
    main()
