"""semble's code-search benchmark, end to end through MCP, beside the peers' published numbers.

The evaluation kit's ``semble/`` folder holds 26 repositories of MinishLab/semble's benchmark
(the languages rag-mcp parses), their queries and the peers' published NDCG@10. Each repository's
benchmark root is indexed once with the real pipeline (one index folder for all of them, so the
embedding cache is shared and a re-run embeds only what changed); then one ``rag-mcp`` server per
repository runs over stdio and a real MCP client (the SDK's) asks every query with ``rag_query``,
k = 10, tau = 0 and a 10-span answer budget, every other setting the default a user gets. The
hits are scored with the benchmark's own rules (the kit's ``scoring.py``: NDCG@10 over the top-10
spans, mean over repositories) and printed beside the published numbers of the same 26
repositories, overall, per query category and per language.

    .venv/bin/python -m bench.quality.semble [--model M] [--backend B] [--repos gin,flask]
        [--label NAME] [--no-write] [--reindex]

Writes the "semble" section of docs/BENCHMARKS.md (unless --no-write or a subset of
repositories) and every query's hits to ``bench/.work/semble/runs/<label>.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._report import ROOT, WORK, md_table, pct, write_section
from bench.quality.sets import add_kit_arg, kit_source, use_kit

WORKDIR = WORK / "semble"
REPOS = WORKDIR / "repos"
INDEX = WORKDIR / "index"
RUNS = WORKDIR / "runs"
#: rag_query's arguments: the benchmark scores the top 10 spans, whatever their confidence
K, TAU, SPANS = 10, 0.0, 10
#: the peers shown beside us, in the published file's names (label, name)
PEERS = [("semble", "semble"), ("CodeRankEmbed Hybrid", "CodeRankEmbed Hybrid"),
         ("CodeRankEmbed", "CodeRankEmbed"), ("ColGREP (file level)", "ColGREP"),
         ("BM25 raw", "BM25 raw (semble ablation)"), ("potion-code-16M raw", "potion-code-16M raw")]
CATEGORIES = ("architecture", "semantic", "symbol")


def kit() -> Path:
    """The evaluation kit's ``semble/`` folder (the kit named by ``--kit DIR`` or
    ``RAG_EVAL_KIT``, read in place: nothing in it is written)."""
    d = kit_source() / "semble"
    if not (d / "scoring.py").is_file():
        sys.exit(f"{d} holds no scoring.py: this kit has no semble benchmark")
    return d


def scoring() -> ModuleType:
    """The kit's scoring rules (``scoring.py``), loaded from the kit as they are."""
    spec = importlib.util.spec_from_file_location("semble_scoring", kit() / "scoring.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while building classes
    spec.loader.exec_module(mod)
    return mod


def unpack() -> Path:
    """Unpack the repositories once into ``bench/.work/semble/repos``."""
    if not (REPOS / ".unpacked").exists():
        REPOS.mkdir(parents=True, exist_ok=True)
        with tarfile.open(kit() / "repos.tar.xz") as tar:
            tar.extractall(REPOS, filter="data")
        (REPOS / ".unpacked").touch()
    return REPOS


def user_default() -> tuple[str, str]:
    """The embedding model and backend a user gets (configs/default.toml, no environment)."""
    from rag_mcp.config import load_settings

    s = load_settings({}, environ={})
    return s.embed_model, s.embed_backend


def tag(model: str, backend: str) -> str:
    """The index's name tag: backend and model, so indexes of two models never share a name
    (all-MiniLM-L6-v2's go by the backend alone: the name they had when it was the default)."""
    short = {"onnx-int8": "int8", "onnx": "fp32"}.get(backend, backend)
    return short if model == "all-MiniLM-L6-v2" else f"{short}-{model.split('/')[-1]}"


def root_of(spec: dict[str, Any]) -> Path:
    """The folder the benchmark indexes: the repository's benchmark root."""
    return REPOS / spec["name"] / (spec.get("benchmark_root") or "")


def collection(spec: dict[str, Any], model: str, backend: str) -> str:
    return f"semble-{spec['name']}-{tag(model, backend)}"[:63].strip("-_.")


def index_repos(specs: list[dict[str, Any]], model: str, backend: str, rebuild: bool) -> None:
    """Index every repository's benchmark root with the default pipeline and ``model``."""
    from indexers.pipeline import run_index
    from rag_mcp.config import load_settings

    for spec in specs:
        s = load_settings({"root": str(root_of(spec)), "index_dir": str(INDEX),
                           "collection": collection(spec, model, backend),
                           "embed_model": model, "embed_backend": backend,
                           "log_dir": str(WORKDIR / "logs")}, environ={})
        t0 = time.perf_counter()
        st = run_index(s, rebuild=rebuild)
        if st.embedded or rebuild:
            print(f"  indexed {spec['name']}: {st.spans_total} spans, {st.embedded} embedded, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)


def server_env(spec: dict[str, Any], model: str, backend: str,
               extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one stdio server: the user's defaults (no RAG_* of this shell), this
    repository's index, the 10-span budget, and ``extra`` (``--env``, for ablations)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env.update(HF_HUB_OFFLINE="1", RAG_INDEX_DIR=str(INDEX),
               RAG_COLLECTION=collection(spec, model, backend), RAG_LOG_DIR=str(WORKDIR / "logs"),
               RAG_MAX_SPANS_PER_ANSWER=str(SPANS))
    env.update(extra or {})
    return env


def located(hit: dict[str, Any]) -> dict[str, Any]:
    """A hit's file and lines (from its span ID ``path:start-end:digest``, which the lean
    structured result keeps), name, kind and score."""
    path, lines, _digest = str(hit["id"]).rsplit(":", 2)
    start, _, end = lines.partition("-")
    return {"path": path, "start_line": int(start), "end_line": int(end),
            **{k: hit.get(k) for k in ("symbol", "kind", "score")}}


async def ask(spec: dict[str, Any], queries: list[str], env: dict[str, str]
              ) -> list[dict[str, Any]]:
    """Every query of one repository in one MCP session over stdio; each answer's hits and
    latencies (the server's own ``took_ms`` and the client's round trip)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rag_mcp", "serve", "--root", str(root_of(spec))],
        env=env, cwd=str(ROOT))
    out: list[dict[str, Any]] = []
    with open(WORKDIR / "server.stderr", "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            for q in queries:
                t0 = time.perf_counter()
                res = await session.call_tool("rag_query", {"query": q, "k": K, "tau": TAU})
                wall = (time.perf_counter() - t0) * 1000
                sc: dict[str, Any] = res.structured_content or {}
                diag: dict[str, Any] = (res.meta or {}).get("rag-mcp/diagnostics") or {}
                if res.is_error or "hits" not in sc:
                    raise RuntimeError(f"{spec['name']}: rag_query({q!r}) failed: {res.content}")
                out.append({"hits": [located(h) for h in sc["hits"]],
                            "took_ms": diag.get("took_ms", sc.get("took_ms")), "wall_ms": wall})
    return out


def run(specs: list[dict[str, Any]], tasks: list[Any], model: str, backend: str,
        extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every task asked through MCP and scored: one row per query."""
    import anyio

    sc = scoring()
    rows: list[dict[str, Any]] = []
    for spec in specs:
        mine = [t for t in tasks if t.repo == spec["name"]]
        answers = anyio.run(ask, spec, [t.query for t in mine],
                            server_env(spec, model, backend, extra))
        prefix = (spec.get("benchmark_root") or "").strip("/")
        for t, a in zip(mine, answers, strict=True):
            results = [(f"{prefix}/{h['path']}" if prefix else h["path"], h["start_line"],
                        h["end_line"]) for h in a["hits"]]
            s = sc.score_task(t, results)
            rows.append({"qid": t.qid, "repo": t.repo, "language": t.language,
                         "category": t.category, "query": t.query, "ndcg10": s["ndcg10"],
                         "ranks": s["ranks"], "n_relevant": s["n_relevant"],
                         "targets": [[x.path, x.start_line, x.end_line] for x in t.all_relevant],
                         "hits": a["hits"], "took_ms": a["took_ms"], "wall_ms": a["wall_ms"]})
        done = [r["ndcg10"] for r in rows if r["repo"] == spec["name"]]
        print(f"  {spec['name']:<14} {len(done):>3} queries  NDCG@10 {sum(done) / len(done):.3f}",
              flush=True)
    return rows


def published(names: list[str]) -> dict[str, dict[str, Any]]:
    """The peers' per-repository records for ``names``, as the kit's summarize() reads them."""
    with (kit() / "published.json").open(encoding="utf-8") as fh:
        pub = json.load(fh)
    specs = {s["name"]: s for s in json.loads((kit() / "repos.json").read_text())}
    out: dict[str, dict[str, Any]] = {}
    for label, name in PEERS:
        repos = pub[name]["repos"]
        out[label] = {n: {"repo": n, "language": specs[n]["language"],
                          "ndcg10": repos[n]["ndcg10"],
                          "by_category": repos[n].get("by_category", {})}
                      for n in names if n in repos}
    return out


def f3(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def tables(rows: list[dict[str, Any]], label: str, others: dict[str, list[dict[str, Any]]]
           | None = None) -> tuple[str, dict[str, Any]]:
    """Markdown tables (overall and per category; per language; per repository) of this run
    beside the peers on the same repositories (and ``others``, saved runs of ours), and this
    run's summary."""
    sc = scoring()
    ours = sc.per_repo(rows)
    names = sorted(ours)
    peers = published(names)
    mine = {label: ours} | {n: sc.per_repo([r for r in o if r["repo"] in ours])
                            for n, o in (others or {}).items()}
    summary = {n: sc.summarize(recs, rows if n == label else None)
               for n, recs in mine.items()} | {
        p: sc.summarize(recs) for p, recs in peers.items()}
    order = sorted(summary, key=lambda m: -summary[m]["ndcg10"])
    head = ["method (same repositories)", "NDCG@10", *CATEGORIES]
    overall = md_table(head, [[f"**{m}**" if m == label else m, f3(summary[m]["ndcg10"]),
                               *(f3(summary[m]["by_category"].get(c)) if peers.get(m) is None
                                 or any(r["by_category"] for r in peers[m].values()) else ""
                                 for c in CATEGORIES)] for m in order])
    langs = sorted(summary[label]["by_language"])
    by_lang = md_table(["method", *langs], [
        [m, *(f3(summary[m]["by_language"].get(lg)) for lg in langs)] for m in order])
    extra = [n for n in mine if n != label]
    by_repo = md_table(["repository", "language", "queries", label, *extra, "semble",
                        "CodeRankEmbed Hybrid"], [
        [n, ours[n]["language"], ours[n]["n_queries"], f3(ours[n]["ndcg10"]),
         *(f3(mine[e][n]["ndcg10"]) if n in mine[e] else "" for e in extra),
         f3(peers["semble"][n]["ndcg10"]), f3(peers["CodeRankEmbed Hybrid"][n]["ndcg10"])]
        for n in names])
    first = [min((r for r in x["ranks"] if r is not None), default=None) for x in rows]
    took = [x["took_ms"] for x in rows if x.get("took_ms") is not None]
    stats = {"queries": len(rows), "top10": sum(f is not None for f in first) / len(rows),
             "rank1": sum(f == 1 for f in first) / len(rows),
             "files_top10": sum(len({h["path"] for h in x["hits"]}) for x in rows) / len(rows),
             "p50_ms": pct(took, 50), "p95_ms": pct(took, 95)}
    text = (f"{overall}\n\nPer language (mean over that language's repositories):\n\n{by_lang}"
            f"\n\nPer repository:\n\n{by_repo}\n\n"
            f"{stats['queries']} queries: a target in the top 10 for {stats['top10']:.1%}, the "
            f"first target at rank 1 for {stats['rank1']:.1%}; {stats['files_top10']:.1f} "
            f"distinct files in a top 10; server time per query P50 {stats['p50_ms']:.0f} ms, "
            f"P95 {stats['p95_ms']:.0f} ms.")
    return text, summary[label] | stats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    model, backend = user_default()
    ap.add_argument("--model", default=model, help=f"embedding model (default: {model})")
    ap.add_argument("--backend", default=backend, help=f"embedding backend (default: {backend})")
    ap.add_argument("--repos", help="comma-separated subset (default: all 26)")
    ap.add_argument("--label", help="run name (default: rag-mcp, with the model's tag)")
    ap.add_argument("--reindex", action="store_true", help="rebuild every index from scratch")
    ap.add_argument("--no-write", action="store_true", help="do not touch docs/BENCHMARKS.md")
    ap.add_argument("--no-index", action="store_true",
                    help="ask the indexes as they are (no update: a chunker change is not applied)")
    ap.add_argument("--saved", metavar="RUN",
                    help="report the saved run bench/.work/semble/runs/RUN.json (no indexing, "
                         "no asking)")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=RUN",
                    help="a saved run (bench/.work/semble/runs/RUN.json) shown as LABEL beside "
                         "this one (repeatable)")
    ap.add_argument("--env", action="append", default=[], metavar="RAG_X=VALUE",
                    help="a setting of the servers (repeatable), e.g. RAG_RANK=false")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    sc = scoring()
    specs_by = sc.load_specs(str(kit()))
    chosen = a.repos.split(",") if a.repos else sorted(specs_by)
    unknown = sorted(set(chosen) - set(specs_by))
    if unknown:
        ap.error(f"unknown repositories: {', '.join(unknown)}")
    specs = [specs_by[n] for n in chosen]
    tasks = sc.load_tasks(str(kit()), specs_by, chosen)
    label = a.label or ("rag-mcp" if (a.model, a.backend) == (model, backend)
                        else f"rag-mcp ({tag(a.model, a.backend)})")
    extra = dict(e.split("=", 1) for e in a.env)
    if any(not k.startswith("RAG_") for k in extra):
        ap.error("--env takes RAG_NAME=VALUE")
    if a.saved:
        saved = json.loads((RUNS / f"{a.saved}.json").read_text(encoding="utf-8"))
        rows, label = saved["rows"], a.label or saved["label"]
    else:
        unpack()
        t0 = time.perf_counter()
        if not a.no_index:
            index_repos(specs, a.model, a.backend, a.reindex)
        print(f"indexes ready ({time.perf_counter() - t0:.0f} s); asking {len(tasks)} queries",
              flush=True)
        rows = run(specs, tasks, a.model, a.backend, extra)
    others = {}
    for c in a.compare:
        name, _, run_name = c.partition("=")
        saved = json.loads((RUNS / f"{run_name}.json").read_text(encoding="utf-8"))
        others[name] = saved["rows"]
    text, stats = tables(rows, label, others)
    print(text)
    if not a.saved:
        RUNS.mkdir(parents=True, exist_ok=True)
        out = RUNS / f"{label.replace(' ', '_').replace('(', '').replace(')', '')}.json"
        out.write_text(json.dumps({"label": label, "model": a.model, "backend": a.backend,
                                   "summary": stats, "rows": rows}, indent=1), encoding="utf-8")
        print(f"saved {out}")
    if not a.no_write and not a.repos and not extra:
        write_section("semble", intro(label, len(rows), len(specs), a.compare) + "\n\n"
                      + text)


def intro(label: str, n_queries: int, n_repos: int, compare: list[str] | None = None) -> str:
    cmd = "".join(f' --compare "{c}"' for c in compare or [])
    return (
        "## Code search beside the peers (semble's benchmark)\n\n"
        f"semble's public code-search benchmark on the {n_repos} of its repositories whose "
        f"languages rag-mcp parses ({n_queries} natural-language, architecture and symbol "
        "queries, each with target files and some with target lines). Every repository is "
        "indexed with the default settings; one `rag-mcp` server per repository answers over "
        "stdio to the MCP SDK's client, `rag_query` with k = 10, tau = 0 and a 10-span answer "
        "budget. Scored with the benchmark's own rules: NDCG@10 over the top-10 spans, the mean "
        "over repositories (per category and per language likewise). The peers' numbers are "
        f"their published ones on the same repositories. `{label}` is this run; other rows "
        "named rag-mcp are saved runs of ours on the same indexes (a run without the ranking "
        "stage: `--env RAG_RANK=false --no-write --label NAME`):\n\n"
        f"`.venv/bin/python -m bench.quality.semble{cmd}`")


if __name__ == "__main__":
    main()
