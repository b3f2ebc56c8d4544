"""What the server needs to know about a tool, declared next to the tool itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _same(result: Any) -> Any:
    return result


def _no_meta(result: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    title: str
    #: ``fn(deps, **params) -> result``; its signature (minus ``deps``) becomes the tool's input
    #: schema, and its docstring the tool's description
    fn: Callable[..., Any]
    #: the result record (a dataclass whose fields carry their descriptions); the tool's output
    #: schema is derived from ``output`` when given, else from this
    result: type[Any]
    #: the plain-text rendering sent alongside the structured result
    render: Callable[[Any], str]
    #: the JSONL log fields of one call (params, result or None on error)
    log_fields: Callable[[dict[str, Any], Any], dict[str, Any]]
    #: listed only when this returns True for the settings (the opt-in local LLM tool)
    enabled: Callable[[Any], bool] = lambda settings: True
    #: and, over HTTP, only when this also returns True (a tool showing private data)
    over_http: Callable[[Any], bool] = lambda settings: True
    #: the record sent as structured content when it is leaner than ``result`` (what an
    #: assistant needs to act), and the function that makes it from a result
    output: type[Any] | None = None
    to_output: Callable[[Any], Any] = _same
    #: diagnostics for programs, sent in the result's ``_meta`` (models do not read it)
    meta: Callable[[Any], dict[str, Any]] = _no_meta
    #: structured content leaves out fields at their defaults (None, False, empty)
    lean: bool = False
