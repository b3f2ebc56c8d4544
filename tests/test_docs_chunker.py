"""Docs chunkers: golden spans on realistic fixtures, budget rules, and span invariants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexers.docs import DOCS_CHUNKER_VERSION, FORMATS, chunk_doc, detect_doc_format
from rag_mcp.index.spans import Chunk, split_lines

FIXTURES = Path(__file__).parent / "fixtures" / "docs"
DW_REL = "data/pages/devops/backup.txt"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def assert_invariants(text: str, chunks: list[Chunk]) -> None:
    """Sorted, disjoint chunks on non-blank ends; every non-blank line in exactly one chunk."""
    lines = split_lines(text)
    nonblank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    covered: list[int] = []
    prev_end = 0
    for c in chunks:
        assert prev_end < c.start_line <= c.end_line <= len(lines), (c, prev_end)
        assert c.start_line in nonblank and c.end_line in nonblank, c
        covered.extend(n for n in range(c.start_line, c.end_line + 1) if n in nonblank)
        prev_end = c.end_line
    assert covered == sorted(nonblank)


def assert_kept_whole(chunks: list[Chunk], start: int, end: int) -> None:
    assert any(c.start_line <= start and end <= c.end_line for c in chunks), (start, end)


def outline(chunks: list[Chunk]) -> list[tuple[int, int, str | None]]:
    return [(c.start_line, c.end_line, c.heading) for c in chunks]


def chunk_size(text: str, c: Chunk) -> int:
    return sum(len(line) + 1 for line in split_lines(text)[c.start_line - 1 : c.end_line])


# --- golden fixtures ------------------------------------------------------------------------------


def test_markdown_golden_outline_and_front_matter():
    text = read("guide.md")
    chunks = chunk_doc(text, "markdown")
    assert_invariants(text, chunks)
    assert outline(chunks) == [
        (1, 13, None),  # front matter + intro paragraph, before the first heading
        (15, 18, "Installation"),  # setext h1
        (20, 34, "Installation > Linux > Debian"),  # bare setext "Linux" merged into Debian
        (36, 43, "Installation > Linux > Fedora"),
        (45, 67, "Installation > macOS"),
        (69, 80, "Configuration"),
        (82, 95, "Configuration > Writing a config file"),
        (97, 105, "Configuration > Troubleshooting"),  # {#troubleshooting} dropped
    ]
    assert [c.preview for c in chunks[:3]] == [
        "Ferret keeps two directories in sync over SSH. This guide covers installation,",
        "Installation",
        "Debian",
    ]
    meta = dict(chunks[0].meta)
    assert meta == {
        "title": "Deploying Ferret",
        "tags": "ops, deploy",
        "authors": "Ada Lovelace, Grace Hopper",
        "summary": "How to install, configure and run the Ferret sync daemon.",
    }
    # every chunk carries the front matter; a section's chunks add its anchor (MkDocs' slug)
    assert all(c.meta[:4] == chunks[0].meta for c in chunks)
    assert [dict(c.meta).get("anchor") for c in chunks][1:4] == ["installation", "debian",
                                                                 "fedora"]
    assert dict(chunks[-1].meta)["anchor"] == "troubleshooting"
    assert {(c.kind, c.symbol, c.context) for c in chunks} == {("doc", None, "")}


def test_markdown_small_budget_never_splits_fences_tables_or_comments():
    text = read("guide.md")
    chunks = chunk_doc(text, "markdown", budget_chars=60)
    assert_invariants(text, chunks)
    # fences with blank lines inside: ```, ~~~, indented in a list, nested 5 deep, ```` around ```
    for start, end in [(27, 34), (38, 43), (50, 55), (62, 67), (84, 91), (74, 78), (93, 95)]:
        assert_kept_whole(chunks, start, end)
    # '#' lines inside fences and comments, '#hashtag' and indented '#' are not headings
    headings = {c.heading for c in chunks}
    assert headings == {
        None,
        "Installation",
        "Installation > Linux",
        "Installation > Linux > Debian",
        "Installation > Linux > Fedora",
        "Installation > macOS",
        "Configuration",
        "Configuration > Writing a config file",
        "Configuration > Troubleshooting",
    }
    # the front matter is one atom: it stays whole even over the budget
    assert chunks[0].start_line == 1 and chunks[0].end_line >= 10


def test_dokuwiki_golden_levels_blocks_and_page_id():
    text = read(DW_REL)
    chunks = chunk_doc(text, "dokuwiki", path=f"wiki/{DW_REL}")
    assert_invariants(text, chunks)
    assert outline(chunks) == [
        (1, 4, "Backup procedure"),
        (6, 13, "Backup procedure > Schedule"),
        (15, 28, "Backup procedure > Configuration > Restic repository"),
        (30, 37, "Backup procedure > Configuration > Exclusions"),
        (39, 44, "Backup procedure > Configuration > Exclusions > Per-host overrides"),
        (46, 49, "Backup procedure > Configuration > Exclusions > Per-host overrides > "
                 "Legacy hosts"),  # '==' is level 5
        (51, 68, "Backup procedure > Restore"),
    ]
    assert all(c.meta[0] == ("page_id", "devops:backup") for c in chunks)
    # DokuWiki's section IDs (sectionID), checked against DokuWiki's own PHP
    assert [dict(c.meta)["anchor"] for c in chunks] == [
        "backup_procedure", "schedule", "restic_repository", "exclusions", "per-host_overrides",
        "legacy_hosts", "restore"]


def test_dokuwiki_small_budget_never_splits_code_file_nowiki_or_tables():
    text = read(DW_REL)
    chunks = chunk_doc(text, "dokuwiki", budget_chars=40)
    assert_invariants(text, chunks)
    # table, <code>, <file>, <nowiki>, %%...%%, preformatted lines
    for start, end in [(10, 13), (21, 28), (32, 37), (56, 59), (63, 65), (67, 68)]:
        assert_kept_whole(chunks, start, end)
    titles = {(c.heading or "").rsplit(" > ", 1)[-1] for c in chunks}
    assert not any(word in t for t in titles for word in ("heading", "shown", "so is"))
    assert "page_id" not in dict(chunks[0].meta)  # no data/pages tree in the path


def test_rst_golden_levels_follow_style_order():
    text = read("manual.rst")
    chunks = chunk_doc(text, "rst")
    assert_invariants(text, chunks)
    root = "Ferret CLI > Command-line reference"
    assert outline(chunks) == [
        (1, 9, root),  # overlined '=' is level 1, overlined '-' level 2: not the same style
        (11, 19, f"{root} > Installation"),
        (21, 34, f"{root} > Installation > Quick start"),
        (36, 48, f"{root} > Subcommands > sync"),
        (50, 56, f"{root} > Subcommands > watch"),
        (58, 71, f"{root} > Configuration > Settings"),  # '~' first seen fifth: level 5
    ]


def test_rst_small_budget_never_splits_code_or_literal_blocks():
    text = read("manual.rst")
    chunks = chunk_doc(text, "rst", budget_chars=40)
    assert_invariants(text, chunks)
    # literal block after '::', code-block, code, simple table
    for start, end in [(14, 19), (24, 30), (44, 48), (64, 69)]:
        assert_kept_whole(chunks, start, end)
    assert not any("=" in (c.heading or "") for c in chunks)  # '# ====' in code is no title


def test_rst_directive_after_a_literal_marker_is_not_a_quoted_literal_block():
    # found by hypothesis: "Example::" then, past blank lines, a code-block at the same indent.
    # Its ".." line looked like a quoted literal block ("." at the start of each line) and went
    # to the piece above, its body to the next one.
    text = "\nExample::\n\n \n\n.. code-block:: python\n\n   :\n"
    chunks = chunk_doc(text, "rst", budget_chars=1)
    assert_invariants(text, chunks)
    assert_kept_whole(chunks, 6, 8)
    quoted = "Example::\n\n> quoted\n> lines\n\nAfter.\n"  # a real quoted literal block
    assert_kept_whole(chunk_doc(quoted, "rst", budget_chars=1), 3, 4)


def test_plain_text_packs_paragraphs():
    text = read("notes.txt")
    assert outline(chunk_doc(text, "text")) == [(1, 14, None)]
    chunks = chunk_doc(text, "text", budget_chars=150)
    assert_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 4), (6, 7), (9, 12), (14, 14)]
    assert [c.preview for c in chunks] == [
        "Ferret release notes",
        "Fixed a crash when the remote directory disappeared during a sync. Syncs now",
        "2.4.0 (2024-02-10)",
        "Dropped support for Python 3.8.",
    ]
    assert {(c.kind, c.heading) for c in chunks} == {("text", None)}


# --- budget, merging and edge rules ------------------------------------------------------------


def test_oversized_section_splits_at_paragraphs_and_keeps_heading_path():
    para = "word " * 30  # 150 characters
    text = "# Top\n\n## Big\n\n" + "\n\n".join(f"{para}{i}" for i in range(6)) + "\n"
    chunks = chunk_doc(text, "markdown", budget_chars=400)
    assert_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 7), (9, 11), (13, 15)]
    assert {c.heading for c in chunks} == {"Top > Big"}
    assert [c.context for c in chunks] == ["", "Top > Big", "Top > Big"]
    assert all(chunk_size(text, c) <= 400 for c in chunks[1:])


def test_oversized_paragraph_splits_at_lines_but_code_block_stays_whole():
    long_para = "\n".join(f"line {i} " + "x" * 40 for i in range(10))
    fence = "```\n" + "\n".join(f"code {i} " + "y" * 40 for i in range(10)) + "\n```"
    text = f"# T\n\n{long_para}\n\n{fence}\n"
    chunks = chunk_doc(text, "markdown", budget_chars=150)
    assert_invariants(text, chunks)
    assert_kept_whole(chunks, 14, 25)
    fence_chunk = next(c for c in chunks if c.start_line <= 14 <= c.end_line)
    assert (fence_chunk.start_line, fence_chunk.end_line) == (14, 25)  # alone, over budget
    para_chunks = [c for c in chunks if c.end_line <= 12]
    assert len(para_chunks) > 1 and all(chunk_size(text, c) <= 150 for c in para_chunks[1:])
    assert para_chunks[0].start_line == 1  # the heading stays with the first piece


def test_paragraph_before_an_oversized_one_is_cut_at_the_blank_line():
    text = "intro line\n\n" + "\n".join(f"row {i} " + "z" * 30 for i in range(8)) + "\n"
    chunks = chunk_doc(text, "text", budget_chars=100)
    assert_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (3, 4), (5, 6), (7, 8), (9, 10)]


def test_fence_nested_in_a_list_item_ends_with_the_item():
    # an unclosed fence indented under a list item ends where the item ends, not at the end
    text = "- item\n\n    ```\n    # code\n\n    more\n# Next\n\ntext\n"
    assert outline(chunk_doc(text, "markdown")) == [(1, 6, None), (7, 9, "Next")]
    # at the top level an unclosed fence runs to the end of the file (CommonMark)
    text = "```\n# code\n\n# Next\n"
    assert outline(chunk_doc(text, "markdown", budget_chars=1)) == [(1, 4, None)]


def test_indented_code_block_is_kept_whole_across_blank_lines():
    code = "\n\n".join(f"    step_{i} = run({i})\n    check(step_{i})" for i in range(4))
    text = f"# Build\n\nRun these:\n\n{code}\n\nDone.\n"
    chunks = chunk_doc(text, "markdown", budget_chars=40)
    assert_invariants(text, chunks)
    # the block (lines 5-15, blank lines inside) is one piece, alone and over the budget
    assert outline(chunks) == [(1, 3, "Build"), (5, 15, "Build"), (17, 17, "Build")]


def test_indented_code_needs_a_blank_line_and_four_columns_past_a_list_item():
    text = (
        "para\n    continues the paragraph\n\n"  # 1-2: no code block inside a paragraph
        "- item\n\n    more of the item\n\n    and more\n\n"  # 4-8: the item's paragraphs
        "  - nested\n\n        code in the nested item\n\n        still code\n\n"  # 10-14: code
        "out of the list\n\n\ta tab is 4 columns: code\n\n\tstill code\n"  # 16-20
    )
    chunks = chunk_doc(text, "markdown", budget_chars=1)
    assert_invariants(text, chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [
        (1, 1), (2, 2), (4, 4), (6, 6), (8, 8), (10, 10), (12, 14), (16, 16), (18, 20)
    ]


def test_bare_heading_merges_only_when_it_fits():
    text = "# Install\n\n## Linux\n\nUse apt.\n\n## Mac\n\nUse brew.\n"
    assert outline(chunk_doc(text, "markdown")) == [
        (1, 5, "Install > Linux"),
        (7, 9, "Install > Mac"),  # sections with content never merge
    ]
    assert outline(chunk_doc(text, "markdown", budget_chars=20)) == [
        (1, 1, "Install"),
        (3, 5, "Install > Linux"),
        (7, 9, "Install > Mac"),
    ]


def test_front_matter_alone_merges_into_first_section():
    text = "---\ntitle: Hi\n---\n\n# Hello\n\nBody.\n"
    chunks = chunk_doc(text, "markdown")
    assert outline(chunks) == [(1, 7, "Hello")]
    assert chunks[0].meta == (("title", "Hi"), ("anchor", "hello"))


def test_unclosed_front_matter_and_thematic_breaks_are_content():
    text = "---\nJust a rule, then prose.\n\nTitle\n---\n\ntext\n"
    chunks = chunk_doc(text, "markdown")
    assert outline(chunks) == [(1, 2, None), (4, 7, "Title")]
    assert chunks[0].meta == ()


def test_setext_needs_a_paragraph_and_table_needs_matching_delimiter():
    text = "- item\n---\n\na | b\n--|--\n1 | 2\n\nx | y\n---\n"
    chunks = chunk_doc(text, "markdown", budget_chars=1)
    # '- item' + '---' is a list and a rule; 'x | y' + '---' is an h2 (no '|' in the delimiter)
    assert outline(chunks) == [(1, 1, None), (2, 2, None), (4, 6, None), (8, 9, "x | y")]


def test_markdown_setext_multiline_title_and_crlf():
    text = "Part one\r\nof the title\r\n====\r\n\r\nbody\r\n"
    chunks = chunk_doc(text, "markdown")
    assert outline(chunks) == [(1, 5, "Part one of the title")]


def test_unclosed_dokuwiki_tags_are_literal():
    # DokuWiki opens a block only if its closing tag follows somewhere later in the page
    text = "==== A ====\nuse <code> tags and 100%% sure\n\n==== B ====\ntext\n"
    assert outline(chunk_doc(text, "dokuwiki", budget_chars=10)) == [
        (1, 2, "A"),
        (4, 5, "B"),
    ]


def test_dokuwiki_inline_code_opener_mid_line_protects_until_close():
    text = (
        "==== A ====\n  * put this in ''lang.php'': <code php>\n== not ==\n\n</code>\n"
        "==== B ====\n"
    )
    chunks = chunk_doc(text, "dokuwiki", budget_chars=10)
    assert outline(chunks) == [(1, 5, "A"), (6, 6, "B")]


def test_dokuwiki_tags_in_preformatted_text_are_shown_not_parsed():
    text = "==== A ====\n  <code> shown as typed\n==== B ====\n<code>\nx\n</code>\n"
    assert outline(chunk_doc(text, "dokuwiki")) == [(1, 2, "A"), (3, 6, "B")]


def test_rst_underline_must_be_long_enough_and_after_a_blank_line():
    text = "Title\n===\n\nparagraph\nNot a title\n===========\n\nOk\n--\n\ntext\n"
    chunks = chunk_doc(text, "rst")
    assert outline(chunks) == [(1, 6, None), (8, 11, "Ok")]


def test_rst_wide_characters_count_double():
    text = "日本語\n======\n\ntext\n"  # 3 wide characters take 6 columns
    assert outline(chunk_doc(text, "rst")) == [(1, 4, "日本語")]
    assert outline(chunk_doc("日本語\n=====\n\ntext\n", "rst")) == [(1, 4, None)]


def test_empty_and_blank_documents():
    for fmt in FORMATS:
        assert chunk_doc("", fmt) == []
        assert chunk_doc("\n  \r\n\t\n", fmt) == []


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown docs format"):
        chunk_doc("x", "asciidoc")
    with pytest.raises(ValueError, match="budget_chars"):
        chunk_doc("x", "text", budget_chars=0)


def test_version_is_a_plain_string():
    assert DOCS_CHUNKER_VERSION and isinstance(DOCS_CHUNKER_VERSION, str)


@pytest.mark.parametrize(
    ("path", "head", "expected"),
    [
        ("docs/guide.md", "", "markdown"),
        ("Docs/Guide.MARKDOWN", "", "markdown"),
        ("site/page.mdx", "", "markdown"),
        ("docs/index.rst", "", "rst"),
        ("docs/old.rest", "", "rst"),
        ("wiki/data/pages/wiki/syntax.txt", "no headings at all", "dokuwiki"),
        ("data\\pages\\start.txt", "", "dokuwiki"),
        ("notes/page.txt", "intro\n\n====== Title ======\n", "dokuwiki"),
        ("notes/page.wiki", "== Section ==\ntext", "dokuwiki"),
        ("export/page.dokuwiki", "", "dokuwiki"),
        ("notes/page.wiki", "no headings", None),
        ("notes/todo.txt", "a == b\n", "text"),
        ("README", "", "text"),
        ("pkg/LICENSE", "", "text"),
        ("CHANGES", "", "text"),
        ("AUTHORS", "", "text"),
        ("src/main.py", "", None),
        ("Makefile", "", None),
        ("data/pages/logo.png", "", None),
    ],
)
def test_detect_doc_format(path, head, expected):
    assert detect_doc_format(path, head) == expected


def test_page_id_from_nested_data_pages_tree():
    chunks = chunk_doc("text\n", "dokuwiki", path="srv/wiki/data/pages/ns/sub/page.txt")
    assert chunks[0].meta == (("page_id", "ns:sub:page"),)


def test_one_megabyte_markdown_is_cut_into_bounded_spans():
    # Its speed is measured by bench/speed/indexing.py (chunking alone), not asserted here.
    section = read("guide.md").split("---\n", 2)[2]
    text = section * (1_000_000 // len(section) + 1)
    chunks = chunk_doc(text, "markdown")
    assert len(text) >= 1_000_000 and len(chunks) > 1000
    assert all(a.end_line < b.start_line for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[-1].end_line >= len(text.splitlines()) - 1  # nothing lost at the end


# --- properties on generated documents ------------------------------------------------------------

# Free text never opens a block by accident (a stray ``` or %% would legitimately swallow the
# block generated after it): runs of the block characters are collapsed to one.
WORD = st.text(st.sampled_from("abcxyzé日🙂#=-*|^`~<>%:.[]() \t"), min_size=1, max_size=12).map(
    lambda w: re.sub(r"([`~%:])\1+", r"\1", w)
)
TEXT_LINE = st.lists(WORD, min_size=1, max_size=4).map(" ".join)
ANY_LINE = st.one_of(TEXT_LINE, st.sampled_from(["", " ", "\t", "\r", "\x0c", "  \u3000"]))
EOL = st.sampled_from(["\n", "\r\n"])


@st.composite
def md_blocks(draw) -> tuple[list[str], tuple[int, int] | None]:
    """One Markdown block: its lines and, for a code block or table, the range to keep whole."""
    kind = draw(st.sampled_from(
        ["atx", "setext", "para", "fence", "indented", "table", "blank", "junk"]))
    if kind == "atx":
        return [draw(st.sampled_from(["#", "##", "###", "######"])) + " " + draw(TEXT_LINE)], None
    if kind == "setext":
        return [draw(WORD).strip("-=#|>*0123456789 \t") + "title", draw(
            st.sampled_from(["===", "---", "=", "-----"]))], None
    if kind == "fence":
        mark = draw(st.sampled_from(["```", "````", "~~~", "~~~~~"]))
        indent = " " * draw(st.integers(0, 6))
        body = draw(st.lists(ANY_LINE, max_size=6))
        body = [b for b in body if b.strip().strip(mark[0]) or mark[0] not in b]
        return [indent + mark + "py", *(indent + b for b in body), indent + mark], (0, -1)
    if kind == "indented":
        # the heading closes any list a previous block opened; the code is its first content
        body = draw(st.lists(ANY_LINE, max_size=6))
        return ["# code", "", "    " + draw(TEXT_LINE), *("    " + b for b in body)], (0, -1)
    if kind == "table":
        cols = draw(st.integers(1, 4))
        rows = [
            "| " + " | ".join(draw(WORD).replace("|", "/") for _ in range(cols)) + " |"
            for _ in range(draw(st.integers(1, 4)))
        ]
        return ["|" + " h |" * cols, "|" + "---|" * cols, *rows], (0, -1)
    if kind == "blank":
        return [""] * draw(st.integers(1, 3)), None
    if kind == "junk":
        return draw(st.lists(ANY_LINE, min_size=1, max_size=3)), None
    return draw(st.lists(TEXT_LINE, min_size=1, max_size=4)), None


@st.composite
def documents(draw, blocks) -> tuple[str, list[tuple[int, int]]]:
    """A document built from blocks separated by blank lines, with its keep-whole line ranges."""
    lines: list[str] = []
    keep = []
    for block, span in draw(st.lists(blocks, max_size=10)):
        lines.append("")
        if span is not None:
            keep.append((len(lines) + 1, len(lines) + len(block)))
        lines.extend(block)
    eols = draw(st.lists(EOL, min_size=len(lines), max_size=len(lines)))
    text = "".join(line + eol for line, eol in zip(lines, eols, strict=True))
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    return text, keep


@st.composite
def dw_blocks(draw) -> tuple[list[str], tuple[int, int] | None]:
    kind = draw(st.sampled_from(["head", "code", "nowiki", "table", "para", "blank", "junk"]))
    if kind == "head":
        marks = "=" * draw(st.integers(2, 7))
        return [f"{marks} {draw(WORD).strip('= ') or 'x'} {marks}"], None
    if kind in ("code", "nowiki"):
        tag = draw(st.sampled_from(["<code>", "<code python>", "<file - x.txt>", "<nowiki>", "%%"]))
        close = "%%" if tag == "%%" else "</" + tag[1:].split(">")[0].split()[0] + ">"
        body = [
            b for b in draw(st.lists(ANY_LINE, max_size=5)) if close not in b and "%%" not in b
        ]
        return [tag, *body, close], (0, -1)
    if kind == "table":
        return [f"^ {draw(WORD)} ^", *(f"| {draw(WORD)} |" for _ in range(2))], (0, -1)
    if kind == "blank":
        return [""], None
    if kind == "junk":
        return draw(st.lists(ANY_LINE, min_size=1, max_size=3)), None
    return draw(st.lists(TEXT_LINE, min_size=1, max_size=3)), None


@st.composite
def rst_blocks(draw) -> tuple[list[str], tuple[int, int] | None]:
    kind = draw(st.sampled_from(["title", "overline", "code", "literal", "para", "junk"]))
    char = draw(st.sampled_from("=-~^*#+"))
    title = draw(WORD).strip() or "t"
    if kind == "title":
        return [title, char * (len(title) * 2 + draw(st.integers(0, 3)))], None
    if kind == "overline":
        bar = char * (len(title) * 2 + 2)
        return [bar, title, bar], None
    body = [draw(TEXT_LINE), *draw(st.lists(ANY_LINE, max_size=4))]
    body = ["   " + b if b.strip() else b for b in body]
    if kind == "code":
        return [".. code-block:: python", "", *body], (0, -1)
    if kind == "literal":
        return ["Example::", "", *body], (0, -1)
    if kind == "junk":
        return draw(st.lists(ANY_LINE, min_size=1, max_size=3)), None
    return draw(st.lists(TEXT_LINE, min_size=1, max_size=3)), None


def trim_keep(text: str, keep: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Keep-whole ranges shrunk to their non-blank ends (a block may end in blank lines)."""
    lines = split_lines(text)
    out = []
    for start, end in keep:
        end = min(end, len(lines))  # the generator may have cut the trailing blank lines
        while end > start and not lines[end - 1].strip():
            end -= 1
        out.append((start, end))
    return out


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(documents(md_blocks()), st.integers(1, 400))
def test_markdown_invariants_and_blocks_kept_whole(doc, budget):
    text, keep = doc
    chunks = chunk_doc(text, "markdown", budget_chars=budget)
    assert_invariants(text, chunks)
    for start, end in trim_keep(text, keep):
        assert_kept_whole(chunks, start, end)


