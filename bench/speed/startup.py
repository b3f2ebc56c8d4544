"""Server start-up: from spawning `rag-mcp serve` to its first answers, as an assistant sees it.

    .venv/bin/python -m bench.speed.startup [--rounds 7] [--baseline REV]

An assistant starts a stdio server per session, so what a user waits for first is the spawn,
the MCP handshake and the first tool calls. Each round spawns a server for this repository
(indexed first, default model) from the official Python SDK client and times, from the spawn:
the `initialize` answer, the first `rag_health`, and the first `rag_query` (which waits for the
embedding model to load). ``--baseline REV`` spawns the server of an older commit (its source
exported with ``git archive``, bench/speed/transport.py's way) in alternating rounds, so the ratio
holds whatever the machine's load. Writes the "startup" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio

from bench._report import ROOT, WORK, md_table, median, write_section
from bench.speed.transport import baseline_tree, server_command

QUERY = "how is a span ID built from path, lines and digest?"
STEPS = ("initialize", "first rag_health", "first rag_query")


async def one_session(tree: Path | None, root: Path) -> list[float]:
    """Seconds from the spawn to each of ``STEPS``."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = server_command(tree)
    params = StdioServerParameters(
        command=command[0], args=[*command[1:], "serve", "--root", str(root)],
        env={**os.environ, "RAG_LOG_DIR": str(WORK / "startup-logs")})
    t0 = time.perf_counter()
    marks = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        marks.append(time.perf_counter() - t0)
        health = await session.call_tool("rag_health", {})
        marks.append(time.perf_counter() - t0)
        query = await session.call_tool("rag_query", {"query": QUERY})
        marks.append(time.perf_counter() - t0)
        if health.is_error or query.is_error:
            raise SystemExit(f"the server failed: {health.content} {query.content}")
    return marks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", metavar="REV",
                    help="also spawn the server of this git revision, in alternating rounds")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(ROOT), "-q"], check=True)
    base = baseline_tree(args.baseline) if args.baseline else None
    trees: dict[str, Path | None] = {"this tree": None}
    if base is not None:
        trees[base.name.removeprefix("baseline-")] = base
    times: dict[str, list[list[float]]] = {name: [] for name in trees}
    load0 = os.getloadavg()[0]
    for i in range(args.rounds + 1):  # the first round warms the page cache: not kept
        for name, tree in (trees.items() if i % 2 == 0 else reversed(trees.items())):
            marks = anyio.run(one_session, tree, ROOT)
            if i:
                times[name].append(marks)
        print(f"round {i}: " + " · ".join(f"{n}: " + ", ".join(f"{m:.2f}" for m in t[-1])
                                          for n, t in times.items() if t), flush=True)
    rows: list[list[object]] = []
    for step_i, step in enumerate(STEPS):
        meds = {n: median([m[step_i] for m in t]) for n, t in times.items()}
        row: list[object] = [step, f"{meds['this tree']:.2f}"]
        if base is not None:
            old = meds[base.name.removeprefix("baseline-")]
            row += [f"{old:.2f}", f"{old / meds['this tree']:.2f}x"]
        rows.append(row)
    header = ["seconds from the spawn to", "this tree (median)"]
    if base is not None:
        rev = base.name.removeprefix("baseline-")
        header += [f"{rev} (median)", "speed-up"]
    cmd = "python -m bench.speed.startup" + (
        f" --rounds {args.rounds}" if args.rounds != 7 else "") + (
        f" --baseline {base.name.removeprefix('baseline-')}" if base else "")
    body = (
        "## Server start-up over stdio\n\n"
        f"`{cmd}`\n\n"
        "What an assistant waits for when it starts a session: the official Python SDK client "
        "spawns `rag-mcp serve` for this repository (indexed, default model) and times from "
        "the spawn to the `initialize` answer, the first `rag_health` and the first "
        "`rag_query` (which waits for the embedding model to load). Medians of "
        f"{args.rounds} rounds after one warm-up round"
        + (", this tree and the baseline alternating, on the same installed dependencies"
           if base else "")
        + f". Load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on "
        f"{os.cpu_count()} cores shared with other work.\n\n" + md_table(header, rows))
    print(body)
    if not args.no_write:
        write_section("startup", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
