"""``rag-mcp serve --http --auth oauth``: the server as an OAuth 2.1 protected resource with its
own authorization server, for one local user.

The SDK does the protocol (``mcp.server.auth``: RFC 8414 and RFC 9728 metadata, dynamic client
registration, PKCE S256, the token endpoint, revocation, the bearer check with
``resource_metadata`` in the 401 challenge); this module is the provider behind it:

* Consent: ``authorize`` does not grant anything by itself. It sends the browser to ``/consent``,
  a page that names the client and asks for a one-time code which only the server's terminal
  shows (stderr), so a page or program that merely reaches the port cannot approve itself. A
  code allows ``CONSENT_TRIES`` attempts and ``CONSENT_SECONDS`` of time.
* Tokens: random, held in memory (a restart asks the user to approve again), bound to this
  server's ``/mcp`` resource whatever the client asked; access tokens live
  ``ACCESS_SECONDS``, refresh tokens ``REFRESH_SECONDS`` and are rotated on every use.
* Client ID Metadata Documents are not accepted: the SDK's server side does not implement them,
  and fetching a client's URL would make a local server reach the network.
"""

from __future__ import annotations

import hmac
import html
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

ACCESS_SECONDS = 15 * 60
REFRESH_SECONDS = 30 * 24 * 3600
CODE_SECONDS = 5 * 60
CONSENT_SECONDS = 10 * 60
CONSENT_TRIES = 3
CONSENT_PATH = "/consent"
#: clients registered at once; the oldest is forgotten beyond this (registration is open)
MAX_CLIENTS = 200
#: consent requests waiting at once; the oldest is dropped beyond this
MAX_PENDING = 20


@dataclass
class Pending:
    """An authorization request waiting for the user's one-time code."""

    client: OAuthClientInformationFull
    params: AuthorizationParams
    code: str
    expires_at: float
    tries: int = 0


def auth_settings(base_url: str, resource_url: str) -> AuthSettings:
    """The SDK's settings: this server issues tokens (``base_url``) for ``resource_url``."""
    return AuthSettings(
        issuer_url=AnyHttpUrl(base_url), resource_server_url=AnyHttpUrl(resource_url),
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True))


def one_time_code() -> str:
    """Six digits in two groups, easy to read off a terminal and type."""
    n = secrets.randbelow(1_000_000)
    return f"{n // 1000:03d}-{n % 1000:03d}"


