"""Secrets: realistic fake credentials planted everywhere; none may leave through any channel.

Channels: ``rag_get_span`` (with and without context), ``rag_query`` text and previews and
labels, ``search`` and ``fetch``, the local LLM's prompt (as the loopback Ollama received it),
the ``explain_code`` prompt, the resources, the JSONL tool log and the server's log records.
The credential files the walker must skip are never indexed nor readable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index.spans import digest
from rag_mcp.search.redact import MARKER_PREFIX, redact_label
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.mcp_helpers import hash_deps, place
from tests.ollama_fake import FakeOllama

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOllama]:
    with FakeOllama() as f:
        yield f


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory, fake: FakeOllama
            ) -> tuple[hc.SecretRepo, Settings]:
    base = tmp_path_factory.mktemp("secrets")
    repo = hc.build_secret_repo(base / "repo")
    s = load_settings({"root": str(repo.root), "embed_model": hc.HASH,
                       "log_dir": str(base / "logs"), "local_llm": "1", "llm_host": fake.url})
    run_index(s)
    return repo, s


def test_the_plant_covers_60_kinds_in_every_kind_of_file(planted: tuple[hc.SecretRepo, Settings]
                                                         ) -> None:
    repo, s = planted
    kinds = {k for _, k, _ in repo.planted}
    assert len(kinds) >= 60
    suffixes = {Path(p).suffix for p, _, _ in repo.planted}
    assert {".py", ".js", ".yaml", ".toml", ".ini", ".json", ".md", ".sh"} <= suffixes
    assert len(repo.skipped) >= 40
    indexed = {i.rsplit(":", 2)[0] for i in hio.catalog_ids(s)}
    assert {p for p, _, _ in repo.planted} <= indexed  # every planted file is searchable
    assert not indexed & {p for p, _ in repo.skipped}  # no credential file is


async def test_span_reads_leak_nothing(planted: tuple[hc.SecretRepo, Settings]) -> None:
    """Every span through the tool functions and renderings; a sample through MCP sessions."""
    repo, s = planted
    leaked: list[str] = []
    ids = hio.catalog_ids(s)
    deps = hash_deps(s)
    try:
        for sid in ids:
            for tool, args in (("rag_get_span", {"span_id": sid}),
                               ("rag_get_span", {"span_id": sid, "context_lines": 5}),
                               ("fetch", {"id": sid})):
                code, out = hio.direct(deps, tool, **args)
                assert code == "ok", (sid, out)
                leaked += [f"{tool} {sid}: {n}" for n in hc.leaks(out, repo)]
    finally:
        deps.close()
    redactions = 0
    async with hio.session(s) as (client, _):
        for sid in ids[:: max(1, len(ids) // 40)]:
            r = await client.call_tool("rag_get_span", {"span_id": sid, "context_lines": 2})
            assert hio.answer_code(r) == "ok" and r.structured_content is not None
            leaked += [f"mcp {sid}: {n}" for n in hc.leaks(hio.everything(r), repo)]
            redactions += r.structured_content["redactions"]
    assert leaked == []
    assert redactions >= 30


async def test_a_token_in_a_file_name_is_masked_and_the_masked_id_reads_back(
        planted: tuple[hc.SecretRepo, Settings]) -> None:
    """The file stays indexed and searchable; its ID, path, title and URL show the name masked,
    and the masked ID works in rag_get_span, fetch and local_llm_rag_query."""
    repo, s = planted
    named = [p for p, _, sec in repo.planted if sec in p]
    assert len(named) == 3
    async with hio.session(s) as (client, _):
        for path in named:
            shown = redact_label(path)
            assert shown and MARKER_PREFIX in shown
            r = await client.call_tool("rag_query", {"query": "deploy notes rotated quarterly",
                                                     "path": path, "tau": 0.0})
            assert hio.answer_code(r) == "ok" and r.structured_content is not None
            hits = r.structured_content["hits"]
            # the lean hit names its file in its ID only: the path part is the masked one
            assert hits and all(place(h)[0] == shown for h in hits), hits
            assert not hc.leaks(hio.everything(r), repo)
            for tool, args in (("rag_get_span", {"span_id": hits[0]["id"], "context_lines": 3}),
                               ("fetch", {"id": hits[0]["id"]}),
                               ("search", {"query": "deploy notes rotated quarterly"}),
                               ("local_llm_rag_query", {"question": "what is rotated?",
                                                        "span_ids": [hits[0]["id"]]})):
                got = await client.call_tool(tool, args)
                assert hio.answer_code(got) == "ok", (tool, hio.text(got))
                assert not hc.leaks(hio.everything(got), repo), tool
            got = await client.call_tool("rag_get_span", {"span_id": hits[0]["id"]})
            assert got.structured_content is not None
            assert got.structured_content["id"] == hits[0]["id"]
            assert not got.structured_content["stale"]
            assert "Rotated quarterly" in got.structured_content["text"]


async def test_queries_leak_nothing(planted: tuple[hc.SecretRepo, Settings]) -> None:
    """Every planted file's spans with their text, previews and labels (path-filtered queries
    through the tool function), then queries by kind through MCP sessions."""
    repo, s = planted
    leaked: list[str] = []
    deps = hash_deps(s)
    try:
        for path in sorted({p for p, _, _ in repo.planted}):
            # The path's own words, so the file is among the candidates the filter keeps.
            words = path.replace("/", " ").replace("_", " ").replace(".", " ")
            code, out = hio.direct(deps, "rag_query", query=f"{words} token key password",
                                  path=path, include_text=True, tau=0.0, k=20)
            shown = redact_label(path)  # a token in the file name is masked
            assert code == "ok" and f'"path":"{shown}"' in out, (path, out[:300])
            leaked += [f"include_text {path}: {n}" for n in hc.leaks(out, repo)]
    finally:
        deps.close()
    async with hio.session(s) as (client, _):
        for kind in sorted({k for _, k, _ in repo.planted}) + ["rotate before release", "slack",
                                                                "config token", "vault keys"]:
            q = kind.replace("_", " ")
            for tool, args in (("rag_query", {"query": q, "k": 20, "tau": 0.0}),
                               ("search", {"query": q})):
                r = await client.call_tool(tool, args)
                assert hio.answer_code(r) == "ok"
                leaked += [f"{tool} {q!r}: {n}" for n in hc.leaks(hio.everything(r), repo)]
    assert leaked == []


async def test_the_local_model_never_sees_a_secret(planted: tuple[hc.SecretRepo, Settings],
                                                   fake: FakeOllama) -> None:
    repo, s = planted
    ids = hio.catalog_ids(s)
    async with hio.session(s) as (client, _):
        for i in range(0, len(ids), 20):
            r = await client.call_tool("local_llm_rag_query", {
                "question": "which credentials does this code use?", "span_ids": ids[i:i + 20]})
            assert hio.answer_code(r) == "ok", hio.text(r)
            assert not hc.leaks(hio.everything(r), repo)
        for q in ("github token", "aws keys", "database password", "private key", "slack"):
            r = await client.call_tool("local_llm_rag_query", {"question": q, "k": 10})
            assert hio.answer_code(r) == "ok"
        # The client pastes a secret into its question: it is not forwarded either.
        secret = next(sec for _, k, sec in repo.planted if k == "github_pat")
        r = await client.call_tool("local_llm_rag_query", {"question": f"who uses {secret}?"})
        assert hio.answer_code(r) == "ok"
    assert len(fake.prompts()) > 2 * len(ids) // 20
    assert hc.leaks(fake.raw_bodies(), repo) == []


async def test_the_explain_code_prompt_leaks_nothing(planted: tuple[hc.SecretRepo, Settings]
                                                     ) -> None:
    repo, s = planted
    async with hio.session(s) as (client, _):
        for q in ("Rotate before release. Old tokens are revoked.",  # docs/deploy.md
                  "Keys go to the vault. Ask ops.", "Loads settings; the default token is",
                  "The bot token above was revoked", "github token", "aws access key"):
            p = await client.get_prompt("explain_code", {"question": q})
            shown = orjson.dumps(p.model_dump(mode="json")).decode()
            assert hc.leaks(shown, repo) == [], q


async def test_resources_leak_nothing(planted: tuple[hc.SecretRepo, Settings]) -> None:
    repo, s = planted
    async with hio.session(s) as (client, _):
        for uri in ("rag://stats", "rag://health", "rag://search-tips"):
            res = await client.read_resource(uri)  # type: ignore[arg-type]
            assert hc.leaks(orjson.dumps(res.model_dump(mode="json")).decode(), repo) == []


async def test_skipped_credential_files_cannot_be_read(planted: tuple[hc.SecretRepo, Settings]
                                                       ) -> None:
    repo, s = planted
    async with hio.session(s) as (client, _):
        for rel, _secret in repo.skipped:
            first = (repo.root / rel).read_text().split("\n", 1)[0]
            sid = f"{rel}:1-1:{digest(first)}"
            for tool, args in (("rag_get_span", {"span_id": sid}), ("fetch", {"id": sid})):
                r = await client.call_tool(tool, args)
                assert hio.answer_code(r) == "E_NOT_FOUND", (rel, hio.text(r))
            q = await client.call_tool("rag_query", {"query": "token", "path": rel, "tau": 0.0})
            assert q.structured_content is not None and q.structured_content["hits"] == [], rel


async def test_logs_hold_no_secret(planted: tuple[hc.SecretRepo, Settings],
                                   caplog: pytest.LogCaptureFixture) -> None:
    """The server logs no repository text; a client's pasted token is masked in the log too.

    The log folder is shared by this module's tests, so it holds every call made above as well.
    """
    repo, s = planted
    caplog.set_level(logging.DEBUG)
    ids = hio.catalog_ids(s)
    pasted = format_tokens(repo)
    async with hio.session(s) as (client, _):
        for sid in ids[:: max(1, len(ids) // 60)]:
            await client.call_tool("rag_get_span", {"span_id": sid, "context_lines": 2})
            await client.call_tool("rag_query", {"query": "token", "path": sid.split(":")[0],
                                                 "include_text": True})
        for secret in pasted:
            for tool, args in (("rag_query", {"query": f"where is {secret} used"}),
                               ("rag_query", {"query": "token", "path": f"src/{secret}"}),
                               ("rag_get_span", {"span_id": f"{secret}:1-1:0123456789ab"}),
                               ("search", {"query": secret}),
                               ("fetch", {"id": f"{secret}:1-1:0123456789ab"}),
                               ("rag_query", {"query": secret, "k": 99})):  # invalid k
                await client.call_tool(tool, args)
    logged = b"".join(p.read_bytes() for p in s.log_path.glob("*.jsonl*"))
    assert logged.count(b"\n") >= 6 * len(pasted)
    assert hc.leaks(logged, repo) == []
    records = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert hc.leaks(records, repo) == []


def format_tokens(repo: hc.SecretRepo) -> list[str]:
    """One planted secret per kind recognisable by its format alone (no key name around it)."""
    corpus = hc.load_corpus()
    fmt = {c.secret for c in corpus.CASES if c.context.startswith("client = ServiceClient(")}
    return list({k: sec for _, k, sec in repo.planted if sec in fmt}.values())


async def test_pasted_secrets_are_not_logged_with_hashed_queries(
        planted: tuple[hc.SecretRepo, Settings], tmp_path: Path) -> None:
    """A password has no format: pasted bare into a query, only ``log.queries = "hash"`` (or
    "off") keeps it out of the log (docs/SECURITY.md)."""
    repo, s = planted
    s2 = load_settings({"root": s.root, "embed_model": hc.HASH, "log_dir": str(tmp_path / "l"),
                        "log_queries": "hash"})
    everyone = [sec for _, _, sec in repo.planted if "\n" not in sec]
    async with hio.session(s2) as (client, _):
        for secret in everyone[::7]:
            await client.call_tool("rag_query", {"query": f"who uses {secret}"})
            await client.call_tool("search", {"query": secret})
    logged = b"".join(p.read_bytes() for p in s2.log_path.glob("*.jsonl*"))
    assert b"query_sha256" in logged and hc.leaks(logged, repo) == []


def test_rag_index_spans_and_status_leak_nothing(planted: tuple[hc.SecretRepo, Settings],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``rag-index --spans`` prints IDs, labels and previews; ``--status`` names stale files."""
    from indexers.cli import main as rag_index

    repo, s = planted
    base = ["--root", s.root, "--model", hc.HASH]
    for extra in (["--spans"], ["--spans", "--json"], ["--status", "--json"], ["--status"]):
        assert rag_index(base + extra) == 0
        out = capsys.readouterr().out
        assert out and hc.leaks(out, repo) == [], extra
    named = next(p for p, _, sec in repo.planted if sec in p)
    assert rag_index(base + ["--spans", named]) == 0
    out = capsys.readouterr().out
    assert MARKER_PREFIX in out and hc.leaks(out, repo) == []
