"""Text of documents that are not text files: PDF page by page (pypdf), Word .docx as Markdown
(python-docx).

The indexer and the span reader both see a document as the text ``extract`` gives, so a span
is a line range of that text like any other and its digest checks it. A PDF's text is its
pages' text in order, one blank line between pages, and ``page_starts`` says on which page a
line is. A .docx becomes Markdown: its heading styles as ``#`` headings (so spans follow its
sections), paragraphs, and tables as ``|`` rows. The original file is only read. Extraction is
deterministic for one library version; after an upgrade that extracts differently, a span
reads as changed (``E_STALE``) until the next ``rag-index``.

Formats without an extractor here are named, not read: ``UNSUPPORTED``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

from rag_mcp.index.spans import split_lines

#: suffixes this module extracts text from
DOCUMENT_SUFFIXES = (".pdf", ".docx")
#: office and e-book formats rag-index names in its summary instead of reading
UNSUPPORTED = (".doc", ".odt", ".rtf", ".epub", ".ppt", ".pptx", ".odp", ".xls", ".xlsx",
               ".ods")
# An encrypted Office file is an OLE compound file, not the zip a .docx is.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: skip reasons of documents, which rag-index names file by file
REASONS = ("encrypted", "damaged_document", "no_text", "unsupported_document")


class Unreadable(Exception):
    """A document whose text cannot be had; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    #: 1-based first line of each page's text (a page without text starts where the next
    #: does); empty for a format without pages
    page_starts: tuple[int, ...]
    #: ``pdf`` (plain text by page) or ``docx`` (Markdown)
    fmt: str = "pdf"

    def page_of(self, line: int) -> int:
        """The 1-based page that line ``line`` of ``text`` is on."""
        page = 1
        for i, start in enumerate(self.page_starts, 1):
            if start <= line:
                page = i
            else:
                break
        return page


def is_document(rel: str) -> bool:
    return rel.lower().endswith(DOCUMENT_SUFFIXES)


def is_unsupported(rel: str) -> bool:
    return rel.lower().endswith(UNSUPPORTED)


def _page_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in split_lines(text.replace("\r\n", "\n").replace("\r", "\n"))]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def extract_pdf(data: bytes) -> Extracted:
    """The text of a PDF's pages; raises ``Unreadable`` (encrypted, damaged, no text)."""
    # pypdf is imported here: the server loads it only when a PDF span is read.
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about odd files are noise
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # An owner password alone (printing or copying restricted) still opens with "".
            try:
                if not reader.decrypt(""):
                    raise Unreadable("encrypted", "a password is needed to open it")
            except (DependencyError, NotImplementedError) as exc:
                raise Unreadable("encrypted", str(exc)) from None
        out: list[str] = []
        starts: list[int] = []
        for page in reader.pages:
            lines = _page_lines(page.extract_text() or "")
            if out and lines:
                out.append("")  # a blank line between pages
            starts.append(len(out) + 1)
            out.extend(lines)
    except Unreadable:
        raise
    except FileNotDecryptedError as exc:
        raise Unreadable("encrypted", str(exc)) from None
    except Exception as exc:
        # Untrusted input meets a large parser: pypdf's own errors (a stream past its size
        # limits, a broken xref) and whatever a malformed file provokes in it must name the
        # file as damaged, never stop the index run or a rag_get_span.
        raise Unreadable("damaged_document", f"{type(exc).__name__}: {exc}") from None
    if not any(line.strip() for line in out):
        raise Unreadable("no_text", "no text layer (a scan needs OCR first)")
    return Extracted("\n".join(out) + "\n", tuple(starts))


def extract_docx(data: bytes) -> Extracted:
    """A .docx as Markdown; raises ``Unreadable`` (encrypted, damaged, no text)."""
    if data.startswith(_OLE_MAGIC):
        raise Unreadable("encrypted", "an encrypted Office file (a password is needed)")
    import docx  # python-docx, imported only when a .docx is read
    from docx.text.paragraph import Paragraph

    try:
        doc = docx.Document(io.BytesIO(data))
        out: list[str] = []
        for item in doc.iter_inner_content():
            if isinstance(item, Paragraph):
                line = " ".join(item.text.split())
                style = (item.style.name if item.style is not None else "") or ""
                level = _heading_level(style)
                block = [f"{'#' * level} {line}" if level and line else line]
            else:
                block = ["| " + " | ".join(" ".join(c.text.split()) for c in row.cells) + " |"
                         for row in item.rows]
            if any(block):
                out.extend([*block, ""])
    except Exception as exc:  # untrusted input meets a parser: see extract_pdf
        raise Unreadable("damaged_document", f"{type(exc).__name__}: {exc}") from None
    if not out:
        raise Unreadable("no_text", "the document holds no text")
    return Extracted("\n".join(out), (), "docx")


def _heading_level(style: str) -> int:
    """Markdown heading level of a Word paragraph style: Title 1, Heading N N+1 (max 6)."""
    if style == "Title":
        return 1
    head, _, n = style.partition(" ")
    return min(6, int(n) + 1) if head == "Heading" and n.isdigit() else 0


_CACHE: OrderedDict[str, Extracted] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 16


def extract(rel: str, data: bytes) -> Extracted:
    """The text of document ``rel`` (its bytes ``data``), remembered for the last few
    documents by content hash: reading a span again must not parse the PDF again."""
    if not is_document(rel):
        raise Unreadable("unsupported_document", rel)
    key = hashlib.sha256(data).hexdigest()
    with _CACHE_LOCK:
        got = _CACHE.get(key)
        if got is not None:
            _CACHE.move_to_end(key)
            return got
    got = extract_docx(data) if rel.lower().endswith(".docx") else extract_pdf(data)
    with _CACHE_LOCK:
        _CACHE[key] = got
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return got