class LocalAuthorizationServer:
    """The ``OAuthAuthorizationServerProvider`` of a local rag-mcp (thread-safe, in memory)."""

    def __init__(self, base_url: str, resource_url: str, *, say: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.base_url = base_url.rstrip("/")
        # the issuer exactly as the SDK's metadata spells it (RFC 9207: clients compare ``iss``
        # in the redirect with it; pydantic gives a bare origin a trailing slash)
        self.issuer = str(AnyHttpUrl(base_url))
        self.resource = resource_url
        self.say = say or sys.stderr
        self.clock = clock
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, Pending] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self._lock = threading.Lock()

    # -- registration -------------------------------------------------------------------------
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        with self._lock:
            self.clients[client_info.client_id] = client_info
            while len(self.clients) > MAX_CLIENTS:
                self.clients.pop(next(iter(self.clients)))

    # -- authorization: the consent page --------------------------------------------------------
    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        request_id = secrets.token_urlsafe(24)
        code = one_time_code()
        with self._lock:
            self._expire()
            self.pending[request_id] = Pending(client, params, code,
                                               self.clock() + CONSENT_SECONDS)
            while len(self.pending) > MAX_PENDING:
                self.pending.pop(next(iter(self.pending)))
        name = (client.client_name or client.client_id)[:80]
        self.say.write(f"rag-mcp: {name!r} asks to use this server (OAuth). To approve, enter "
                       f"{code} on the page your browser opened ({self.base_url}"
                       f"{CONSENT_PATH}); valid {CONSENT_SECONDS // 60} minutes.\n")
        self.say.flush()
        return f"{self.base_url}{CONSENT_PATH}?request={request_id}"

    async def consent(self, request: Request) -> Response:
        """``GET /consent`` shows the request; ``POST`` checks the code and redirects back."""
        if request.method == "GET":
            rid = request.query_params.get("request", "")
            with self._lock:
                self._expire()
                p = self.pending.get(rid)
            return consent_page(rid, p)
        form = await request.form()
        rid = str(form.get("request", ""))
        with self._lock:
            self._expire()
            p = self.pending.get(rid)
            if p is None:
                return consent_page(rid, None)
            if form.get("deny"):
                del self.pending[rid]
                return RedirectResponse(construct_redirect_uri(
                    str(p.params.redirect_uri), error="access_denied",
                    error_description="the user denied access", state=p.params.state), 302)
            typed = str(form.get("code", "")).strip().replace(" ", "")
            if not hmac.compare_digest(typed.encode(), p.code.encode()):
                p.tries += 1
                if p.tries >= CONSENT_TRIES:
                    del self.pending[rid]
                    return consent_page(rid, None, "Too many wrong codes: start the sign-in "
                                        "again from your client.")
                return consent_page(rid, p, "That is not the code the server printed.", 403)
            del self.pending[rid]
            code = AuthorizationCode(
                code=secrets.token_urlsafe(32), scopes=p.params.scopes or [],
                expires_at=self.clock() + CODE_SECONDS, client_id=p.client.client_id,
                code_challenge=p.params.code_challenge, redirect_uri=p.params.redirect_uri,
                redirect_uri_provided_explicitly=p.params.redirect_uri_provided_explicitly,
                resource=self.resource)
            self.codes[code.code] = code
        self.say.write(f"rag-mcp: approved {(p.client.client_name or p.client.client_id)[:80]!r}"
                       "\n")
        self.say.flush()
        return RedirectResponse(construct_redirect_uri(
            str(p.params.redirect_uri), code=code.code, state=p.params.state,
            iss=self.issuer), 302)

    # -- tokens ---------------------------------------------------------------------------------
    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        if code is None or code.client_id != client.client_id or code.expires_at < self.clock():
            return None
        return code

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        with self._lock:
            if self.codes.pop(authorization_code.code, None) is None:  # used once
                raise TokenError("invalid_grant", "authorization code already used")
            return self._issue(client.client_id, authorization_code.scopes)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        if token is None or token.client_id != client.client_id or (
                token.expires_at is not None and token.expires_at < self.clock()):
            return None
        return token

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken, scopes: list[str]
                                     ) -> OAuthToken:
        with self._lock:
            if self.refresh.pop(refresh_token.token, None) is None:  # rotated: used once
                raise TokenError("invalid_grant", "refresh token already used")
            return self._issue(client.client_id, scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < self.clock()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        with self._lock:
            self.access.pop(token.token, None)
            self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull,
                                          params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not accepted")

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        now = int(self.clock())
        access = AccessToken(token=secrets.token_urlsafe(32), client_id=client_id,
                             scopes=scopes, expires_at=now + ACCESS_SECONDS,
                             resource=self.resource)
        refresh = RefreshToken(token=secrets.token_urlsafe(32), client_id=client_id,
                               scopes=scopes, expires_at=now + REFRESH_SECONDS,
                               resource=self.resource)
        self.access[access.token] = access
        self.refresh[refresh.token] = refresh
        self._expire()
        return OAuthToken(access_token=access.token, expires_in=ACCESS_SECONDS,
                          refresh_token=refresh.token, scope=" ".join(scopes) or None)

    def _expire(self) -> None:
        now = self.clock()
        stores: tuple[dict[str, Any], ...] = (self.pending, self.codes, self.access, self.refresh)
        for store in stores:
            for key in [k for k, v in store.items()
                        if v.expires_at is not None and v.expires_at < now]:
                del store[key]


def consent_page(request_id: str, p: Pending | None, problem: str = "",
                 status: int = 200) -> HTMLResponse:
    """The page a user approves a client on: who asks, where it sends the answer, the code."""
    if p is None:
        why = problem or "This sign-in request has expired or was already answered."
        body = (f"<p>{html.escape(why)}</p><p>Start the sign-in again from your MCP "
                "client.</p>")
        return HTMLResponse(_PAGE.format(body=body), status_code=400)
    name = html.escape((p.client.client_name or p.client.client_id)[:80])
    where = html.escape(str(p.params.redirect_uri)[:200])
    warn = f'<p class="problem">{html.escape(problem)}</p>' if problem else ""
    body = (f"<p><b>{name}</b> asks to search the repository this rag-mcp serves. After you "
            f"approve, your browser returns to <code>{where}</code>.</p>{warn}"
            f'<form method="post" action="{CONSENT_PATH}">'
            f'<input type="hidden" name="request" value="{html.escape(request_id)}">'
            '<label>Code shown in the rag-mcp terminal: <input name="code" autofocus '
            'autocomplete="one-time-code" inputmode="numeric" size="9"></label> '
            '<button type="submit">Approve</button> '
            '<button type="submit" name="deny" value="1">Deny</button></form>')
    return HTMLResponse(_PAGE.format(body=body), status_code=status,
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"})


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>rag-mcp sign-in</title>
<style>body{{font:16px system-ui;max-width:40em;margin:3em auto}}.problem{{color:#b00}}</style>
</head><body><h1>rag-mcp</h1>{body}</body></html>"""
