"""Wiki and docs chunkers: Markdown, DokuWiki, reStructuredText and plain text.

Each format has a small line scanner (``indexers.doc_formats``) that turns the file into *atoms*:
runs of lines that must stay together (a heading, a code block, a table, front matter) or single
plain lines. Every non-blank line lies in exactly one atom and every atom starts and ends on a
non-blank line, so one packer (here) cuts any format into sections at headings and into pieces at
blank lines, and the span invariants (coverage, no overlap, sorted) hold by construction. Pure
Python, one pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from indexers.doc_anchors import ANCHORS
from indexers.doc_formats import Doc, scan_dokuwiki, scan_rst, scan_text
from indexers.doc_markdown import scan_markdown
from rag_mcp.index.spans import Chunk, split_lines

#: bump when chunk boundaries, headings or meta change, so indexes rebuild cleanly
DOCS_CHUNKER_VERSION = "4"

FORMATS = ("markdown", "dokuwiki", "rst", "text")

_PREVIEW_CHARS = 120

_MARKDOWN_EXT = (".md", ".markdown", ".mdx")
_RST_EXT = (".rst", ".rest")
_WIKI_EXT = (".txt", ".dokuwiki", ".wiki")
_PROSE_NAMES = frozenset(
    "readme license licence copying copyright changes changelog history news authors "
    "contributors credits thanks notice install todo maintainers patents".split()
)
_DW_HEADING_RE = re.compile(r"^ ?={2,}[ \t]*[^=\s].*={2,}[ \t]*$", re.MULTILINE)


def detect_doc_format(path: str, head: str, *, wiki_page: bool = False) -> str | None:
    """The docs format of a file from its path and first few KB, or None if it is not prose.

    ``wiki_page``: the file is a page of a DokuWiki page tree (``indexers.wiki``)."""
    norm = path.replace("\\", "/")
    name = norm.rsplit("/", 1)[-1].lower()
    if wiki_page and name.endswith(".txt"):
        return "dokuwiki"
    if name.endswith(_MARKDOWN_EXT):
        return "markdown"
    if name.endswith(_RST_EXT):
        return "rst"
    if name.endswith(".dokuwiki"):
        return "dokuwiki"
    if name.endswith(".txt") and _page_id(norm):
        return "dokuwiki"
    if name.endswith(_WIKI_EXT) and _DW_HEADING_RE.search(head):
        return "dokuwiki"
    if name.endswith(".txt") or ("." not in name and name in _PROSE_NAMES):
        return "text"
    return None


def chunk_doc(text: str, fmt: str, *, budget_chars: int = 1500, path: str = "",
              page_id: str = "") -> list[Chunk]:
    """Cut a docs file into heading sections, then into pieces of about ``budget_chars``.

    Rules:
    - A section runs from a heading to the next heading of any level; ``heading`` is its path
      ("Install > Linux > Debian"), ``preview`` its title. Text before the first heading is a
      section without a heading (``heading`` None, ``preview`` its first line).
    - A section longer than the budget is cut at blank lines; a paragraph longer than the budget
      is cut between lines; an atom (code block, table, front matter) is never cut, even when it
      alone exceeds the budget. Every piece keeps the section's heading path; pieces after the
      first carry it in ``context`` because their text no longer shows the heading. The heading
      line always stays with the first piece of its section.
    - A section with no content of its own (a heading directly followed by another heading, or
      front matter alone) merges into the next section when both fit in the budget, so the
      chunk takes the heading path of the first section that has content ("Install > Linux"
      followed by "Debian" gives "Install > Linux > Debian"). Sections with content never
      merge: a chunk's heading path always names the section its content belongs to.
    - Markdown front matter (``---`` ... ``---`` at the top) goes into ``meta`` as flat string
      pairs; its lines belong to the first chunk. A DokuWiki page gets its page ID in
      ``meta["page_id"]`` (``page_id``, or from a path under ``data/pages/``). Every chunk of a
      file carries that ``meta``; a chunk of a section adds the section's ``anchor`` as the
      site publishing the page computes it (``indexers.doc_anchors``).
    - Plain text has no headings: paragraphs are packed up to the budget, kind "text".
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown docs format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if budget_chars < 1:
        raise ValueError(f"budget_chars must be positive, got {budget_chars}")
    lines = split_lines(text)
    if fmt == "markdown":
        doc = scan_markdown(lines)
    elif fmt == "dokuwiki":
        doc = scan_dokuwiki(lines)
        page_id = page_id or _page_id(path.replace("\\", "/"))
        if page_id:
            doc.meta.append(("page_id", page_id))
    elif fmt == "rst":
        doc = scan_rst(lines)
    else:
        doc = scan_text(lines)
    return _assemble(lines, doc, budget_chars, "text" if fmt == "text" else "doc", fmt)


