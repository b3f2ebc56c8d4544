"""``rag-mcp`` / ``python -m rag_mcp``: serve the index over MCP, or ask it something."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import RagError

EPILOG = """\
commands:
  rag-mcp [serve]                 serve the index over stdio (what MCP clients launch)
  rag-mcp serve --http            serve streamable HTTP at http://127.0.0.1:8765/mcp
  rag-mcp ask "QUESTION"          start a server, ask rag_query through a real MCP session
  rag-mcp config --client NAME    print (or --write) the config snippet for a client

examples:
  rag-mcp --root ~/src/app
  rag-mcp --root ~/src/app --root ~/src/lib   serve two repositories (rag_query takes repo=)
  rag-mcp ask "where is the retry policy configured?" --k 3 --include-text
  RAG_LOCAL_LLM=1 rag-mcp         also offer local_llm_rag_query (needs `ollama serve`)

Configuration: configs/default.toml < --config FILE < RAG_* variables < flags.
"""


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--root", action="append", metavar="ROOT",
                    help="repository root (default: the enclosing git root); repeat it to serve "
                         "several repositories, each with its own index")
    ap.add_argument("--config", metavar="FILE", help="a TOML file with any subset of the knobs")
    ap.add_argument("--index-dir", help="where the index lives (default <root>/.rag)")
    ap.add_argument("--log-dir", help="where JSONL tool logs go")
    ap.add_argument("-v", "--verbose", action="store_true", help="log more to stderr")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rag-mcp", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A local MCP server that gives coding assistants small, exact spans of a "
                    "repository's code and docs (tools: rag_query, rag_get_span, rag_health).")
    sub = ap.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve MCP (stdio by default)")
    _common(serve)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    serve.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", help="HTTP port (default 8765)")
    serve.add_argument("--watch", action="store_true",
                       help="keep the index fresh while serving (re-index on file changes)")
    serve.add_argument("--local-llm", action="store_true",
                       help="offer local_llm_rag_query (same as RAG_LOCAL_LLM=1)")
    ask = sub.add_parser("ask", help="ask rag_query through a spawned stdio server")
    _common(ask)
    ask.add_argument("query", help="what you are looking for")
    ask.add_argument("--k", type=int, default=5)
    ask.add_argument("--include-text", action="store_true")
    ask.add_argument("--json", action="store_true", help="print the structured result")
    cfg = sub.add_parser("config", help="client configuration snippets")
    _common(cfg)
    cfg.add_argument("--client", required=True,
                     help="cursor | windsurf | claude-code | claude-desktop | vscode | codex | "
                          "chatgpt")
    cfg.add_argument("--write", action="store_true", help="merge it into the client's file")
    return ap


def _settings(args: argparse.Namespace) -> Settings:
    roots: list[str] = args.root or []
    overrides: dict[str, Any] = {
        "root": roots[0] if roots else None, "roots": roots if len(roots) > 1 else None,
        "index_dir": args.index_dir, "log_dir": args.log_dir,
        "http_host": getattr(args, "host", None), "http_port": getattr(args, "port", None),
    }
    if getattr(args, "local_llm", False):
        overrides["local_llm"] = True
    return load_settings(overrides, config_file=args.config)


def _protect_stdout() -> None:
    """Keep fd 1 for JSON-RPC only: anything else written to it (a library's print, a C
    extension's warning) is sent to stderr instead."""
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(real, "w", encoding="utf-8", buffering=1)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("serve", "ask", "config", "-h", "--help"):
        argv.insert(0, "serve")
    args = build_parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if args.verbose else logging.WARNING,
                        format="rag-mcp: %(levelname)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        settings = _settings(args)
        if args.command == "ask":
            from rag_mcp.serve.ask import ask

            return ask(settings, args.query, k=args.k, include_text=args.include_text,
                       as_json=args.json, config=args.config, index_dir=args.index_dir,
                       log_dir=args.log_dir)
        if args.command == "config":
            from rag_mcp.serve.clients import client_config

            return client_config(settings, args.client, write=args.write)
        from rag_mcp.serve.server import serve

        if not args.http:
            _protect_stdout()
        return serve(settings, http=args.http, watch=args.watch)
    except RagError as exc:
        print(f"rag-mcp: {exc.code}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
