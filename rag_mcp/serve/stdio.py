"""``rag-mcp serve`` over stdio: the newline-delimited JSON-RPC of MCP's stdio transport on the
event loop's own pipe transports."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from rag_mcp.serve.inflight import bounded_streams
from rag_mcp.serve.sdk import RagServer, run_session

log = logging.getLogger("rag_mcp.serve.stdio")


#: a JSON-RPC line longer than this is dropped (and reported to the session as an error) instead
#: of being buffered whole: 16 MiB is ~2,000 times the largest request rag-mcp accepts
MAX_LINE_BYTES = 16 << 20


def _pipe_like(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: a pipe, a socket or a terminal. Other character
    devices are not pollable (``< /dev/null`` made epoll refuse stdin and the server wait for
    a line that could never come), and neither are regular files."""
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


@asynccontextmanager
async def pipe_stdio(stdin_fd: int, stdout_fd: int) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport, on the event loop's own pipe transports.

    ``mcp.server.stdio`` reads and writes through ``anyio.wrap_file``: every line read, every
    write and every flush is a trip to a worker thread and back, three per request, which was
    most of a trivial call's round trip (rag_health 3.25 ms over it, 1.3-1.5 ms over this, the
    echo floor 0.1 ms; docs/DESIGN.md, "The stdio transport"). This reads and writes the same
    newline-delimited JSON-RPC with epoll instead. Same framing and the same
    streams as the SDK's (``SessionMessage`` or the parse error, which the session reports),
    UTF-8 with replacement like the SDK. The descriptors must be pipes, sockets or terminals
    (``serve_stdio`` falls back to the SDK's transport otherwise); their blocking mode is
    restored on exit because it is shared with whoever else holds them.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    blocking = {fd: os.get_blocking(fd) for fd in (stdin_fd, stdout_fd)}
    reader = asyncio.StreamReader(loop=loop)  # read in chunks: its line limit is unused
    rt, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
                                         os.fdopen(os.dup(stdin_fd), "rb", buffering=0))
    wt, wp = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                           os.fdopen(os.dup(stdout_fd), "wb", buffering=0))
    writer = asyncio.StreamWriter(wt, wp, None, loop)
    to_session, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, from_session = anyio.create_memory_object_stream[Any](0)

    async def write() -> None:
        if await _write_lines(writer, from_session):  # the client went away
            tg.cancel_scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, reader, to_session)
            tg.start_soon(write)
            yield read_stream, write_stream
            tg.cancel_scope.cancel()
    finally:
        rt.close()
        wt.close()
        for fd, was in blocking.items():
            try:
                os.set_blocking(fd, was)
            except OSError:
                pass


async def _read_lines(reader: Any, to_session: Any) -> None:
    """Send each line of ``reader`` to the session as a message, or the error parsing it."""
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    async def deliver(line: bytes) -> None:
        try:
            message: Any = SessionMessage(jsonrpc_message_adapter.validate_json(
                line.decode("utf-8", "replace"), by_name=False))
        except Exception as exc:  # dropped, as by the SDK's transport (2.x answers nothing)
            log.warning("dropped a line that is not a JSON-RPC message (%s)",
                        str(exc).splitlines()[0][:200])
            return
        await to_session.send(message)

    def too_long() -> ValueError:
        log.warning("dropped a JSON-RPC line over %d bytes", MAX_LINE_BYTES)
        return ValueError(f"a JSON-RPC line over {MAX_LINE_BYTES} bytes was dropped")

    async with to_session:
        pending = bytearray()
        dropping = False
        while chunk := await reader.read(1 << 16):
            pending += chunk
            while (nl := pending.find(b"\n")) >= 0:
                line = bytes(pending[:nl + 1])
                del pending[:nl + 1]
                if dropping:  # the tail of a line already reported as too long
                    dropping = False
                elif len(line) > MAX_LINE_BYTES:
                    await to_session.send(too_long())
                else:
                    await deliver(line)
            if len(pending) > MAX_LINE_BYTES:
                if not dropping:
                    await to_session.send(too_long())
                dropping, pending = True, bytearray()
        if pending and not dropping:
            await deliver(bytes(pending))


async def _write_lines(writer: Any, from_session: Any) -> bool:
    """Write the session's messages, one JSON line each; True when the client closed stdout."""
    async with from_session:
        async for message in from_session:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            try:
                writer.write(data.encode("utf-8") + b"\n")
                await writer.drain()  # raises once the client has closed our stdout
            except ConnectionError:  # the session is over
                log.info("the client closed stdout; stopping")
                return True
    return False


async def serve_stdio(server: RagServer) -> None:
    """Serve one client on stdin/stdout until it closes stdin."""
    import sys

    from mcp.server.stdio import stdio_server

    fds = (sys.stdin.fileno(), sys.stdout.fileno())
    transport = (pipe_stdio(*fds) if os.name == "posix" and all(map(_pipe_like, fds))
                 else stdio_server())
    async with transport as (read_stream, write_stream), \
            bounded_streams(read_stream, write_stream) as (reads, writes):
        await run_session(server, reads, writes)


def run_stdio(server: RagServer) -> int:
    """Serve one client on stdin/stdout until it closes stdin; the exit status."""
    anyio.run(serve_stdio, server)
    return 0
