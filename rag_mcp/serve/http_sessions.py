"""A new HTTP client always gets a session: the least recently used idle one makes room.

The SDK caps the sessions it keeps open (``MAX_SESSIONS``) and ends one only after 30 minutes
without a request, so 63 ``initialize`` calls that never came back locked every new client out
(503) for half an hour. ``SessionRoom`` sits between the guard and the SDK's app: when the SDK
refuses a new session for lack of room, it ends the least recently used session that has no
request in flight (with the protocol's own ``DELETE``, as a client ends its session) and asks
again. A session with a request in flight or an open event stream is never ended; when every
session is busy the 503 stands.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("rag_mcp.serve.http")

SESSION_HEADER = "mcp-session-id"
#: attempts, 20 ms apart, to open the new session once an idle one was ended
ROOM_WAIT_TRIES = 100


class SessionRoom:
    """ASGI middleware in front of the SDK's streamable HTTP app at ``path``."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path
        self.last_used: dict[str, float] = {}  # session id -> monotonic time of its last request
        self.busy: Counter[str] = Counter()  # session id -> requests in flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        sid = Headers(scope=scope).get(SESSION_HEADER)
        if sid is not None:
            await self._in_session(sid, scope, receive, send)
        elif scope.get("method") == "POST":
            await self._new_session(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _in_session(self, sid: str, scope: Scope, receive: Receive, send: Send) -> None:
        self.busy[sid] += 1
        self.last_used[sid] = time.monotonic()
        status = {"code": 0}
        try:
            await self.app(scope, receive, recording_status(send, status))
        finally:
            self.busy[sid] -= 1
            if self.busy[sid] <= 0:
                del self.busy[sid]
            ended = status["code"] == 404 or (scope.get("method") == "DELETE"
                                               and 200 <= status["code"] < 300)
            if ended:
                self.last_used.pop(sid, None)
            elif sid in self.last_used:
                self.last_used[sid] = time.monotonic()

    async def _new_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        refused = await self._try(scope, body, receive, send)
        if refused and await self._make_room(scope):
            # the SDK forgets an ended session in that session's own task: give it a moment
            for _ in range(ROOM_WAIT_TRIES):
                refused = await self._try(scope, body, receive, send)
                if not refused:
                    return
                await anyio.sleep(0.02)
        if refused:  # every session is busy: the SDK's 503 stands
            await _send_all(send, refused)

    async def _try(self, scope: Scope, body: bytes, receive: Receive, send: Send
                   ) -> list[Message] | None:
        """Pass the request on; a 503 is held back and returned (None once sent)."""
        held: list[Message] = []
        state = {"holding": False}

        async def hold(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["holding"] = message["status"] == 503
                if not state["holding"]:
                    sid = Headers(raw=message.get("headers", [])).get(SESSION_HEADER)
                    if sid is not None:
                        self.last_used[sid] = time.monotonic()
            if state["holding"]:
                held.append(message)
            else:
                await send(message)

        await self.app(scope, replay_body(body, receive), hold)
        return held if state["holding"] else None

    async def _make_room(self, scope: Scope) -> bool:
        """End the least recently used idle session; False when there is none to end."""
        for sid in sorted(self.last_used, key=self.last_used.__getitem__):
            if self.busy[sid]:
                continue
            self.last_used.pop(sid)
            if await self._end(scope, sid):
                log.info("ended the least recently used idle session to make room for a new one")
                return True
        return False

    async def _end(self, scope: Scope, sid: str) -> bool:
        """DELETE session ``sid`` through the app, as its client would; whether it ended."""
        headers = [(k, v) for k, v in scope.get("headers", [])
                   if k.lower() in (b"host", b"mcp-protocol-version")]
        delete = {**scope, "method": "DELETE",
                  "headers": [*headers, (SESSION_HEADER.encode(), sid.encode())]}
        status = {"code": 0}

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def collect(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]

        with anyio.move_on_after(10):
            await self.app(delete, receive, collect)
        return 200 <= status["code"] < 300


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def recording_status(send: Send, status: dict[str, int]) -> Send:
    """``send``, noting the response's status code in ``status["code"]`` on the way."""

    async def recorded(message: Message) -> None:
        if message["type"] == "http.response.start":
            status["code"] = message["status"]
        await send(message)

    return recorded


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then defers to the real one
    (the client's disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_all(send: Send, messages: list[Message]) -> None:
    for message in messages:
        await send(message)
