"""DokuWiki trees indexed as DokuWiki: found by their shape, state folders never indexed, page
IDs and section anchors in hits, rag_get_span and fetch, and the web URLs built from them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from indexers.doc_anchors import dokuwiki_section_id, markdown_slug, rst_id
from indexers.pipeline import run_index
from indexers.walk import walk
from indexers.wiki import WikiTrees
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import ConfigError
from rag_mcp.index.spans import Span
from rag_mcp.search.links import where
from rag_mcp.search.records import QueryParams
from rag_mcp.serve.server import build_server
from tests.mcp_helpers import answer, connect, hash_deps, in_process, text

HASH = "test-hash-64"

SYNTAX = """\
====== Formatting Syntax ======

DokuWiki supports some simple markup language, which tries to make the datafiles as readable
as possible.

===== Tables =====

DokuWiki supports a simple syntax to create tables.

^ Heading 1      ^ Heading 2       ^
| Row 1 Col 1    | Row 1 Col 2     |

Table rows have to start and end with a ''|'' for normal rows or a ''^'' for headers.

===== Über uns & Größe =====

Die Größe der Tabelle wächst mit dem Inhalt.
"""
# A page with no heading at all: before, a .txt without a heading was filed as plain text.
PLAIN_PAGE = "Welcome to the **playground**. Try [[wiki:syntax|the syntax]] here.\n"


def make_data_dir(base: Path) -> Path:
    """A DokuWiki data folder as DokuWiki leaves it: pages, media, and its own state."""
    data = base / "data"
    files = {
        "pages/wiki/syntax.txt": SYNTAX,
        "pages/playground/playground.txt": PLAIN_PAGE,
        "media/wiki/logo.svg": "<svg xmlns='http://www.w3.org/2000/svg'/>\n",
        "attic/wiki/syntax.1700000000.txt": "====== Old revision ======\nold text\n",
        "meta/wiki/syntax.meta": "a:2:{s:7:\"current\";a:0:{}}\n",
        "meta/wiki/syntax.changes": "1700000000\t127.0.0.1\tC\twiki:syntax\tadmin\tcreated\n",
        "index/w3.idx": "tables\nsyntax\n",
        "cache/a/abc.xhtml": "<h1>Formatting Syntax</h1>\n",
        "locks/wiki_syntax.lock": "admin\n",
        "tmp/scratch.txt": "scratch\n",
        "deleted.files": "# files removed by upgrades\nlib/old.php\n",
    }
    for rel, body in files.items():
        p = data / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    return data


def listed(root: Path) -> tuple[set[str], dict[str, int]]:
    r = walk(root)
    return {c.rel for c in r.files}, dict(r.skipped)


def test_a_data_folder_indexes_pages_and_media_never_dokuwikis_state(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path)
    files, skipped = listed(data)
    assert files == {"pages/wiki/syntax.txt", "pages/playground/playground.txt",
                     "media/wiki/logo.svg"}
    # attic, meta, index, cache, locks, tmp and deleted.files: one skip each, pruned whole
    assert skipped == {"wiki_state": 7}
    wiki = WikiTrees(data)
    assert wiki.page_id("pages/wiki/syntax.txt") == "wiki:syntax"
    assert wiki.media_id("media/wiki/logo.svg") == "wiki:logo.svg"


def test_a_whole_install_keeps_its_data_rules_and_hides_the_user_file(tmp_path: Path) -> None:
    make_data_dir(tmp_path / "dokuwiki")
    conf = tmp_path / "dokuwiki" / "conf"
    conf.mkdir()
    (conf / "users.auth.php").write_text("admin:$2y$10$abcdefghijklmnopqrstuv:Admin:a@b.c:admin\n")
    (tmp_path / "dokuwiki" / "doku.php").write_text("<?php\n// DokuWiki's entry point\n")
    files, skipped = listed(tmp_path / "dokuwiki")
    assert "data/pages/wiki/syntax.txt" in files and "doku.php" in files
    assert not any(f.startswith(("data/meta", "data/cache", "data/attic")) for f in files)
    assert "conf/users.auth.php" not in files and skipped["secret"] == 1  # password hashes
    assert WikiTrees(tmp_path / "dokuwiki").page_id("data/pages/wiki/syntax.txt") == "wiki:syntax"


def test_a_pages_folder_is_a_page_tree_by_its_parent_or_by_its_content(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "srv")
    wiki = WikiTrees(data / "pages")  # the root is pages/ itself: its parent says it
    assert wiki.root_kind == "pages"
    assert wiki.page_id("playground/playground.txt") == "playground:playground"
    # the same pages copied out on their own (no /data/pages/ anywhere in the path)
    copy = tmp_path / "export"
    for page in (data / "pages").rglob("*.txt"):
        target = copy / page.relative_to(data / "pages")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.read_text())
    wiki = WikiTrees(copy)
    assert wiki.root_kind == "pages" and wiki.page_id("wiki/syntax.txt") == "wiki:syntax"
    # a repository with a notes.txt is no wiki
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "notes.txt").write_text("**bold** words and [[a link]]\n")
    (tmp_path / "repo" / "main.py").write_text("print('hi')\n")
    assert WikiTrees(tmp_path / "repo").page_id("notes.txt") == ""


# Titles and the section IDs DokuWiki 2022-07-31a (Debian's package) gives them, in this order
# on one page (so the repeated title is numbered): run through its inc/pageutils.php sectionID.
DOKUWIKI_IDS = [
    ("Formatting Syntax", "formatting_syntax"), ("Tables", "tables"), ("Tables", "tables1"),
    ("RSS/ATOM Feed Aggregation", "rss_atom_feed_aggregation"), ("1. Einführung", "einfuehrung"),
    ("Über uns & Größe", "ueber_uns_groesse"), ("2024", "section2024"),
    ("C++ / C# notes", "c_c_notes"), ("weird: a.b.c", "weirdabc"), ("  --x--  ", "x"),
    ("Wer? Wie? Was?", "wer_wie_was"), ("naïve café ½", "naive_cafe"),
    ("€ Preise – “Zitat”", "preise_zitat"), ("Per-host overrides", "per-host_overrides"),
]


def test_dokuwiki_section_ids_match_dokuwiki() -> None:
    seen: list[str] = []
    assert [dokuwiki_section_id(t, seen) for t, _ in DOKUWIKI_IDS] == [a for _, a in DOKUWIKI_IDS]


def test_markdown_and_rst_anchors_follow_mkdocs_and_docutils() -> None:
    seen: list[str] = []
    got = [markdown_slug(t, seen) for t in ("Install on `Linux`", "Install on Linux",
                                            "[Links](x.md) & more", "Café crème", "???")]
    assert got == ["install-on-linux", "install-on-linux_1", "links-more", "cafe-creme", "_1"]
    assert rst_id("2. Getting Started: the API", []) == "getting-started-the-api"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, **kw})


def _span(path: str, **meta: str) -> Span:
    return Span(path=path, start_line=1, end_line=2, digest="0" * 12, kind="doc",
                language="dokuwiki", meta=tuple(meta.items()))


def test_urls_from_the_links_settings(tmp_path: Path) -> None:
    s = settings_for(tmp_path, wiki_url="https://wiki.example.org/doku.php")
    w = where(s, _span("pages/wiki/syntax.txt", page_id="wiki:syntax", anchor="tables"))
    assert (w.page_id, w.anchor, w.url) == (
        "wiki:syntax", "tables", "https://wiki.example.org/doku.php?id=wiki:syntax#tables")
    rewritten = settings_for(tmp_path, wiki_url="https://wiki.example.org/")
    assert where(rewritten, _span("x.txt", page_id="a b:c")).url == (
        "https://wiki.example.org/a%20b:c")
    media = where(s, _span("media/manual.pdf", media_id="ops:manual.pdf", page="3"))
    assert media.url == "https://wiki.example.org/lib/exe/fetch.php?media=ops:manual.pdf#page=3"
    assert media.page == 3
    docs = settings_for(tmp_path, docs_url="https://example.org/docs/")
    assert where(docs, _span("docs/guide/install.md", anchor="linux")).url == (
        "https://example.org/docs/guide/install/#linux")
    assert where(docs, _span("docs/index.md")).url == "https://example.org/docs/"
    assert where(docs, _span("src/app.py")).url is None
    sphinx = settings_for(tmp_path, docs_url="https://example.org", docs_style="html",
                          docs_dir="doc")
    assert where(sphinx, _span("doc/usage/api.rst", anchor="api")).url == (
        "https://example.org/usage/api.html#api")
    assert where(settings_for(tmp_path), _span("a.txt", page_id="a")).url is None
    with pytest.raises(ConfigError, match="RAG_WIKI_URL"):
        load_settings(environ={"RAG_WIKI_URL": "wiki.example.org"}, cwd=tmp_path)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_wiki_hits_carry_page_id_anchor_and_url_end_to_end(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path)
    # join_gap -1: every span apart (a joined range is labelled by its best part)
    s = settings_for(data, wiki_url="https://wiki.example.org/doku.php", join_gap=-1)
    stats = run_index(s)
    assert stats.skipped["wiki_state"] == 7
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "Tables syntax rows headers",
                                                  "k": 5, "kind": "doc"})
        hits = answer(r)["hits"]  # the lean hits, with path and lines read from their IDs
        hit = next(h for h in hits if h.get("anchor") == "tables")
        assert hit["page_id"] == "wiki:syntax" and hit["language"] == "dokuwiki"
        url = "https://wiki.example.org/doku.php?id=wiki:syntax#tables"
        assert hit["url"] == url and url in text(r)
        assert all(h["path"].startswith(("pages/", "media/")) for h in hits)
        # the page without a heading is a wiki page too, with its page ID
        r = await session.call_tool("rag_query", {"query": "playground", "kind": "doc"})
        assert r.structured_content is not None
        assert any(h["page_id"] == "playground:playground" and h["language"] == "dokuwiki"
                   for h in r.structured_content["hits"])
        got = await session.call_tool("rag_get_span", {"span_id": hit["id"]})
        assert got.structured_content is not None and got.structured_content["url"] == url
        assert "page wiki:syntax#tables" in text(got)
    # ChatGPT's fetch gives the wiki URL instead of a file:// one
    server = build_server(s, lambda: hash_deps(s), connector_tools=True)
    async with connect(server) as session:
        found = json.loads(text(await session.call_tool("search", {"query": "Größe Tabelle"})))
        umlaut = next(x for x in found["results"] if "ueber_uns_groesse" in x["url"])
        doc = json.loads(text(await session.call_tool("fetch", {"id": umlaut["id"]})))
        assert doc["url"] == "https://wiki.example.org/doku.php?id=wiki:syntax#ueber_uns_groesse"
        assert doc["metadata"]["page_id"] == "wiki:syntax"


def test_docs_chunker_anchor_lands_in_the_catalog(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "install.md").write_text(textwrap.dedent("""\
        # Install

        ## On Linux

        Run the installer with sudo.
        """))
    s = settings_for(root, docs_url="https://example.org/")
    run_index(s)
    deps = hash_deps(s)
    try:
        ans = deps.queries.query(QueryParams(query="installer sudo Linux", k=3))
    finally:
        deps.close()
    hit = next(h for h in ans.hits if h.anchor == "on-linux")
    assert hit.url == "https://example.org/install/#on-linux"


def test_a_web_app_with_pages_tmp_and_log_is_no_wiki(tmp_path: Path) -> None:
    app = tmp_path / "app"
    for rel in ("pages/index.tsx", "tmp/cache.txt", "log/dev.log", "lib/util.ts"):
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text("x\n")
    files, skipped = listed(app)
    assert "lib/util.ts" in files and "wiki_state" not in skipped
