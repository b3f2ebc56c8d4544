"""Chroma server mode against the real server shipped with chromadb (``chroma run``, loopback)."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from rag_mcp.config import Settings, load_settings
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.handle import OpenIndex
from rag_mcp.index.store import EmbeddedStore, ServerStore, store_class
from tests.mcp_helpers import error_code, over_stdio, text

pytestmark = pytest.mark.slow

HASH = "test-hash-64"


def _chroma_cli() -> Path | None:
    """The ``chroma`` entry point the chromadb package installs next to this interpreter."""
    here = Path(sys.executable).with_name("chroma")
    if here.exists():
        return here
    found = shutil.which("chroma")
    return Path(found) if found else None


CHROMA = _chroma_cli()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ChromaServer:
    """``chroma run`` on a loopback port, stopped and started again on the same data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        assert CHROMA is not None
        self.proc = subprocess.Popen(
            [str(CHROMA), "run", "--path", str(self.path), "--host", "127.0.0.1",
             "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "chroma run exited"
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2):
                    return
            time.sleep(0.2)
        raise AssertionError("chroma run did not come up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def chroma(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChromaServer]:
    if CHROMA is None:
        pytest.skip("the `chroma` CLI is not installed (it ships with the chromadb package); "
                    "server mode is not tested here")
    srv = ChromaServer(tmp_path / "chroma-data")
    srv.start()
    monkeypatch.setenv("RAG_CHROMA_URL", srv.url)
    monkeypatch.setenv("RAG_EMBED_MODEL", HASH)
    monkeypatch.setenv("RAG_CACHE_SIZE", "0")  # every query reaches the vector store
    yield srv
    srv.stop()


def rag_index(root: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(root), "--json",
                          *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout)


def current(s: Settings) -> gen.Pointer:
    p = gen.read_pointer(s.index_path)
    assert p is not None
    return p


def live_keys(pointer: gen.Pointer) -> set[str]:
    cat = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    try:
        return cat.emb_keys()
    finally:
        cat.close()


@pytest.mark.anyio
async def test_index_query_restart_wipe(sample_repo: Path, chroma: ChromaServer) -> None:
    first = rag_index(sample_repo)
    s = load_settings({"root": str(sample_repo)})
    pointer = current(s)
    manifest = gen.read_manifest(pointer.dir)
    assert manifest["store"] == "http" and not (pointer.dir / gen.CHROMA).exists()
    assert first["embedded"] == manifest["vectors"] > 0
    q = {"query": "retry a call with exponential backoff", "tau": 0.0}
    async with over_stdio(sample_repo) as session:
        r = await session.call_tool("rag_query", q)
        assert r.structured_content is not None and not r.is_error
        before = [h["id"] for h in r.structured_content["hits"]]
        assert r.structured_content["hits"][0]["symbol"] == "retry"

        chroma.stop()  # the server goes away under a live rag-mcp
        r = await session.call_tool("rag_query", q)
        assert error_code(r) == "E_INDEX_UNAVAILABLE"
        assert "Chroma server" in text(r)
        chroma.start()
        r = await session.call_tool("rag_query", q)  # the same session, nothing lost
        assert not r.is_error and r.structured_content is not None
        assert [h["id"] for h in r.structured_content["hits"]] == before
    async with over_stdio(sample_repo) as session:  # a new reader after the restart
        r = await session.call_tool("rag_query", q)
        assert r.structured_content is not None
        assert [h["id"] for h in r.structured_content["hits"]] == before

    # A server that lost its data: readers say how to rebuild, and the rebuild re-embeds
    # nothing (the vectors come back from the embedding cache).
    chroma.stop()
    shutil.rmtree(chroma.path)
    chroma.start()
    async with over_stdio(sample_repo) as session:
        r = await session.call_tool("rag_query", q)
        assert error_code(r) == "E_INDEX_UNAVAILABLE"
        assert "rag-index" in text(r)
    again = rag_index(sample_repo, "--rebuild")
    assert again["embedded"] == 0 and again["vectors_reused"] >= manifest["vectors"]
    async with over_stdio(sample_repo) as session:
        r = await session.call_tool("rag_query", q)
        assert r.structured_content is not None
        assert [h["id"] for h in r.structured_content["hits"]] == before


def test_server_mode_leaves_this_process_clean(
        make_repo: Callable[..., Path], chroma: ChromaServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Using a Chroma server in a process must not change what a later embedded store in the
    same process connects to (a shared chromadb Settings object once made every later test in a
    pytest run fail with "cannot open the vector store")."""
    from indexers.pipeline import run_index
    from rag_mcp.index.store import chroma as chroma_client

    proto = chroma_client._settings_prototype()
    impl = proto.chroma_api_impl
    root = make_repo({"a.py": "def served(x):\n    return x\n"}, name="served")
    s_http = load_settings({"root": str(root)})
    assert s_http.chroma_url == chroma.url
    assert run_index(s_http).published
    remote = OpenIndex(s_http, current(s_http))
    assert isinstance(remote.vectors, ServerStore)
    monkeypatch.delenv("RAG_CHROMA_URL")
    local = make_repo({"b.py": "def kept_local(x):\n    return x\n"}, name="local")
    s_local = load_settings({"root": str(local)})
    assert not s_local.chroma_url
    st = run_index(s_local)  # while the server client is still open in this process
    assert st.published
    assert gen.read_manifest(current(s_local).dir)["store"] == "embedded"
    assert (current(s_local).dir / gen.CHROMA).is_dir()  # the vectors are local, not remote
    opened = OpenIndex(s_local, current(s_local))
    try:
        assert isinstance(opened.vectors, EmbeddedStore)
        assert opened.vectors.count() == st.spans_total
        assert remote.vectors.count() == len(live_keys(current(s_http)))
    finally:
        opened.close()
        remote.close()
    assert proto.chroma_api_impl == impl  # the shared prototype was never written to


def test_shared_server_two_repos_readers_and_late_orphans(
        make_repo: Callable[..., Path], chroma: ChromaServer) -> None:
    def funcs(tag: str) -> str:
        return "\n\n".join(f"def {tag}_{j}(x):\n    return x * {j}\n" for j in range(6))

    a = make_repo({"m.py": funcs("first"), "n.py": funcs("stable")}, name="repo-a")
    b = make_repo({"m.py": funcs("other"), "doc.md": "# B\n\nrepository b\n"}, name="repo-b")
    # two indexers for two repositories at once, on one server
    procs = [subprocess.Popen([sys.executable, "-m", "indexers.cli", "--root", str(r), "-q"],
                              env=os.environ.copy()) for r in (a, b)]
    assert [p.wait(300) for p in procs] == [0, 0]
    sa, sb = (load_settings({"root": str(r)}) for r in (a, b))
    g1 = current(sa)
    col_a = gen.read_manifest(g1.dir)["vector_collection"]
    col_b = gen.read_manifest(current(sb).dir)["vector_collection"]
    assert col_a != col_b
    store_b = store_class(sb).open_reader(sb, current(sb).dir, col_b)
    count_b = store_b.count()
    assert count_b == len(live_keys(current(sb)))

    reader1 = OpenIndex(sa, g1)  # a server still on generation 1
    keys1 = live_keys(g1)
    (a / "m.py").write_text(funcs("second"))
    rag_index(a)
    g2 = current(sa)
    reader2 = OpenIndex(sa, g2)
    keys2 = live_keys(g2)
    only1 = keys1 - keys2
    assert only1  # the edit orphaned generation 1's vectors of m.py ...
    assert reader1.vectors is not None and reader2.vectors is not None
    assert reader1.vectors.existing(sorted(keys1)) == keys1  # ... which its readers still use
    (a / "m.py").write_text(funcs("third"))
    rag_index(a)
    g3 = current(sa)
    assert reader2.vectors.existing(sorted(keys2)) == keys2  # one generation back: intact
    assert reader2.vectors.existing(sorted(only1)) == set()  # two back: deleted now
    assert reader2.vectors.existing(sorted(live_keys(g3))) == live_keys(g3)
    assert store_b.count() == count_b  # the other repository's collection is untouched
    for r in (reader1, reader2):
        r.close()
    store_b.close()


class TokenProxy(ThreadingHTTPServer):
    """A reverse proxy that lets through only requests carrying ``token``: what a team puts in
    front of the Chroma 1.x server, which checks no credentials itself."""

    def __init__(self, upstream_port: int, token: str) -> None:
        self.upstream_port, self.token = upstream_port, token
        self.seen: list[tuple[str, str]] = []  # (Authorization, X-Chroma-Token) per request
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    server: TokenProxy

    def log_message(self, *args: object) -> None:  # keep the test output quiet
        pass

    def _forward(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.server.seen.append((auth, self.headers.get("X-Chroma-Token", "")))
        if auth != f"Bearer {self.server.token}" and "heartbeat" not in self.path:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",
                                                                              "connection")}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward


def test_token_goes_to_a_proxy_and_a_wrong_one_is_named(
        sample_repo: Path, chroma: ChromaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = TokenProxy(chroma.port, "s3cret-t0ken")
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("RAG_CHROMA_URL", proxy.url)
        monkeypatch.setenv("RAG_CHROMA_TOKEN", "wrong-token")
        out = subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(sample_repo)],
                             capture_output=True, text=True, check=False)
        assert out.returncode == 5
        assert "refused the credentials" in out.stderr and "RAG_CHROMA_TOKEN" in out.stderr
        assert "wrong-token" not in out.stderr + out.stdout and "Traceback" not in out.stderr
        monkeypatch.setenv("RAG_CHROMA_TOKEN", "s3cret-t0ken")
        stats = rag_index(sample_repo)
        assert stats["embedded"] > 0
        assert ("Bearer s3cret-t0ken", "s3cret-t0ken") in proxy.seen
    finally:
        proxy.shutdown()
        proxy.server_close()
