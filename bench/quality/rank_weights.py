"""The ranking stage's weights: ablations and the fit, over cached candidate pools.

The ranking stage (rag_mcp/search/rank.py) reorders the fusion's candidates. To weigh its rules
without re-asking a server per setting, every query's candidate pool is taken once through the
real retriever with the stage off (``query.rank = false``; the fusion's order, scores, names,
kinds and paths) and cached in ``bench/.work/rank/``; then ``rank.rank`` runs over the pools with
each setting, the same join as rag_query (``search.join``) makes the top 10, and each benchmark
scores it with its own rule: semble's NDCG@10 (bench/quality/semble.py, the mean over
repositories) and the kit sets' MRR@10 (rag-eval's rule). The end-to-end numbers through MCP are
bench/quality/semble.py's and bench/quality/retrieval.py's; this script chooses and explains.

    .venv/bin/python -m bench.quality.rank_weights [--models M1,M2] [--sets docs,cosqa]
        [--fit] [--no-write]

Writes the "rank-ablation" section of docs/BENCHMARKS.md: the stage off, on, and on with each
rule off, per benchmark. ``--fit`` also prints a coordinate search over the weights (each one
scaled by 0, 0.5, 1.5 and 2 in turn, kept when the semble NDCG@10 rises by more than 0.002 and
every kit set stays within 0.005 MRR@10 of the stage off), which is how the defaults were
checked after a grid over ``file`` and ``spread``, the two rules that trade semble's file-level
targets against the kit's span-level ones.
"""

from __future__ import annotations

import argparse
import pickle
from dataclasses import asdict, astuple, fields, replace
from pathlib import Path
from typing import Any

from bench._report import WORK, md_table, write_section
from bench.quality import semble as S
from bench.quality.sets import add_kit_arg, load_set, settings_for, use_kit
from rag_mcp.search import rank as R
from rag_mcp.search.fusion import calibration_for
from rag_mcp.search.join import Placed, plan_joins

POOLS = WORK / "rank" / "pools"
KIT_SETS = ("docs", "cosqa", "docstring", "swebench_lite")
JOIN_GAP, JOIN_MAX_LINES = 3, 150  # configs/default.toml's query.join_gap / join_max_lines
#: the most MRR@10 a kit set may lose against the stage off (the fusion's order): the bar the
#: stage has to hold on every set
KIT_SLACK = 0.005


