"""Ablations of the default pipeline: K, tau, joining, the span text the model reads, the
candidate pool, the memo cache, the fusion.

Every study is made of real runs through rag-eval's path: rag_query joins adjacent hits of one
file within the k it is asked for, and a hit under tau never joins, so neither K nor tau is a
cut of the k = 10 ranking.

    .venv/bin/python -m bench.quality.ablations [--backend onnx-int8] [--reuse]

Run bench.quality.retrieval first (it saves the hybrid runs this reads).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench._report import md_table, write_section
from bench.quality import plots
from bench.quality.runs import Run, score_run, service_run
from bench.quality.sets import (
    DEFAULT_READ,
    SETS,
    SHORT,
    WORK,
    EvalSet,
    add_kit_arg,
    index_all,
    load_set,
    use_kit,
)
from rag_mcp.search.fusion import calibration_for

KS = (3, 5, 8, 10)
TAUS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
POOLS = (10, 20, 50, 100)
FUSIONS = ("convex", "rrf", "dense", "lexical")
#: a reading shorter than the default, measured beside it: all-MiniLM-L6-v2 was trained on 128
SHORTER = 128


def saved(ev: EvalSet, system: str, make, reuse: bool) -> Run:  # type: ignore[no-untyped-def]
    run = Run.load(ev.name, system) if reuse else None
    if run is None:
        run = make()
        print(f"  {ev.name} / {system}: {run.seconds:.0f} s", flush=True)
    return run


def study_k(evs: list[EvalSet], backend: str, hybrid: dict[str, Run], reuse: bool) -> str:
    tag = SHORT[backend]
    rows: list[list[object]] = []
    pts: dict[str, list[tuple[str, float, float]]] = {}
    for ev in evs:
        pts[ev.name] = []
        for k in KS:
            name = f"hybrid ({tag}) k {k}"
            run = hybrid[ev.name] if k == 10 else saved(
                ev, name, lambda ev=ev, k=k, name=name: service_run(ev, backend, name, k=k),
                reuse)
            m = score_run(ev, run, k=k)  # k answers: hit@10 is hit@k
            rows.append([ev.name, k, f"{m['MRR@10']:.3f}", f"{m['hit@10']:.3f}",
                         f"{m['tok@10_k']:,.0f}"])
            pts[ev.name].append((f"K={k}", m["tok@10_k"], m["hit@10"]))
    plots.tradeoff(plots.IMG / "quality-k.png", pts, "tokens returned (top K)", "hit@K",
                   "K: quality against tokens")
    return md_table(["set", "K", "MRR@K", "hit@K", "tokens returned"], rows)


def study_tau(evs: list[EvalSet], backend: str, tau_default: float, reuse: bool) -> str:
    tag = SHORT[backend]
    rows: list[list[object]] = []
    pts: dict[str, list[tuple[str, float, float]]] = {}
    for ev in evs:
        pts[ev.name] = []
        for tau in TAUS:
            name = f"hybrid ({tag}) k 5 tau {tau:g}"
            run = saved(ev, name, lambda ev=ev, tau=tau, name=name: service_run(
                ev, backend, name, k=5, tau=tau), reuse)
            m = score_run(ev, run, k=5)
            rows.append([ev.name, f"{tau:g}" + (" (default)" if tau == tau_default else ""),
                         f"{m['hit@5']:.3f}", f"{m['MRR@10']:.3f}", f"{m['tok@10_k']:,.0f}"])
            pts[ev.name].append((f"{tau:g}", m["tok@10_k"], m["hit@5"]))
    plots.tradeoff(plots.IMG / "quality-tau.png", pts, "tokens returned (k = 5)", "hit@5",
                   "tau from 0 to 0.9: quality against tokens")
    return md_table(["set", "tau", "hit@5", "MRR", "tokens returned (k = 5)"], rows)


def study_join(evs: list[EvalSet], backend: str, hybrid: dict[str, Run], reuse: bool) -> str:
    tag = SHORT[backend]
    rows: list[list[object]] = []
    vals: dict[tuple[str, str], float] = {}
    for ev in evs:
        for label, gap in (("joined (default)", None), ("apart (join_gap -1)", -1)):
            name = f"hybrid ({tag}) spans apart"
            run = hybrid[ev.name] if gap is None else saved(
                ev, name, lambda ev=ev, name=name: service_run(ev, backend, name, join_gap=-1),
                reuse)
            m = score_run(ev, run)
            rows.append([ev.name, label, f"{m['MRR@10']:.3f}", f"{m['hit@1']:.3f}",
                         f"{m['hit@5']:.3f}", f"{m['hit@10']:.3f}", f"{m['tok@5']:,.0f}",
                         f"{m['lines@5']:,.0f}"])
            vals[(ev.name, label.split(" ")[0])] = m["MRR@10"]
    plots.bars(plots.IMG / "quality-join.png", [e.name for e in evs], ["joined", "apart"], vals,
               "MRR@10", "Adjacent hits joined into one range, or returned apart")
    return md_table(["set", "hits", "MRR@10", "hit@1", "hit@5", "hit@10", "tok@5", "lines@5"],
                    rows)


def study_max_tokens(evs: list[EvalSet], backend: str, hybrid: dict[str, Run],
                     reuse: bool) -> str:
    """The default reading (embed.max_tokens of configs/default.toml) against the whole window
    and against SHORTER tokens, next to the fp32 reference (whole; the compare run of
    bench.quality.retrieval) where that set has one."""
    tag, default = SHORT[backend], DEFAULT_READ
    rows: list[list[object]] = []
    for ev in evs:
        runs: dict[int, Run] = {default: hybrid[ev.name]}
        for cut in (0, SHORTER):
            cut_dir = WORK / f"index-w{cut}"
            index_all([ev.name], [backend], quiet=True, index_dir=cut_dir, embed_max_tokens=cut)
            name = f"hybrid ({tag}) " + (f"{cut} tokens" if cut else "whole window")
            runs[cut] = saved(ev, name, lambda ev=ev, name=name, d=cut_dir, cut=cut: service_run(
                ev, backend, name, index_dir=d, embed_max_tokens=cut), reuse)
        fp32 = Run.load(ev.name, "hybrid (fp32)")
        m = {cut: score_run(ev, run) for cut, run in runs.items()}
        m_ref = score_run(ev, fp32) if fp32 and len(fp32.results) == len(ev.queries) else None
        delta = [f"{m[c]['MRR@10'] - m_ref['MRR@10']:+.3f}" if m_ref else "-"
                 for c in (default, SHORTER)]
        rows.append([ev.name, f"{m_ref['MRR@10']:.3f}" if m_ref else "not indexed",
                     *(f"{m[c]['MRR@10']:.3f}" for c in (0, default, SHORTER)), *delta,
                     *(f"{m[c]['hit@5']:.3f}" for c in (0, default, SHORTER))])
    return md_table(["set", "MRR@10 fp32, whole", f"MRR@10 {tag}, whole",
                     f"MRR@10 {tag}, {default} (default)", f"MRR@10 {tag}, {SHORTER}",
                     f"{default} - fp32", f"{SHORTER} - fp32", "hit@5 whole",
                     f"hit@5 {default}", f"hit@5 {SHORTER}"], rows)


def study_pool(evs: list[EvalSet], backend: str, hybrid: dict[str, Run], reuse: bool) -> str:
    tag = SHORT[backend]
    rows: list[list[object]] = []
    pts: dict[str, list[tuple[str, float, float]]] = {}
    for ev in evs:
        pts[ev.name] = []
        for pool in POOLS:
            name = f"hybrid ({tag}) pool {pool}"
            # every pool size a run of its own, 50 included, so the latency columns come
            # from the same stretch of time (the hybrid run may be hours older)
            run = saved(ev, name, lambda ev=ev, pool=pool, name=name: service_run(
                ev, backend, name, pool=pool), reuse)
            m = score_run(ev, run)
            rows.append([ev.name, pool, f"{m['MRR@10']:.3f}", f"{m['hit@10']:.3f}",
                         f"{m.get('p50_ms', 0):.0f}", f"{m.get('p95_ms', 0):.0f}"])
            pts[ev.name].append((str(pool), m.get("p50_ms", 0.0), m["MRR@10"]))
    plots.tradeoff(plots.IMG / "quality-pool.png", pts, "P50 latency ms", "MRR@10",
                   "Candidate pool per leg: quality against latency")
    return md_table(["set", "pool per leg", "MRR@10", "hit@10", "P50 ms", "P95 ms"], rows)


def study_cache(ev: EvalSet, backend: str) -> str:
    tag = SHORT[backend]
    off = service_run(ev, backend, f"hybrid ({tag}) cache off", cache=False)
    on = service_run(ev, backend, f"hybrid ({tag}) cache on, 2nd pass", passes=2)
    same = all(off.results[q] == on.results[q] for q in off.results)
    rows: list[list[Any]] = []
    for label, run in (("off", off), ("on, second pass (every query a hit)", on)):
        took = sorted(run.took_ms.values())
        rows.append([label, f"{statistics.median(took):.2f}",
                     f"{took[int(0.95 * (len(took) - 1))]:.2f}"])
    plots.bars(plots.IMG / "quality-cache.png", ["P50", "P95"], ["off", "on"],
               {("P50", "off"): float(rows[0][1]), ("P95", "off"): float(rows[0][2]),
                ("P50", "on"): float(rows[1][1]), ("P95", "on"): float(rows[1][2])},
               "ms per query", f"Memo cache on {ev.name} ({len(ev.queries)} queries)")
    return (md_table(["cache", "P50 ms", "P95 ms"], rows)
            + f"\n\nIdentical results with and without the cache: **{same}**.")


def study_fusion(evs: list[EvalSet], backend: str, hybrid: dict[str, Run], reuse: bool) -> str:
    tag = SHORT[backend]
    rows: list[list[object]] = []
    vals: dict[tuple[str, str], float] = {}
    for ev in evs:
        for fusion in FUSIONS:
            name = {"convex": f"hybrid ({tag})", "dense": f"dense ({tag})",
                    "lexical": f"lexical ({tag})"}.get(fusion, f"{fusion} ({tag})")
            run = hybrid[ev.name] if fusion == "convex" else saved(
                ev, name, lambda ev=ev, fusion=fusion, name=name: service_run(
                    ev, backend, name, fusion=fusion), reuse)
            m = score_run(ev, run)
            rows.append([ev.name, fusion, f"{m['MRR@10']:.3f}", f"{m['hit@5']:.3f}",
                         f"{m['hit@10']:.3f}", f"{m['nDCG@10']:.3f}"])
            vals[(ev.name, fusion)] = m["MRR@10"]
    plots.bars(plots.IMG / "quality-fusion.png", [e.name for e in evs], list(FUSIONS), vals,
               "MRR@10", "Fusion variants (same candidates)")
    return md_table(["set", "fusion", "MRR@10", "hit@5", "hit@10", "nDCG@10"], rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--cache-set", default="docs")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    plots.ENABLED = not a.no_write
    tag = SHORT[a.backend]
    evs = [load_set(s) for s in a.sets.split(",")]
    hybrid = {}
    for ev in evs:
        run = Run.load(ev.name, f"hybrid ({tag})")
        if run is None:
            raise SystemExit(f"no saved hybrid run for {ev.name}: "
                             "run bench.quality.retrieval first")
        hybrid[ev.name] = run
    tau = calibration_for("all-MiniLM-L6-v2").tau
    body = f"""## Ablations of the default pipeline ({a.backend})

