"""What an assistant's model receives from rag_query: characters and tokens per answer, per client
style, through a real MCP session.

    .venv/bin/python -m bench.speed.payload [--queries 60] [--repo PATH] [--no-write]

Clients hand their model either the text content of a tool result (text-reading clients) or
the JSON of its ``structuredContent`` (structured-reading clients; Claude Code does when a
result has it). For each query this measures both for a default rag_query (k=5) and with
include_text=true, and the structured JSON the server sent before it was made lean (the whole
result record, diagnostics included: the same answer dumped as the old surface did). Tokens are
estimated at 4 characters a token (the estimate rag_query itself reports). The target: the
structured JSON of a default rag_query at most 1.3x its text at the median, never above 1.6x.
The repository (this one by default) is indexed once with the default model into
bench/.work/payload. Writes the "payload" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio

from bench._report import ROOT, md_table, write_section

WORK = ROOT / "bench" / ".work" / "payload"

TOKEN_CHARS = 4


def compact(value: Any) -> str:
    """JSON as a client passes it on (JavaScript's JSON.stringify: no spaces)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def measure(root: Path, queries: list[str]) -> dict[str, list[dict[str, float]]]:
    from mcp import Client
    from pydantic import TypeAdapter

    from rag_mcp.config import load_settings
    from rag_mcp.deps import build_deps
    from rag_mcp.search.records import QueryAnswer, QueryParams
    from rag_mcp.serve.server import build_server

    settings = load_settings({"root": str(root), "index_dir": str(WORK / "index")})
    deps = build_deps(settings)
    server = build_server(settings, lambda: deps)
    old = TypeAdapter(QueryAnswer).dump_python
    rows: dict[str, list[dict[str, float]]] = {"default": [], "include_text": []}
    async with Client(server, mode="legacy") as client:
        for q in queries:
            for style, include_text in (("default", False), ("include_text", True)):
                r = await client.call_tool("rag_query", {"query": q, "include_text": include_text})
                assert not r.is_error, r.content
                text = "".join(getattr(c, "text", "") for c in r.content)
                lean = compact(r.structured_content)
                # The same answer as the old surface sent it (the whole record); the memo cache
                # makes this the very answer the call above returned.
                ans = deps.queries.query(QueryParams(query=q, include_text=include_text))
                before = compact(old(ans, mode="json"))
                rows[style].append({"text": len(text), "structured": len(lean),
                                    "before": len(before), "ratio": len(lean) / len(text),
                                    "ratio_before": len(before) / len(text)})
    deps.close()
    return rows


def report(rows: dict[str, list[dict[str, float]]], n: int) -> str:
    table = []
    for style, got in rows.items():
        def med(key: str, got: list[dict[str, float]] = got) -> float:
            return statistics.median(r[key] for r in got)

        table.append([
            "rag_query" + (" include_text=true" if style == "include_text" else " (default)"),
            f"{med('text'):,.0f} / ~{med('text') / TOKEN_CHARS:,.0f}",
            f"{med('structured'):,.0f} / ~{med('structured') / TOKEN_CHARS:,.0f}",
            f"{med('before'):,.0f} / ~{med('before') / TOKEN_CHARS:,.0f}",
            f"{med('ratio'):.2f}x (max {max(r['ratio'] for r in got):.2f}x)",
            f"{med('ratio_before'):.2f}x (max {max(r['ratio_before'] for r in got):.2f}x)"])
    return (
        "## Payload: what a client's model reads of an answer\n\n"
        "What the model reads per rag_query answer, through a real MCP session, over "
        f"{n} queries on this repository (median characters / ~tokens at 4 characters a "
        "token). Text-reading clients pass the text content on; structured-reading clients "
        "(Claude Code, when a result has structured content) pass the JSON of the structured "
        "content. The target is a structured answer at most 1.3 times its text at the median "
        "and never above 1.6 times; the last column is the structured answer as it was sent "
        "before it was made lean (diagnostics such as timings, budgets and token counts now "
        "travel in the result's `_meta`, which clients do not show their model).\n\n"
        + md_table(["call", "text-reading client", "structured-reading client",
                    "structured, before", "structured / text", "before / text"], table)
        + "\n\n`.venv/bin/python -m bench.speed.payload`")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    from bench.speed.latency import queries_for

    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(args.repo),
                    "--index-dir", str(WORK / "index"), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)

    os.environ["RAG_INDEX_DIR"] = str(WORK / "index")  # where queries_for reads the spans
    queries = queries_for(args.repo, args.queries)
    rows = anyio.run(measure, args.repo, queries)
    body = report(rows, len(queries))
    print(body)
    if not args.no_write:
        write_section("payload", body)
    default = rows["default"]
    ok = (statistics.median(r["ratio"] for r in default) <= 1.3
          and max(r["ratio"] for r in default) <= 1.6)
    print("target met" if ok else "target NOT met", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
