"""Tool latency through the real stdio transport, client and server in separate processes.

    python -m bench.latency [--calls 200] [--repo PATH ...]

For each repository (default: this one and the Flask 3.1.0 sdist, ~33k lines; both are indexed
first with the default model): rag_query uncached (distinct queries), cached (repeats), rag_get_span
and rag_health, P50 and P95 over --calls calls each, with the server-side split that rag_query
reports (embedding, dense, lexical, fusion, formatting). Writes the "latency" section of
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench._report import ROOT, WORK, md_table, pct, write_section

TEMPLATES = ("where is {} defined", "{}", "how does {} work", "what calls {}",
             "{} implementation")


def queries_for(root: Path, n: int, seed: int = 7) -> list[str]:
    """Distinct realistic queries: identifiers, questions about them, doc headings."""
    from rag_mcp import generation as gen
    from rag_mcp.catalog import Catalog
    from rag_mcp.config import load_settings

    s = load_settings({"root": str(root)})
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None, f"index {root} first"
    cat = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    labels = sorted({r.span.symbol or r.span.heading or "" for r in cat.all_spans()} - {""})
    cat.close()
    rng = random.Random(seed)
    rng.shuffle(labels)
    out: list[str] = []
    for i, label in enumerate(labels):
        q = TEMPLATES[i % len(TEMPLATES)].format(label.split(" > ")[-1].replace(".", " "))
        if q not in out:
            out.append(q)
        if len(out) >= n:
            break
    while len(out) < n:
        out.append(f"{rng.choice(labels)} {len(out)}")
    return out


async def measure(root: Path, calls: int) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
        # The protocol round trip. ClientSession.call_tool also re-validates structured output
        # against the tool's JSON schema with `jsonschema.validate`, which re-checks the schema
        # itself every call (~5-60 ms here): a client-side cost, measured separately below.
        return await session.send_request(
            types.ClientRequest(types.CallToolRequest(
                params=types.CallToolRequestParams(name=name, arguments=arguments))),
            types.CallToolResult)

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rag_mcp", "serve", "--root", str(root)],
        env={**os.environ, "RAG_LOG_DIR": str(WORK / "latency-logs"),
             "RAG_CACHE_SIZE": "100000"})
    qs = queries_for(root, calls)
    res: dict[str, Any] = {"uncached": [], "cached": [], "get_span": [], "health": [],
                           "split": {k: [] for k in ("embed_ms", "dense_ms", "lexical_ms",
                                                     "fusion_ms", "format_ms")},
                           "server_uncached": [], "server_cached": [], "sdk_cached": []}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("rag_query", {"query": "warm up the model"})
        ids: list[str] = []
        for q in qs:
            t0 = time.perf_counter()
            r = await call(session, "rag_query", {"query": q})
            res["uncached"].append((time.perf_counter() - t0) * 1000)
            sc = r.structuredContent or {}
            assert not r.isError and not sc.get("cache_hit"), r
            res["server_uncached"].append(sc["took_ms"])
            for k, v in sc.get("timings", {}).items():
                if k in res["split"]:
                    res["split"][k].append(v)
            ids += [h["id"] for h in sc["hits"][:1]]
        for i in range(calls):
            t0 = time.perf_counter()
            r = await call(session, "rag_query", {"query": qs[i % 20]})
            res["cached"].append((time.perf_counter() - t0) * 1000)
            assert (r.structuredContent or {}).get("cache_hit"), r
            res["server_cached"].append((r.structuredContent or {})["took_ms"])
        for i in range(calls):
            t0 = time.perf_counter()
            r = await call(session, "rag_get_span", {"span_id": ids[i % len(ids)]})
            res["get_span"].append((time.perf_counter() - t0) * 1000)
            # a file edited since indexing answers E_STALE: still a measured round trip
            assert not r.isError or "E_STALE" in str(r.content), r
        for _ in range(calls):
            t0 = time.perf_counter()
            await call(session, "rag_health", {})
            res["health"].append((time.perf_counter() - t0) * 1000)
        for i in range(min(calls, 50)):
            t0 = time.perf_counter()
            await session.call_tool("rag_query", {"query": qs[i % 20]})
            res["sdk_cached"].append((time.perf_counter() - t0) * 1000)
    return res


def ensure_indexed(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(root), "-q"],
                   check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repo", action="append", type=Path)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    repos = args.repo
    if not repos:
        from bench.index_bench import fetch_sdist

        repos = [ROOT, fetch_sdist("flask==3.1.0")]
    rows = []
    splits = []
    load0 = os.getloadavg()[0]
    for root in repos:
        ensure_indexed(root)
        r = anyio.run(measure, root, args.calls)
        name = root.name
        for label, key in (("rag_query uncached", "uncached"), ("rag_query cached", "cached"),
                           ("rag_get_span", "get_span"), ("rag_health", "health"),
                           ("rag_query cached, via ClientSession.call_tool", "sdk_cached")):
            rows.append([name, label, pct(r[key], 50), pct(r[key], 95)])
        splits.append([name, pct(r["server_uncached"], 50), pct(r["server_cached"], 50),
                       *(pct(r["split"][k], 50) for k in ("embed_ms", "dense_ms", "lexical_ms",
                                                          "fusion_ms", "format_ms"))])
        print(md_table(["repo", "call", "P50 ms", "P95 ms"], rows[-5:]), flush=True)
    table = md_table(["repository", "call", "P50 ms", "P95 ms"], rows)
    split = md_table(["repository", "server rag_query uncached P50", "cached P50", "embed",
                      "dense", "lexical", "fusion", "format"], splits)
    print(split)
    cmd = "python -m bench.latency" + (f" --calls {args.calls}" if args.calls != 200 else "")
    write_section("latency", "## Tool latency over stdio\n\n"
                  f"`{cmd}`\n\nA real MCP client session talking to `rag-mcp` in another "
                  f"process over stdio, {args.calls} calls of each kind (distinct queries for "
                  "the uncached case), measured at the client as the protocol round trip "
                  "(request written, response read). The last row per repository adds the "
                  "Python SDK client's own check of the structured result against the output "
                  "schema (`jsonschema.validate` re-checks the schema on every call). "
                  "Targets: rag_query uncached P50 ≤ 25 ms and P95 ≤ 60 ms, cached P50 ≤ 2 ms, "
                  "rag_get_span P50 ≤ 3 ms.\n\n"
                  + table + "\n\nServer-side split of rag_query (P50, ms):\n\n" + split
                  + f"\n\nLoad average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at "
                  f"the end, on {os.cpu_count()} cores shared with other work: absolute times "
                  "are inflated by load; bench/transport.py times the transport alone.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
