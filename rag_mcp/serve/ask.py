"""``rag-mcp ask``: spawn the server over stdio and ask ``rag_query`` through the official MCP
client, as an assistant would."""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from rag_mcp.config import Settings


def ask(settings: Settings, query: str, *, k: int = 5, include_text: bool = False,
        as_json: bool = False, config: str | None = None) -> int:
    """Print ``rag_query``'s answer (its text, or with ``as_json`` the structured result);
    the exit status."""
    args = ["-m", "rag_mcp", "serve"]
    for root in settings.roots:
        args += ["--root", root]
    if config:
        args += ["--config", config]
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

    result = anyio.run(run)
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    if result.is_error:
        print(text, file=sys.stderr)
        return 1
    print(json.dumps(result.structured_content, indent=2) if as_json else text)
    return 0
