"""``rag-mcp serve --http``: MCP's streamable HTTP transport at ``/mcp``, ``GET /health``, and a
guard in front of both.

Threats, and the answer to each (docs/CLIENTS.md has the user-facing version):

* A web page in the user's browser talking to the loopback server (DNS rebinding, cross-origin
  POSTs): without a token the server answers only ``Host: localhost|127.0.0.1|[::1]`` (421
  otherwise) and, always, only allow-listed ``Origin`` values (403), as the MCP specification
  asks of local servers.
* Anyone on the network, or behind a tunnel, calling tools: binding to a non-loopback address
  needs ``RAG_HTTP_TOKEN`` (the server refuses to start without one). With a token set, ``/mcp``
  needs ``Authorization: Bearer <token>``, or the secret path ``/mcp/<token>`` for ChatGPT,
  which cannot send headers; both are compared in constant time.
* Guessing the token, or a leaked URL being hammered: with a token set, auth failures and
  requests are rate limited per client (429), and short tokens are refused at start.
* Oversized bodies: 413 above ``http.max_body_bytes``, declared or streamed.
* Malformed bodies: JSON the SDK's transport cannot parse without an exception it does not
  expect (invalid UTF-8, nesting past the recursion limit, 5,000-digit numbers) got a 500 and a
  full traceback in the server log per request (tests/test_hostile_traffic.py); the guard
  answers those with JSON-RPC's parse error (400) before the SDK sees them.
* Leaks through logs: uvicorn's access log is off; this module logs paths with the secret
  segment masked and never logs headers.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_mcp.config import Settings, is_loopback
from rag_mcp.errors import ConfigError, RagError
from rag_mcp.serve.http_sessions import SessionRoom

if TYPE_CHECKING:
    import uvicorn

    from rag_mcp.serve.sdk import RagServer

log = logging.getLogger("rag_mcp.serve.http")

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
#: ``secrets.token_urlsafe(32)`` is 43 characters; 32 keeps guessing hopeless even unthrottled
MIN_TOKEN_CHARS = 32
#: sessions one server keeps open at once (the SDK's default is 10,000)
MAX_SESSIONS = 64
#: per client, with a token set: a burst, then a steady rate (requests per second)
REQUEST_BURST, REQUEST_RATE = 120, 5.0
#: per client, failed authentications before 429, refilled over a minute
AUTH_FAILURE_BURST, AUTH_FAILURE_RATE = 10, 10 / 60
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~+=-]+")
#: deeper JSON is refused (MCP messages nest a few levels; orjson, used by the log, stops at 255)
MAX_JSON_DEPTH = 64
_TOKEN_HINT = ("generate one with: python -c \"import secrets; print(secrets.token_urlsafe(32))\"")


def check_exposure(settings: Settings) -> None:
    """Refuse configurations that would expose the index: a non-loopback bind without a token,
    or a token too short to resist guessing."""
    token = settings.http_token
    if not is_loopback(settings.http_host) and not token:
        raise ConfigError(
            f"refusing to serve on {settings.http_host}, which is reachable from other "
            "machines, without a token: set RAG_HTTP_TOKEN (clients then send "
            f"`Authorization: Bearer <token>`), or bind to 127.0.0.1; {_TOKEN_HINT}")
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"RAG_HTTP_TOKEN is too short ({len(token)} characters; at least "
                          f"{MIN_TOKEN_CHARS}); {_TOKEN_HINT}")
    if token and not _TOKEN_CHARS.fullmatch(token):
        raise ConfigError("RAG_HTTP_TOKEN may hold only letters, digits and . _ ~ + = - (it "
                          f"also forms the secret URL path /mcp/<token>); {_TOKEN_HINT}")


def fastmcp_options(settings: Settings) -> dict[str, Any]:
    """FastMCP settings for HTTP (and the exposure check, before anything is built).

    Host/Origin checks live in ``Guard`` because they depend on the token, so the SDK's own
    DNS-rebinding check is off; its body limit is ours. Responses are plain JSON rather than an
    SSE stream per POST: no tool here streams progress, and the stream cost ~5 ms of server
    time a call (bench/speed/transport.py); clients must accept both (MCP streamable HTTP).
    """
    check_exposure(settings)
    return {"host": settings.http_host, "port": settings.http_port,
            "transport_security": TransportSecuritySettings(enable_dns_rebinding_protection=False),
            "max_request_body_size": settings.http_max_body, "max_sessions": MAX_SESSIONS,
            "json_response": True}


class RateLimiter:
    """Token buckets keyed by client; the least recently seen keys are dropped beyond
    ``max_keys`` so spoofed client addresses cannot grow memory without bound."""

    def __init__(self, burst: float, rate: float, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.rate, self.max_keys, self.clock = burst, rate, max_keys, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - at) * self.rate)

    def exhausted(self, key: str) -> bool:
        with self._lock:
            return self._level(key, self.clock()) < 1.0

    def take(self, key: str) -> bool:
        """Spend one token; False (and nothing spent) when none is left."""
        with self._lock:
            now = self.clock()
            tokens = self._level(key, now)
            ok = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if ok else tokens, now)
            self._buckets.move_to_end(key)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            return ok

    def retry_after(self) -> int:
        return max(1, int(1.0 / self.rate + 0.999))


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def origin_allowed(origin: str, extra: tuple[str, ...]) -> bool:
    """Loopback origins on any port, plus the configured ones (exact, scheme://host[:port])."""
    if origin.rstrip("/") in {o.rstrip("/") for o in extra}:
        return True
    try:
        parts = urlsplit(origin)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host in _LOOPBACK_NAMES


def mask_path(path: str) -> str:
    """The path as logs may show it: the secret segment of ``/mcp/<token>`` masked."""
    return f"{MCP_PATH}/***" if path.startswith(MCP_PATH + "/") else path[:200]


class Guard:
    """ASGI middleware in front of the MCP app: Host, Origin, token, rate limits, body cap."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.token = settings.http_token.encode() if settings.http_token else b""
        # Without a token, the Host check is the DNS-rebinding defence; with one, the token is,
        # and tunnels and proxies (which rewrite Host) keep working.
        self.check_host = not self.token
        self.origins = settings.http_allowed_origins
        self.max_body = settings.http_max_body
        self.requests = RateLimiter(REQUEST_BURST, REQUEST_RATE)
        self.failures = RateLimiter(AUTH_FAILURE_BURST, AUTH_FAILURE_RATE)

    def _token_ok(self, presented: str) -> bool:
        return bool(self.token) and hmac.compare_digest(presented.encode(), self.token)

    def _bearer_ok(self, header: str | None) -> bool:
        scheme, _, value = (header or "").partition(" ")
        return scheme.lower() == "bearer" and self._token_ok(value.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        status = {"code": 0}

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            refusal = self._check(scope)
            if isinstance(refusal, Response):
                await refusal(scope, receive, send_logged)
                return
            if scope.get("method") == "POST" and refusal["path"] == MCP_PATH:
                body = await self._body(receive)
                if isinstance(body, Response):
                    await body(scope, receive, send_logged)
                    return
                receive = _replay(body, receive)
            await self.app(refusal, receive, send_logged)
        finally:
            log.debug("%s %s -> %s", scope.get("method"), mask_path(path), status["code"])

    def _check(self, scope: Scope) -> Response | Scope:
        """The refusal to send, or the scope to pass on (its path rewritten for /mcp/<token>)."""
        headers = Headers(scope=scope)
        path: str = scope["path"]
        if self.check_host and _host_name(headers.get("host", "")) not in _LOOPBACK_NAMES:
            log.warning("refused a request for Host %r: without RAG_HTTP_TOKEN only loopback "
                        "host names are served", headers.get("host", "")[:100])
            return _error(421, "misdirected_request", "this server answers only requests for "
                          "localhost; set RAG_HTTP_TOKEN to serve other host names")
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.origins):
            log.warning("refused a request from Origin %r (not in http.allowed_origins)",
                        origin[:100])
            return _error(403, "forbidden_origin", "this Origin is not allowed; add it to "
                          "http.allowed_origins (RAG_HTTP_ALLOWED_ORIGINS) if you trust it")
        if not self.token:
            if path.startswith(MCP_PATH + "/"):
                return _error(404, "not_found", "no such path; the MCP endpoint is /mcp")
        else:
            client = scope.get("client")
            key = str(client[0]) if client else "?"
            protected = path == MCP_PATH or path.startswith(MCP_PATH + "/")
            if protected:
                if self.failures.exhausted(key):
                    return _error(429, "too_many_requests", "too many failed authentications; "
                                  "wait a minute", retry_after=60)
                if path == MCP_PATH:
                    ok = self._bearer_ok(headers.get("authorization"))
                else:
                    ok = self._token_ok(path[len(MCP_PATH) + 1:])
                    scope = dict(scope, path=MCP_PATH, raw_path=MCP_PATH.encode())
                if not ok:
                    self.failures.take(key)
                    log.warning("refused an unauthenticated request from %s", key[:64])
                    return _error(401, "unauthorized", "send `Authorization: Bearer <token>` "
                                  "(RAG_HTTP_TOKEN), or use the secret URL /mcp/<token>",
                                  www_authenticate=True)
            if not self.requests.take(key):
                return _error(429, "too_many_requests", "rate limit exceeded; slow down",
                              retry_after=self.requests.retry_after())
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return _error(413, "payload_too_large",
                          f"request body over {self.max_body} bytes (http.max_body_bytes)")
        return scope


    async def _body(self, receive: Receive) -> bytes | Response:
        """The whole request body, or the refusal: 413 past the cap, 400 for malformed JSON."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return _error(400, "bad_request", "the request body did not arrive")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return _error(413, "payload_too_large",
                              f"request body over {self.max_body} bytes (http.max_body_bytes)")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_problem(body)
        if problem is None:
            return body
        log.info("refused a malformed JSON body (%s)", problem)
        return JSONResponse({"jsonrpc": "2.0", "id": None,
                             "error": {"code": -32700, "message": f"Parse error: {problem}"}},
                            status_code=400)


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is not a JSON message the server will read, or None."""
    try:
        value = json.loads(body)
    except RecursionError:
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    except UnicodeDecodeError:
        return "the body is not valid UTF-8"
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        return "not valid JSON" if isinstance(exc, json.JSONDecodeError) else "a number too long"
    # "\ud800" is valid JSON but no Unicode text: echoed back in a reply (an id, a name) it
    # made the SDK fail to encode its response (500).
    escapes = b"\\u" in body
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            if escapes:
                stack.extend((k, depth) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif escapes and isinstance(item, str) and not _encodable(item):
            return "a string holds an unpaired surrogate escape"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _error(status: int, error: str, message: str, *, retry_after: int | None = None,
           www_authenticate: bool = False) -> Response:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if www_authenticate:
        headers["WWW-Authenticate"] = 'Bearer realm="rag-mcp"'
    return JSONResponse({"error": error, "message": message}, status_code=status,
                        headers=headers)


def health_summary(server: RagServer) -> tuple[int, dict[str, Any]]:
    """``GET /health``: cheap (one stat), unauthenticated, so it names no paths or messages."""
    deps = server.deps
    if deps is None:
        return 503, {"status": "starting"}
    out: dict[str, Any] = {"status": "ok", "version": deps.version,
                           "uptime_s": round(time.monotonic() - deps.started, 1)}
    present, spans, errors = 0, 0, []
    for repo in deps.repos.values():
        try:
            idx = repo.handle.get()
            present += 1
            n = idx.counts["spans"]
            spans += n if isinstance(n, int) else 0
            if not deps.multi:
                out["generation"] = idx.generation
        except RagError as exc:
            errors.append(exc.code)
    out.update(index_present=present == len(deps.repos), spans=spans,
               model_loaded=bool(deps.models.loaded))
    if deps.multi:
        # counts only: names and roots are paths, and this endpoint needs no token
        out.update(repos=len(deps.repos), repos_available=present)
    if not present:
        out.update(status="unavailable", error=errors[0] if errors else "E_INDEX_UNAVAILABLE")
    elif errors:
        out["status"] = "degraded"
    return (503 if out["status"] == "unavailable" else 200), out


def build_app(server: RagServer, settings: Settings) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app (``/mcp``) plus ``/health``, guarded."""

    async def health(_request: Request) -> Response:
        status, body = await anyio.to_thread.run_sync(health_summary, server)
        return JSONResponse(body, status_code=status)

    server.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(health)
    return Guard(SessionRoom(server.streamable_http_app(), MCP_PATH), settings)


