"""Page evidence: whole pages of prose in a keyword index of their own, and their share of a
question added to the order of their sections (rag_mcp.search.pages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rag_mcp.config import load_settings
from rag_mcp.deps import build_deps
from rag_mcp.embed.catalog import DEFAULT
from rag_mcp.index.lexical import tokenize
from rag_mcp.search.fusion import calibration_for
from rag_mcp.search.pages import page_shares

HASH_MODEL = "test-hash-64"

PAGES = {
    "guide/cache.md": """
        # Response cache

        The response cache keeps responses keyed by URL, so a repeated request is answered
        from the cache.

        ## Setup

        Call enable() with a size in megabytes.

        ## Expiry

        Entries of the response cache expire after ttl seconds.
        """,
    "guide/logging.md": """
        # Logging

        ## Setup

        Set up the response logger: every response and its setup time is written to the log.
        """,
    "notes.txt": "Release notes.\n\nNothing about caching here.\n",
    "src/cache.py": '''
        def enable(size):
            """Turn the response cache on."""
            return size
        ''',
}


@pytest.fixture
def indexed(make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    root = make_repo(PAGES)
    run_index(load_settings({"root": str(root)}))
    return root


def test_each_page_of_prose_is_one_document_and_follows_changes(indexed: Path) -> None:
    from indexers.pipeline import run_index

    deps = build_deps(load_settings({"root": str(indexed)}))
    try:
        idx = deps.repo().handle.get()
        assert idx.pages is not None and idx.pages.num_docs() == 3  # two pages, one text file
        shares = page_shares(idx, tokenize("response cache"))
        assert set(shares) == {"guide/cache.md", "guide/logging.md"}  # src/cache.py is code
        assert shares["guide/cache.md"] > shares["guide/logging.md"] > 0
    finally:
        deps.close()
    (indexed / "guide/logging.md").unlink()
    (indexed / "notes.txt").write_text("Release notes.\n\nThe cache grew a ttl.\n")
    run_index(load_settings({"root": str(indexed)}))
    deps = build_deps(load_settings({"root": str(indexed)}))
    try:
        idx = deps.repo().handle.get()
        assert idx.pages is not None and idx.pages.num_docs() == 2
        assert set(page_shares(idx, tokenize("ttl"))) == {"guide/cache.md", "notes.txt"}
        assert page_shares(idx, tokenize("logger")) == {}
    finally:
        deps.close()


def test_a_section_is_ordered_by_its_page_share_too(indexed: Path) -> None:
    from rag_mcp.search.retrieve import Filters, lexical_coverage

    deps = build_deps(load_settings({"root": str(indexed), "rank": "false"}))
    try:
        r = deps.repo().retriever
        idx = deps.repo().handle.get()
        cal = r.calibration(idx)
        assert cal.page > 0
        plain = replace(cal, page=0.0)
        # the second question has a word the pages lack: its page evidence is scaled down
        for q in ("response cache setup", "response cache setup zwischenspeicher"):
            r.calibration = lambda idx: plain  # type: ignore[method-assign]
            before = {h.span.id: h for h in r.retrieve(q, Filters()).hits}
            r.calibration = lambda idx: replace(plain, page=cal.page)  # type: ignore[method-assign]
            after = r.retrieve(q, Filters()).hits
            shares = page_shares(idx, tokenize(q))
            coverage = lexical_coverage(idx.lexical, tokenize(q))
            assert (coverage == 1.0) == (q == "response cache setup")
            assert before.keys() == {h.span.id for h in after}
            best = max(shares.get(h.span.path, 0.0) for h in after if h.span.kind != "code")
            for h in after:
                was = before[h.span.id]
                assert (h.score, h.cos, h.lex) == (was.score, was.cos, was.lex)  # order only
                if h.span.kind == "code":  # code is never passed by a page's gain
                    assert h.raw == was.raw
                    continue
                share = shares.get(h.span.path, 0.0)
                assert h.raw == pytest.approx(was.raw + cal.page * coverage * (share - best))
            assert [h.raw for h in after] == sorted((h.raw for h in after), reverse=True)
            # the cache page's "Setup" keeps its score, the logging page's falls behind, though
            # its own text shares more words with the question
            setup = {h.span.path: h for h in after
                     if h.span.heading and "Setup" in h.span.heading}
            gain = {p: h.raw - before[h.span.id].raw for p, h in setup.items()}
            assert gain["guide/cache.md"] == pytest.approx(0.0)
            assert gain["guide/logging.md"] < -1e-6
    finally:
        deps.close()


def test_every_model_weights_page_evidence() -> None:
    for model in (DEFAULT, "all-MiniLM-L6-v2", "multilingual-e5-small", "unknown-model"):
        assert calibration_for(model).page > 0, model


def test_an_index_without_pages_is_rebuilt_with_a_reason() -> None:
    from indexers import manifest

    s = load_settings({})
    good = {"chunker_version": manifest.chunking.CHUNKER_VERSION,
            "embed_text_version": manifest.EMBED_TEXT_VERSION,
            "pages_version": manifest.PAGES_VERSION, "model_identity": "id",
            "model": s.embed_model, "backend": s.embed_backend,
            "embed_max_tokens": s.embed_max_tokens}
    old = {k: v for k, v in good.items() if k != "pages_version"}
    assert "pages of prose" in manifest.incompatible(old, s, "id", "chroma")
    assert "pages of prose" not in manifest.incompatible(good, s, "id", "chroma")
