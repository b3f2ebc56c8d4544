"""Changed files read and chunked in a thread, handed to the index writer in order.

Chunking runs in a thread while the model embeds in the main thread (ONNX Runtime releases the
GIL), so both cores work.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from indexers import chunking, walk
from indexers.wiki import WikiTrees
from rag_mcp.config import Settings
from rag_mcp.index import documents
from rag_mcp.index.catalog import FileRecord
from rag_mcp.index.spans import Span, content_hash, decode_text, digest, span_text


@dataclass
class Work:
    """One changed file after chunking."""

    cand: walk.Candidate
    record: FileRecord | None  # None: the file turned out unindexable (binary, secret, ...)
    skip: str = ""
    spans: list[tuple[Span, str, str]] = field(default_factory=list)  # (span, text, embedded)


def chunk_one(settings: Settings, c: walk.Candidate, wiki: WikiTrees | None = None) -> Work:
    """Read and chunk one file: its record and spans, or the reason it is skipped. ``wiki``
    knows the DokuWiki page trees of the root (none when omitted). A PDF or .docx is read as
    the text ``rag_mcp.index.documents`` extracts; other office formats are named, not read."""
    if documents.is_unsupported(c.rel):
        return Work(c, None, "unsupported_document")
    try:
        data = c.abs_path.read_bytes()
    except OSError:
        return Work(c, None, "unreadable")
    if documents.is_document(c.rel):
        try:
            extracted = documents.extract(c.rel, data)
        except documents.Unreadable as exc:
            return Work(c, None, exc.reason)
        text = extracted.text
        fc = chunking.chunk_extracted(text, extracted.fmt, extracted.page_starts,
                                      budget_chars=settings.chunk_chars)
        n_bytes = len(text.encode("utf-8", "surrogatepass"))
    else:
        reason = walk.check_content(c.rel, data)
        if reason:
            return Work(c, None, reason)
        text = decode_text(data)
        fc = chunking.chunk_file(c.rel, text, budget_chars=settings.chunk_chars,
                                 window_lines=settings.window_lines,
                                 window_overlap=settings.window_overlap,
                                 page_id=wiki.page_id(c.rel) if wiki is not None else "")
        n_bytes = len(data)
    media_id = wiki.media_id(c.rel) if wiki is not None else ""
    fhash = content_hash(data)
    rec = FileRecord(c.rel, fhash, c.size, c.mtime_ns, fc.language, fc.kind,
                     len(fc.lines), n_bytes, fc.fallback)
    work = Work(c, rec)
    for ch in fc.chunks:
        t = span_text(fc.lines, ch.start_line, ch.end_line)
        meta = (*ch.meta, ("media_id", media_id)) if media_id else ch.meta
        span = Span(path=c.rel, start_line=ch.start_line, end_line=ch.end_line,
                    digest=digest(t), kind=ch.kind, language=fc.language, symbol=ch.symbol,
                    parent=ch.parent, heading=ch.heading, preview=ch.preview[:1000],
                    byte_len=len(t.encode("utf-8", "surrogatepass")), file_hash=fhash,
                    chunker_version=chunking.CHUNKER_VERSION, meta=meta)
        work.spans.append((span, t, ch.embedding_text(c.rel, t)))
    return work


class ChunkFeed:
    """Chunks ``todo`` in a thread; iterate to get each file's ``Work`` in order."""

    def __init__(self, settings: Settings, todo: list[walk.Candidate]) -> None:
        self.seconds = 0.0  # spent parsing, no waits
        self._s = settings
        self._todo = todo
        self._wiki = WikiTrees(Path(settings.root))
        self._q: queue.Queue[object] = queue.Queue(maxsize=64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        # A bounded put that gives up once the writer stopped (error, Ctrl-C, cancel), so a
        # long-lived watcher process never keeps a thread blocked on a dead queue.
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for c in self._todo:
                t0 = time.perf_counter()
                work = chunk_one(self._s, c, self._wiki)
                self.seconds += time.perf_counter() - t0
                if not self._put(work):
                    return
        except BaseException as exc:  # surface in the main thread, never die silently
            self._put(exc)
        finally:
            self._put(None)

    def __iter__(self) -> Iterator[Work]:
        while (item := self._q.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Work)
            yield item
        self._thread.join()

    def stop(self) -> None:
        """Let the thread give up its next put (the writer stopped early)."""
        self._stop.set()
