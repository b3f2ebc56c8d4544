"""Running a real MCP client session against the server, in process or over stdio."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import CallToolResult, TextContent

from rag_mcp.config import Settings
from rag_mcp.deps import Deps, build_deps
from rag_mcp.embed import load_embedder
from rag_mcp.embed.pool import EmbedderPool
from rag_mcp.serve.sdk import RagServer
from rag_mcp.serve.server import build_server


def hash_models(settings: Settings) -> EmbedderPool:
    """The model pool with the settings' (deterministic test) model, loaded without threads."""
    return EmbedderPool(settings, lambda m, b: load_embedder(
        m, b, cache_dir=settings.model_cache_path))


def hash_deps(settings: Settings) -> Deps:
    return build_deps(settings, models=hash_models(settings))


@contextlib.asynccontextmanager
async def in_process(settings: Settings, deps: Deps | None = None
                     ) -> AsyncIterator[tuple[ClientSession, RagServer]]:
    server = build_server(settings, lambda: deps or hash_deps(settings))
    async with create_connected_server_and_client_session(server) as session:
        yield session, server


@contextlib.asynccontextmanager
async def over_stdio(root: Path, env: dict[str, str] | None = None,
                     args: tuple[str, ...] = ()) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rag_mcp", "serve", "--root", str(root), *args],
        env={**os.environ, **(env or {})})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def error_code(result: CallToolResult) -> str | None:
    if not result.isError:
        return None
    sc: Any = result.structuredContent or {}
    code = sc.get("error", {}).get("code")
    assert text(result).startswith(f"{code}: "), text(result)
    assert "Traceback" not in text(result)
    return code
