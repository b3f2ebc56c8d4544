"""Tool latency through the real stdio transport, client and server in separate processes.

    python -m bench.speed.latency [--calls 200] [--rounds 5] [--repo PATH ...] [--baseline REV]
        [--baseline-env RAG_X=VALUE ...]

For each repository (default: this one and the Flask 3.1.0 sdist, ~33k lines; both are indexed
first with the default model): rag_query uncached (distinct queries), cached (repeats), rag_get_span
and rag_health, P50 and P95 over --calls calls each, with the server-side split that rag_query
reports (embedding, dense, lexical, fusion, formatting). One server per repository, all open at
once; each kind of call runs in --rounds blocks alternating between them. ``--baseline REV``
adds the servers of an older commit to the same rounds (bench/speed/transport.py's way) and a table
of the speed-up; ``--baseline-env RAG_RANK=0`` (alone: this checkout's servers) starts the
baseline servers with those settings, to time one stage of the pipeline against the same code
without it. Writes the "latency" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from bench._report import ROOT, WORK, md_table, pct, write_section
from bench.speed.transport import (
    baseline_tree,
    run_ts_client,
    server_command,
    ts_client_ready,
    ts_version,
)

TEMPLATES = ("where is {} defined", "{}", "how does {} work", "what calls {}",
             "{} implementation")


def queries_for(root: Path, n: int, seed: int = 7) -> list[str]:
    """Distinct realistic queries: identifiers, questions about them, doc headings."""
    from rag_mcp.config import load_settings
    from rag_mcp.index import generation as gen
    from rag_mcp.index.catalog import Catalog

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


async def measure(roots: list[Path], calls: int, rounds: int, baseline: Path | None = None,
                  baseline_env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every repository's server open at once (and the ``baseline`` tree's server for each, as
    ``<name>@base``); each kind of call runs in ``rounds`` blocks that alternate between the
    servers, so a burst of load from other work on this machine lands on all of them alike
    rather than on one row."""
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
        # The protocol round trip. ClientSession.call_tool also re-validates structured output
        # against the tool's JSON schema with `jsonschema.validate`, which re-checks the schema
        # itself every call (~5-60 ms here): a client-side cost, measured separately below.
        return await session.send_request(  # SDK 2: the request model itself, no ClientRequest
            types.CallToolRequest(
                params=types.CallToolRequestParams(name=name, arguments=arguments)),
            types.CallToolResult)

    out: dict[str, dict[str, Any]] = {}
    sessions: dict[str, ClientSession] = {}
    qs: dict[str, list[str]] = {}
    ids: dict[str, list[str]] = {}
    async with AsyncExitStack() as stack:
        servers: list[tuple[str, Path, Path | None, dict[str, str]]] = [
            (root.name, root, None, {}) for root in roots]
        if baseline is not None or baseline_env is not None:
            servers += [(f"{root.name}@base", root, baseline, baseline_env or {})
                        for root in roots]
        for name, root, tree, extra in servers:
            command = server_command(tree)
            params = StdioServerParameters(
                command=command[0], args=[*command[1:], "serve", "--root", str(root)],
                env={**os.environ, "RAG_LOG_DIR": str(WORK / "latency-logs"),
                     "RAG_CACHE_SIZE": "100000", **extra})
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await session.call_tool("rag_query", {"query": "warm up the model"})
            sessions[name] = session
            qs[name] = queries_for(root, calls)
            ids[name] = []
            out[name] = {
                "uncached": [], "cached": [], "get_span": [], "health": [],
                "split": {k: [] for k in ("embed_ms", "dense_ms", "lexical_ms", "fusion_ms",
                                          "format_ms")},
                "server_uncached": [], "server_cached": [], "sdk_cached": []}
        per = max(1, calls // rounds)
        blocks = [range(i * per, calls if i == rounds - 1 else (i + 1) * per)
                  for i in range(rounds)]
        for block in blocks:
            for name, session in sessions.items():
                res = out[name]
                for q in (qs[name][i] for i in block):
                    t0 = time.perf_counter()
                    r = await call(session, "rag_query", {"query": q})
                    res["uncached"].append((time.perf_counter() - t0) * 1000)
                    # diagnostics: in _meta since the lean results, in the structured content
                    # before (a --baseline server)
                    sc = (r.meta or {}).get("rag-mcp/diagnostics") or r.structured_content or {}
                    assert not r.is_error and not sc.get("cache_hit"), r
                    res["server_uncached"].append(sc["took_ms"])
                    for k, v in sc.get("timings", {}).items():
                        if k in res["split"]:
                            res["split"][k].append(v)
                    # the hits are the structured content's, whichever holds the diagnostics
                    ids[name] += [h["id"] for h in (r.structured_content or {})["hits"][:1]]
        for block in blocks:
            for name, session in sessions.items():
                res = out[name]
                for i in block:
                    t0 = time.perf_counter()
                    r = await call(session, "rag_query", {"query": qs[name][i % 20]})
                    res["cached"].append((time.perf_counter() - t0) * 1000)
                    sc = (r.meta or {}).get("rag-mcp/diagnostics") or r.structured_content or {}
                    assert sc.get("cache_hit"), r
                    res["server_cached"].append(sc["took_ms"])
                for i in block:
                    t0 = time.perf_counter()
                    r = await call(session, "rag_get_span",
                                   {"span_id": ids[name][i % len(ids[name])]})
                    res["get_span"].append((time.perf_counter() - t0) * 1000)
                    # a file edited since indexing answers E_STALE: still a measured round trip
                    assert not r.is_error or "E_STALE" in str(r.content), r
                for _ in block:
                    t0 = time.perf_counter()
                    await call(session, "rag_health", {})
                    res["health"].append((time.perf_counter() - t0) * 1000)
        for name, session in sessions.items():
            for i in range(min(calls, 50)):
                t0 = time.perf_counter()
                await session.call_tool("rag_query", {"query": qs[name][i % 20]})
                out[name]["sdk_cached"].append((time.perf_counter() - t0) * 1000)
        if ts_client_ready():
            # The TypeScript SDK client (bench/speed/transport_client.mjs), a stdio server of this
            # tree per repository spawned by it: a cached query, a span, health.
            command = server_command(None)
            ts = await run_ts_client({root.name: {
                "stdio": {"command": command[0],
                          "args": [*command[1:], "serve", "--root", str(root)],
                          "env": {**os.environ, "RAG_LOG_DIR": str(WORK / "latency-logs")}},
                "calls": [["rag_query", {"query": qs[root.name][0]}],
                          ["rag_get_span", {"span_id": ids[root.name][0]}],
                          ["rag_health", {}]]} for root in roots}, calls, rounds)
            for root in roots:
                for key, tool in TS_KEYS.items():
                    out[root.name][key] = ts[f"{root.name} {tool}"]
    return out


#: rows of the TypeScript SDK client, and the tool each one calls
TS_KEYS = {"ts_cached": "rag_query", "ts_get_span": "rag_get_span", "ts_health": "rag_health"}
TS_LABELS = {"ts_cached": "rag_query cached, TypeScript SDK client",
             "ts_get_span": "rag_get_span, TypeScript SDK client",
             "ts_health": "rag_health, TypeScript SDK client"}


def ensure_indexed(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(root), "-q"],
                   check=True)


