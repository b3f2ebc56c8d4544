"""Line scanners of the docs chunker: DokuWiki, reStructuredText and plain text (Markdown:
``indexers.doc_markdown``).

Each scanner turns a file's lines into a ``Doc``: *atoms*, runs of lines that must stay together
(a heading, a code block, a table, front matter) or single plain lines. Every non-blank line lies
in exactly one atom and every atom starts and ends on a non-blank line; ``indexers.docs`` packs
the atoms into chunks the same way for every format.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field


@dataclass(slots=True)
class Doc:
    """A scanned document: atoms as parallel line-index lists (0-based, inclusive)."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: atom index -> (level, title) for heading atoms
    heads: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: atoms that are not content of their own: headings and front matter
    bare: set[int] = field(default_factory=set)
    meta: list[tuple[str, str]] = field(default_factory=list)

    def add(
        self, start: int, end: int, head: tuple[int, str] | None = None, bare: bool = False
    ) -> None:
        if head is not None:
            self.heads[len(self.starts)] = head
        if head is not None or bare:
            self.bare.add(len(self.starts))
        self.starts.append(start)
        self.ends.append(end)

    def drop_from(self, line: int) -> None:
        """Forget the trailing plain atoms from ``line`` on (they became a heading or a table)."""
        while self.starts and self.starts[-1] >= line:
            self.starts.pop()
            self.ends.pop()


# --- line helpers


def blank(line: str) -> bool:
    return not line.strip()


def indent(line: str) -> int:
    """Leading columns, a tab advancing to the next multiple of 4 (CommonMark's rule)."""
    col = 0
    for ch in line:
        if ch == " ":
            col += 1
        elif ch == "\t":
            col += 4 - col % 4
        else:
            break
    return col


def last_nonblank(lines: list[str], lo: int, hi: int) -> int:
    """The last non-blank line in ``lo..hi`` (``lo`` itself must be non-blank)."""
    while hi > lo and blank(lines[hi]):
        hi -= 1
    return hi


# --- DokuWiki

_DW_HEAD = re.compile(r" ?(={2,})(.*?)={2,}[ \t]*$")
# blocks whose content is never parsed; like DokuWiki's lexer, an opener counts only if its
# closer follows somewhere later in the page
_DW_OPEN = re.compile(r"<(code|file|nowiki|html|HTML|php|PHP)(?:[ \t][^>]*)?>|%%")
_DW_CLOSERS = ("</code>", "</file>", "</nowiki>", "</html>", "</HTML>", "</php>", "</PHP>", "%%")
_DW_PRE = re.compile(r"(?:  |\t)(?![ \t]*[*-])")  # preformatted: indented, but not a list item


def scan_dokuwiki(lines: list[str]) -> Doc:
    inside = _dw_protected(lines)
    doc = Doc()
    n, i = len(lines), 0
    while i < n:
        line = lines[i]
        if blank(line):
            i += 1
            continue
        j = i
        while j + 1 < n and (inside[j] or _dw_glued(line, lines[j], lines[j + 1])):
            j += 1
        m = _DW_HEAD.match(line) if j == i else None
        title = m.group(2).strip() if m else ""
        if m and title.strip("="):
            doc.add(i, i, head=(max(1, 7 - min(len(m.group(1)), 6)), title))
        else:
            doc.add(i, j)
        i = j + 1
    return doc


def _dw_glued(first: str, line: str, nxt: str) -> bool:
    """Whether ``nxt`` continues the table or preformatted block that ``line`` is part of."""
    if first[:1] in ("^", "|"):
        return nxt[:1] in ("^", "|")
    return bool(_DW_PRE.match(first) and _DW_PRE.match(nxt) and not blank(nxt))


def _dw_protected(lines: list[str]) -> list[bool]:
    """Per line: whether the line ends inside a ``<code>``/``<file>``/``<nowiki>``/``%%`` block."""
    last: dict[str, tuple[int, int]] = {}
    for i in range(len(lines) - 1, -1, -1):
        for tag in _DW_CLOSERS:
            if tag not in last and tag in lines[i]:
                last[tag] = (i, lines[i].rfind(tag))
        if len(last) == len(_DW_CLOSERS):
            break
    out = []
    closer: str | None = None
    for i, line in enumerate(lines):
        pos = 0
        # preformatted text (indented two spaces) is shown as typed: its tags open nothing
        while closer is not None or not _DW_PRE.match(line):
            if closer is not None:
                k = line.find(closer, pos)
                if k < 0:
                    break
                pos, closer = k + len(closer), None
            else:
                m = _DW_OPEN.search(line, pos)
                if m is None:
                    break
                want = "%%" if m.group(1) is None else f"</{m.group(1)}>"
                pos = m.end()
                if last.get(want, (-1, -1)) >= (i, pos):
                    closer = want
        out.append(closer is not None)
    return out


