"""A bound on the requests one stdio session holds at a time.

The SDK's session starts a task for every request it reads and keeps it until its response is
written. A client that writes requests and never reads the answers (its stdout pipe full, our
writes blocked) therefore grew the server without bound: 40,000 unread requests held 760 MB.
Between the transport and the session, ``bounded_streams`` stops reading the client once
``limit`` requests are unanswered; the pipes then fill and the client's own writes block, as
with any well-behaved stream server. Notifications, parse errors and responses to the server's
own requests pass freely: they end nothing the session holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

#: unanswered requests one session may hold; a client that pipelines more waits for answers
MAX_IN_FLIGHT = 32


def _message(item: Any) -> Any:
    """The JSON-RPC message a transport item carries (the SDK's ``SessionMessage.message``, a
    plain union of the request, notification, response and error models), or None."""
    return getattr(item, "message", None)


def _request_id(item: Any) -> Any:
    """The JSON-RPC id of a request (``None`` for anything else)."""
    msg = _message(item)
    return getattr(msg, "id", None) if hasattr(msg, "method") else None


def _response_id(item: Any) -> Any:
    """The id a response or an error answers (``None`` for requests and notifications)."""
    msg = _message(item)
    return None if msg is None or hasattr(msg, "method") else getattr(msg, "id", None)


@asynccontextmanager
async def bounded_streams(read_stream: Any, write_stream: Any, limit: int = MAX_IN_FLIGHT
                          ) -> AsyncIterator[tuple[Any, Any]]:
    """The session's ends of ``read_stream``/``write_stream``, holding at most ``limit``
    unanswered client requests: reading waits while that many are open."""
    pending: Counter[str] = Counter()
    answered = anyio.Event()
    to_session, session_reads = anyio.create_memory_object_stream[Any](0)
    session_writes, from_session = anyio.create_memory_object_stream[Any](0)

    async def pump_in() -> None:
        nonlocal answered
        async with to_session, read_stream:
            async for item in read_stream:
                rid = _request_id(item)
                if rid is not None:
                    while sum(pending.values()) >= limit:
                        await answered.wait()
                        answered = anyio.Event()
                    pending[repr(rid)] += 1  # repr: 1 and "1" are different ids
                await to_session.send(item)

    async def pump_out() -> None:
        async with from_session, write_stream:
            async for item in from_session:
                await write_stream.send(item)
                rid = _response_id(item)
                if rid is not None and pending[repr(rid)] > 0:
                    pending[repr(rid)] -= 1
                    answered.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield session_reads, session_writes
        finally:
            tg.cancel_scope.cancel()
