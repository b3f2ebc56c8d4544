"""Line scanners of the docs chunker: Markdown, DokuWiki, reStructuredText and plain text.

Each scanner turns a file's lines into a ``Doc``: *atoms*, runs of lines that must stay together
(a heading, a code block, a table, front matter) or single plain lines. Every non-blank line lies
in exactly one atom and every atom starts and ends on a non-blank line; ``indexers.docs`` packs
the atoms into chunks the same way for every format.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_META_KEYS = 50
_META_VALUE_CHARS = 500


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


def _blank(line: str) -> bool:
    return not line.strip()


def _indent(line: str) -> int:
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


def _last_nonblank(lines: list[str], lo: int, hi: int) -> int:
    """The last non-blank line in ``lo..hi`` (``lo`` itself must be non-blank)."""
    while hi > lo and _blank(lines[hi]):
        hi -= 1
    return hi


# --- Markdown

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+$")
_HEADING_ATTRS = re.compile(r"[ \t]*\{[#.][^{}]*\}$")  # "## Install {#install}" (Pandoc, MkDocs)
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")
_HR = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_CONTAINER = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)| {0,3}>")
_LIST_MARKER = re.compile(r"(?:[-+*]|\d{1,9}[.)])(?=[ \t]|$)")
_DELIM_CELL = re.compile(r"[ \t]*:?-+:?[ \t]*$")
_FM_KEY = re.compile(r"([\w][\w .-]*?)[ \t]*:(?:[ \t]+(.*))?$")


def scan_markdown(lines: list[str]) -> Doc:
    doc = Doc()
    n, i = len(lines), 0
    fm_end = _front_matter_end(lines)
    if fm_end is not None:
        doc.meta = _front_matter(lines[1:fm_end])
        doc.add(0, fm_end, bare=True)
        i = fm_end + 1
    para: int | None = None  # first line of the current run of plain paragraph lines
    items: list[int] = []  # content columns of the open list items, innermost last
    while i < n:
        line = lines[i]
        if _blank(line):
            para, i = None, i + 1
            continue
        ind = _indent(line)
        body = line.lstrip(" \t")
        if para is None:
            _close_items(items, ind)
        # indented code cannot interrupt a paragraph; in a list item it is indented 4 columns
        # past the item's content, so the item's own indented paragraphs are not code
        code_col = (items[-1] if items else 0) + 4 if para is None else None
        end = _md_block_end(lines, i, ind, body, code_col)
        if end is not None:
            _close_items(items, ind)
            doc.add(i, end)
            para, i = None, end + 1
            continue
        head = _atx_title(line) if ind <= 3 and body[:1] == "#" else None
        if head is not None:
            _close_items(items, ind)
            doc.add(i, i, head=head)
            para, i = None, i + 1
            continue
        if para is not None and _SETEXT.match(line) and not _CONTAINER.match(lines[para]):
            title = " ".join(part.strip() for part in lines[para:i])
            doc.drop_from(para)
            doc.add(para, i, head=(1 if body[0] == "=" else 2, title))
            para, i = None, i + 1
            continue
        if para is not None and "|" in lines[i - 1] and _is_delim_row(line, lines[i - 1]):
            end = i
            while end + 1 < n and not _md_breaks_table(lines[end + 1]):
                end += 1
            doc.drop_from(i - 1)
            doc.add(i - 1, end)
            para, i = None, end + 1
            continue
        item = _item_column(line, ind, body)
        if item is not None or _HR.match(line):  # a lazy continuation line closes no item
            _close_items(items, ind)
            if item is not None and ind - (items[-1] if items else 0) <= 3:
                items.append(item)
        doc.add(i, i)
        para = None if _HR.match(line) else (i if para is None else para)
        i += 1
    return doc


def _close_items(items: list[int], ind: int) -> None:
    while items and ind < items[-1]:
        items.pop()


def _item_column(line: str, ind: int, body: str) -> int | None:
    """The content column of the list item that ``line`` opens (CommonMark), else None."""
    m = _LIST_MARKER.match(body)
    if m is None or _HR.match(line):
        return None
    col = ind + m.end()
    rest = body[m.end() :]
    gap = _indent(" " * col + rest) - col
    # an empty item, or one whose first line is indented code, has its content 1 column in
    return col + 1 if not rest.strip() or gap > 4 else col + gap


def _md_block_end(
    lines: list[str], i: int, ind: int, body: str, code_col: int | None
) -> int | None:
    """Last line of the code block or HTML comment opened on line ``i``, else None.

    ``code_col`` is the indent that opens an indented code block here (None: none can start).
    """
    if code_col is not None and ind >= code_col:
        # an indented code block runs across blank lines until a line indented less
        end = i
        for j in range(i + 1, len(lines)):
            if not _blank(lines[j]):
                if _indent(lines[j]) < code_col:
                    break
                end = j
        return end
    if body.startswith(("```", "~~~")):
        mark = body[0]
        width = len(body) - len(body.lstrip(mark))
        if mark == "`" and "`" in body[width:]:
            return None  # a backtick fence's info string holds no backtick: inline code
        for j in range(i + 1, len(lines)):
            s = lines[j].strip()
            if s and s.lstrip(mark) == "" and len(s) >= width:
                return j
            # a fence nested in a list item (indent >= 4) ends with its item: at a line that
            # is indented less than a list item's content
            if ind >= 4 and s and _indent(lines[j]) <= 3:
                return _last_nonblank(lines, i, j - 1)
        return _last_nonblank(lines, i, len(lines) - 1)  # unclosed: runs to the end
    if ind <= 3 and body.startswith("<!--"):
        if "-->" in body[4:]:
            return None
        for j in range(i + 1, len(lines)):
            if "-->" in lines[j]:
                return j
        return _last_nonblank(lines, i, len(lines) - 1)
    return None


def _atx_title(line: str) -> tuple[int, str] | None:
    m = _ATX.match(line)
    if m is None:
        return None
    title = _HEADING_ATTRS.sub("", _ATX_CLOSE.sub("", (m.group(2) or "").strip())).strip()
    return (len(m.group(1)), title) if title else None


def _cells(line: str) -> list[str]:
    s = line.strip().replace("\\|", "")
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return s.split("|")


def _is_delim_row(line: str, header: str) -> bool:
    """A GFM table delimiter row (``| --- | :-: |``) matching the header's cell count."""
    if "|" not in line or "-" not in line:
        return False
    cells = _cells(line)
    return all(_DELIM_CELL.match(c) for c in cells) and len(cells) == len(_cells(header))


