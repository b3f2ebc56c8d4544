"""Answers the server makes on its event loop: memo hits and cheap health checks only."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.deps import Deps, build_deps
from rag_mcp.errors import RagError
from rag_mcp.serve.server import stale_count
from tests.mcp_helpers import hash_deps, hash_models, in_process
from tools import rag_health, rag_query

HASH = "test-hash-64"
PARAMS: dict[str, Any] = {"query": "checksum of bytes", "k": 5, "tau": None, "kind": "any",
                          "path": None, "language": None, "include_text": False,
                          "rerank": None, "repo": None}
VARYING = {"took_ms", "cache_hit", "timings", "uptime_s", "cache"}


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = load_settings({"root": str(sample_repo), "embed_model": HASH})
    run_index(s)
    return s


def served_deps(settings: Settings) -> Deps:
    """Dependencies as ``rag-mcp serve`` builds them, freshness count included."""
    return build_deps(settings, stale_count=stale_count, models=hash_models(settings))


def same(a: Any, b: Any) -> bool:
    def plain(r: Any) -> dict[str, Any]:
        return {k: v for k, v in asdict(r).items() if k not in VARYING}

    return plain(a) == plain(b)


def test_query_quick_path_is_a_memo_hit_or_nothing(indexed: Settings) -> None:
    deps = hash_deps(indexed)
    try:
        assert rag_query.quick(deps, **PARAMS) is None  # no index opened yet: a worker's job
        full = rag_query.rag_query(deps, **PARAMS)
        hit = rag_query.quick(deps, **PARAMS)
        assert hit is not None and hit.cache_hit and not full.cache_hit
        assert same(hit, full)  # the memo is the uncached answer
        assert rag_query.quick(deps, **{**PARAMS, "k": 6}) is None  # other parameters: a miss
        with pytest.raises(RagError) as bad:  # invalid input fails the same way on both paths
            rag_query.quick(deps, **{**PARAMS, "query": "   "})
        assert bad.value.code == "E_INVALID_ARGUMENT"
        # A newly published generation is never opened on the quick path.
        (Path(indexed.root) / "src/app/extra.py").write_text("def checksum_of_bytes(b):\n"
                                                              "    return 0\n")
        run_index(indexed)
        assert rag_query.quick(deps, **PARAMS) is None
        fresh = rag_query.rag_query(deps, **PARAMS)
        assert not fresh.cache_hit and fresh.index_generation > full.index_generation
        assert rag_query.quick(deps, **PARAMS) is not None
    finally:
        deps.close()


def test_health_quick_path_needs_nothing_to_open_walk_or_probe(
        indexed: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    deps = served_deps(indexed)
    try:
        assert rag_health.quick(deps) is None  # index not open, freshness never counted
        full = rag_health.rag_health(deps)
        quick = rag_health.quick(deps)
        assert quick is not None and same(quick, full) and quick.status == "ok"
        assert quick.stale_files == 0
        monkeypatch.setattr(rag_health, "FRESH_SECONDS", 0.0)  # the count is now too old
        assert rag_health.quick(deps) is None
    finally:
        deps.close()
    llm = served_deps(load_settings({"root": indexed.root, "embed_model": HASH,
                                     "local_llm": True}))
    try:
        rag_health.rag_health(llm)  # opens the index, counts (Ollama is not running: degraded)
        assert rag_health.quick(llm) is None  # reaching Ollama is network I/O
    finally:
        llm.close()


@pytest.mark.anyio
async def test_server_answers_memo_hits_without_a_worker_thread(
        indexed: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = anyio.to_thread.run_sync

    async def counting(fn: Any, *args: Any, **kw: Any) -> Any:
        calls.append(fn)
        return await real(fn, *args, **kw)

    async with in_process(indexed) as (session, _):
        first = await session.call_tool("rag_query", {"query": "checksum of bytes"})
        monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
        again = await session.call_tool("rag_query", {"query": "checksum of bytes"})
        other = await session.call_tool("rag_query", {"query": "retry with backoff"})
    assert first.structuredContent and again.structuredContent and other.structuredContent
    assert again.structuredContent["cache_hit"] and not other.structuredContent["cache_hit"]
    assert len(calls) == 1  # only the new question went to a worker thread


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
