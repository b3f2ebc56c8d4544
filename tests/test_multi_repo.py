"""Several repositories in one server: the repo filter, merged hits, span lookup, health, and
two repositories sharing one index folder (real Chroma, the deterministic hash model, real MCP
client sessions)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import ConfigError
from rag_mcp.search.repos import qualify, repo_names, split_qualified
from rag_mcp.serve.__main__ import _settings, build_parser
from rag_mcp.serve.server import build_server
from tests.mcp_helpers import answer, error_code, hash_deps, in_process, over_stdio, text

pytestmark = pytest.mark.anyio
HASH = "test-hash-64"

#: the same file in both repositories: its spans have the same IDs in each
SHARED = '''
    def clamp(value, low, high):
        """Keep value between low and high."""
        return max(low, min(value, high))


    def chunked(items, size):
        """Yield lists of at most size items."""
        for i in range(0, len(items), size):
            yield items[i : i + size]
    '''

ALPHA = {
    "src/util.py": SHARED,
    # same path as in beta, different content
    "src/auth.py": '''
        def login(user, password):
            """Check a password against the stored hash and open a session."""
            return verify_hash(user, password)


        def logout(session):
            """Close a user session and forget its token."""
            session.close()
        ''',
    "src/alpha_cache.py": '''
        class LruCache:
            """A least recently used cache with a fixed capacity."""

            def get(self, key):
                return self.items.get(key)
        ''',
    "docs/guide.md": '''
        # Alpha guide

        ## Caching

        Alpha keeps results in an LRU cache so repeated lookups are fast.
        ''',
}

BETA = {
    "src/util.py": SHARED,
    "src/auth.py": '''
        def login(token):
            """Validate an OAuth bearer token and return the user it names."""
            return decode_token(token)


        def refresh(token):
            """Exchange a refresh token for a new access token."""
            return issue_token(token)
        ''',
    "src/beta_queue.py": '''
        class RetryQueue:
            """Jobs retried with exponential backoff until they succeed."""

            def push(self, job):
                self.jobs.append(job)
        ''',
    "docs/guide.md": '''
        # Beta guide

        ## Queues

        Beta runs background jobs from a retry queue with exponential backoff.
        ''',
}

ONLY_ALPHA = {"src/alpha_cache.py"}
ONLY_BETA = {"src/beta_queue.py"}

QUERIES = [
    "login", "password hash session", "oauth bearer token", "refresh token", "logout",
    "clamp value between low and high", "chunked items size", "LRU cache capacity",
    "retry queue exponential backoff", "background jobs", "guide", "caching", "queues",
    "push job", "get key", "user", "token", "session close", "yield lists", "fast lookups",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(*roots: Path, **kw: object) -> Settings:
    return load_settings({"roots": [str(r) for r in roots], "embed_model": HASH, **kw})


@pytest.fixture
def two(make_repo: Callable[..., Path]) -> tuple[Path, Path]:
    a, b = make_repo(ALPHA, name="alpha"), make_repo(BETA, name="beta")
    for root in (a, b):
        run_index(settings_for(root))
    return a, b


@pytest.fixture
def served(two: tuple[Path, Path]) -> Settings:
    return settings_for(*two)


def sc(result: Any) -> dict[str, Any]:
    return answer(result)


async def test_names_and_health_list_both(served: Settings) -> None:
    async with in_process(served) as (session, _):
        h = sc(await session.call_tool("rag_health", {}))
        assert [r["name"] for r in h["repos"]] == ["alpha", "beta"]
        assert [r["root"] for r in h["repos"]] == list(served.roots)
        assert h["status"] == "ok" and all(r["status"] == "ok" for r in h["repos"])
        assert all(r["index_present"] and r["generation"] == 1 for r in h["repos"])
        assert h["spans"] == sum(r["spans"] for r in h["repos"]) > 0
        assert "repo alpha" in text(await session.call_tool("rag_health", {}))
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "alpha, beta" in (tools["rag_query"].description or "")
        assert "repo" in tools["rag_query"].input_schema["properties"]
        assert "repo" in tools["rag_get_span"].input_schema["properties"]


async def test_a_repo_filter_never_returns_another_repos_spans(served: Settings) -> None:
    seen: dict[str | None, set[str]] = {None: set(), "alpha": set(), "beta": set()}
    checked: set[tuple[str, str]] = set()
    async with in_process(served) as (session, _):
        for q in QUERIES:
            for repo, other_only in (("alpha", ONLY_BETA), ("beta", ONLY_ALPHA)):
                for arg in (repo, [repo]):
                    r = sc(await session.call_tool("rag_query", {
                        "query": q, "repo": arg, "k": 10, "tau": 0.0, "include_text": True}))
                    for h in r["hits"]:
                        seen[repo].add(h["repo"])
                        assert h["repo"] == repo and h["path"] not in other_only, (q, h)
                        if (repo, h["id"]) in checked:
                            continue
                        checked.add((repo, h["id"]))
                        # the span is this repository's own text, readable through it alone
                        g = sc(await session.call_tool("rag_get_span", {
                            "span_id": h["id"], "repo": repo}))
                        assert g["repo"] == repo and g["text"] == h["text"] and not g["stale"]
            both = sc(await session.call_tool("rag_query", {"query": q, "k": 10, "tau": 0.0}))
            seen[None] |= {h["repo"] for h in both["hits"]}
    assert seen == {None: {"alpha", "beta"}, "alpha": {"alpha"}, "beta": {"beta"}}


async def test_no_repo_searches_all_and_merges_by_calibrated_score(served: Settings) -> None:
    async with in_process(served) as (session, _):
        r = sc(await session.call_tool("rag_query", {"query": "clamp value between low and high",
                                                     "k": 10, "tau": 0.0}))
        scores = [h["score"] for h in r["hits"]]
        assert scores == sorted(scores, reverse=True)
        # a joined range names its best-ranked part first
        clamp = [h for h in r["hits"] if (h["symbol"] or "").split(", ")[0] == "clamp"]
        # the shared file: one span ID, once from each repository
        assert {h["repo"] for h in clamp} == {"alpha", "beta"}
        assert len({h["id"] for h in clamp}) == 1
        assert r["generations"] == {"alpha": 1, "beta": 1} and r["unavailable"] is None
        listed = sc(await session.call_tool("rag_query", {
            "query": "clamp value between low and high", "k": 10, "tau": 0.0,
            "repo": ["beta", "alpha"]}))
        strip = ("took_ms", "cache_hit", "timings")
        assert ({k: v for k, v in listed.items() if k not in strip}
                == {k: v for k, v in r.items() if k not in strip})
        assert "alpha: src/util.py" in text(await session.call_tool(
            "rag_query", {"query": "clamp", "k": 10, "tau": 0.0}))


async def test_budgets_and_tau_apply_to_the_merged_list(two: tuple[Path, Path]) -> None:
    s = settings_for(*two, max_spans="3")
    async with in_process(s) as (session, _):
        r = sc(await session.call_tool("rag_query", {"query": "token login session user",
                                                     "k": 10, "tau": 0.0}))
        assert r["returned"] == 3 and r["cut_by_budget"] >= 3
        high = sc(await session.call_tool("rag_query", {"query": "token login session user",
                                                        "k": 10, "tau": 0.99}))
        assert high["low_confidence"] and high["returned"] == 1  # one best guess overall


async def test_unknown_repo_is_an_invalid_argument_listing_the_served(served: Settings) -> None:
    async with in_process(served) as (session, _):
        for arg in ("gamma", ["alpha", "gamma"], []):
            r = await session.call_tool("rag_query", {"query": "login", "repo": arg})
            assert error_code(r) == "E_INVALID_ARGUMENT"
            assert "alpha, beta" in text(r)
        g = await session.call_tool("rag_get_span", {"span_id": "src/util.py:1-3:0123456789ab",
                                                     "repo": "gamma"})
        assert error_code(g) == "E_INVALID_ARGUMENT" and "alpha, beta" in text(g)


async def test_get_span_with_and_without_repo(served: Settings) -> None:
    async with in_process(served) as (session, _):
        async def ids(q: str, repo: str) -> dict[str, str]:
            r = sc(await session.call_tool("rag_query", {"query": q, "repo": repo, "k": 10,
                                                         "tau": 0.0}))
            return {h["symbol"].split(", ")[0]: h["id"] for h in r["hits"] if h["symbol"]}

        shared = (await ids("clamp", "alpha"))["clamp"]
        assert (await ids("clamp", "beta"))["clamp"] == shared
        ambiguous = await session.call_tool("rag_get_span", {"span_id": shared})
        assert error_code(ambiguous) == "E_INVALID_ARGUMENT"
        assert "alpha, beta" in text(ambiguous) and "repo" in text(ambiguous)
        for repo in ("alpha", "beta"):
            g = sc(await session.call_tool("rag_get_span", {"span_id": shared, "repo": repo}))
            assert g["repo"] == repo and g["text"].startswith("def clamp")
        cache = (await ids("LRU cache", "alpha"))["LruCache"]
        g = sc(await session.call_tool("rag_get_span", {"span_id": cache}))  # only in alpha
        assert g["repo"] == "alpha"
        missing = await session.call_tool("rag_get_span", {"span_id": cache, "repo": "beta"})
        assert error_code(missing) == "E_NOT_FOUND"
        # same path, other content: alpha's login ID names nothing in beta
        login = (await ids("login password", "alpha"))["login"]
        assert login.startswith("src/auth.py:")
        crossed = await session.call_tool("rag_get_span", {"span_id": login, "repo": "beta"})
        assert error_code(crossed) == "E_NOT_FOUND"
        own = sc(await session.call_tool("rag_get_span", {"span_id": login}))
        assert own["repo"] == "alpha" and "password" in own["text"]


async def test_one_repo_without_an_index_does_not_take_the_others_down(
        two: tuple[Path, Path], make_repo: Callable[..., Path]) -> None:
    gamma = make_repo({"src/g.py": "def gamma_only():\n    return 3\n"}, name="gamma")
    s = settings_for(*two, gamma)
    async with in_process(s) as (session, _):
        h = sc(await session.call_tool("rag_health", {}))
        by_name = {r["name"]: r for r in h["repos"]}
        assert h["status"] == "degraded" and h["index_present"]
        assert by_name["gamma"]["status"] == "unavailable"
        assert by_name["gamma"]["error_code"] == "E_INDEX_UNAVAILABLE"
        assert "rag-index --root" in by_name["gamma"]["message"]
        assert by_name["alpha"]["status"] == by_name["beta"]["status"] == "ok"
        assert "gamma:" in h["message"]
        r = sc(await session.call_tool("rag_query", {"query": "login", "k": 10, "tau": 0.0}))
        assert r["hits"] and {x["repo"] for x in r["hits"]} <= {"alpha", "beta"}
        assert list(r["unavailable"]) == ["gamma"] and "gamma" in r["message"]
        assert "gamma" in text(await session.call_tool("rag_query", {"query": "login"}))
        only = await session.call_tool("rag_query", {"query": "login", "repo": "gamma"})
        assert error_code(only) == "E_INDEX_UNAVAILABLE"
        g = await session.call_tool("rag_get_span", {"span_id": "src/g.py:1-2:0123456789ab"})
        assert error_code(g) == "E_NOT_FOUND" and "gamma" in text(g)
        # the missing index is built while serving: the next query answers from it
        run_index(s.for_root(str(gamma)))
        again = sc(await session.call_tool("rag_query", {"query": "gamma_only", "tau": 0.0,
                                                         "k": 10}))
        assert again["unavailable"] is None and "gamma" in {x["repo"] for x in again["hits"]}


async def test_every_repo_unavailable_is_an_index_error(make_repo: Callable[..., Path]) -> None:
    a, b = make_repo({"a.py": "x = 1\n"}, name="a1"), make_repo({"b.py": "y = 2\n"}, name="b1")
    async with in_process(settings_for(a, b)) as (session, _):
        r = await session.call_tool("rag_query", {"query": "x"})
        assert error_code(r) == "E_INDEX_UNAVAILABLE" and "a1" in text(r) and "b1" in text(r)
        h = sc(await session.call_tool("rag_health", {}))
        assert h["status"] == "unavailable" and not h["index_present"]


async def test_two_repos_share_one_index_dir(make_repo: Callable[..., Path],
                                             tmp_path: Path) -> None:
    shared = tmp_path / "shared-index"
    a, b = make_repo(ALPHA, name="alpha"), make_repo(BETA, name="beta")
    sa, sb = (settings_for(r, index_dir=str(shared)) for r in (a, b))
    run_index(sa)
    run_index(sb)
    assert sa.index_path != sb.index_path and sa.index_path.parent == shared
    folders = sorted(p.name for p in shared.iterdir() if p.is_dir())
    assert folders == sorted([sa.collection_name, sb.collection_name])
    manifests = [json.loads((s.index_path / "gen-000001" / "manifest.json").read_text())
                 for s in (sa, sb)]
    assert manifests[0]["vector_collection"] != manifests[1]["vector_collection"]
    assert not (a / ".rag").exists() and not (b / ".rag").exists()
    # re-indexing one repository leaves the other's generation alone
    (a / "src/new.py").write_text("def fresh_alpha():\n    return 1\n")
    run_index(sa)
    served = settings_for(a, b, index_dir=str(shared))
    async with in_process(served) as (session, _):
        h = sc(await session.call_tool("rag_health", {}))
        assert {r["name"]: r["generation"] for r in h["repos"]} == {"alpha": 2, "beta": 1}
        for q in QUERIES[:8] + ["fresh_alpha"]:
            r = sc(await session.call_tool("rag_query", {"query": q, "repo": "beta", "k": 10,
                                                         "tau": 0.0}))
            assert all(x["repo"] == "beta" and x["path"] != "src/new.py" for x in r["hits"])
        fresh = sc(await session.call_tool("rag_query", {"query": "fresh_alpha", "k": 3}))
        assert fresh["hits"][0]["repo"] == "alpha" and fresh["hits"][0]["path"] == "src/new.py"


async def test_one_root_output_only_gains_the_repo_field(two: tuple[Path, Path]) -> None:
    async with in_process(settings_for(two[0])) as (session, _):
        r = sc(await session.call_tool("rag_query", {"query": "login", "k": 3}))
        assert r["generations"] is None and r["unavailable"] is None
        assert r["hits"] and all(h["repo"] is None for h in r["hits"])  # one root: no field
        assert "alpha:" not in text(await session.call_tool("rag_query", {"query": "login"}))
        h = sc(await session.call_tool("rag_health", {}))
        assert h["generation"] == 1 and [x["name"] for x in h["repos"]] == ["alpha"]
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "Several repositories" not in (tools["rag_query"].description or "")


@contextlib.asynccontextmanager
async def connector(settings: Settings) -> AsyncIterator[Client]:
    server = build_server(settings, lambda: hash_deps(settings), connector_tools=True)
    async with Client(server, mode="legacy") as session:
        yield session


async def test_search_ids_name_their_repo_and_fetch_takes_them(served: Settings) -> None:
    async with connector(served) as session:
        r = await session.call_tool("search", {"query": "clamp value between low and high"})
        results = json.loads(text(r))["results"]
        repos = {i["id"].split(":", 1)[0] for i in results}
        assert repos == {"alpha", "beta"}
        for item in results:
            f = json.loads(text(await session.call_tool("fetch", {"id": item["id"]})))
            repo, bare = item["id"].split(":", 1)
            assert f["id"] == item["id"] and f["metadata"]["repo"] == repo
            assert f["url"] == ""  # no git remote: no link rather than a file:// one
        shared = next(i["id"] for i in results if "clamp" in i["title"]).split(":", 1)[1]
        bare = await session.call_tool("fetch", {"id": shared})
        assert error_code(bare) == "E_INVALID_ARGUMENT"


async def test_stdio_server_takes_root_twice(two: tuple[Path, Path]) -> None:
    a, b = two
    async with over_stdio(a, args=("--root", str(b))) as session:
        h = sc(await session.call_tool("rag_health", {}))
        assert [r["name"] for r in h["repos"]] == ["alpha", "beta"]
        r = sc(await session.call_tool("rag_query", {"query": "login", "repo": "beta",
                                                     "tau": 0.0}))
        assert r["hits"] and {x["repo"] for x in r["hits"]} == {"beta"}


def test_repo_names_are_folder_names_told_apart_by_their_parents() -> None:
    assert repo_names(["/w/alpha", "/w/beta"]) == ["alpha", "beta"]
    names = repo_names(["/home/u/work/app", "/home/u/oss/app", "/srv/lib"])
    assert names == ["work/app", "oss/app", "lib"]
    assert repo_names(["/home/u/oss/app", "/home/u/work/app"]) == ["oss/app", "work/app"]
    deep = repo_names(["/x/a/app", "/y/a/app"])
    assert deep == ["x/a/app", "y/a/app"]
    cleaned = repo_names(["/p/my app", "/q/my:app"])
    assert len(set(cleaned)) == 2 and all(":" not in n and " " not in n for n in cleaned)
    assert repo_names(["/"]) == ["repo"]


def test_qualified_ids_split_only_on_served_names() -> None:
    sid = "src/a.py:1-3:0123456789ab"
    assert split_qualified(["alpha"], qualify("alpha", sid)) == ("alpha", sid)
    assert split_qualified(["alpha"], sid) == (None, sid)
    odd = "alpha:b.py:1-3:0123456789ab"  # a path that starts with a served name and ':'
    assert split_qualified(["beta"], odd) == (None, odd)


def test_roots_from_env_file_and_flags(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in ("a", "b", "c"))
    for p in (a, b, c):
        p.mkdir()
    env = {"RAG_ROOTS": f"{a}:{b}"}
    s = load_settings(environ=env)
    assert s.roots == (str(a), str(b)) and s.root == str(a)
    assert load_settings({"root": str(c)}, environ=env).roots == (str(c),)  # a flag wins
    assert load_settings(environ={**env, "RAG_REPO_ROOT": str(c)}).roots == (str(a), str(b))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[repo]\nroots = ["{a}", "{c}", "{a}"]\n')
    assert load_settings(config_file=cfg, environ={}).roots == (str(a), str(c))
    assert load_settings(config_file=cfg, environ={"RAG_REPO_ROOT": str(b)}).roots == (str(b),)
    args = build_parser().parse_args(["serve", "--root", str(b), "--root", str(c)])
    assert _settings(args).roots == (str(b), str(c))
    one = build_parser().parse_args(["serve", "--root", str(b)])
    assert _settings(one).roots == (str(b),)
    per = load_settings(environ=env).for_root(str(b))
    assert per.root == str(b) and per.roots == (str(b),)
    with pytest.raises(ConfigError, match="RAG_ROOTS"):
        load_settings(environ={"RAG_ROOTS": f"{a}:{tmp_path / 'missing'}"})
    with pytest.raises(ConfigError, match="collection"):
        load_settings({"collection": "shared"}, environ=env)


def test_deps_build_one_index_per_root(served: Settings) -> None:
    deps = hash_deps(served)
    try:
        assert list(deps.repos) == ["alpha", "beta"]
        a, b = deps.repos["alpha"], deps.repos["beta"]
        assert a.settings.root == served.roots[0] and b.settings.root == served.roots[1]
        assert a.handle.base != b.handle.base
        assert a.retriever.qvec is b.retriever.qvec  # one query embedding serves both
    finally:
        deps.close()
    shutil.rmtree(Path(served.roots[1]) / ".rag")
    deps = hash_deps(served)
    try:
        assert deps.repos["alpha"].handle.get().generation == 1
        with pytest.raises(Exception, match="no index"):
            deps.repos["beta"].handle.get()
    finally:
        deps.close()


def test_rag_index_indexes_every_configured_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from indexers import cli

    a, b = tmp_path / "a", tmp_path / "b"
    for root, name in ((a, "alpha"), (b, "beta")):
        root.mkdir()
        (root / f"{name}.py").write_text(f"def {name}():\n    return 1\n")
    monkeypatch.setenv("RAG_ROOTS", f"{a}:{b}")
    monkeypatch.setenv("RAG_EMBED_MODEL", "test-hash-64")
    assert cli.main(["--json"]) == 0
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(r["root"]).name for r in runs] == ["a", "b"]
    assert all(r["spans_total"] >= 1 for r in runs)
    # --status names one index: with several roots it asks which
    assert cli.main(["--status"]) == 2
    assert "pick one with --root" in capsys.readouterr().err
    assert cli.main(["--status", "--root", str(b)]) == 0