`python -m bench.quality.ablations --backend {a.backend}`
(after `python -m bench.quality.retrieval`)

### K (spans returned)

{study_k(evs, a.backend, hybrid, a.reuse)}

![K](img/quality-k.png)

### tau (confidence threshold), k = 5

The calibrated default is tau = {tau:g} (docs/RETRIEVAL.md). A query whose hits all fall under
tau still gets its best guess, flagged `low_confidence`.

{study_tau(evs, a.backend, tau, a.reuse)}

![tau](img/quality-tau.png)

### Joining adjacent hits

rag_query returns neighbouring spans of one file that rank in the same answer as one range
(`query.join_gap` 3 lines, `query.join_max_lines` 150); `join_gap = -1` returns them apart.

{study_join(evs, a.backend, hybrid, a.reuse)}

![join](img/quality-join.png)

### Span text read by the model (`embed.max_tokens`)

The model reads each span's embedded text (path, symbol, signature, docstring, code or prose) up
to `embed.max_tokens` tokens: 160 by default, against its whole 256-token window and 128 here
(spans/s of each: "Embedding throughput"). The lexical leg reads every word either way; queries
are read whole. Same spans and queries; only the vectors differ.

{study_max_tokens(evs, a.backend, hybrid, a.reuse)}

### Candidate pool (per leg, before fusion)

{study_pool(evs, a.backend, hybrid, a.reuse)}

![pool](img/quality-pool.png)

### Memo cache ({a.cache_set})

{study_cache(load_set(a.cache_set), a.backend)}

![cache](img/quality-cache.png)

### Fusion variants

`convex` is the default (calibrated weighted sum); `rrf` is equal-weight reciprocal rank
fusion of the same two candidate lists; `dense` and `lexical` are the single legs.

{study_fusion(evs, a.backend, hybrid, a.reuse)}

![fusion](img/quality-fusion.png)
"""
    print(body)
    if not a.no_write:
        write_section("quality-ablations", body)


if __name__ == "__main__":
    main()
