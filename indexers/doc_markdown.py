"""The Markdown scanner of the docs chunker (CommonMark blocks, GFM tables, YAML front matter).

It turns a file's lines into a ``Doc`` of atoms like the other scanners
(``indexers.doc_formats``): headings (ATX and setext), fenced and indented code, HTML comments,
tables and front matter stay whole; list items and paragraphs are single lines.
"""

from __future__ import annotations

import re

from indexers.doc_formats import Doc, blank, indent, last_nonblank

_META_KEYS = 50
_META_VALUE_CHARS = 500
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
        if blank(line):
            para, i = None, i + 1
            continue
        ind = indent(line)
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
    gap = indent(" " * col + rest) - col
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
            if not blank(lines[j]):
                if indent(lines[j]) < code_col:
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
            if ind >= 4 and s and indent(lines[j]) <= 3:
                return last_nonblank(lines, i, j - 1)
        return last_nonblank(lines, i, len(lines) - 1)  # unclosed: runs to the end
    if ind <= 3 and body.startswith("<!--"):
        if "-->" in body[4:]:
            return None
        for j in range(i + 1, len(lines)):
            if "-->" in lines[j]:
                return j
        return last_nonblank(lines, i, len(lines) - 1)
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
    return blank(line) or body.startswith(("```", "~~~", "<!--")) or _ATX.match(line) is not None


def _front_matter_end(lines: list[str]) -> int | None:
    """Index of the line closing YAML front matter opened by ``---`` on line 1, else None."""
    if not lines or lines[0].rstrip() != "---":
        return None
    for j in range(1, len(lines)):
        line = lines[j]
        if line.rstrip() in ("---", "..."):
            return j
        # a thematic break followed by prose is not front matter: every line must look like YAML
        if not (blank(line) or line[0] in " \t-#" or _FM_KEY.match(line)):
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
