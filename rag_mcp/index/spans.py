"""Span records and their stable IDs ``path:start-end:digest``.

A span is a contiguous range of lines of one file. Its text is the file's lines ``start..end``
(1-based, inclusive) joined with ``\\n``, each without its line terminator, so a CRLF checkout and
an LF checkout of the same code give the same digest. The digest is the first 12 hex characters
of the sha256 of that text: a reader can check in microseconds whether the span still matches the
file, and find it again when only its line numbers moved.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from rag_mcp.errors import InvalidArgument

DIGEST_LEN = 12
MAX_ID_LEN = 1100
MAX_PATH_LEN = 1024

KINDS = ("code", "doc", "text")

_ID_TAIL = re.compile(r":(\d{1,9})-(\d{1,9}):([0-9a-f]{12})\Z")


# Test code by file name in any language (test_x.py, x_test.go, x.test.js, x.spec.ts, x_spec.rb,
# XTest.java, XTests.cs, conftest.py) or by folder (tests/, test/, __tests__/, testing/, spec/).
_TEST_FILE = re.compile(r"(?:^|[._-])(?i:test|tests|spec)(?:[._-]|$)|[a-z0-9]Tests?$")
_TEST_DIRS = frozenset({"test", "tests", "__tests__", "testing", "spec", "specs"})
#: query tokens that ask about tests: a short query with one of them gets no test penalty
TEST_WORDS = frozenset({"test", "tests", "testing", "tested", "unittest", "spec", "specs"})


def is_test_file(rel: str) -> bool:
    """Whether the repo-relative file ``rel`` is named like a test (its folders are not read)."""
    stem = rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return stem == "conftest" or _TEST_FILE.search(stem) is not None


def is_test_path(rel: str) -> bool:
    """Whether ``rel`` is test code: a test file by name, or any file under a test folder."""
    return is_test_file(rel) or any(p.lower() in _TEST_DIRS for p in rel.split("/")[:-1])


def is_test_code(rel: str, symbol: str | None) -> bool:
    """Whether a code span is a test: in a test file or folder, or inside a test module of a
    source file (Rust's ``mod tests``, whose items get the symbols ``tests.x``)."""
    head, dot, _ = (symbol or "").partition(".")
    return is_test_path(rel) or (bool(dot) and head in ("tests", "test"))


def decode_text(data: bytes) -> str:
    """A file's bytes as the text the indexer chunks and the reader numbers (both call this, so
    span digests agree): UTF-8 when it is; otherwise the encoding charset-normalizer detects
    (Latin-1 and other legacy files were read with U+FFFD in place of every accented letter).
    A file that is UTF-8 but for a few stray bytes stays UTF-8 with replacement characters (a
    detector would turn all its other non-ASCII letters into mojibake), and so does one that
    nothing fits. A leading BOM is dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        if _UTF8_LETTER.search(text) is None:
            from charset_normalizer import from_bytes  # ~0.1 s of imports, legacy files only

            best = from_bytes(data).best()
            text = str(best) if best is not None else text
    return text.lstrip("\ufeff")


_UTF8_LETTER = re.compile("[^\x00-\x7f\ufffd]")  # a non-ASCII character UTF-8 did decode


def split_lines(text: str) -> list[str]:
    """Split file text into lines the way editors number them (only ``\\n`` ends a line)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" not in text:  # the usual case: no per-line work (a whole file is split per read)
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def span_text(lines: list[str], start_line: int, end_line: int) -> str:
    """The exact text of lines ``start_line..end_line`` (1-based, inclusive)."""
    return "\n".join(lines[start_line - 1 : end_line])


def digest(text: str) -> str:
    """First 12 hex characters of the sha256 of the span text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_LEN]


def content_hash(data: bytes) -> str:
    """Full sha256 of a file's bytes, the manifest's change detector."""
    return hashlib.sha256(data).hexdigest()


def make_span_id(path: str, start_line: int, end_line: int, text_digest: str) -> str:
    return f"{path}:{start_line}-{end_line}:{text_digest}"


@dataclass(frozen=True, slots=True)
class SpanId:
    path: str
    start_line: int
    end_line: int
    digest: str

    def __str__(self) -> str:
        return make_span_id(self.path, self.start_line, self.end_line, self.digest)


def parse_span_id(span_id: object) -> SpanId:
    """Check the shape of a span ID and split it; raises ``InvalidArgument`` with the reason.

    Only the shape is checked here; whether the path is safe and indexed is the store's job.
    """
    if not isinstance(span_id, str):
        raise InvalidArgument("span_id must be a string like 'src/app.py:10-42:3f2a9c1be07d'")
    if not span_id:
        raise InvalidArgument("span_id is empty; pass an id returned by rag_query")
    if len(span_id) > MAX_ID_LEN:
        raise InvalidArgument(f"span_id is too long ({len(span_id)} characters, max {MAX_ID_LEN})")
    if "\x00" in span_id:
        raise InvalidArgument("span_id contains a NUL byte")
    match = _ID_TAIL.search(span_id)
    if match is None:
        raise InvalidArgument(
            "span_id must look like 'path:start-end:digest' with a 12-character hex digest, "
            "e.g. 'src/app.py:10-42:3f2a9c1be07d'; use an id returned by rag_query"
        )
    path = span_id[: match.start()]
    start, end = int(match.group(1)), int(match.group(2))
    if not path:
        raise InvalidArgument("span_id has an empty path")
    if start < 1 or end < start:
        raise InvalidArgument(f"span_id has an invalid line range {start}-{end}")
    return SpanId(path, start, end, match.group(3))


@dataclass(frozen=True, slots=True)
class Chunk:
    """What a chunker returns: a line range of one file plus what it knows about it.

    Chunkers are pure: text in, chunks out. The indexing pipeline attaches path, text and ID.
    """

    start_line: int
    end_line: int
    kind: str
    symbol: str | None = None
    parent: str | None = None
    heading: str | None = None
    #: a one-line signature or heading shown in search results
    preview: str = ""
    #: the enclosing unit's signature, prefixed to the embedded text of a split piece
    context: str = ""
    #: extra facts (Markdown front matter, DokuWiki page id), flat strings only
    meta: tuple[tuple[str, str], ...] = ()
    #: why this file fell back to line windows ("" for AST or heading spans)
    fallback: str = ""

    def embedding_text(self, path: str, text: str) -> str:
        """What the model reads for this chunk of ``path`` whose lines are ``text``."""
        return embedding_text(path, self.symbol or self.heading, self.context, text,
                              kind=self.kind)


@dataclass(frozen=True, slots=True)
class Span:
    """One indexed span: the record the store keeps and the tools return."""

    path: str
    start_line: int
    end_line: int
    digest: str
    kind: str
    language: str
    symbol: str | None = None
    parent: str | None = None
    heading: str | None = None
    preview: str = ""
    byte_len: int = 0
    file_hash: str = ""
    chunker_version: str = ""
    meta: tuple[tuple[str, str], ...] = field(default=())

    @property
    def id(self) -> str:
        return make_span_id(self.path, self.start_line, self.end_line, self.digest)

    @property
    def label(self) -> str:
        """The symbol or heading path, whichever the span has."""
        return self.symbol or self.heading or ""


# What the model sees for a span: where it is, what it is, then the code or prose itself; in
# code, camelCase words apart. The stored text (and the digest) is the exact span; the embedded
# text only steers the vector. A change here re-embeds every index (the manifest records the
# version, and an index embedded from another version is rebuilt).
EMBED_TEXT_VERSION = "2"

# A lower-case letter or digit before an upper-case one, or an acronym before a capitalised word:
# parseHTTPResponse -> parse HTTP Response, baseIsNative -> base Is Native, utf8Decode -> utf8
# Decode. WordPiece cuts a joined identifier into pieces that are not words (base ##is ##nat
# ##ive); apart, they are words the model learned. snake_case needs nothing: "_" is a token of
# its own already. Prose keeps its spelling: there a PascalCase word is a name (GitHub,
# JavaScript) the model may know whole. docs/RETRIEVAL.md has the measurements.
_CASE_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def split_case(text: str) -> str:
    """``text`` with the words of camelCase and PascalCase identifiers apart."""
    return _CASE_BOUNDARY.sub(" ", text)


def embedding_text(path: str, label: str | None, context: str, text: str, *, kind: str) -> str:
    """The text embedded for a span: path, symbol or heading path, split context, then text;
    for a code span (``kind`` "code") with identifiers' words apart (``split_case``)."""
    head = [path]
    if label:
        head.append(label)
    if context:
        head.append(context)
    joined = "\n".join(head) + "\n" + text
    return split_case(joined) if kind == "code" else joined


def query_embedding_text(query: str) -> str:
    """The text embedded for a query, split like a code span: an identifier in a question is
    meant to meet the code that holds it."""
    return split_case(query)


def embedding_key(model_identity: str, embedded: str) -> str:
    """Content key of a vector: the same model and text always give the same key."""
    h = hashlib.sha256()
    h.update(model_identity.encode())
    h.update(b"\x00")
    h.update(embedded.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]