def _shown(name: str) -> str:
    """A repository's name in the tables: this checkout's folder name says nothing to a reader."""
    return "rag-mcp (this repository)" if name == ROOT.name else name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200, help="calls of each kind per repository")
    ap.add_argument("--rounds", type=int, default=5,
                    help="blocks alternating between the repositories")
    ap.add_argument("--repo", action="append", type=Path)
    ap.add_argument("--baseline", metavar="REV",
                    help="also time the server of this git revision, side by side")
    ap.add_argument("--baseline-env", action="append", default=[], metavar="RAG_X=VALUE",
                    help="settings of the baseline servers (without --baseline: this "
                         "checkout's servers with these settings), side by side")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    repos = args.repo
    if not repos:
        from bench.speed.indexing import fetch_sdist

        repos = [ROOT, fetch_sdist("flask==3.1.0")]
    rows = []
    splits = []
    for root in repos:
        ensure_indexed(root)
    load0 = os.getloadavg()[0]
    base = baseline_tree(args.baseline) if args.baseline else None
    benv = dict(kv.split("=", 1) for kv in args.baseline_env) if args.baseline_env else None
    measured = anyio.run(measure, repos, args.calls, args.rounds, base, benv)
    for name, r in measured.items():
        if name.endswith("@base"):
            continue
        shown = _shown(name)
        kinds = [("rag_query uncached", "uncached"), ("rag_query cached", "cached"),
                 ("rag_get_span", "get_span"), ("rag_health", "health"),
                 ("rag_query cached, via ClientSession.call_tool", "sdk_cached")]
        kinds += [(TS_LABELS[k], k) for k in TS_KEYS if k in r]
        for label, key in kinds:
            rows.append([shown, label, pct(r[key], 50), pct(r[key], 95)])
        splits.append([shown, pct(r["server_uncached"], 50), pct(r["server_cached"], 50),
                       *(pct(r["split"][k], 50) for k in ("embed_ms", "dense_ms", "lexical_ms",
                                                          "fusion_ms", "format_ms"))])
        print(md_table(["repo", "call", "P50 ms", "P95 ms"], rows[-len(kinds):]), flush=True)
    table = md_table(["repository", "call", "P50 ms", "P95 ms"], rows)
    split = md_table(["repository", "server rag_query uncached P50", "cached P50", "embed",
                      "dense", "lexical", "fusion", "format"], splits)
    print(split)
    rev = base.name.removeprefix("baseline-") if base else ""
    cmd = ("python -m bench.speed.latency" + (f" --calls {args.calls}" if args.calls != 200 else "")
           + (f" --rounds {args.rounds}" if args.rounds != 5 else "")
           + (f" --baseline {rev}" if base else "")
           + "".join(f" --baseline-env {kv}" for kv in args.baseline_env))
    # what the baseline servers are, in words
    who = (f"the server of commit `{rev}`" if base else "this tree's server") + (
        f" with {', '.join(f'`{kv}`' for kv in args.baseline_env)}" if benv else "")
    before = (rev or "baseline") + (" " + " ".join(args.baseline_env) if benv else "")
    side = ""
    if base or benv:
        brows = []
        for root in repos:
            new, old = measured[root.name], measured[f"{root.name}@base"]
            for label, key in (("rag_query uncached", "uncached"), ("rag_query cached", "cached"),
                               ("rag_get_span", "get_span"), ("rag_health", "health")):
                brows.append([_shown(root.name), label, pct(old[key], 50), pct(new[key], 50),
                              f"{pct(old[key], 50) / pct(new[key], 50):.2f}x"])
            # what the server itself spent: the client's round trip carries the machine's noise
            for label, o, n in (("server: rag_query uncached", old["server_uncached"],
                                 new["server_uncached"]),
                                ("server: embedding the query", old["split"]["embed_ms"],
                                 new["split"]["embed_ms"]),
                                ("server: fusion and ranking", old["split"]["fusion_ms"],
                                 new["split"]["fusion_ms"])):
                if o and n:
                    brows.append([_shown(root.name), label, pct(o, 50), pct(n, 50),
                                  f"{pct(o, 50) / pct(n, 50):.2f}x"])
        how = ("; its source exported to bench/.work, run on the same installed dependencies"
               if base else "")
        side = (f"\n\nSide by side with {who} (same indexes, queries and rounds{how}):\n\n"
                + md_table(["repository", "call", f"{before} P50 ms", "now P50 ms", "speed-up"],
                           brows)
                + ("\n\nEmbedding the query is the same work on both servers, so its ratio "
                   "shows how far the machine alone moves a ratio in this run; the stage "
                   "compared shows in the fusion and ranking row." if benv and not base else ""))
        print(side)
    write_section("latency", "## Tool latency over stdio\n\n"
                  f"`{cmd}`\n\nA real MCP client session talking to `rag-mcp` in another "
                  f"process over stdio, {args.calls} calls of each kind (distinct queries for "
                  "the uncached case), one server per repository, all open at once, each kind "
                  f"of call in {args.rounds} blocks alternating between the repositories (load "
                  "from other work hits every row alike), "
                  "measured at the client as the protocol round trip "
                  "(request written, response read). The last row per repository adds the "
                  "Python SDK client's own check of the structured result against the output "
                  "schema (`jsonschema.validate` re-checks the schema on every call). "
                  + ("The TypeScript SDK client rows are the official `@modelcontextprotocol/"
                     f"sdk` {ts_version()} (the client Node-based assistants embed) calling "
                     "through `Client.callTool` (output schema checked with the validator it "
                     "compiled once) to a stdio server of this tree per repository that it "
                     f"spawned, {args.calls} calls of each kind in {args.rounds} blocks "
                     "alternating between the repositories, after the Python client's rounds; "
                     "the same query repeated (cached) and one span. "
                     if ts_client_ready() else
                     "The TypeScript SDK client was not measured (node or its SDK is missing; "
                     "`make test` installs it with the MCP Inspector). ")
                  + "Targets: rag_query uncached P50 ≤ 25 ms and P95 ≤ 60 ms, cached P50 ≤ "
                  "2 ms, rag_get_span P50 ≤ 3 ms.\n\n"
                  + table + "\n\nServer-side split of rag_query (P50, ms):\n\n" + split
                  + f"\n\nLoad average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at "
                  f"the end, on {os.cpu_count()} cores shared with other work: absolute times "
                  "are inflated by load; bench/speed/transport.py times the transport alone."
                  + side)
    return 0


if __name__ == "__main__":
    sys.exit(main())
