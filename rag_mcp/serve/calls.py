"""One tool call as the server makes it: the tool function in a worker thread, its result as
text plus structured content (and diagnostics in ``_meta``), and one JSONL log line, whatever
happens."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import TypeAdapter

from rag_mcp.errors import E_INTERNAL, RagError
from rag_mcp.search.redact import redact
from rag_mcp.serve.sdk import RagServer, call_record, output_model
from tools._base import ToolSpec

#: the keyword the SDK passes the call's context as (it is not part of the input schema)
CONTEXT_ARG = "rag_mcp_context"
#: where a result's diagnostics travel (``ToolSpec.meta``)
META_KEY = "rag-mcp/diagnostics"


def tool_function(server: RagServer, spec: ToolSpec) -> Callable[..., Any]:
    """An async function with ``spec.fn``'s signature minus ``deps``, for ``MCPServer.add_tool``:
    the SDK validates the arguments against that signature and takes the output schema from
    ``spec.output`` (or ``spec.result``)."""
    sig = inspect.signature(spec.fn, eval_str=True)
    params = [p for n, p in sig.parameters.items() if n != "deps"]
    out_type = spec.output or spec.result
    dump = TypeAdapter(out_type).dump_python
    lean = spec.lean  # leave out fields at their defaults (None, False, empty)

    async def call(**kwargs: Any) -> CallToolResult:
        ctx = kwargs.pop(CONTEXT_ARG, None)
        deps = server.deps
        assert deps is not None, "the server's dependencies are built in its lifespan"
        t0 = time.perf_counter()
        record = call_record(deps, spec.name, ctx, kwargs)
        try:
            # a worker thread: a query waits on the model, the disk or Ollama, never the loop
            result = await anyio.to_thread.run_sync(functools.partial(spec.fn, deps, **kwargs))
            text = spec.render(result)
            record.update(spec.log_fields(kwargs, result))
            record["bytes_out"] = len(text.encode("utf-8", "replace"))
            meta = spec.meta(result)
            return CallToolResult(content=[TextContent(type="text", text=text)],
                                  structured_content=dump(spec.to_output(result), mode="json",
                                                          exclude_none=lean,
                                                          exclude_defaults=lean),
                                  _meta={META_KEY: meta} if meta else None)
        except RagError as exc:
            record.update(spec.log_fields(kwargs, None))
            record["error"] = exc.code
            exc._rag_logged = True  # type: ignore[attr-defined]
            raise
        except Exception as exc:
            record["error"] = E_INTERNAL
            exc._rag_logged = True  # type: ignore[attr-defined]
            raise
        finally:
            record["took_ms"] = round((time.perf_counter() - t0) * 1000, 2)
            for key in ("span_id", "path"):
                if isinstance(record.get(key), str):
                    record[key] = redact(record[key])[0]
            deps.log.write(record)

    call.__name__ = spec.name
    call.__doc__ = spec.fn.__doc__
    ret = Annotated[CallToolResult, output_model(out_type)]
    ctx_param = inspect.Parameter(CONTEXT_ARG, inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    call.__signature__ = sig.replace(parameters=[*params, ctx_param],  # type: ignore[attr-defined]
                                     return_annotation=ret)
    call.__annotations__ = ({p.name: p.annotation for p in params}
                            | {CONTEXT_ARG: Context, "return": ret})
    return call
