"""The MCP server through a real client session (in process; the fast deterministic model)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from tests.mcp_helpers import ERAS, Era, diagnostics, error_code, in_process, place, text

pytestmark = pytest.mark.anyio
HASH = "test-hash-64"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, **kw})


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


async def test_tools_are_listed_with_read_only_annotations(indexed: Settings) -> None:
    async with in_process(indexed) as (session, _):
        init_tools = (await session.list_tools()).tools
        names = {t.name for t in init_tools}
        assert names == {"rag_query", "rag_get_span", "rag_health"}  # LLM tool is opt-in
        for t in init_tools:
            assert t.annotations is not None
            assert t.annotations.read_only_hint is True and t.annotations.open_world_hint is False
            assert t.output_schema is not None and t.description
        q = next(t for t in init_tools if t.name == "rag_query")
        props = q.input_schema["properties"]
        assert props["k"]["maximum"] == 20 and props["k"]["default"] == 5
        assert "description" in props["query"]


@pytest.mark.parametrize("era", ERAS)
async def test_query_then_get_span_round_trip(indexed: Settings, era: Era) -> None:
    async with in_process(indexed, era=era) as (session, _):
        r = await session.call_tool("rag_query", {"query": "parse_span_id", "k": 3})
        assert not r.is_error and r.structured_content is not None
        hits = r.structured_content["hits"]
        # an exact identifier wins (its file's neighbours join it, named after it)
        assert hits and hits[0]["symbol"].split(", ")[0] == "parse_span_id"
        for h in hits:
            assert {"id", "kind", "language", "score", "preview"} <= set(h)
            assert 0.0 <= h["score"] <= 1.0 and "text" not in h
        assert r.structured_content["next"].startswith("rag_get_span(")
        meta = diagnostics(r)
        assert meta["tokens_whole_files"] >= meta["tokens_returned"] > 0
        assert "parse_span_id" in text(r)
        g = await session.call_tool("rag_get_span", {"span_id": hits[0]["id"]})
        assert not g.is_error and g.structured_content is not None
        # the definition, with whatever adjacent span ranked among the hits (rag_mcp/search/join.py)
        assert "\ndef parse_span_id(" in "\n" + g.structured_content["text"]
        assert g.structured_content["stale"] is False


async def test_include_text_and_budgets(indexed: Settings) -> None:
    s = settings_for(Path(indexed.root), max_spans="2", max_bytes="600")
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "HTTP error status", "k": 5,
                                                  "include_text": True, "tau": 0.0})
        sc = r.structured_content
        assert sc is not None and not r.is_error
        assert len(sc["hits"]) <= 2 and diagnostics(r)["cut_by_budget"] >= 3
        assert all(h["text"] for h in sc["hits"])
        assert "cut by the response budget" in sc["message"]


@pytest.mark.parametrize("args,code", [
    ({"span_id": "../../etc/passwd:1-2:0123456789ab"}, "E_INVALID_ARGUMENT"),
    ({"span_id": "/etc/passwd:1-2:0123456789ab"}, "E_INVALID_ARGUMENT"),
    ({"span_id": "src/app/spans.py:1-2"}, "E_INVALID_ARGUMENT"),
    ({"span_id": "src/app/spans.py:1-2:0123456789ab"}, "E_NOT_FOUND"),
    ({"span_id": "x" * 5000}, "E_INVALID_ARGUMENT"),
    ({"span_id": 42}, "E_INVALID_ARGUMENT"),
    ({}, "E_INVALID_ARGUMENT"),
])
async def test_get_span_errors_have_codes(indexed: Settings, args: dict, code: str) -> None:
    async with in_process(indexed) as (session, _):
        r = await session.call_tool("rag_get_span", args)
        assert error_code(r) == code
        assert "/etc" not in text(r) or "passwd" not in text(r).split(": ", 1)[1]


@pytest.mark.parametrize("args", [
    {"query": ""}, {"query": "   "}, {"query": "x" * 9000}, {"query": "a", "k": 0},
    {"query": "a", "k": 21}, {"query": "a", "tau": 1.5}, {"query": "a", "kind": "binary"},
    {"query": "a", "path": "../outside"}, {"query": "a", "path": "/etc"}, {"query": ["a"]},
])
async def test_bad_queries_are_invalid_arguments(indexed: Settings, args: dict) -> None:
    async with in_process(indexed) as (session, _):
        assert error_code(await session.call_tool("rag_query", args)) == "E_INVALID_ARGUMENT"


async def test_unknown_tool(indexed: Settings) -> None:
    async with in_process(indexed) as (session, _):
        assert error_code(await session.call_tool("rm_rf", {})) == "E_NOT_FOUND"


async def test_missing_index_then_generation_picked_up(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    async with in_process(s) as (session, _):
        h = await session.call_tool("rag_health", {})
        assert not h.is_error and h.structured_content is not None
        assert h.structured_content["status"] == "unavailable"
        r = await session.call_tool("rag_query", {"query": "retry"})
        assert error_code(r) == "E_INDEX_UNAVAILABLE"
        assert f"rag-index --root {sample_repo}" in text(r)
        run_index(s)  # another process publishes a generation while the server runs
        r = await session.call_tool("rag_query", {"query": "retry with backoff"})
        assert not r.is_error and r.structured_content is not None
        assert place(r.structured_content["hits"][0])[0] == "src/app/retry.py"
        h = await session.call_tool("rag_health", {})
        assert h.structured_content is not None and h.structured_content["status"] == "ok"


async def test_cache_hits_and_invalidation_on_new_generation(indexed: Settings) -> None:
    root = Path(indexed.root)
    async with in_process(indexed) as (session, _):
        first = await session.call_tool("rag_query", {"query": "checksum of bytes"})
        again = await session.call_tool("rag_query", {"query": "  checksum   of bytes "})
        assert first.structured_content and again.structured_content
        assert not diagnostics(first)["cache_hit"] and diagnostics(again)["cache_hit"]
        strip = ("took_ms", "cache_hit", "timings")
        a = {k: v for k, v in first.structured_content.items() if k not in strip}
        b = {k: v for k, v in again.structured_content.items() if k not in strip}
        assert a == b  # a cached answer is the uncached answer
        (root / "src/app/extra.py").write_text("def checksum_of_bytes(b):\n    return 0\n")
        run_index(indexed)
        third = await session.call_tool("rag_query", {"query": "checksum of bytes"})
        assert third.structured_content is not None
        assert not diagnostics(third)["cache_hit"]
        assert diagnostics(third)["index_generation"] > diagnostics(first)["index_generation"]


async def test_stale_spans_moved_changed_and_deleted(indexed: Settings) -> None:
    root = Path(indexed.root)
    async with in_process(indexed) as (session, _):
        # the function's span, whatever the (fake) model ranks first
        r = await session.call_tool("rag_query", {"query": "retry exponential backoff", "k": 5,
                                                  "tau": 0.0, "path": "src/app/retry.py"})
        assert r.structured_content is not None
        sid = next(h["id"] for h in r.structured_content["hits"] if h.get("symbol") == "retry")
        path = root / "src/app/retry.py"
        path.write_text("# a new first line\n" + path.read_text())
        g = await session.call_tool("rag_get_span", {"span_id": sid})
        assert g.structured_content is not None and g.structured_content["stale"] is True
        new_id = g.structured_content["id"]
        assert new_id != sid and g.structured_content["start_line"] > 1
        g2 = await session.call_tool("rag_get_span", {"span_id": new_id})  # the moved ID works
        assert g2.structured_content is not None and g2.structured_content["id"] == new_id
        path.write_text(path.read_text().replace("exponential", "linear"))
        assert error_code(await session.call_tool("rag_get_span", {"span_id": sid})) == "E_STALE"
        path.unlink()
        assert error_code(await session.call_tool("rag_get_span", {"span_id": sid})) == "E_STALE"


async def test_secrets_are_redacted_everywhere(make_repo) -> None:  # type: ignore[no-untyped-def]
    key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    root = make_repo({"conf/settings.py": f'GITHUB_TOKEN = "{key}"\n\n\ndef connect():\n'
                                          f'    """Connect to the forge."""\n    return 1\n'})
    s = settings_for(root)
    run_index(s)
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "GITHUB_TOKEN forge",
                                                  "include_text": True, "k": 5})
        assert r.structured_content is not None and key not in text(r)
        assert key not in orjson.dumps(r.structured_content).decode()
        assert diagnostics(r)["redactions"] >= 1
        for h in r.structured_content["hits"]:
            g = await session.call_tool("rag_get_span", {"span_id": h["id"]})
            assert key not in text(g) and key not in orjson.dumps(g.structured_content).decode()
    log_text = b"".join(p.read_bytes() for p in Path(s.log_path).glob("*.jsonl*"))
    assert key.encode() not in log_text


async def test_every_call_is_logged(indexed: Settings) -> None:
    async with in_process(indexed) as (session, _):
        await session.call_tool("rag_query", {"query": "retry with backoff", "k": 2})
        await session.call_tool("rag_get_span", {"span_id": "nope:1-2:0123456789ab"})
        await session.call_tool("rag_health", {})
        await session.call_tool("rag_query", {"query": ""})
    lines = [orjson.loads(x) for x in (indexed.log_path / "rag-mcp.jsonl").read_bytes()
             .splitlines()]
    assert [x["tool"] for x in lines] == ["rag_query", "rag_get_span", "rag_health", "rag_query"]
    q = lines[0]
    for key in ("ts", "client", "query", "k", "returned", "top_score", "low_score",
                "cache_hit", "took_ms", "bytes_out"):
        assert key in q, key
    assert q["client"]["name"] and "text" not in q and "hits" not in q
    assert lines[1]["error"] == "E_NOT_FOUND" and lines[1]["span_id"].startswith("nope")
    assert lines[3]["error"] == "E_INVALID_ARGUMENT"
    # a call the SDK refuses before the tool runs is logged with the same fields
    assert all(x["root"] == indexed.root for x in lines) and "query" in lines[3]


async def test_the_structured_answer_is_lean(indexed: Settings) -> None:
    """What a structured-reading client's model gets is about what a text-reading one gets:
    the hits and what to do next; timings, budgets and token counts are in ``_meta``."""
    async with in_process(indexed) as (session, _):
        for q in ("retry with exponential backoff", "parse_span_id", "HTTP error status",
                  "how do I install it on Debian?", "ApiClient fetchUser"):
            r = await session.call_tool("rag_query", {"query": q})
            sc = r.structured_content
            assert sc is not None and not r.is_error
            size = len(orjson.dumps(sc))
            assert size <= 1.6 * len(text(r)), (q, size, len(text(r)), sc)
            assert not {"took_ms", "cache_hit", "timings", "tau", "tokens_returned",
                        "index_generation", "query"} & set(sc)
            assert {"took_ms", "timings", "tokens_returned"} <= set(diagnostics(r))
            for h in sc["hits"]:  # defaults are left out: no nulls, no false flags
                assert not [k for k, v in h.items() if v is None or v is False], h
