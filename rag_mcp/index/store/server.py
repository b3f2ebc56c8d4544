"""The server store: one collection per model on a Chroma server (``RAG_CHROMA_URL``).

The collection outlives generations and may be shared by several indexers (one per repository)
and by readers of older generations, so a writer looks keys up on the server before embedding
and deletes what its previous run orphaned one generation late.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlparse

from rag_mcp.errors import IndexUnavailable, InvalidArgument
from rag_mcp.index.store import chroma
from rag_mcp.index.store.base import VectorStore

if TYPE_CHECKING:
    from rag_mcp.config import Settings


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status behind a Chroma client error, if any (it wraps httpx's in plain types)."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        response = getattr(seen, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        code = getattr(seen, "code", None)  # ChromaError.code() is the HTTP status it maps to
        if callable(code) and type(seen).__name__ in ("ChromaAuthError", "AuthorizationError"):
            value = code()
            return value if isinstance(value, int) else None
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(exc: BaseException) -> bool:
    return _http_status(exc) in (401, 403)


def _server_error(server: str, what: str, exc: BaseException) -> IndexUnavailable:
    status = _http_status(exc)
    if status in (401, 403):
        return IndexUnavailable(
            f"the Chroma server at {server} refused the credentials (HTTP {status}); check "
            "RAG_CHROMA_TOKEN (and RAG_CHROMA_TENANT / RAG_CHROMA_DATABASE)")
    return IndexUnavailable(
        f"the Chroma server at {server} failed to {what} ({type(exc).__name__}); is `chroma run` "
        "up? (RAG_CHROMA_URL)")


class ServerStore(VectorStore):
    """A collection on a Chroma server, shared by generations and indexers."""

    kind: ClassVar[str] = "http"
    shared: ClassVar[bool] = True

    def __init__(self, client: Any, collection: Any, server: str) -> None:
        super().__init__(client, collection)
        self.server = server  # "http://host:port", for messages

    def _failure(self, what: str, exc: BaseException) -> IndexUnavailable:
        return _server_error(self.server, what, exc)

    @classmethod
    def open(cls, url: str, name: str, *, tenant: str, database: str, token: str,
             create: bool) -> ServerStore:
        """The collection ``name`` on the server at ``url``."""
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidArgument(
                "store.chroma_url must look like http://host:8000 (env RAG_CHROMA_URL), "
                f"got {url!r}"
            )
        # A token goes out both ways Chroma deployments read it: a proxy in front of the 1.x
        # server (which has no check of its own) usually wants a bearer token, Chroma Cloud and
        # distributed Chroma's gateway read X-Chroma-Token.
        headers = ({"Authorization": f"Bearer {token}", "X-Chroma-Token": token}
                   if token else None)
        port = parsed.port or (443 if parsed.scheme == "https" else 8000)
        server = f"{parsed.scheme}://{parsed.hostname}:{port}"
        settings = chroma.client_settings()
        if parsed.scheme == "http":
            # Plain HTTP verifies no certificate; left at its default, httpx loads the CA bundle
            # for every client (~0.16 s measured), i.e. per index run and per new generation.
            settings.chroma_server_ssl_verify = False
        try:
            client = chroma.chromadb().HttpClient(
                host=parsed.hostname, port=port, ssl=parsed.scheme == "https", headers=headers,
                tenant=tenant, database=database, settings=settings,
            )
            col = chroma.collection(client, name, create, refused=_refused)
        except IndexUnavailable:
            raise
        except Exception as exc:
            raise _server_error(server, "answer", exc) from exc
        return cls(client, col, server)

    @classmethod
    def _for(cls, settings: Settings, name: str, create: bool) -> ServerStore:
        return cls.open(settings.chroma_url, name, tenant=settings.chroma_tenant,
                        database=settings.chroma_database, token=settings.chroma_token,
                        create=create)

    # -- the mode's answers ------------------------------------------------------------------
    @classmethod
    def open_reader(cls, settings: Settings, gen_dir: Path, name: str) -> ServerStore:
        return cls._for(settings, name, create=False)

    @classmethod
    def open_writer(cls, settings: Settings, gen_dir: Path, name: str, *,
                    update: bool) -> ServerStore:
        return cls._for(settings, name, create=True)

    @classmethod
    def carry_over(cls, src_gen: Path, dst_gen: Path) -> None:
        return None  # the vectors stay on the server

    def stored_already(self, keys: Sequence[str]) -> set[str]:
        return self.existing(keys)  # another indexer, or an earlier run, may have stored them

    def drop_orphans(self, orphans: Sequence[str], earlier: Sequence[str],
                     live: Collection[str]) -> list[str]:
        # Readers of the previous generation may still use this run's orphans: delete what the
        # previous run orphaned, one generation late.
        self.delete(sorted(set(earlier).difference(live)))
        return list(orphans)

    def seal(self, live: Collection[str]) -> int:
        # The server applies each write itself. Its collection also holds other generations'
        # and indexers' vectors, so this generation's count is that of its live keys, each of
        # which was stored or found stored.
        return len(live)

    def holds(self, recorded: object) -> bool:
        return True  # a shared collection has no count of one generation's own to compare