# --- reStructuredText

_RST_ADORN = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_RST_NOT_TITLE = re.compile(r"(?:[-*+\u2022\u2023\u2043]|\d+[.)]|#\.|\.\.|:[^:]+:|>>>)(?:\s|$)")
_RST_DIRECTIVE = re.compile(r"[ \t]*\.\.[ \t]+([\w:+.-]+?)::(?:\s|$)")
# directives whose body is code or a table: kept whole like a literal block
_RST_CODE = frozenset(
    "code code-block sourcecode parsed-literal literalinclude highlight math raw doctest testcode "
    "testoutput testsetup ipython jupyter-execute prompt csv-table list-table table".split()
)
_RST_TABLE_BORDER = re.compile(r"[ \t]*(?:\+[-=+]*\+|=+(?:[ \t]+=+)+)[ \t]*$")


def scan_rst(lines: list[str]) -> Doc:
    doc = Doc()
    styles: dict[tuple[str, bool], int] = {}  # heading level by (character, overlined)
    n, i, fresh = len(lines), 0, True  # fresh: a title may start here (after a blank line)

    def heading(start: int, end: int, char: str, over: bool, title: str) -> None:
        level = styles.setdefault((char, over), len(styles) + 1)
        doc.add(start, end, head=(level, title))

    while i < n:
        line = lines[i]
        if blank(line):
            i, fresh = i + 1, True
            continue
        adorn = _rst_adornment(line)
        if fresh and i + 2 < n and adorn and lines[i + 2].rstrip() == adorn:
            title = lines[i + 1].strip()
            if title and _width(title) <= len(adorn):
                heading(i, i + 2, adorn[0], True, title)
                i += 3
                continue
        if fresh and i + 1 < n and not adorn and line[0] not in " \t":
            under = _rst_adornment(lines[i + 1])
            title = line.strip()
            if under and _width(title) <= len(under) and not _RST_NOT_TITLE.match(title):
                heading(i, i + 1, under[0], False, title)
                i += 2
                continue
        end = i
        m = _RST_DIRECTIVE.match(line)
        if m is not None:
            if m.group(1).lower() in _RST_CODE:
                end = _rst_block_end(lines, i, quoted=False)
        elif line.rstrip().endswith("::"):
            end = _rst_block_end(lines, i, quoted=True)
        elif _RST_TABLE_BORDER.match(line):
            while end + 1 < n and not blank(lines[end + 1]):
                end += 1
        doc.add(i, end)
        i, fresh = end + 1, False
    return doc


def _rst_adornment(line: str) -> str | None:
    """The line if it is a run of one punctuation character (a title adornment), else None."""
    s = line.rstrip()
    if len(s) < 2 or s[0] not in _RST_ADORN or s.strip(s[0]) or s in ("::", ".."):
        return None
    return s


def _rst_block_end(lines: list[str], i: int, *, quoted: bool) -> int:
    """Last line of the literal block or directive body introduced by line ``i`` (else ``i``)."""
    base = indent(lines[i])
    j = i + 1
    while j < len(lines) and blank(lines[j]):
        j += 1
    if j == len(lines):
        return i
    if indent(lines[j]) > base:
        end = j
        for k in range(j + 1, len(lines)):
            if not blank(lines[k]):
                if indent(lines[k]) <= base:
                    break
                end = k
        return end
    mark = lines[j].lstrip()[:1]
    # a quoted literal block: "> ..." lines; a directive (".. code-block::") is not one of them,
    # or its first line would go to the block above and its body to the next piece
    if quoted and j > i + 1 and mark in _RST_ADORN and not _RST_DIRECTIVE.match(lines[j]):
        end = j
        while end + 1 < len(lines) and lines[end + 1].lstrip()[:1] == mark:
            end += 1
        return end
    return i


def _width(text: str) -> int:
    """Columns ``text`` takes in a monospace font, the way docutils measures title underlines."""
    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


# --- plain text


def scan_text(lines: list[str]) -> Doc:
    """Every non-blank line is an atom of its own: the packer groups them into paragraphs."""
    doc = Doc()
    for i, line in enumerate(lines):
        if not blank(line):
            doc.add(i, i)
    return doc
