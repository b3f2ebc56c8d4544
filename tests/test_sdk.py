"""What rag_mcp.serve.sdk relies on in the MCP SDK: one test per private attribute, one per
behaviour of its public API. When an SDK upgrade breaks one, it fails here, by name."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import pytest
from mcp import Client, ClientSession
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, Implementation, TextContent
from pydantic import Field

from rag_mcp.errors import NotFound
from rag_mcp.serve.sdk import (
    RESOURCE_NOT_FOUND,
    RagServer,
    client_info,
    output_model,
    run_session,
)
from tests.mcp_helpers import MODERN, Era, error_code, mode

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True, slots=True, kw_only=True)
class Echo:
    """For readers of the code only."""

    text: Annotated[str, Field(description="What was said")]
    times: int = 1
    notes: Annotated[list[str], Field(description="Remarks")] = field(default_factory=list)


def small_server() -> RagServer:
    """A RagServer with a tool that answers, one that fails each way, a resource and a prompt."""
    server = RagServer(name="sdk-test", log_level="WARNING")

    def echo(text: Annotated[str, Field(max_length=10)]) -> Annotated[CallToolResult,
                                                                      output_model(Echo)]:
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structuredContent={"text": text, "times": 1, "notes": []})

    def missing() -> str:
        raise NotFound("no such thing; ask for another")

    def broken() -> str:
        raise RuntimeError("a bug")

    for fn in (echo, missing, broken):
        server.add_tool(fn, structured_output=fn is echo)
    server.resource("rag://here", name="here")(lambda: "here")

    @server.prompt(name="explain")
    def explain(question: Annotated[str, Field(max_length=10)]) -> str:
        return f"explain {question}"

    return server


ERAS: tuple[Era, ...] = ("legacy", "modern")


@contextlib.asynccontextmanager
async def session_of(server: RagServer, era: Era = "legacy") -> AsyncIterator[Client]:
    info = Implementation(name="sdk-client", version="9")
    async with Client(server, client_info=info, mode=mode(era)) as s:
        yield s


@pytest.mark.parametrize("era", ERAS)
async def test_lowlevel_server_runs_a_connection_on_given_streams(era: Era) -> None:
    """``MCPServer._lowlevel_server``: ``run_session`` serves our own transport's streams, in
    the era the client opens with (an initialize handshake, or 2026-07-28 requests)."""
    server = small_server()
    client_to_server = anyio.create_memory_object_stream[Any](10)
    server_to_client = anyio.create_memory_object_stream[Any](10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_session, server, client_to_server[1], server_to_client[0])
        async with ClientSession(server_to_client[1], client_to_server[0]) as session:
            if era == "legacy":
                init = await session.initialize()
                assert init.server_info.name == "sdk-test" and init.protocol_version != MODERN
            else:
                found = await session.discover()
                assert MODERN in found.supported_versions
                session.adopt(found)
            assert {t.name for t in (await session.list_tools()).tools} == {
                "echo", "missing", "broken"}
        tg.cancel_scope.cancel()


async def test_prompt_manager_renders_without_mcpserver_get_prompt(
        caplog: pytest.LogCaptureFixture) -> None:
    """``MCPServer._prompt_manager``: prompts are looked up and rendered there, so a client's
    mistake is INVALID_PARAMS with the fix, never an internal error and a logged traceback."""
    server = small_server()
    prompt = server._prompt_manager.get_prompt("explain")
    assert prompt is not None and [(a.name, a.required) for a in prompt.arguments or ()] == [
        ("question", True)]
    async with session_of(server) as session:
        got = await session.get_prompt("explain", {"question": "this"})
        assert isinstance(got.messages[0].content, TextContent)
        assert got.messages[0].content.text == "explain this"
        for name, args, says in (("nothing", {}, "unknown prompt 'nothing'; prompts: explain"),
                                 ("explain", {}, "missing argument(s): question"),
                                 ("explain", {"question": "x" * 11}, "question: String should")):
            with pytest.raises(MCPError) as err:
                await session.get_prompt(name, args)
            assert err.value.error.code == INVALID_PARAMS and says in err.value.error.message
    assert "Traceback" not in caplog.text and not [
        r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("era", ERAS)
async def test_tool_errors_reach_call_tool_as_the_cause_of_a_tool_error(era: Era) -> None:
    """MCPServer wraps a tool's exception, an argument's validation error and an unknown tool in
    ``ToolError`` (the first two as ``__cause__``): RagServer turns each into a coded result
    with no structured content (it would not match the tool's output schema)."""
    server = small_server()
    with pytest.raises(ToolError) as unknown:
        await super(RagServer, server).call_tool("nope", {})
    assert unknown.value.__cause__ is None and str(unknown.value).startswith("Unknown tool")
    with pytest.raises(ToolError) as failed:
        await super(RagServer, server).call_tool("missing", {})
    assert isinstance(failed.value.__cause__, NotFound)
    async with session_of(server, era) as session:
        assert error_code(await session.call_tool("missing", {})) == "E_NOT_FOUND"
        assert error_code(await session.call_tool("echo", {"text": "x" * 11})) == \
            "E_INVALID_ARGUMENT"
        gone = await session.call_tool("nope", {})
        assert error_code(gone) == "E_NOT_FOUND"
        assert "tools: echo, missing, broken" in gone.content[0].text  # type: ignore[union-attr]
        bug = await session.call_tool("broken", {})
        assert error_code(bug) == "E_INTERNAL" and "a bug" not in str(bug.content)
        ok = await session.call_tool("echo", {"text": "hi"})
        assert not ok.is_error and ok.structured_content == {"text": "hi", "times": 1, "notes": []}


async def test_unknown_resource_is_an_error_named_so() -> None:
    """MCPServer raises ``ResourceNotFoundError``: RagServer answers the MCP specification's
    resource-not-found code with the resources it has."""
    server = small_server()
    with pytest.raises(ResourceNotFoundError):
        await super(RagServer, server).read_resource("rag://nothing")
    async with session_of(server) as session:
        with pytest.raises(MCPError) as err:
            await session.read_resource("rag://nothing")  # type: ignore[arg-type]
        assert err.value.error.code == RESOURCE_NOT_FOUND
        assert "resources: rag://here" in err.value.error.message


async def test_output_schema_comes_from_the_result_record() -> None:
    """MCPServer takes the output schema from ``Annotated[CallToolResult, Model]``; the model
    ``output_model`` derives from a dataclass keeps its descriptions and defaults, and not its
    docstring."""
    async with session_of(small_server()) as session:
        tool = next(t for t in (await session.list_tools()).tools if t.name == "echo")
    schema = tool.output_schema
    assert schema is not None and schema["title"] == "Echo" and "description" not in schema
    props = schema["properties"]
    assert props["text"]["description"] == "What was said" and schema["required"] == ["text"]
    assert props["times"]["default"] == 1 and props["notes"]["description"] == "Remarks"


@pytest.mark.parametrize("era", ERAS)
async def test_client_info_comes_from_the_injected_context(era: Era) -> None:
    """A parameter annotated ``Context`` receives the call's context, which names the client in
    both eras (from initialize, or from the request's ``_meta``); without one, nothing."""
    server = small_server()
    seen: list[dict[str, str]] = []

    def who(ctx: Context) -> str:
        seen.append(client_info(ctx))
        return "ok"

    server.add_tool(who)
    assert client_info(None) == {}
    async with session_of(server, era) as session:
        await session.call_tool("who", {})
    assert seen == [{"name": "sdk-client", "version": "9"}]