def _page_id(norm_path: str) -> str:
    """``.../data/pages/wiki/syntax.txt`` -> ``wiki:syntax``; "" outside a DokuWiki page tree."""
    at = ("/" + norm_path).rfind("/data/pages/")
    if at < 0 or not norm_path.endswith(".txt"):
        return ""
    return norm_path[at + len("data/pages/") : -len(".txt")].replace("/", ":")


# --- the shared packer


@dataclass(slots=True)
class _Piece:
    first: int  # atom indexes, inclusive
    last: int
    path: tuple[str, ...]  # heading path shown for the piece
    bare: bool  # the section has no content besides headings and front matter
    continued: bool  # a later piece of a split section
    anchor: str  # the section's anchor ("" before the first heading)


def _assemble(lines: list[str], doc: Doc, budget: int, kind: str, fmt: str) -> list[Chunk]:
    starts, ends = doc.starts, doc.ends
    if not starts:
        return []
    pre = [0]
    for line in lines:
        pre.append(pre[-1] + len(line) + 1)

    def size(a: int, b: int) -> int:
        return pre[ends[b] + 1] - pre[starts[a]]

    heads = sorted(doc.heads)
    anchor_of = ANCHORS.get(fmt)
    seen: list[str] = []
    anchors = {h: anchor_of(doc.heads[h][1], seen) for h in heads} if anchor_of else {}
    bounds = heads if heads and heads[0] == 0 else [0, *heads]
    pieces: list[_Piece] = []
    stack: list[tuple[int, str]] = []
    for s, first in enumerate(bounds):
        last = bounds[s + 1] - 1 if s + 1 < len(bounds) else len(starts) - 1
        head = doc.heads.get(first)
        if head is not None:
            while stack and stack[-1][0] >= head[0]:
                stack.pop()
            stack.append(head)
        path = tuple(title for _, title in stack) if head is not None else ()
        bare = all(k in doc.bare for k in range(first, last + 1))
        cuts = _cut_section(doc, first, last, head is not None, budget, size)
        for n, (a, b) in enumerate(cuts):
            pieces.append(_Piece(a, b, path, bare, n > 0, anchors.get(first, "")))

    merged: list[_Piece] = []  # built back to front so chains of bare headings fold in one pass
    for piece in reversed(pieces):
        # a bare section is one piece, and the piece after it starts the next section
        if piece.bare and merged and size(piece.first, merged[-1].last) <= budget:
            merged[-1].first = piece.first
            continue
        merged.append(piece)
    merged.reverse()

    meta = tuple(doc.meta)
    chunks = []
    for p in merged:
        label = " > ".join(p.path) or None
        if p.path:
            preview = p.path[-1]
        else:
            k = next((k for k in range(p.first, p.last + 1) if k not in doc.bare), p.first)
            preview = lines[starts[k]].strip()
        chunks.append(Chunk(
            start_line=starts[p.first] + 1,
            end_line=ends[p.last] + 1,
            kind=kind,
            heading=label,
            preview=preview[:_PREVIEW_CHARS],
            context=(label or "") if p.continued else "",
            meta=(*meta, ("anchor", p.anchor)) if p.anchor else meta,
        ))
    return chunks


def _cut_section(
    doc: Doc, first: int, last: int, has_head: bool, budget: int, size: Callable[[int, int], int]
) -> list[tuple[int, int]]:
    """Atom ranges of one section's pieces: paragraphs packed greedily up to the budget."""
    body = first + 1 if has_head else first
    if body > last or size(first, last) <= budget:
        return [(first, last)]
    # units: whole paragraphs, or the single atoms of a paragraph larger than the budget
    units: list[tuple[int, int, bool]] = []  # (first atom, last atom, must start a new piece)
    para = body
    for k in range(body + 1, last + 2):
        if k == last + 1 or doc.starts[k] > doc.ends[k - 1] + 1:  # a blank line before k
            if size(para, k - 1) <= budget:
                units.append((para, k - 1, False))
            else:
                units.extend((j, j, j == para) for j in range(para, k))
            para = k
    cuts: list[tuple[int, int]] = []
    a, b, _ = units[0]
    for ua, ub, fresh in units[1:]:
        if not fresh and size(a, ub) <= budget:
            b = ub
        else:
            cuts.append((a, b))
            a, b = ua, ub
    cuts.append((a, b))
    cuts[0] = (first, cuts[0][1])
    return cuts

