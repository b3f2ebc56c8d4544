"""Where rag-mcp bends the MCP SDK (``mcp==2.3.0``, ``MCPServer``): every override and every
private attribute it relies on, in one module, each with its test in tests/test_sdk.py, so an
SDK upgrade fails loudly here and nowhere else.

Private attributes used, and why there is no public way in 2.3:

* ``MCPServer._lowlevel_server`` (``run_session``): serving a connection over our own stdio
  streams (``serve.stdio``); ``MCPServer``'s public runners each open their own transport.
* ``MCPServer._prompt_manager`` (``RagServer.get_prompt``): rendering a prompt without
  ``MCPServer.get_prompt``, which turns every client mistake into a bare ``ValueError`` that
  reaches the client as an internal error.

Behaviour of the public API relied on (tested alike): a tool's exception reaches ``call_tool``
as the ``__cause__`` of a ``ToolError`` (``UnexpectedToolError`` for anything but ``ToolError``
itself); an unknown tool is a ``ToolError`` whose message starts "Unknown tool" and an unknown
resource a ``ResourceNotFoundError``; the SDK takes a tool's output schema from
``Annotated[CallToolResult, Model]``, checks a successful structured result against ``Model``
and leaves an ``is_error`` result alone; a parameter annotated ``Context`` receives the call's
context, whose session names the client in both protocol eras (from ``initialize`` or from the
request's ``_meta``); a stdlib dataclass there loses its field descriptions, hence
``output_model``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any, get_type_hints

import pydantic_core
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, GetPromptResult, TextContent
from pydantic import BaseModel, Field, ValidationError, create_model

from rag_mcp.deps import Deps
from rag_mcp.errors import E_INTERNAL, E_INVALID_ARGUMENT, E_NOT_FOUND, RagError
from rag_mcp.search.redact import redact

log = logging.getLogger("rag_mcp.serve")

#: the MCP specification's code for an unknown resource URI
RESOURCE_NOT_FOUND = -32002
#: where a tool error's code and message travel for programs (``_meta`` of the result): the
#: model reads them in the text, ``E_CODE: message``
ERROR_META = "rag-mcp/error"


def error_result(code: str, message: str) -> CallToolResult:
    """A tool error every client's model reads: the text ``E_CODE: message`` and no structured
    content, which would have to match the tool's output schema (clients that validate it
    replaced our message with their own schema error); programs find the code in ``_meta``."""
    message = redact(message)[0]  # messages name paths and IDs: a file may be named by a token
    return CallToolResult(content=[TextContent(type="text", text=f"{code}: {message}")],
                          is_error=True,
                          _meta={ERROR_META: {"code": code, "message": message}})


def describe_validation(exc: ValidationError) -> str:
    """Which argument is wrong and why, without echoing the (possibly huge) value."""
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__") or "arguments"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def output_model(result: type[Any]) -> type[BaseModel]:
    """The pydantic model the SDK derives a tool's output schema from, for a result dataclass:
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


def client_info(ctx: Context[Any, Any] | None) -> dict[str, str]:
    """The calling client's name and version, for the log (empty when it gave none)."""
    try:
        params = ctx.request_context.session.client_params if ctx is not None else None
    except ValueError:  # a context built outside a request (direct calls in tests)
        return {}
    info = params.client_info if params else None
    return {"name": info.name, "version": info.version} if info else {}


def call_record(deps: Deps, tool: str, ctx: Context[Any, Any] | None,
                arguments: object) -> dict[str, Any]:
    """The first fields of a tool call's log line: the tool, the client, the served root(s) (one
    log folder can be shared by servers of several repositories) and the query or question as
    the log keeps it."""
    args = arguments if isinstance(arguments, dict) else {}
    q = args.get("query") if "query" in args else args.get("question")
    return {"tool": tool[:100], "client": client_info(ctx),
            "root": os.pathsep.join(deps.settings.roots), **deps.log.query_field(q)}


class RagServer(MCPServer):
    """MCPServer with coded errors around every tool, prompt and resource."""

    deps: Deps | None = None
    #: builds ``deps``; the HTTP transport calls it once for all sessions (rag_mcp.serve.http)
    deps_factory: Callable[[], Deps] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
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
                code = (err.meta or {}).get(ERROR_META, {}).get("code", "")
                self.deps.log.write({**call_record(self.deps, name, context, arguments),
                                     "error": code})
            return err

    # A client's mistake in prompts/get reached clients as an internal error and the server log
    # as a traceback (tests/test_hostile_traffic.py): map it to the code the MCP specification
    # names, with the fix in the message.
    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None,
                         context: Context[Any, Any] | None = None) -> GetPromptResult:
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in await self.list_prompts())
            raise MCPError(code=INVALID_PARAMS,
                           message=f"unknown prompt {name[:100]!r}; prompts: {known}")
        missing = {a.name for a in prompt.arguments or () if a.required} - set(arguments or {})
        if missing:
            raise MCPError(code=INVALID_PARAMS,
                           message="missing argument(s): " + ", ".join(sorted(missing)))
        if context is None:
            context = Context(mcp_server=self)
        try:
            messages = await prompt.render(arguments, context)
        except ValueError as exc:
            cause = exc if isinstance(exc, ValidationError) else exc.__cause__ or exc.__context__
            if not isinstance(cause, ValidationError):
                raise
            raise MCPError(code=INVALID_PARAMS, message=describe_validation(cause)) from None
        return GetPromptResult(description=prompt.description,
                               messages=pydantic_core.to_jsonable_python(messages))

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError:
            known = ", ".join(str(r.uri) for r in await self.list_resources())
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"unknown resource "
                           f"{str(uri)[:200]!r}; resources: {known}") from None


async def run_session(server: MCPServer, read_stream: Any, write_stream: Any) -> None:
    """Serve one MCP connection over the given streams until the client ends it, in the
    protocol era the client opens with (an ``initialize`` handshake, or 2026-07-28 requests)."""
    low = server._lowlevel_server
    await low.run(read_stream, write_stream, low.create_initialization_options())
