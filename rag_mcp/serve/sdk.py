"""Where rag-mcp bends the MCP SDK (``mcp==1.30.0``, FastMCP): every override and every private
attribute it relies on, in one module, each with its test in tests/test_sdk.py, so an SDK
upgrade fails loudly here and nowhere else.

Private attributes used, and why there is no public way in 1.30:

* ``FastMCP._mcp_server`` (``run_session``): serving the session over our own stdio streams
  (``serve.stdio``); FastMCP's public runners each open their own transport.
* ``FastMCP._prompt_manager`` (``RagServer.get_prompt``): rendering a prompt without FastMCP's
  ``get_prompt``, which logs every client mistake with a traceback and answers JSON-RPC code 0.

Behaviour of the public API relied on (tested alike): a tool's exception reaches ``call_tool``
as the ``__cause__`` of a ``ToolError``; an unknown tool is a ``ToolError`` whose message starts
"Unknown tool" and an unknown resource a ``ValueError`` starting "Unknown resource"; FastMCP
takes a tool's output schema from ``Annotated[CallToolResult, Model]`` and checks the structured
result against ``Model``; a stdlib dataclass there loses its field descriptions (FastMCP 1.30
reads it with ``get_type_hints`` without extras), hence ``output_model``.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any, get_type_hints

import pydantic_core
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import McpError
from mcp.types import INVALID_PARAMS, CallToolResult, ErrorData, GetPromptResult, TextContent
from pydantic import BaseModel, Field, ValidationError, create_model

from rag_mcp.deps import Deps
from rag_mcp.errors import E_INTERNAL, E_INVALID_ARGUMENT, E_NOT_FOUND, RagError
from rag_mcp.search.redact import redact

log = logging.getLogger("rag_mcp.serve")

#: the MCP specification's code for an unknown resource URI (not in mcp.types 1.x)
RESOURCE_NOT_FOUND = -32002


def error_result(code: str, message: str) -> CallToolResult:
    """A tool error the client can read: text ``E_CODE: message`` plus structured fields."""
    message = redact(message)[0]  # messages name paths and IDs: a file may be named by a token
    return CallToolResult(
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structuredContent={"error": {"code": code, "message": message}},
        isError=True,
    )


def describe_validation(exc: ValidationError) -> str:
    """Which argument is wrong and why, without echoing the (possibly huge) value."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__") or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def output_model(result: type[Any]) -> type[BaseModel]:
    """The pydantic model FastMCP derives a tool's output schema from, for a result dataclass:
    same name, fields, defaults and (from ``Annotated[..., Field(...)]``) descriptions. The
    class docstring stays out of the schema (it is written for readers of the code)."""
    hints = get_type_hints(result, include_extras=True)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            fields[f.name] = hints[f.name]
    return create_model(result.__name__, **fields)


class RagServer(FastMCP):
    """FastMCP with coded errors around every tool, prompt and resource."""

    deps: Deps | None = None
    #: builds ``deps``; the HTTP transport calls it once for all sessions (rag_mcp.serve.http)
    deps_factory: Callable[[], Deps] | None = None

    def client_info(self) -> dict[str, str]:
        """The calling client's name and version, for the log."""
        try:
            params = self.get_context().session.client_params
        except ValueError:  # outside a request (direct calls in tests): omit the client
            return {}
        info = params.clientInfo if params else None
        return {"name": info.name, "version": info.version} if info else {}

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, RagError):
                err = error_result(cause.code, cause.message)
            elif isinstance(cause, ValidationError):
                err = error_result(E_INVALID_ARGUMENT, describe_validation(cause))
            elif cause is None and str(exc).startswith("Unknown tool"):
                known = ", ".join(t.name for t in await self.list_tools())
                err = error_result(E_NOT_FOUND, f"unknown tool {name[:100]!r}; tools: {known}")
            else:
                ref = uuid.uuid4().hex[:8]
                log.error("tool %s failed (ref %s)", name[:100], ref, exc_info=cause or exc)
                err = error_result(E_INTERNAL, f"internal error (ref {ref}); details are in the "
                                               "server log")
            if not getattr(cause, "_rag_logged", False) and self.deps is not None:
                # Validation errors and unknown tools never reach the tool wrapper.
                q = arguments.get("query") if isinstance(arguments, dict) else None
                code = err.structuredContent["error"]["code"] if err.structuredContent else ""
                self.deps.log.write({"tool": name[:100], "client": self.client_info(),
                                     **self.deps.log.query_field(q), "error": code})
            return err

    # A client's mistake in prompts/get or resources/read reached clients as JSON-RPC code 0 and
    # the server log as a traceback (tests/test_hostile_traffic.py): map it to the codes the MCP
    # specification names, with the fix in the message.
    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None
                         ) -> GetPromptResult:
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in await self.list_prompts())
            raise McpError(ErrorData(code=INVALID_PARAMS,
                                     message=f"unknown prompt {name[:100]!r}; prompts: {known}"))
        missing = {a.name for a in prompt.arguments or () if a.required} - set(arguments or {})
        if missing:
            raise McpError(ErrorData(code=INVALID_PARAMS, message="missing argument(s): "
                                     + ", ".join(sorted(missing))))
        try:
            messages = await prompt.render(arguments, context=self.get_context())
        except ValueError as exc:
            cause = exc.__cause__ or exc.__context__
            if not isinstance(cause, ValidationError):
                raise
            raise McpError(ErrorData(code=INVALID_PARAMS,
                                     message=describe_validation(cause))) from None
        return GetPromptResult(description=prompt.description,
                               messages=pydantic_core.to_jsonable_python(messages))

    async def read_resource(self, uri: Any) -> Any:
        try:
            return await super().read_resource(uri)
        except (ResourceError, ValueError) as exc:  # 1.30's resource manager raises ValueError
            if not str(exc).startswith("Unknown resource"):
                raise
            known = ", ".join(str(r.uri) for r in await self.list_resources())
            raise McpError(ErrorData(code=RESOURCE_NOT_FOUND, message=f"unknown resource "
                                     f"{str(uri)[:200]!r}; resources: {known}")) from None


async def run_session(server: FastMCP, read_stream: Any, write_stream: Any) -> None:
    """Serve one MCP session over the given streams until the client ends it."""
    low = server._mcp_server
    await low.run(read_stream, write_stream, low.create_initialization_options())
