"""What a hit's one-line preview says: what the span is, not its first line.

The preview beside a hit is often all an assistant reads before deciding to fetch the span, so
it should say what the span is: the signature of a definition, the first sentence of the doc
comment a piece of code opens with, the first sentence of a documentation section. The first
line of the range says that only by luck: a JavaScript file opens with ``'use strict';``, a
JSDoc block with ``/**``, a Python module with ``\"\"\"``, and the first line of a Markdown
section is its heading, which the hit already shows.

The indexer stores a preview per span (a definition's signature, else the first line that is
not a comment); here it is kept when it says something and replaced from the span's stored text
when it does not, so every index gets the rule without being rebuilt.
"""

from __future__ import annotations

import re

from rag_mcp.index.spans import Span

#: longest preview (characters); the tool cuts at PREVIEW_CHARS as well
LIMIT = 200
#: lines that say nothing about what the span is: directives, encoding cookies, shebangs
_DIRECTIVE = re.compile(
    r"^(?:['\"]use (?:strict|client|server)['\"];?|#!.*|#.*-\*-.*-\*-.*"
    r"|#\s*(?:frozen_string_literal|encoding|coding)\b.*|package\s+[\w.]+;?|<\?php|\?>"
    r"|from\s+__future__\s+import.*)$",
    re.IGNORECASE)
#: markers that open, continue or close a comment (stripped to get at its words)
_MARKER = re.compile(r"^(?:/\*\*?|\*/|\*|///?|//!|#+|--|;+|%+|\"\"\"|'''|<!--|-->|=begin|=end|"
                     r"\(\*|\*\))\s?")
#: what opens a block comment or docstring, and what closes it
_CLOSERS = {"/**": "*/", "/*": "*/", '"""': '"""', "'''": "'''", "<!--": "-->",
            "=begin": "=end", "(*": "*)"}
_BLOCK = re.compile(r"^(?:/\*\*|/\*|\"\"\"|'''|<!--|=begin|\(\*)")
#: a line comment or a block's opening (``#`` but not C's preprocessor or Rust's attributes)
_COMMENT_START = re.compile(
    r"^(?:/\*|//|#(?![!\[{]|\s*(?:include|define|if|ifdef|ifndef|endif|else|elif|undef|pragma"
    r"|import|region|endregion|error|line)\b)|--|;|%|\"\"\"|'''|<!--|=begin|\(\*)")
#: a line made of markers and punctuation only: ``/**``, ``*/``, ``#``, ``\"\"\"``, ``// ---``
_BARE = re.compile(r"^[\s/*#;%=\-~+!<>\"'`(){}]*$")
#: a heading line: Markdown ATX, DokuWiki ``== x ==``, setext/reST underlines, wiki ``=`` lines
_HEADING = re.compile(r"^(?:#{1,6}\s|={2,}.*={2,}\s*$|[=\-~^*+#`:'\"]{3,}\s*$|\.\.\s+_)")
#: prose markup that opens a line: list bullets, quotes, numbered items, wiki list markers
_BULLET = re.compile(r"^(?:[-*+>]\s+|\d+[.)]\s+|\s*\*\s+|\s*-\s+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
#: a JSDoc/Javadoc/Doxygen tag line ends the summary of a doc comment
_TAG = re.compile(r"^[@\\](?:param|returns?|throws?|type|private|public|api|see|example|brief)\b")


def describe(span: Span, text: str | None) -> str:
    """The preview of ``span`` whose stored text is ``text`` (None: the stored preview)."""
    stored = span.preview.strip()
    if text is None:
        return stored
    if span.kind in ("doc", "text"):
        return _section_sentence(text, span) or stored
    if span.symbol and stored and not says_nothing(stored):
        return stored  # the definition's signature (or, in a piece of one, its first statement)
    return _code_summary(text) or stored


def first_sentence(text: str) -> str:
    """The first sentence of a run of prose, on one line, cut at LIMIT characters."""
    one = " ".join(text.split())
    parts = _SENTENCE_END.split(one, maxsplit=1)
    out = parts[0]
    return out if len(out) <= LIMIT else out[: LIMIT - 1].rstrip() + "…"


def says_nothing(line: str) -> bool:
    s = line.strip()
    return not s or bool(_BARE.match(s)) or bool(_DIRECTIVE.match(s))


def _code_summary(text: str) -> str:
    """The first sentence of the comment the code opens with, or else its first line that says
    something (not a directive, a marker or a comment)."""
    words: list[str] = []
    closer: str | None = None  # the end of the block comment or docstring we are in
    first_code = ""
    for s in (line.strip() for line in text.splitlines()):
        if closer is None and (not s or _DIRECTIVE.match(s)):
            if words:
                break
            continue
        opener = _BLOCK.match(s) if closer is None else None
        if closer is None and opener is None and not _COMMENT_START.match(s):
            first_code = s
            break
        if opener is not None:
            closer = _CLOSERS[opener.group(0)]
            s = s[len(opener.group(0)):].strip()
            ends = s.endswith(closer)
        else:
            ends = closer is not None and s.endswith(closer)
        if closer is not None and s.endswith(closer):
            s = s[: -len(closer)].strip()
        body = _MARKER.sub("", s).strip()
        if ends:
            closer = None
        if _TAG.match(body):
            if words:
                break
            continue
        if body and not _BARE.match(body):
            words.append(body)
            if ends:
                break
        elif words:
            break  # a blank comment line ends the summary paragraph
    if words:
        return first_sentence(" ".join(words))
    return first_code[:LIMIT]


def _section_sentence(text: str, span: Span) -> str:
    """The first sentence of a documentation section's prose, past its heading."""
    title = (span.heading or "").rsplit(" > ", 1)[-1].strip().lower()
    para: list[str] = []
    fence = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(("```", "~~~")):
            fence = not fence
            if para:
                break
            continue
        if fence or s.startswith(("<!--", "---", "|", "{%", "{{", ":::", "<", "[[!")):
            if para:
                break
            continue
        if not s:
            if para:
                break
            continue
        if _HEADING.match(s) or s.strip("#= ").lower() == title:
            if para:
                break
            continue
        para.append(_BULLET.sub("", s))
        if len(" ".join(para)) > LIMIT * 2:
            break
    return first_sentence(" ".join(para)) if para else ""
