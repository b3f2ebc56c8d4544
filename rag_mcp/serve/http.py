"""``rag-mcp serve --http``: MCP's streamable HTTP transport at ``/mcp`` (both protocol eras on
one endpoint), ``GET /health``, and ``serve.guard`` in front of both; with ``--auth oauth`` the
SDK's OAuth routes and the consent page (``serve.auth``) too.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from rag_mcp.config import Settings
from rag_mcp.errors import ConfigError, RagError
from rag_mcp.serve.guard import MCP_PATH, Auth, Guard, is_loopback
from rag_mcp.serve.http_limits import protocol_class
from rag_mcp.serve.http_sessions import SessionRoom

if TYPE_CHECKING:
    import uvicorn

    from rag_mcp.serve.auth import LocalAuthorizationServer
    from rag_mcp.serve.sdk import RagServer

HEALTH_PATH = "/health"
#: ``secrets.token_urlsafe(32)`` is 43 characters; 32 keeps guessing hopeless even unthrottled
MIN_TOKEN_CHARS = 32
#: sessions one server keeps open at once (the SDK's default is 10,000)
MAX_SESSIONS = 64
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~+=-]+")
_TOKEN_HINT = ("generate one with: python -c \"import secrets; print(secrets.token_urlsafe(32))\"")
#: OAuth issuers the SDK accepts over plain HTTP (RFC 8414 wants HTTPS elsewhere)
_HTTP_ISSUER_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass
class HttpPlan:
    """What ``serve --http`` decided before building the server: the socket, the URLs clients
    use, and the authentication (``oauth`` carries its authorization server)."""

    sock: socket.socket
    auth: Auth
    base_url: str  # scheme://host[:port] clients reach (a tunnel's, with --public-url)
    provider: LocalAuthorizationServer | None = None
    server_options: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.base_url + MCP_PATH


def check_exposure(settings: Settings, auth: Auth | None = None) -> Auth:
    """The authentication to use, after refusing configurations that would expose the index:
    a non-loopback bind without authentication, ``--auth token`` without a token, a token too
    short to resist guessing."""
    token = settings.http_token
    auth = auth or ("token" if token else "none")
    if auth == "token" and not token:
        raise ConfigError(f"--auth token needs RAG_HTTP_TOKEN; {_TOKEN_HINT}")
    if not is_loopback(settings.http_host) and auth == "none":
        raise ConfigError(
            f"refusing to serve on {settings.http_host}, which is reachable from other "
            "machines, without authentication: set RAG_HTTP_TOKEN (clients then send "
            "`Authorization: Bearer <token>`), or use --auth oauth, or bind to 127.0.0.1; "
            f"{_TOKEN_HINT}")
    if auth != "token":
        return auth
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"RAG_HTTP_TOKEN is too short ({len(token)} characters; at least "
                          f"{MIN_TOKEN_CHARS}); {_TOKEN_HINT}")
    if token and not _TOKEN_CHARS.fullmatch(token):
        raise ConfigError("RAG_HTTP_TOKEN may hold only letters, digits and . _ ~ + = - (it "
                          f"also forms the secret URL path /mcp/<token>); {_TOKEN_HINT}")
    return auth


def app_options(settings: Settings) -> dict[str, Any]:
    """The SDK's streamable HTTP options.

    Host/Origin checks live in ``Guard`` because they depend on the token, so the SDK's own
    DNS-rebinding check is off; its body limit is ours. Responses are plain JSON rather than an
    SSE stream per POST: no tool here streams progress, and the stream cost ~5 ms of server
    time a call (bench/speed/transport.py); clients must accept both (MCP streamable HTTP).
    """
    return {"transport_security": TransportSecuritySettings(enable_dns_rebinding_protection=False),
            "max_request_body_size": settings.http_max_body, "max_sessions": MAX_SESSIONS,
            "json_response": True, "host": settings.http_host}


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


def build_app(server: RagServer, settings: Settings, plan: HttpPlan | None = None) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app (``/mcp``, and the OAuth routes when the
    server was built with ``plan.server_options``) plus ``/health`` and the consent page,
    guarded."""

    async def health(_request: Request) -> Response:
        status, body = await anyio.to_thread.run_sync(health_summary, server)
        return JSONResponse(body, status_code=status)

    server.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(health)
    if plan is not None and plan.provider is not None:
        from rag_mcp.serve.auth import CONSENT_PATH

        server.custom_route(CONSENT_PATH, methods=["GET", "POST"],
                            include_in_schema=False)(plan.provider.consent)
    return Guard(SessionRoom(server.streamable_http_app(**app_options(settings)), MCP_PATH),
                 settings,
                 plan.auth if plan is not None else None)


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