def _dump(settings: Any, queries: list[tuple[str, str]], out: Path) -> dict[str, Any]:
    """Every query's candidates in the fusion's order (the stage off), cached per generation."""
    from rag_mcp.deps import build_deps
    from rag_mcp.search.retrieve import Filters

    deps = build_deps(replace(settings, rank=False))
    try:
        retriever = deps.repo().retriever
        gen = retriever.handle.get().generation
        if out.exists():
            cached: dict[str, Any] = pickle.loads(out.read_bytes())
            if cached["generation"] == gen and len(cached["queries"]) == len(queries):
                return _candidates(cached)
        rows = []
        for qid, text in queries:
            hits = retriever.retrieve(text, Filters()).hits
            rows.append({"qid": qid, "query": text,
                         "cands": [astuple(R.candidate(h)) for h in hits]})
    finally:
        deps.close()
    data = {"generation": gen, "queries": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(pickle.dumps(data))
    return _candidates(data)


def _candidates(data: dict[str, Any]) -> dict[str, Any]:
    """The cached rows (plain tuples, so a changed class still reads them) as Candidates."""
    for q in data["queries"]:
        q["cands"] = [R.Candidate(*c) for c in q["cands"]]
    return data


def semble_pools(model: str, backend: str = "onnx-int8"
                 ) -> tuple[Any, dict[str, Any], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Every semble query's pool over ``model``'s indexes (the repositories indexed so far)."""
    from rag_mcp.config import load_settings

    sc = S.scoring()
    specs = sc.load_specs(str(S.kit()))
    tasks = {t.qid: t for t in sc.load_tasks(str(S.kit()), specs)}
    pools = []
    for name, spec in sorted(specs.items()):
        coll = S.collection(spec, model, backend)
        if not (S.INDEX / coll / "CURRENT").exists():
            print(f"  {name}: not indexed with {model} here, left out", flush=True)
            continue
        s = load_settings({"root": str(S.root_of(spec)), "index_dir": str(S.INDEX),
                           "collection": coll, "embed_model": model, "embed_backend": backend,
                           "log_dir": str(S.WORKDIR / "logs")}, environ={})
        qs = [(t.qid, t.query) for t in tasks.values() if t.repo == name]
        pool = _dump(s, qs, POOLS / f"semble-{name}-{S.tag(model, backend)}.pkl")
        pools.append((spec, pool | {"terms": calibration_for(model).terms}))
    return sc, tasks, pools


def kit_pools(sets: list[str], model: str, backend: str = "onnx-int8"
              ) -> list[tuple[Any, str, dict[str, Any]]]:
    from bench.quality.sets import INDEX, collection

    out = []
    for name in sets:
        ev = load_set(name)
        for sub in ev.corpora:
            if not (INDEX / collection(name, sub, backend, model) / "CURRENT").exists():
                continue  # not indexed here (SWE-bench's snapshots are many)
            qs = [(q["id"], q["query"]) for q in ev.queries if q.get("corpus", "") == sub]
            tag = sub.split("/")[0] or "corpus"
            pool = _dump(settings_for(ev, sub, backend, model=model), qs,
                         POOLS / f"kit-{name}-{tag}-{S.tag(model, backend)}.pkl")
            out.append((ev, sub, pool | {"terms": calibration_for(model).terms}))
    return out


def top10(query: str, cands: list[R.Candidate], w: R.Weights, terms: float = 8
          ) -> list[tuple[str, int, int]]:
    """rag_query's first 10 answers: the stage's order (``terms``: the model's calibration's
    length threshold, as the retriever passes it), adjacent spans joined."""
    order = [cands[i] for i in R.rank(query, cands, w, terms=terms)]
    groups = plan_joins([Placed(c.path, c.start_line, c.end_line) for c in order], 20,
                        gap=JOIN_GAP, max_lines=JOIN_MAX_LINES)
    return [(order[g[0]].path, min(order[i].start_line for i in g),
             max(order[i].end_line for i in g)) for g in groups[:10]]


def score_semble(w: R.Weights, sc: Any, tasks: dict[str, Any],
                 pools: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for spec, pool in pools:
        prefix = (spec.get("benchmark_root") or "").strip("/")
        for q in pool["queries"]:
            t = tasks[q["qid"]]
            res = [(f"{prefix}/{p}" if prefix else p, s, e)
                   for p, s, e in top10(q["query"], q["cands"], w, pool["terms"])]
            rows.append({"repo": t.repo, "language": t.language, "category": t.category,
                         "ndcg10": sc.score_task(t, res)["ndcg10"]})
    summary: dict[str, Any] = sc.summarize(sc.per_repo(rows), rows)
    return summary


def score_kit(w: R.Weights, pools: list[tuple[Any, str, dict[str, Any]]]) -> dict[str, float]:
    from rag_mcp.eval.metrics import LineSpan, score_query

    per: dict[str, list[float]] = {}
    for ev, _sub, pool in pools:
        gold = {q["id"]: [LineSpan.of(g) for g in q["gold"]] for q in ev.queries}
        for q in pool["queries"]:
            res = [LineSpan(p, s, e)
                   for p, s, e in top10(q["query"], q["cands"], w, pool["terms"])]
            per.setdefault(ev.name, []).append(score_query(gold[q["qid"]], res)["MRR@10"])
    return {n: sum(v) / len(v) for n, v in per.items()}


def service_check(sets: list[str], model: str) -> list[list[object]]:
    """The kit's sets through rag-eval's path (QueryService, k = 10, tau = 0) with the stage
    off and on, side by side; a set's corpora without an index here are left out (said)."""
    from bench.quality.runs import score_run, service_run
    from bench.quality.sets import INDEX, EvalSet, collection

    rows: list[list[object]] = []
    for name in sets:
        ev = load_set(name)
        ready = [q for q in ev.queries if (INDEX / collection(
            name, q.get("corpus", ""), "onnx-int8", model) / "CURRENT").exists()]
        if not ready:
            continue
        sub = EvalSet(ev.name, ev.dir, ready)
        off = score_run(sub, service_run(sub, "onnx-int8", "hybrid, stage off", rank=False,
                                         model=model))
        on = score_run(sub, service_run(sub, "onnx-int8", "hybrid, stage on", rank=True,
                                        model=model))
        rows.append([f"{name} (n={len(ready)}" + ("" if len(ready) == len(ev.queries)
                                                   else f" of {len(ev.queries)}") + ")",
                     f"{off['MRR@10']:.4f}", f"{on['MRR@10']:.4f}",
                     f"{on['MRR@10'] - off['MRR@10']:+.4f}",
                     f"{off['hit@5']:.3f}", f"{on['hit@5']:.3f}"])
        print(" | ".join(map(str, rows[-1])), flush=True)
    return rows


def variants() -> list[tuple[str, R.Weights]]:
    d = R.DEFAULT
    out = [("off (the fusion's order)", R.OFF), ("on (default)", d)]
    groups = {"names (name, name_type, name_file, docs_symbol)":
              dict(name=0.0, name_type=0.0, name_file=0.0, docs_symbol=0.0),
              "type definitions first (name_type)": dict(name_type=0.0),
              "files named after the identifier (name_file)": dict(name_file=0.0),
              "members of the named type (member)": dict(member=0.0),
              "examples folders second (example)": dict(example=0.0),
              "file preambles second (preamble)": dict(preamble=0.0),
              "query words in the path (path)": dict(path=0.0),
              "file-level evidence (file, family)": dict(file=0.0, family=0.0),
              "a partial class's base file first (family)": dict(family=0.0),
              "docs second (docs, docs_symbol)": dict(docs=0.0, docs_symbol=0.0),
              "changelogs last (changelog)": dict(changelog=0.0),
              "tests after the code they test (test)": dict(test=0.0),
              "spread over files (spread)": dict(spread=0.0)}
    out += [(f"without {k}", replace(d, **v)) for k, v in groups.items()]
    return out


def fit(sc: Any, tasks: dict[str, Any], sp: list[Any], kp: list[Any]) -> R.Weights:
    """Coordinate search from the defaults (see the module docstring)."""
    w = R.DEFAULT
    best = score_semble(w, sc, tasks, sp)["ndcg10"]
    kit0 = score_kit(R.OFF, kp)  # the stage off: no setting may cost a kit set more
    for f in fields(R.Weights):
        base = getattr(w, f.name)
        for scale in (0.0, 0.5, 1.5, 2.0):
            cand = replace(w, **{f.name: round(base * scale, 4)})
            s = score_semble(cand, sc, tasks, sp)["ndcg10"]
            if s <= best + 0.002:
                continue
            k = score_kit(cand, kp)
            if all(k[n] >= kit0[n] - KIT_SLACK for n in k):
                print(f"  {f.name} {base} -> {getattr(cand, f.name)}: {best:.4f} -> {s:.4f}")
                w, best = cand, s
    print("fitted:", asdict(w))
    return w


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(KIT_SETS),
                    help="kit sets (their indexed corpora; SWE-bench's snapshots may be a part)")
    ap.add_argument("--fit", action="store_true", help="print the coordinate search")
    ap.add_argument("--service", default="docs,cosqa,docstring,swebench_lite",
                    help="kit sets also asked through rag-eval's path, stage off and on "
                         "('' for none)")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/BENCHMARKS.md")
    model, _backend = S.user_default()
    ap.add_argument("--models", default=model,
                    help=f"the indexes' embedding models, comma-separated (default: {model}, "
                         "the user's); the first one's are also asked through rag-eval")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    models = a.models.split(",")
    text = ("## The ranking stage, rule by rule\n\n"
            "What each rule of the ranking stage (rag_mcp/search/rank.py) earns: every query's "
            "candidate pool is taken once through the retriever with the stage off, then "
            "reordered with each setting and joined as rag_query joins; semble's benchmark "
            "scored by its NDCG@10 (mean over the repositories indexed with that model), the "
            "kit's sets by MRR@10. \"without X\" is the default with that rule's weights at 0.")
    for m in models:
        sc, tasks, sp = semble_pools(m)
        kp = kit_pools(a.sets.split(","), m)
        if a.fit:
            fit(sc, tasks, sp, kp)
        total = len(S.scoring().load_specs(str(S.kit())))
        some = "" if len(sp) == total else ": " + ", ".join(spec["name"] for spec, _ in sp)
        text += (f"\n\nWith {m} ({len(sp)} of semble's {total} repositories indexed{some}):"
                 "\n\n" + ablation_table(sc, tasks, sp, kp))
    text += f"\n\n`.venv/bin/python -m bench.quality.rank_weights --models {a.models}`"
    checked = service_check([x for x in a.service.split(",") if x], models[0])
    if checked:
        text += (f"\n\nThe kit's sets end to end through rag-eval's path with {models[0]} "
                 "(QueryService, k = 10, tau = 0), the stage off (`query.rank = false`) and on, "
                 "in one run:\n\n"
                 + md_table(["set", "MRR@10 off", "MRR@10 on", "change", "hit@5 off",
                             "hit@5 on"], checked))
    print(text)
    if not a.no_write:
        write_section("rank-ablation", text)


def ablation_table(sc: Any, tasks: dict[str, Any], sp: list[Any], kp: list[Any]) -> str:
    """Each variant's semble NDCG@10 (overall, per category) and kit MRR@10, as a table."""
    rows: list[list[object]] = []
    names: list[str] = []
    for label, w in variants():
        s, k = score_semble(w, sc, tasks, sp), score_kit(w, kp)
        names = list(k)
        cat = s["by_category"]
        rows.append([label, f"{s['ndcg10']:.3f}", *(f"{cat[c]:.3f}" for c in S.CATEGORIES),
                     *(f"{k[n]:.4f}" for n in k)])
        print(" | ".join(map(str, rows[-1])), flush=True)
    head = ["ranking stage", "semble NDCG@10", *S.CATEGORIES, *(f"{n} MRR@10" for n in names)]
    return md_table(head, rows)


if __name__ == "__main__":
    main()