@PROPERTY
@given(documents(dw_blocks()), st.integers(1, 400))
def test_dokuwiki_invariants_and_blocks_kept_whole(doc, budget):
    text, keep = doc
    chunks = chunk_doc(text, "dokuwiki", budget_chars=budget)
    assert_invariants(text, chunks)
    for start, end in trim_keep(text, keep):
        assert_kept_whole(chunks, start, end)


@PROPERTY
@given(documents(rst_blocks()), st.integers(1, 400))
def test_rst_invariants_and_blocks_kept_whole(doc, budget):
    text, keep = doc
    chunks = chunk_doc(text, "rst", budget_chars=budget)
    assert_invariants(text, chunks)
    for start, end in trim_keep(text, keep):
        assert_kept_whole(chunks, start, end)


@PROPERTY
@given(
    st.text(st.sampled_from("ab é日\t\r\n#=-~`|^<>%:.*"), max_size=400),
    st.sampled_from(FORMATS),
    st.integers(1, 300),
)
def test_invariants_on_arbitrary_text(text, fmt, budget):
    assert_invariants(text, chunk_doc(text, fmt, budget_chars=budget))


@PROPERTY
@given(documents(md_blocks()), st.integers(20, 400))
def test_pieces_stay_within_budget_unless_one_unit(doc, budget):
    text, _ = doc
    for c in chunk_doc(text, "text", budget_chars=budget):
        # plain text atoms are single lines: only a single line can exceed the budget
        assert chunk_size(text, c) <= budget or c.start_line == c.end_line
