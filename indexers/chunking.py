"""Which chunker a file gets: tree-sitter for code, heading-bounded for docs, windows otherwise."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from indexers import code, docs, languages, windows
from rag_mcp.index.spans import Chunk, split_lines

# Bumped when the mapping from file to chunks changes in this module; the code and docs
# chunkers carry their own versions.
# 3: wiki trees, documents; 4: C++ headers, the per-file span cap, legacy encodings
DISPATCH_VERSION = "4"
CHUNKER_VERSION = (
    f"{code.CHUNKER_VERSION}+docs-{docs.DOCS_CHUNKER_VERSION}+dispatch-{DISPATCH_VERSION}"
)

# Text formats without a parser here: indexed as line windows under their own language name,
# so `language=` filters and the status summary still say what they are.
OTHER_CODE = {
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json", ".jsonc": "json",
    ".ini": "ini", ".cfg": "ini", ".conf": "conf", ".html": "html", ".htm": "html",
    ".css": "css", ".scss": "scss", ".less": "less", ".sql": "sql", ".xml": "xml",
    ".kt": "kotlin", ".kts": "kotlin", ".swift": "swift", ".scala": "scala", ".lua": "lua",
    ".r": "r", ".pl": "perl", ".pm": "perl", ".dart": "dart", ".ex": "elixir", ".exs": "elixir",
    ".erl": "erlang", ".hs": "haskell", ".ml": "ocaml", ".clj": "clojure", ".vue": "vue",
    ".svelte": "svelte", ".proto": "protobuf", ".graphql": "graphql", ".gql": "graphql",
    ".tf": "terraform", ".hcl": "hcl", ".gradle": "gradle", ".groovy": "groovy", ".zig": "zig",
    ".nim": "nim", ".jl": "julia", ".ps1": "powershell", ".bat": "batch", ".cmd": "batch",
    ".cmake": "cmake", ".mk": "make", ".jinja": "jinja", ".j2": "jinja", ".tmpl": "template",
    ".csv": "csv", ".tsv": "csv", ".sbt": "scala", ".f90": "fortran", ".m": "objc",
    ".mm": "objc", ".vim": "vim", ".el": "elisp", ".fish": "fish", ".zsh": "zsh",
}
OTHER_CODE_NAMES = {
    "Makefile": "make", "GNUmakefile": "make", "Dockerfile": "dockerfile",
    "Containerfile": "dockerfile", "CMakeLists.txt": "cmake", "Jenkinsfile": "groovy",
    "Vagrantfile": "ruby", "Procfile": "conf",
}

#: a file cut into more spans than this gets line windows instead, as many as fit under it: one
#: 200 KB file of 10,000 one-line headings became 10,000 spans (a third of a large repository's
#: vectors for one file, and search results crowded by it). Ordinary source stays far below:
#: 1 MB (``index.max_file_bytes``) of 1,500-character spans is ~700.
MAX_SPANS_PER_FILE = 1000


CODE_NAMES = frozenset(lang.name for lang in languages.CODE_LANGUAGES)

# ``.h`` is C's suffix and C++'s: a header written in C++ says so in its text. Constructs C has
# no way to write, at the start of a line (so not in a C comment's prose, mostly): a namespace
# or template, an access label, ``using namespace``, a suffix-less standard include
# (``<string>``; C's all end in ``.h``), or ``std::``. A C header's ``extern "C"`` guard for C++
# readers matches none of them.
_CPP_HEADER = re.compile(
    r"^[ \t]*(?:namespace\b[\w: ]*\{|template[ \t]*<|(?:public|private|protected)[ \t]*:"
    r"|using[ \t]+namespace\b|#[ \t]*include[ \t]*<[a-z_]+>)|\bstd::\w",
    re.MULTILINE)


def header_language(rel: str, language: str, text: str) -> str:
    """``cpp`` for a ``.h`` file written in C++, else ``language``."""
    if language == "c" and rel.lower().endswith(".h") and _CPP_HEADER.search(text):
        return "cpp"
    return language


@dataclass(frozen=True, slots=True)
class FileChunks:
    language: str
    kind: str
    chunks: list[Chunk]
    lines: list[str]
    #: why the file got line windows instead of AST/heading spans ("" when it did not)
    fallback: str


def classify(rel: str, head: str, *, wiki_page: bool = False) -> tuple[str, str]:
    """``(language, kind)`` of a file from its path and first characters; ``wiki_page``: the
    file is in a DokuWiki page tree."""
    lang = languages.code_language_for_path(rel)
    if lang:
        return lang, "code"
    if not PurePosixPath(rel).suffix:
        # a script named without a suffix (bin/deploy) says what it is on its `#!` line
        lang = languages.code_language_for_shebang(head.split("\n", 1)[0])
        if lang:
            return lang, "code"
    fmt = docs.detect_doc_format(rel, head, wiki_page=wiki_page)
    if fmt:
        return fmt, ("text" if fmt == "text" else "doc")
    p = PurePosixPath(rel)
    other = OTHER_CODE_NAMES.get(p.name) or OTHER_CODE.get(p.suffix.lower())
    if other:
        return other, "code"
    return "text", "text"


def chunk_pages(lines: list[str], page_starts: tuple[int, ...], budget_chars: int
                ) -> list[Chunk]:
    """A document's text cut page by page (a span never spans two pages), each page's
    paragraphs packed up to the budget; every chunk carries its ``page``."""
    out: list[Chunk] = []
    ends = [*page_starts[1:], len(lines) + 1]
    for page, (start, end) in enumerate(zip(page_starts, ends, strict=True), 1):
        if start >= end:
            continue
        for ch in docs.chunk_doc("\n".join(lines[start - 1:end - 1]), "text",
                                 budget_chars=budget_chars):
            out.append(replace(ch, start_line=ch.start_line + start - 1,
                               end_line=ch.end_line + start - 1, kind="doc",
                               meta=(*ch.meta, ("page", str(page)))))
    return out


def chunk_extracted(text: str, fmt: str, page_starts: tuple[int, ...], *,
                    budget_chars: int) -> FileChunks:
    """Chunks of a document's extracted text (``rag_mcp.index.documents``): a PDF page by
    page, a .docx (extracted as Markdown) by its headings. Their language is the format."""
    lines = split_lines(text)
    if fmt == "pdf":
        return FileChunks(fmt, "doc", chunk_pages(lines, page_starts, budget_chars), lines, "")
    # a Word file has no web page: its headings' slugs would be anchors of nothing
    chunks = [replace(c, meta=tuple(m for m in c.meta if m[0] != "anchor"))
              for c in docs.chunk_doc(text, "markdown", budget_chars=budget_chars)]
    return FileChunks(fmt, "doc", chunks, lines, "")


def chunk_file(rel: str, text: str, *, budget_chars: int, window_lines: int,
               window_overlap: int, page_id: str = "") -> FileChunks:
    """Cut one file into chunks; never fails on odd input (falls back to line windows).
    ``page_id``: the file is the DokuWiki page with this ID (``indexers.wiki``)."""
    lines = split_lines(text)
    language, kind = classify(rel, text[:4096], wiki_page=bool(page_id))
    language = header_language(rel, language, text)
    fallback = ""
    chunks: list[Chunk] | None = None
    if kind == "code" and language in CODE_NAMES:
        try:
            chunks = code.chunk_code(text, language, budget_chars=budget_chars)
        except code.ParseFailed as exc:
            fallback = exc.reason or "parse_error"
        except RecursionError:
            fallback = "too_deep"
    elif kind in ("doc", "text") and language in ("markdown", "dokuwiki", "rst", "text"):
        chunks = docs.chunk_doc(text, language, budget_chars=budget_chars, path=rel,
                                page_id=page_id)
    else:
        fallback = "unsupported_language"
    if chunks is not None and len(chunks) > MAX_SPANS_PER_FILE:
        fallback = "too_many_spans"
        # windows start every (window - overlap) lines: step past enough lines per window
        window_lines = max(window_lines, -(-len(lines) // MAX_SPANS_PER_FILE) + window_overlap)
        chunks = None
    if chunks is None:
        chunks = windows.line_windows(lines, window=window_lines, overlap=window_overlap,
                                      kind=kind, reason=fallback)
    return FileChunks(language, kind, chunks, lines, fallback)
