"""Slow and surplus HTTP connections: read deadlines, and a connection cap that makes room.

uvicorn closes a kept-alive connection after 5 idle seconds, but it waits for a request's head
and body forever and accepts connections until the process runs out of file descriptors: 400
half-open requests (a "slowloris") kept every new client waiting in the listen queue, and the
tool log could no longer be opened. ``LimitedH11Protocol`` is uvicorn's h11 protocol (passed as
``uvicorn.Config(http=...)``, uvicorn's extension point for it) plus three rules:

* a request's head (request line and headers) must arrive whole within
  ``http.header_timeout_seconds`` of the connection, or of its first byte on a kept-alive one;
* its body must make progress (any bytes) at least every ``http.body_timeout_seconds``;
* at most ``http.max_connections`` connections are open (and never more than half the process's
  descriptor limit). A new connection is never refused: it makes room by closing the oldest
  connection still reading the first request it carries, else the oldest idle kept-alive one,
  else the oldest reading a later request (``eviction_rank``). Only when every other connection
  has a request in flight (a tool call, an event stream) is the oldest of those closed; its
  client sees the connection drop, as it would on a server restart.

The phase of a connection is read from h11's public state machine; the subclass hooks only the
asyncio protocol entry points and uvicorn's ``on_response_complete`` callback. h11 rather than
httptools: its states are public API, and it is the parser uvicorn always installs. It parses
in pure Python, about 0.4 ms a request more than httptools on this loaded 2-core machine, within
the noise of an HTTP round trip (bench/speed/transport.py side by side: 0.99x for rag_health).
"""

from __future__ import annotations

import asyncio
import logging
import select
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from rag_mcp.config import Settings

log = logging.getLogger("rag_mcp.serve.http")

Phase = Literal["head", "body", "idle", "busy", "closing"]
#: candidates checked for unread bytes before the oldest is closed anyway
UNREAD_CHECKS = 32


@dataclass(frozen=True)
class Limits:
    header_timeout: float
    body_timeout: float
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(settings.http_header_timeout, settings.http_body_timeout,
                   min(settings.http_max_connections, descriptor_room()))


def descriptor_room() -> int:
    """Half the process's open-file limit: the index, the model and the logs need the rest
    (about 30 descriptors with one repository). macOS's default limit is 256."""
    try:
        import resource
    except ImportError:  # Windows: no such limit per process
        return 1 << 20
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(2, soft // 2) if soft != resource.RLIM_INFINITY else 1 << 20


class Room:
    """The open connections of one server, oldest first."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: dict[LimitedH11Protocol, None] = {}  # insertion order = age

    def admit(self, conn: LimitedH11Protocol) -> None:
        self.open[conn] = None
        if len(self.open) <= self.limits.max_connections:
            return
        victim = pick_victim([c for c in self.open if c is not conn])
        if victim.phase == "busy":
            log.warning("every one of the %d HTTP connections (http.max_connections) had a "
                        "request in flight: closed the oldest to let a new client in",
                        self.limits.max_connections)
        victim.drop()

    def leave(self, conn: LimitedH11Protocol) -> None:
        self.open.pop(conn, None)


def eviction_rank(conn: Any) -> int:
    """Lower makes room first: a closing connection; a request on a connection never answered
    (where a slowloris lives); an idle kept-alive connection; a request on a connection that
    was answered before (a client that already proved itself, whose request may just be slow
    to arrive from a busy machine); a request in flight."""
    if conn.phase in ("head", "body"):
        return 3 if conn.served else 1
    return {"closing": 0, "idle": 2}.get(conn.phase, 4)


def pick_victim(conns: list[Any]) -> Any:
    """The connection that makes room: the oldest of the lowest ``eviction_rank``, passing
    over (a few) whose client has sent bytes the server has not read yet: under a flood of
    connections a new client's request can wait unread while newer connections arrive, and it
    is not the client that is slow."""
    ordered = sorted(conns, key=eviction_rank)  # stable: oldest first within a rank
    calm = (c for c in ordered[:UNREAD_CHECKS] if c.phase == "closing"
            or (c.phase != "busy" and not c.has_unread_bytes()))
    return next(calm, ordered[0])


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines and a place in its server's ``Room``."""

    room: ClassVar[Room]  # set on the per-server subclass ``protocol_class`` makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase: Phase = "head"
        self.served = 0  # responses completed on this connection
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.room.limits.header_timeout)
        self.room.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.room.leave(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow(got_data=True)

    def on_response_complete(self) -> None:
        self.served += 1
        super().on_response_complete()
        self._follow(got_data=False)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # the transport passes to another protocol (which refuses: no route serves WebSocket)
        self._disarm()
        self.room.leave(self)
        super().handle_websocket_upgrade(event)

    def has_unread_bytes(self) -> bool:
        """Whether bytes from the client wait in the kernel, unread by the server."""
        sock = self.transport.get_extra_info("socket")
        try:
            return sock is not None and bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):  # closed meanwhile
            return False

    def drop(self) -> None:
        """Close now, discarding anything unsent (the descriptor is what is short)."""
        self.phase = "closing"
        self._disarm()
        self.transport.abort()

    def _follow(self, got_data: bool) -> None:
        """Set the phase, and the deadline that goes with it, from h11's state."""
        theirs, ours = self.conn.their_state, self.conn.our_state
        limits = self.room.limits
        if self.transport.is_closing():
            self.phase = "closing"
            self._disarm()
        elif theirs is h11.IDLE:
            if not got_data:  # a response went out: idle, uvicorn's keep-alive timer runs
                self.phase = "idle"
                self._disarm()
            elif self.phase != "head":  # the first bytes of the next request
                self.phase = "head"
                self._arm(limits.header_timeout)
        elif theirs is h11.SEND_BODY:
            if got_data or self.phase != "body":
                self.phase = "body"
                self._arm(limits.body_timeout)
        elif theirs is h11.DONE and ours in (h11.SEND_RESPONSE, h11.SEND_BODY):
            self.phase = "busy"
            self._disarm()
        else:
            self.phase = "closing"
            self._disarm()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.phase == "body" and self.flow.read_paused:
            # uvicorn stopped reading until the app takes what it has: not the client's delay
            self._arm(self.room.limits.body_timeout)
            return
        log.debug("closed an HTTP connection whose request %s did not arrive in time",
                  "body" if self.phase == "body" else "head")
        self.drop()


def protocol_class(settings: Settings) -> type[LimitedH11Protocol]:
    """A ``LimitedH11Protocol`` with a ``Room`` of its own, for one uvicorn server."""
    return type("LimitedH11Protocol", (LimitedH11Protocol,),
                {"room": Room(Limits.from_settings(settings))})
