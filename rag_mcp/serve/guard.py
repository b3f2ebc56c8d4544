"""The guard in front of ``rag-mcp serve --http``: Host, Origin, authentication, rate limits,
body size and malformed JSON, before the SDK's app sees a request.

Threats, and the answer to each (docs/CLIENTS.md has the user-facing version):

* A web page in the user's browser talking to the loopback server (DNS rebinding, cross-origin
  POSTs): without authentication the server answers only ``Host: localhost`` or a loopback
  address (127.0.0.0/8, ``[::1]``; 421 otherwise) and, always, only allow-listed ``Origin``
  values (403), as the MCP specification asks of local servers.
* Anyone on the network, or behind a tunnel, calling tools: binding to a non-loopback address
  needs authentication (the server refuses to start without it). ``--auth token``: ``/mcp``
  needs ``Authorization: Bearer <RAG_HTTP_TOKEN>``, or the secret path ``/mcp/<token>`` for
  clients that cannot send headers; both compared in constant time. ``--auth oauth``: the SDK
  checks the bearer tokens this server issued (``serve.auth``).
* Guessing the token, or a leaked URL being hammered: with authentication on, failed
  authentications and requests are rate limited per client (429). Only a wrong credential
  counts as a failure: a client that sends none (a client probing for OAuth, a misconfigured
  one) gets its answer without using up the limit of the address, which a correctly
  configured client on the same machine shares.
* OAuth discovery against a static-token server: clients that read ``401 + WWW-Authenticate:
  Bearer`` as an OAuth challenge probe the well-known metadata and the registration endpoint;
  they get a JSON answer that says "this server uses a static bearer token" and how to send
  it, instead of a bare 404 that clients misreport.
* Oversized bodies: 413 above ``http.max_body_bytes``, declared or streamed.
* Malformed bodies: JSON the SDK's transport cannot parse without an exception it does not
  expect (invalid UTF-8, nesting past the recursion limit, 5,000-digit numbers) got a 500 and a
  full traceback in the server log per request (tests/test_hostile_traffic.py); the guard
  answers those with JSON-RPC's parse error (400) before the SDK sees them.
* Slow and surplus connections (a "slowloris"): read deadlines and a connection cap that lets
  a new client in, below this guard in the HTTP protocol (``serve.http_limits``).
* Leaks through logs: uvicorn's access log is off; this module logs paths with the secret
  segment masked and never logs headers.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from rag_mcp.config import Settings
from rag_mcp.serve.auth import CONSENT_PATH
from rag_mcp.serve.http_sessions import recording_status, replay_body

log = logging.getLogger("rag_mcp.serve.http")

MCP_PATH = "/mcp"
#: per client, with authentication on: a burst, then a steady rate (requests per second)
REQUEST_BURST, REQUEST_RATE = 120, 5.0
#: per client, failed authentications before 429, refilled over a minute
AUTH_FAILURE_BURST, AUTH_FAILURE_RATE = 10, 10 / 60
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
#: deeper JSON is refused (MCP messages nest a few levels; orjson, used by the log, stops at 255)
MAX_JSON_DEPTH = 64
#: where OAuth clients look for metadata (RFC 9728, RFC 8414, OpenID discovery) and register
_OAUTH_DISCOVERY = ("/.well-known/oauth-protected-resource",
                    "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
_OAUTH_ENDPOINTS = ("/register", "/authorize", "/token")
STATIC_TOKEN = ("this server uses a static bearer token, not OAuth: configure your client to send "
                "the header `Authorization: Bearer <RAG_HTTP_TOKEN>` (or use the URL "
                "/mcp/<RAG_HTTP_TOKEN>), or restart the server with --auth oauth")

Auth = Literal["none", "token", "oauth"]


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


def loopback_name(host: str) -> bool:
    """``localhost`` or a loopback address literal (any of 127.0.0.0/8, ``[::1]``): a name that
    no DNS answer can make point elsewhere, so a rebinding page cannot send it."""
    return host in _LOOPBACK_NAMES or (host[:1].isdigit() or host[:1] == "[") and is_loopback(host)


def origin_allowed(origin: str, extra: tuple[str, ...]) -> bool:
    """Loopback origins on any port, plus the configured ones (exact, scheme://host[:port])."""
    if origin.rstrip("/") in {o.rstrip("/") for o in extra}:
        return True
    try:
        parts = urlsplit(origin)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and loopback_name(host)


def mask_path(path: str) -> str:
    """The path as logs may show it: the secret segment of ``/mcp/<token>`` masked."""
    return f"{MCP_PATH}/***" if path.startswith(MCP_PATH + "/") else path[:200]


class Guard:
    """ASGI middleware in front of the MCP app: Host, Origin, authentication, rate limits, body
    cap. ``auth`` is "token" (``settings.http_token``), "oauth" (the app checks the tokens this
    server issued) or "none" (loopback only)."""

    def __init__(self, app: ASGIApp, settings: Settings, auth: Auth | None = None) -> None:
        self.app = app
        self.auth: Auth = auth or ("token" if settings.http_token else "none")
        self.token = (settings.http_token.encode()
                      if self.auth == "token" and settings.http_token else b"")
        # Without authentication, the Host check is the DNS-rebinding defence; with it, the
        # credential is, and tunnels and proxies (which rewrite Host) keep working.
        self.check_host = self.auth == "none"
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
        send_logged = recording_status(send, status)
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
                receive = replay_body(body, receive)
            await self.app(refusal, receive, send_logged)
            if self.auth == "oauth" and self._oauth_failure(scope, status["code"]):
                self.failures.take(_client_key(scope))
        finally:
            log.debug("%s %s -> %s", scope.get("method"), mask_path(path), status["code"])

    def _oauth_failure(self, scope: Scope, status: int) -> bool:
        """A wrong credential under OAuth: a bearer token the app refused, a wrong consent
        code. A request without a token is a client asking how to sign in, not a failure."""
        path = scope["path"]
        if path == MCP_PATH and status == 401:
            return Headers(scope=scope).get("authorization") is not None
        return path == CONSENT_PATH and scope.get("method") == "POST" and status == 403

    def _check(self, scope: Scope) -> Response | Scope:
        """The refusal to send, or the scope to pass on (its path rewritten for /mcp/<token>)."""
        headers = Headers(scope=scope)
        path: str = scope["path"]
        if self.check_host and not loopback_name(_host_name(headers.get("host", ""))):
            log.warning("refused a request for Host %r: without authentication only loopback "
                        "host names are served", headers.get("host", "")[:100])
            return _error(421, "misdirected_request", "this server answers only requests for "
                          "localhost or a loopback address; serve other host names with "
                          "--auth token (RAG_HTTP_TOKEN) or --auth oauth")
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.origins):
            log.warning("refused a request from Origin %r (not in http.allowed_origins)",
                        origin[:100])
            return _error(403, "forbidden_origin", "this Origin is not allowed; add it to "
                          "http.allowed_origins (RAG_HTTP_ALLOWED_ORIGINS) if you trust it")
        if self.auth == "token" and (answer := _static_token_answer(path)) is not None:
            return answer
        if self.auth != "token" and path.startswith(MCP_PATH + "/"):
            return _error(404, "not_found", "no such path; the MCP endpoint is /mcp")
        if self.auth != "none":
            key = _client_key(scope)
            guarded = path == MCP_PATH or path.startswith(MCP_PATH + "/") or (
                path == CONSENT_PATH and scope.get("method") == "POST")
            if guarded and self.failures.exhausted(key):
                return _error(429, "too_many_requests", "too many failed authentications; "
                              "wait a minute", retry_after=60)
            if self.auth == "token" and guarded:
                scope, refusal = self._token_check(scope, headers, key)
                if refusal is not None:
                    return refusal
            if not self.requests.take(key):
                return _error(429, "too_many_requests", "rate limit exceeded; slow down",
                              retry_after=self.requests.retry_after())
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return _error(413, "payload_too_large",
                          f"request body over {self.max_body} bytes (http.max_body_bytes)")
        return scope

    def _token_check(self, scope: Scope, headers: Headers, key: str
                     ) -> tuple[Scope, Response | None]:
        """``--auth token``: the bearer header or the secret path. Only a wrong credential
        counts against the client's failure limit; none at all is a 401 that says what to do."""
        path: str = scope["path"]
        if path == MCP_PATH:
            header = headers.get("authorization")
            presented, ok = header is not None, self._bearer_ok(header)
        else:
            presented, ok = True, self._token_ok(path[len(MCP_PATH) + 1:])
            scope = dict(scope, path=MCP_PATH, raw_path=MCP_PATH.encode())
        if ok:
            return scope, None
        if presented:
            self.failures.take(key)
            log.warning("refused a wrong credential from %s", key[:64])
        return scope, _error(401, "unauthorized", STATIC_TOKEN, www_authenticate=True)

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


def _error(status: int, error: str, message: str, *, retry_after: int | None = None,
           www_authenticate: bool = False) -> Response:
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if www_authenticate:
        headers["WWW-Authenticate"] = (f'Bearer realm="rag-mcp", error="invalid_token", '
                                       f'error_description="{message}"')
    # "error_description" as OAuth clients read it, "message" as people and scripts do
    return JSONResponse({"error": error, "error_description": message, "message": message},
                        status_code=status, headers=headers)


def _client_key(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "?"


def _static_token_answer(path: str) -> Response | None:
    """What OAuth discovery and registration get from a static-token server: the reason, in
    the error format each endpoint's clients read (RFC 9728/8414 metadata: a 404 with a JSON
    body; RFC 7591 registration and RFC 6749 endpoints: a 400 OAuth error)."""
    if path.startswith(_OAUTH_DISCOVERY):
        return _error(404, "not_found", STATIC_TOKEN)
    if path in _OAUTH_ENDPOINTS:
        return _error(400, "invalid_client_metadata" if path == "/register"
                      else "invalid_request", STATIC_TOKEN)
    return None


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine (127.0.0.0/8, ::1, localhost)."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
