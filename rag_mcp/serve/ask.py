"""``rag-mcp ask``: spawn the server over stdio and ask ``rag_query`` through the official MCP
client, as an assistant would."""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from rag_mcp import errors
from rag_mcp.config import Settings
from rag_mcp.serve.sdk import ERROR_META

#: the exit status of each error code, as ``rag-index`` and the README give them
EXIT_CODES: dict[str, int] = {cls.code: cls.exit_code for cls in (
    errors.InvalidArgument, errors.NotFound, errors.Stale, errors.IndexUnavailable,
    errors.LLMUnavailable, errors.Internal)}


def exit_status(result: CallToolResult) -> int:
    """0 for an answer; for a refusal, the exit status of its error code."""
    if not result.is_error:
        return 0
    error = (result.meta or {}).get(ERROR_META)
    code = error.get("code") if isinstance(error, dict) else None
    return EXIT_CODES.get(str(code), errors.Internal.exit_code)


def serve_args(settings: Settings, *, config: str | None = None, index_dir: str | None = None,
               log_dir: str | None = None) -> list[str]:
    """The ``rag-mcp serve`` arguments that serve what ``ask`` was told to ask."""
    args = ["-m", "rag_mcp", "serve"]
    for root in settings.roots:
        args += ["--root", root]
    for flag, value in (("--config", config), ("--index-dir", index_dir),
                        ("--log-dir", log_dir)):
        if value:
            args += [flag, value]
    return args


def ask(settings: Settings, query: str, *, k: int = 5, include_text: bool = False,
        as_json: bool = False, config: str | None = None, index_dir: str | None = None,
        log_dir: str | None = None) -> int:
    """Print ``rag_query``'s answer (its text, or with ``as_json`` the structured result);
    the exit status (that of the error code when the server refuses)."""
    args = serve_args(settings, config=config, index_dir=index_dir, log_dir=log_dir)
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))

    async def run() -> CallToolResult:
        async with Client(params, mode="legacy") as session:
            tools = await session.list_tools()
            info = session.server_info
            who = f"{info.name} {info.version}" if info else "the server"
            print(f"connected to {who} over stdio ({session.protocol_version}); tools: "
                  f"{', '.join(t.name for t in tools.tools)}", file=sys.stderr)
            return await session.call_tool("rag_query", {"query": query, "k": k,
                                                         "include_text": include_text})

    try:
        result = anyio.run(run)
    except Exception as exc:  # the server ended before answering: its own message is above
        print(f"rag-mcp: {errors.E_INDEX_UNAVAILABLE}: the server stopped before answering "
              f"({type(exc).__name__}); its message above says why", file=sys.stderr)
        return errors.IndexUnavailable.exit_code
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    if result.is_error:
        print(text, file=sys.stderr)
        return exit_status(result)
    print(json.dumps(result.structured_content, indent=2) if as_json else text)
    return 0
