"""What real HTTP clients run into: OAuth sign-in completed by the SDK's own client auth
provider, OAuth discovery against a static-token server, probing without a credential, and
loopback addresses other than 127.0.0.1."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from indexers.pipeline import run_index
from rag_mcp.config import Settings
from rag_mcp.serve import guard
from tests.mcp_helpers import ERAS, Era, mode
from tests.test_http import INIT, MCP_HEADERS, TOKEN, serving, settings_for

REDIRECT = "http://127.0.0.1:1/callback"  # never contacted: the test reads the redirect itself


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


class Memory:
    """The client's token storage (the SDK's ``TokenStorage`` protocol), in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """The user's side of the sign-in: opens the authorization URL, types the code the server
    printed on its terminal into the consent page, and hands the redirect to the client."""

    def __init__(self, terminal: io.StringIO, typed: str | None = None) -> None:
        self.terminal, self.typed = terminal, typed
        self.result: AuthorizationCodeResult | None = None
        self.pages: list[str] = []

    async def open(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=30) as web:
            r = await web.get(url)
            assert r.status_code == 302, r.text
            consent = await web.get(r.headers["location"])
            self.pages.append(consent.text)
            assert consent.status_code == 200 and "rag-mcp test client" in consent.text
            request_id = re.search(r'name="request" value="([^"]+)"', consent.text)
            code = re.findall(r"enter (\d{3}-\d{3})", self.terminal.getvalue())[-1]
            assert request_id is not None
            r = await web.post(urlsplit(url)._replace(path="/consent", query="").geturl(),
                               data={"request": request_id.group(1),
                                     "code": self.typed or code})
            self.pages.append(r.text)
            if r.status_code != 302:
                return
            back = parse_qs(urlsplit(r.headers["location"]).query)
            self.result = AuthorizationCodeResult(
                code=back["code"][0], state=back.get("state", [None])[0],
                iss=back.get("iss", [None])[0])

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None, self.pages[-1]
        return self.result


def oauth_client(url: str, browser: Browser, storage: Memory) -> OAuthClientProvider:
    meta = OAuthClientMetadata(client_name="rag-mcp test client", redirect_uris=[REDIRECT],
                               grant_types=["authorization_code", "refresh_token"],
                               response_types=["code"], token_endpoint_auth_method="none")
    return OAuthClientProvider(url, meta, storage, redirect_handler=browser.open,
                               callback_handler=browser.callback)


@pytest.mark.parametrize("era", ERAS)
def test_oauth_sign_in_with_the_sdk_client(indexed: Settings, era: Era) -> None:
    plans: list[Any] = []
    with serving(indexed, auth="oauth", plan_out=plans) as url:
        terminal = io.StringIO()
        plans[0].provider.say = terminal
        with httpx.Client(timeout=30) as c:  # the challenge points at the metadata
            r = c.post(url, json=INIT, headers=MCP_HEADERS)
            assert r.status_code == 401 and "resource_metadata=" in r.headers["www-authenticate"]
            meta = c.get(url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp")
            assert meta.status_code == 200 and meta.json()["resource"] == url
        browser, storage = Browser(terminal), Memory()

        async def signed_in() -> None:
            auth = oauth_client(url, browser, storage)
            async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=60)) as hc, \
                    Client(streamable_http_client(url, http_client=hc), mode=mode(era)) as s:
                r = await s.call_tool("rag_health", {})
                assert not r.is_error and r.structured_content is not None

        anyio.run(signed_in)
        assert storage.tokens is not None and storage.tokens.refresh_token
        assert "approved 'rag-mcp test client'" in terminal.getvalue()
        with httpx.Client(timeout=30) as c:  # the issued token works for plain requests too
            r = c.post(url, json=INIT, headers={
                **MCP_HEADERS, "Authorization": f"Bearer {storage.tokens.access_token}"})
            assert r.status_code == 200


def test_oauth_consent_needs_the_printed_code(indexed: Settings) -> None:
    plans: list[Any] = []
    with serving(indexed, auth="oauth", plan_out=plans) as url:
        terminal = io.StringIO()
        plans[0].provider.say = terminal
        browser = Browser(terminal, typed="000-000")

        async def attempt() -> None:
            auth = oauth_client(url, browser, Memory())
            async with httpx2.AsyncClient(auth=auth, timeout=30) as hc, \
                    Client(streamable_http_client(url, http_client=hc), mode="legacy"):
                pass

        with pytest.raises(BaseException):  # noqa: B017 - whatever the SDK raises on no code
            anyio.run(attempt)
        assert "not the code the server printed" in browser.pages[-1]
        assert "approved" not in terminal.getvalue()


def test_a_static_token_server_answers_oauth_discovery(indexed: Settings) -> None:
    s = settings_for(Path(indexed.root), http_token=TOKEN)
    with serving(s) as url, httpx.Client(timeout=30) as c:
        base = url.removesuffix("/mcp")
        for path in ("/.well-known/oauth-protected-resource/mcp",
                     "/.well-known/oauth-authorization-server",
                     "/.well-known/openid-configuration"):
            r = c.get(base + path)
            assert r.status_code == 404 and "static bearer token" in r.json()["error_description"]
        r = c.post(base + "/register", json={"redirect_uris": [REDIRECT]})
        assert r.status_code == 400 and r.json()["error"] == "invalid_client_metadata"
        assert "static bearer token" in r.json()["error_description"]
        # Probing without a credential, as OAuth-minded clients do, is answered every time and
        # does not use up the failed-login limit that a configured client here shares.
        for _ in range(guard.AUTH_FAILURE_BURST * 2):
            r = c.post(url, json=INIT, headers=MCP_HEADERS)
            assert r.status_code == 401 and "static bearer token" in r.json()["message"]
        ok = c.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.2", "127.1.2.3"])
def test_any_loopback_address_serves_its_own_url(indexed: Settings, host: str) -> None:
    s = settings_for(Path(indexed.root), http_host=host)
    with serving(s) as url, httpx.Client(timeout=30) as c:
        assert url.startswith(f"http://{host}:")
        assert c.post(url, json=INIT, headers=MCP_HEADERS).status_code == 200
        assert c.get(url.removesuffix("/mcp") + "/health").status_code == 200


def test_client_id_metadata_documents_are_neither_offered_nor_fetched(indexed: Settings) -> None:
    """A URL as client_id (a Client ID Metadata Document) is refused like any unknown client:
    the server does not fetch what a caller names (docs/SECURITY.md, HTTP exposure)."""
    with serving(indexed, auth="oauth") as url, httpx.Client(timeout=30) as c:
        base = url.removesuffix("/mcp")
        meta = c.get(base + "/.well-known/oauth-authorization-server").json()
        assert meta.get("client_id_metadata_document_supported") in (None, False)
        assert meta["registration_endpoint"] == base + "/register"
        doc = "http://127.0.0.1:1/client.json"  # a fetch would fail loudly, not hang
        r = c.get(base + "/authorize", params={
            "client_id": doc, "response_type": "code", "redirect_uri": REDIRECT,
            "code_challenge": "x" * 43, "code_challenge_method": "S256", "state": "s"})
        assert r.status_code == 400 and "client" in r.text.lower(), r.text
