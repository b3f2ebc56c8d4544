"""MCP resources (rag://health, rag://stats, rag://search-tips) and the explain_code prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent, TextResourceContents

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from tests.mcp_helpers import in_process

pytestmark = pytest.mark.anyio
HASH = "test-hash-64"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(root: Path) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH})


@pytest.fixture
def indexed(sample_repo: Path) -> Settings:
    s = settings_for(sample_repo)
    run_index(s)
    return s


async def read(session, uri: str) -> str:  # type: ignore[no-untyped-def]
    res = await session.read_resource(uri)
    assert len(res.contents) == 1 and isinstance(res.contents[0], TextResourceContents)
    return res.contents[0].text


async def test_resources_are_listed_and_read(indexed: Settings) -> None:
    async with in_process(indexed) as (session, _):
        listed = {str(r.uri): r for r in (await session.list_resources()).resources}
        assert set(listed) == {"rag://health", "rag://stats", "rag://search-tips"}
        assert listed["rag://stats"].mime_type == "application/json"

        health = json.loads(await read(session, "rag://health"))
        assert health["status"] == "ok" and health["spans"] > 0

        stats = json.loads(await read(session, "rag://stats"))
        assert stats["index_present"] and stats["generation"] == health["generation"]
        assert stats["spans"] == sum(stats["by_kind"].values()) == health["spans"]
        assert {"python", "typescript", "markdown"} <= set(stats["by_language"])
        assert stats["embedding_model"] == HASH and stats["files"] == 5

        tips = await read(session, "rag://search-tips")
        assert "rag_query" in tips and "rag_get_span" in tips and "low_confidence" in tips

        with pytest.raises(MCPError):
            await session.read_resource("rag://nothing")  # type: ignore[arg-type]


async def test_stats_and_health_explain_a_missing_index(sample_repo: Path) -> None:
    async with in_process(settings_for(sample_repo)) as (session, _):
        stats = json.loads(await read(session, "rag://stats"))
        assert stats["index_present"] is False
        assert stats["error"]["code"] == "E_INDEX_UNAVAILABLE"
        assert f"rag-index --root {sample_repo}" in stats["error"]["message"]
        health = json.loads(await read(session, "rag://health"))
        assert health["status"] == "unavailable"


async def test_explain_code_prompt_embeds_cited_spans(indexed: Settings) -> None:
    async with in_process(indexed) as (session, _):
        prompts = {p.name: p for p in (await session.list_prompts()).prompts}
        assert set(prompts) == {"explain_code"}
        args = prompts["explain_code"].arguments or []
        assert [(a.name, a.required) for a in args] == [("question", True)]

        question = "how is retry backed off?"
        got = await session.get_prompt("explain_code", {"question": question})
        assert len(got.messages) == 1 and got.messages[0].role == "user"
        content = got.messages[0].content
        assert isinstance(content, TextContent)
        body = content.text
        assert question in body
        # The spans rag_query returns for the question are in the prompt, text and all.
        r = await session.call_tool("rag_query", {"query": question, "include_text": True})
        assert r.structured_content is not None
        hits = r.structured_content["hits"]
        assert hits
        for h in hits:
            assert f"Span `{h['id']}`" in body and h["text"] in body
        cited = body.split("cite each claim with its span ID in backticks, e.g. `")[1]
        assert cited.split("`")[0] == hits[0]["id"]

        with pytest.raises(MCPError):
            await session.get_prompt("explain_code", {})


async def test_explain_code_without_an_index_says_what_to_do(sample_repo: Path) -> None:
    async with in_process(settings_for(sample_repo)) as (session, _):
        got = await session.get_prompt("explain_code", {"question": "what is this?"})
        content = got.messages[0].content
        assert isinstance(content, TextContent)
        assert "E_INDEX_UNAVAILABLE" in content.text and "rag_health" in content.text