@contextmanager
def shared_deps(server: RagServer) -> Any:
    """Build the dependencies once for every session: the SDK runs the server's lifespan per
    HTTP session, and it then reuses these instead of building and closing its own."""
    assert server.deps_factory is not None, "build it with server.build_server"
    server.deps = server.deps_factory()
    server.deps.warm_up()
    try:
        yield server.deps
    finally:
        server.deps.close()
        server.deps = None


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or a ConfigError that says which address is taken."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family = infos[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose "
                          "another --port or --host") from None


def endpoint_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in str(host) else str(host)
    return f"http://{shown}:{port}{MCP_PATH}"


def make_server(server: RagServer, settings: Settings) -> tuple[uvicorn.Server, socket.socket]:
    """A uvicorn server for the guarded app and its bound socket (port 0 picks a free one)."""
    import uvicorn

    check_exposure(settings)
    app = build_app(server, settings)
    sock = bind(settings.http_host, settings.http_port)
    # X-Forwarded-For is believed only from the proxies the operator names: uvicorn's default
    # trusts it from loopback, i.e. from every local process, and a rotated header escaped the
    # rate limits (unlimited failed-token attempts).
    trusted = list(settings.http_trusted_proxies)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            server_header=False, timeout_graceful_shutdown=3,
                            proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None)
    return uvicorn.Server(config), sock


def run_http(server: RagServer, settings: Settings) -> int:
    """Serve until interrupted; prints the endpoint (never the token) to stderr."""
    uv, sock = make_server(server, settings)
    url = endpoint_url(sock)
    auth = ("; clients must send `Authorization: Bearer $RAG_HTTP_TOKEN` or use "
            f"{url}/<RAG_HTTP_TOKEN>" if settings.http_token else "; loopback only, no token")
    with shared_deps(server):
        # The one line a user needs, on stderr (stdout is not ours to write to).
        sys.stderr.write(f"rag-mcp: serving {settings.root} over streamable HTTP at {url}"
                         f"{auth}; health at {url[: -len(MCP_PATH)]}{HEALTH_PATH}\n")
        sys.stderr.flush()
        uv.run(sockets=[sock])
    return 0