def plan_http(settings: Settings, auth: Auth | None = None, public_url: str | None = None
              ) -> HttpPlan:
    """Check the exposure, bind the socket (port 0 picks a free one) and, for ``oauth``, make
    the authorization server for the URL clients will use."""
    auth = check_exposure(settings, auth)
    if public_url is not None:
        parts = urlsplit(public_url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/"):
            raise ConfigError(f"--public-url {public_url[:100]!r}: give scheme://host[:port] "
                              "only, e.g. https://rag.example.ts.net")
    sock = bind(settings.http_host, settings.http_port)
    base = (public_url or endpoint_url(sock)[: -len(MCP_PATH)]).rstrip("/")
    plan = HttpPlan(sock=sock, auth=auth, base_url=base)
    if auth == "oauth":
        from rag_mcp.serve.auth import LocalAuthorizationServer, auth_settings

        parts = urlsplit(base)
        if parts.scheme != "https" and parts.netloc.rsplit(":", 1)[0] not in _HTTP_ISSUER_HOSTS:
            sock.close()
            raise ConfigError(f"--auth oauth over plain HTTP needs --host 127.0.0.1, localhost "
                              f"or ::1 (not {parts.hostname}), or an HTTPS --public-url such as "
                              "a tunnel's")
        plan.provider = LocalAuthorizationServer(base, plan.url)
        plan.server_options = {"auth": auth_settings(base, plan.url),
                               "auth_server_provider": plan.provider}
    return plan


def make_server(server: RagServer, settings: Settings, plan: HttpPlan
                ) -> uvicorn.Server:
    """A uvicorn server for the guarded app, to run on ``plan.sock``."""
    import uvicorn

    app = build_app(server, settings, plan)
    # X-Forwarded-For is believed only from the proxies the operator names: uvicorn's default
    # trusts it from loopback, i.e. from every local process, and a rotated header escaped the
    # rate limits (unlimited failed-token attempts).
    trusted = list(settings.http_trusted_proxies)
    # Read deadlines and a connection cap that makes room (serve.http_limits): uvicorn alone
    # waited forever for a slow request's head or body, and 400 of them locked new clients out.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            server_header=False, timeout_graceful_shutdown=3,
                            proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None,
                            http=protocol_class(settings))
    return uvicorn.Server(config)


_AUTH_LINE = {
    "none": "loopback only, no authentication",
    "token": "clients must send `Authorization: Bearer $RAG_HTTP_TOKEN` or use {url}/"
             "<RAG_HTTP_TOKEN>",
    "oauth": "OAuth: clients sign in through their browser and you approve each one with a "
             "code printed here",
}


def run_http(server: RagServer, settings: Settings, plan: HttpPlan) -> int:
    """Serve until interrupted; prints the endpoint (never the token) to stderr."""
    uv = make_server(server, settings, plan)
    url = plan.url
    with shared_deps(server):
        # The one line a user needs, on stderr (stdout is not ours to write to).
        sys.stderr.write(f"rag-mcp: serving {settings.root} over streamable HTTP at {url}; "
                         f"{_AUTH_LINE[plan.auth].format(url=url)}; health at "
                         f"{plan.base_url}{HEALTH_PATH}\n")
        sys.stderr.flush()
        uv.run(sockets=[plan.sock])
    return 0
