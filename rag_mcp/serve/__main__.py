"""``rag-mcp`` / ``python -m rag_mcp``: serve the index over MCP, or ask it something."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import InvalidArgument, RagError

EPILOG = """\
commands:
  rag-mcp [serve]                 serve the index over stdio (what MCP clients launch)
  rag-mcp serve --http            serve streamable HTTP at http://127.0.0.1:8765/mcp
  rag-mcp serve --http --auth oauth   ... with OAuth sign-in (you approve each client)
  rag-mcp ask "QUESTION"          start a server, ask rag_query through a real MCP session
  rag-mcp config --client NAME    print (or --write) the config snippet for a client
  rag-mcp stats [--since 7d]      query statistics from the JSONL tool log (--json for all)

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
    serve.add_argument("--auth", choices=("token", "oauth", "none"),
                       help="HTTP authentication: token (RAG_HTTP_TOKEN as a bearer token; the "
                            "default when it is set), oauth (clients sign in through the browser, "
                            "you approve each with a code printed here), none (loopback only)")
    serve.add_argument("--public-url", metavar="URL",
                       help="the scheme://host[:port] clients reach the server at, when it is "
                            "not the bound address (a tunnel or proxy); used in OAuth metadata")
    serve.add_argument("--connector-tools", action="store_true",
                       help="also offer search and fetch, the tools ChatGPT connectors and deep "
                            "research call (HTTP only)")
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
    stats = sub.add_parser("stats", help="query statistics from the JSONL tool log")
    _common(stats)
    stats.add_argument("--since", help="only calls since: a date (2026-11-27), a UTC time "
                                       "(2026-11-27T08:00) or a span back from now (30m, 24h, 7d)")
    stats.add_argument("--top", type=int, default=10, help="rows of each top list (default 10)")
    stats.add_argument("--json", action="store_true", help="print the statistics as JSON")
    cfg = sub.add_parser("config", help="client configuration snippets")
    _common(cfg)
    cfg.add_argument("--client", required=True,
                     help="cursor | windsurf | claude-code | claude-desktop | vscode | gemini | "
                          "codex | chatgpt")
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


def _stats(settings: Settings, args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from rag_mcp.logstats import parse_since, render, summarize

    if args.top < 1:
        raise InvalidArgument("--top must be at least 1")
    s = summarize(settings.log_path, since=parse_since(args.since), top=args.top)
    print(json.dumps(asdict(s), indent=2, ensure_ascii=False) if args.json else render(s))
    return 0


def exit_now(code: int) -> NoReturn:
    """End the server process at once, once its work is done or a client stops it.

    Every file the server writes is safe at any instant (log lines are single appends, the index
    is only read, a ``--watch`` re-index publishes crash-safe generations, locks are ``flock``s
    the kernel releases), so the interpreter's own teardown adds nothing but time: with the
    model and the index loaded it took 4.5 s, and while the model was still loading its native
    threads aborted the process ("terminate called without an active exception", exit -6).
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the client closed the pipe
            pass
    os._exit(code)


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM end a stdio server at once: that is how clients stop it (Claude Code
    sends SIGINT and SIGTERM 100 ms later), and nothing is left to finish (``exit_now``)."""

    def stop(signum: int, _frame: Any) -> None:
        exit_now(0)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("serve", "ask", "config", "stats", "-h", "--help"):
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
        if args.command == "stats":
            return _stats(settings, args)
        if args.command == "config":
            from rag_mcp.serve.clients import client_config

            return client_config(settings, args.client, write=args.write)
        if not args.http and (args.auth or args.public_url or args.connector_tools):
            raise InvalidArgument("--auth, --public-url and --connector-tools apply to --http "
                                  "only: add --http, or leave them out for stdio")
        from rag_mcp.serve.server import serve

        if not args.http:
            _protect_stdout()
            _stop_on_signals()
        code = serve(settings, http=args.http, watch=args.watch, auth=args.auth,
                     public_url=args.public_url, connector_tools=args.connector_tools)
        exit_now(code)
    except RagError as exc:
        print(f"rag-mcp: {exc.code}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
