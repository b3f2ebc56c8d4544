"""Doc comments of code outside Python: the questions of ``rag-eval --docstrings`` and the text
hidden from its temporary index.

The chunker (``indexers.code``) already attaches the comment right above a definition to that
definition's span. Here, for every function or method span, that leading comment becomes a
question (its first sentence, as CodeSearchNet does with JSDoc, Javadoc, Go and Ruby comments)
and is blanked in place, so the index of the run cannot answer the question with its own text
and every line number stays the user's. Comment syntax is data (``COMMENTS``); nothing here
branches on a language by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from indexers.code import ParseFailed, chunk_code
from rag_mcp.eval.sets import Documented, first_sentence


@dataclass(frozen=True, slots=True)
class CommentSyntax:
    #: prefixes of a line comment (``//``, ``#``)
    line: tuple[str, ...]
    #: opening and closing marks of a block comment, if the language has one
    block: tuple[str, str] | None = None
    #: line starts that look like a comment but are code (Rust and PHP attributes, a shebang)
    not_comment: tuple[str, ...] = ("#!", "#[")


_C_LIKE = CommentSyntax(("//",), ("/*", "*/"))
COMMENTS: dict[str, CommentSyntax] = {
    "javascript": _C_LIKE, "typescript": _C_LIKE, "tsx": _C_LIKE, "go": _C_LIKE,
    "rust": _C_LIKE, "java": _C_LIKE, "c": _C_LIKE, "cpp": _C_LIKE, "c_sharp": _C_LIKE,
    "php": CommentSyntax(("//", "#"), ("/*", "*/")),
    "ruby": CommentSyntax(("#",), ("=begin", "=end")),
    "bash": CommentSyntax(("#",)),
}
_LEAF = frozenset({"function", "method"})
_MARKS = re.compile(r"^(?:/\*\*|/\*!|/\*|\*/|///|//!|//|#+|=begin|=end)\s?")
_INLINE_TAG = re.compile(r"\{@\w+\s+([^}]*)\}")  # {@link Foo} -> Foo
_HTML = re.compile(r"</?[a-zA-Z][^>]*>")
#: a line of tags ends the description: @param, @return (JSDoc, Javadoc, YARD), :param
_TAG_LINE = re.compile(r"^(?:@\w|:\w+:|\\\w)")
_LEGAL = re.compile(r"copyright|licen[cs]e|spdx", re.IGNORECASE)
#: a note to the authors, not a description of the code
_NOTE = re.compile(r"^(?:todo|fixme|xxx|hack)\b", re.IGNORECASE)
#: the definition's signature must follow the comment within this many lines (attributes,
#: annotations, decorators in between)
_SIGNATURE_WITHIN = 6


def comment_end(lines: list[str], first: int, last: int, syntax: CommentSyntax) -> int:
    """The first row at or after ``first`` (0-based) that is not part of a run of comment
    lines; ``first`` itself when that row is code. A row holding code after a comment ends the
    run without being part of it."""
    row, inside = first, False
    while row <= last:
        s = lines[row].strip()
        if inside:
            assert syntax.block is not None
            close = s.find(syntax.block[1])
            if close >= 0:
                if s[close + len(syntax.block[1]):].strip():
                    return row  # `*/ code`: code shares the line
                inside = False
            row += 1
            continue
        if not s or s.startswith(syntax.not_comment):
            return row
        if syntax.block and s.startswith(syntax.block[0]):
            rest = s[len(syntax.block[0]):]
            close = rest.find(syntax.block[1])
            if close < 0:
                inside = True
            elif rest[close + len(syntax.block[1]):].strip():
                return row  # `/** doc */ function f() {}` on one line
            row += 1
            continue
        if s.startswith(syntax.line):
            row += 1
            continue
        return row
    return row


def comment_text(rows: list[str]) -> str:
    """The description of a doc comment: its lines before the first tag line (``@param``,
    ``:param:``; JSDoc, Javadoc, YARD and PHPDoc put the description first), with comment
    marks, leading stars, inline tags and HTML removed."""
    out: list[str] = []
    for raw in rows:
        s = raw.strip()
        if s.endswith("*/"):
            s = s[:-2].rstrip()
        s = _MARKS.sub("", s).lstrip("*").strip()
        if _TAG_LINE.match(s):
            break  # the tags and their continuation lines describe parameters, not the function
        out.append(_HTML.sub("", _INLINE_TAG.sub(r"\1", s)))
    return "\n".join(out)


def _question(text: str, name: str) -> str:
    query = first_sentence(text)
    words = query.split()
    # Go and much of Java/Rust write "Name does X": the name would answer the question itself
    if words and words[0].strip("`'\"()") in (name, f"{name}()"):
        query = " ".join(words[1:])
    return query


def strip_doc_comments(text: str, language: str, *, budget_chars: int = 1500
                       ) -> tuple[str, list[Documented]]:
    """``text`` with the comment above every definition blanked (line numbers kept), and the
    documented functions and methods that make good questions. Raises ValueError for a
    language without a comment syntax here or a file its grammar cannot chunk."""
    syntax = COMMENTS.get(language)
    if syntax is None:
        raise ValueError(f"no comment syntax for {language!r}")
    try:
        chunks = chunk_code(text, language, budget_chars=budget_chars)
    except ParseFailed as exc:
        raise ValueError(f"cannot chunk: {exc.reason}") from None
    lines = text.split("\n")
    found: list[Documented] = []
    blank: list[tuple[int, int]] = []
    for i, c in enumerate(chunks):
        meta = dict(c.meta)
        if not c.symbol or "def" not in meta:
            continue
        if i and chunks[i - 1].symbol == c.symbol and meta["def"] in _LEAF:
            continue  # a later piece of a long function
        first, last = c.start_line - 1, c.end_line - 1
        end = comment_end(lines, first, last, syntax)
        if end == first:
            continue
        signature = c.preview.strip()[:40]
        if not signature or not any(lines[r].strip().startswith(signature)
                                    for r in range(end, min(last, end + _SIGNATURE_WITHIN) + 1)):
            continue  # a comment above other code (a field, a statement) stays
        blank.append((first, end))
        if meta["def"] not in _LEAF:
            continue
        # a long function is cut into pieces that share its symbol: the gold is all of them
        stop = last
        for nxt in chunks[i + 1:]:
            if nxt.symbol != c.symbol:
                break
            stop = nxt.end_line - 1
        short = c.symbol.rsplit(".", 1)[-1]
        prose = comment_text(lines[first:end])
        if "test" in short.lower() or _LEGAL.search(prose) or stop - end + 1 < 3:
            continue
        query = _question(prose, short)
        if len(query.split()) >= 3 and not _NOTE.match(query):
            found.append(Documented(c.symbol, query, end + 1, stop + 1))
    for a, b in blank:
        for r in range(a, b):
            lines[r] = ""
    return "\n".join(lines), found
