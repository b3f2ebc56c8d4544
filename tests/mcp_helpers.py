"""Running a real MCP client session against the server, in process or over stdio, in either
protocol era: ``legacy`` (the initialize handshake, 2025-11-25) or ``modern`` (2026-07-28)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from rag_mcp.config import Settings
from rag_mcp.deps import Deps, build_deps
from rag_mcp.embed import load_embedder
from rag_mcp.embed.pool import EmbedderPool
from rag_mcp.serve.sdk import ERROR_META, RagServer
from rag_mcp.serve.server import build_server

Era = Literal["legacy", "modern"]
ERAS: tuple[Era, ...] = ("legacy", "modern")
MODERN = "2026-07-28"


def mode(era: Era) -> str:
    return "legacy" if era == "legacy" else MODERN


def hash_models(settings: Settings) -> EmbedderPool:
    """The model pool with the settings' (deterministic test) model, loaded without threads."""
    return EmbedderPool(settings, lambda m, b: load_embedder(
        m, b, cache_dir=settings.model_cache_path))


def hash_deps(settings: Settings) -> Deps:
    return build_deps(settings, models=hash_models(settings))


@contextlib.asynccontextmanager
async def connect(server: RagServer, era: Era = "legacy", **client: Any
                  ) -> AsyncIterator[Client]:
    """A client session with ``server`` in this process, through the SDK's JSON-RPC framing."""
    async with Client(server, mode=mode(era), **client) as session:
        yield session


@contextlib.asynccontextmanager
async def in_process(settings: Settings, deps: Deps | None = None, era: Era = "legacy"
                     ) -> AsyncIterator[tuple[Client, RagServer]]:
    server = build_server(settings, lambda: deps or hash_deps(settings))
    async with connect(server, era) as session:
        yield session, server


@contextlib.asynccontextmanager
async def over_stdio(root: Path, env: dict[str, str] | None = None,
                     args: tuple[str, ...] = (), era: Era = "legacy") -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rag_mcp", "serve", "--root", str(root), *args],
        env={**os.environ, **(env or {})})
    async with Client(params, mode=mode(era)) as session:
        yield session


def text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def error_code(result: CallToolResult) -> str | None:
    """A tool error's code, checked the way every client reads it: the text starts with it,
    nothing structured contradicts the tool's output schema, no traceback."""
    if not result.is_error:
        return None
    assert result.structured_content is None, result.structured_content
    code = (result.meta or {})[ERROR_META]["code"]
    assert text(result).startswith(f"{code}: "), text(result)
    assert "Traceback" not in text(result)
    return code


def diagnostics(result: CallToolResult) -> dict[str, Any]:
    """What a result carries for programs in ``_meta`` (timings, budgets, token counts)."""
    from rag_mcp.serve.calls import META_KEY

    return (result.meta or {})[META_KEY]


def place(hit: dict[str, Any]) -> tuple[str, int, int]:
    """A hit's path and lines, read from its ID 'path:start-end:digest' as a client reads it."""
    path, lines, _digest = hit["id"].rsplit(":", 2)
    start, end = lines.split("-")
    return path, int(start), int(end)


#: what a lean rag_query hit leaves out when it is at its default
HIT_DEFAULTS: dict[str, Any] = {"symbol": None, "heading": None, "preview": "", "text": None,
                                "stale": False, "truncated": False, "repo": None, "joins": 0}
#: ... and a lean rag_query answer (``generations`` is a diagnostic in ``_meta``)
ANSWER_DEFAULTS: dict[str, Any] = {"low_confidence": False, "message": None, "next": None,
                                   "stale_files": None, "unavailable": None,
                                   "generations": None}


def answer(result: CallToolResult) -> dict[str, Any]:
    """A tool result as tests read it: the structured content with each rag_query hit's path
    and lines (from its ID) and left-out defaults filled in, plus the ``_meta`` diagnostics."""
    from rag_mcp.serve.calls import META_KEY

    assert result.structured_content is not None and not result.is_error, text(result)
    out = dict(result.structured_content)
    meta = (result.meta or {}).get(META_KEY, {})
    if "hits" in out:
        meta = {**ANSWER_DEFAULTS, **meta}
        out["hits"] = [{**HIT_DEFAULTS, **h, **dict(zip(("path", "start_line", "end_line"),
                                                        place(h), strict=True))}
                       for h in out["hits"]]
    return {**meta, **out}