def _md_breaks_table(line: str) -> bool:
    body = line.lstrip(" \t")
    return _blank(line) or body.startswith(("```", "~~~", "<!--")) or _ATX.match(line) is not None


def _front_matter_end(lines: list[str]) -> int | None:
    """Index of the line closing YAML front matter opened by ``---`` on line 1, else None."""
    if not lines or lines[0].rstrip() != "---":
        return None
    for j in range(1, len(lines)):
        line = lines[j]
        if line.rstrip() in ("---", "..."):
            return j
        # a thematic break followed by prose is not front matter: every line must look like YAML
        if not (_blank(line) or line[0] in " \t-#" or _FM_KEY.match(line)):
            return None
    return None


def _front_matter(body: list[str]) -> list[tuple[str, str]]:
    """Flat ``key: value`` pairs of YAML front matter; lists and block scalars become one line."""
    meta: list[tuple[str, str]] = []
    key, parts, sep = None, [], ", "

    def flush() -> None:
        if key is not None and parts and len(meta) < _META_KEYS:
            meta.append((key, sep.join(parts)[:_META_VALUE_CHARS]))

    for line in body:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if line[0] not in " \t-":
            flush()
            m = _FM_KEY.match(line)
            key, value = (m.group(1), (m.group(2) or "").strip()) if m else (None, "")
            sep = " " if value[:1] in ("|", ">") else ", "
            parts = [] if value[:1] in ("", "|", ">") else [_scalar(value)]
        elif key is not None:
            parts.append(_scalar(s[2:] if s.startswith("- ") else s))
    flush()
    return meta


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if value.startswith("[") and value.endswith("]"):
        return ", ".join(_scalar(v.strip()) for v in value[1:-1].split(",") if v.strip())
    return value


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
        if _blank(line):
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
    return bool(_DW_PRE.match(first) and _DW_PRE.match(nxt) and not _blank(nxt))


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
        if _blank(line):
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
            while end + 1 < n and not _blank(lines[end + 1]):
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
    base = _indent(lines[i])
    j = i + 1
    while j < len(lines) and _blank(lines[j]):
        j += 1
    if j == len(lines):
        return i
    if _indent(lines[j]) > base:
        end = j
        for k in range(j + 1, len(lines)):
            if not _blank(lines[k]):
                if _indent(lines[k]) <= base:
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
        if not _blank(line):
            doc.add(i, i)
    return doc
