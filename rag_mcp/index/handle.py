"""Reading an index: open the current generation, check it, follow CURRENT as it moves.

A generation is checked before it is used, because a damaged store can do worse than raise:
Chroma's native HNSW loader crashes the whole process (SIGSEGV) on truncated or garbage segment
files (chroma-core/chroma#7238, #7069; tests/test_hostile_index.py). So the files are compared
with the checksums the manifest records, when it records them, before any store opens them; the
catalog, lexical and vector counts must agree; and one lexical search runs, since tantivy opens
some segment files only then.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rag_mcp.config import Settings
from rag_mcp.errors import IndexUnavailable, RagError
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.lexical import LexicalIndex
from rag_mcp.index.store import VectorStore, store_class
from rag_mcp.index.store.files import SIZE_ONLY, check_graphs, rewritten_on_open

log = logging.getLogger(__name__)


def index_command(settings: Settings, *, rebuild: bool = False) -> str:
    """The exact command that (re)builds this index, for error messages."""
    cmd = f"rag-index --root {settings.root}"
    return cmd + " --rebuild" if rebuild else cmd


def checksummed(rel: str) -> bool:
    """Whether a generation file keeps its bytes once published: readers change the lock files
    and the vector store rewrites some of its own on open, so those are not checksummed."""
    name = rel.rsplit("/", 1)[-1]
    return not (rel == gen.MANIFEST or name == gen.READERS or name.endswith(".lock")
                or rewritten_on_open(name))


def _fingerprint(path: Path) -> str:
    if path.name in SIZE_ONLY:
        return f"size:{path.stat().st_size}"
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_checksums(gen_dir: Path) -> dict[str, str]:
    """sha256 (or, for ``SIZE_ONLY`` files, the size) of each checksummed file of a generation,
    by relative path: what the writer records in the manifest under ``checksums`` and
    ``verify_checksums`` compares."""
    out: dict[str, str] = {}
    for path in sorted(gen_dir.rglob("*")):
        rel = path.relative_to(gen_dir).as_posix()
        if path.is_file() and checksummed(rel):
            out[rel] = _fingerprint(path)
    return out


def file_stats(gen_dir: Path, checksums: dict[str, str]) -> dict[str, list[int]]:
    """``[size, mtime_ns]`` of each sha256-checksummed file of a generation, recorded in the
    manifest beside ``checksums``: ``quick_verify`` hashes a large file only when they differ."""
    out: dict[str, list[int]] = {}
    for rel, want in checksums.items():
        if not want.startswith("size:"):
            st = (gen_dir / rel).stat()
            out[rel] = [st.st_size, st.st_mtime_ns]
    return out


def _missing(gen_dir: Path, rel: str) -> IndexUnavailable:
    return IndexUnavailable(f"generation {gen_dir.name} is damaged: {rel} is missing")


def _changed(gen_dir: Path, rel: str) -> IndexUnavailable:
    return IndexUnavailable(f"generation {gen_dir.name} is damaged: {rel} changed since it was "
                            "written")


def verify_checksums(gen_dir: Path, manifest: dict[str, Any]) -> None:
    """Raise ``IndexUnavailable`` naming the first file that is missing or not as published."""
    recorded = manifest.get("checksums")
    if not isinstance(recorded, dict):
        return  # written before checksums were recorded: the count checks still apply
    for rel, want in sorted(recorded.items()):
        try:
            got = _fingerprint(gen_dir / rel)
        except FileNotFoundError:
            raise _missing(gen_dir, rel) from None
        if got != want:
            raise _changed(gen_dir, rel)


#: ``quick_verify`` hashes files up to this size every time; a larger one only when its size or
#: modification time is not what the writer recorded
QUICK_HASH_BYTES = 1 << 20


def quick_verify(gen_dir: Path, manifest: dict[str, Any]) -> bool:
    """The check of a ``rag-index`` run that finds nothing to update: every file present with
    its recorded size, small files hashed, a large one hashed only when its size or mtime
    moved (damage written to a file moves its mtime), small HNSW graphs checked as
    ``check_graphs`` does. On a 300k-line repository it takes milliseconds where
    ``verify_generation`` reads every byte and opens every store (docs/BENCHMARKS.md). What it
    cannot see (bit rot, or damage with its mtime put back) ``rag-index --verify`` and every
    server start still find. Raises ``IndexUnavailable`` on damage; False when the manifest
    predates recorded stats (then verify fully)."""
    recorded, stats = manifest.get("checksums"), manifest.get("stats")
    if not isinstance(recorded, dict) or not isinstance(stats, dict):
        return False
    for rel, want in sorted(recorded.items()):
        path = gen_dir / rel
        try:
            st = path.stat()
            if want.startswith("size:"):
                ok = want == f"size:{st.st_size}"
            elif st.st_size > QUICK_HASH_BYTES and stats.get(rel) == [st.st_size,
                                                                      st.st_mtime_ns]:
                ok = True
            else:
                ok = _fingerprint(path) == want
        except FileNotFoundError:
            raise _missing(gen_dir, rel) from None
        if not ok:
            raise _changed(gen_dir, rel)
    check_graphs(gen_dir, max_bytes=QUICK_HASH_BYTES)
    return True


VERIFY_ATTEMPTS = 3


def verify_generation(gen_dir: Path, manifest: dict[str, Any]) -> None:
    """``verify_checksums`` and the vector store's ``check_graphs``, tried a few times 0.25 s
    apart: another process loading a generation whose Chroma log was not yet saved into its
    graph has Chroma rewrite two HNSW files in place, and a check that reads them mid-write must
    not call a sound index damaged. (Generations published since writers persist after every
    write hold no such log; older ones, and a cold build's, still may.)"""
    for attempt in range(VERIFY_ATTEMPTS):
        try:
            verify_checksums(gen_dir, manifest)
            check_graphs(gen_dir)
            return
        except IndexUnavailable:
            if attempt == VERIFY_ATTEMPTS - 1:
                raise
            time.sleep(0.25)


def _read_only(path: Path) -> bool:
    """Whether ``path`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class OpenIndex:
    """One published generation, opened and checked; immutable while open."""

    def __init__(self, settings: Settings, pointer: gen.Pointer) -> None:
        self.pointer = pointer
        self.generation = pointer.generation
        self.dir = pointer.dir
        self._pin = gen.ReaderPin(pointer.dir) if pointer.dir.is_dir() else None
        self.catalog: Catalog | None = None
        self.vectors: VectorStore | None = None
        #: whole pages of prose (None: a generation written before they were indexed)
        self.pages: LexicalIndex | None = None
        self._copy: Path | None = None
        try:
            self.manifest = gen.read_manifest(pointer.dir)
            verify_generation(pointer.dir, self.manifest)
            src = pointer.dir
            if not settings.chroma_url and _read_only(src):
                # Chroma writes to its database when it opens one: serve a private copy, checked
                # against the manifest like the original.
                self._copy = Path(tempfile.mkdtemp(prefix="rag-generation-"))
                src = self._copy / pointer.dir.name
                shutil.copytree(pointer.dir, src, ignore=shutil.ignore_patterns(
                    "*.lock", gen.READERS))
                verify_generation(src, self.manifest)
            self.catalog = Catalog(src / gen.CATALOG, readonly=True)
            counts = self.catalog.counts()
            if counts["spans"] != self.manifest.get("spans"):
                raise IndexUnavailable(
                    f"generation {pointer.dir.name} is inconsistent: the catalog holds "
                    f"{counts['spans']} spans, the manifest says {self.manifest.get('spans')}"
                )
            self.lexical = LexicalIndex.private_copy(
                src / gen.LEXICAL, self.manifest.get("checksums"), f"{gen.LEXICAL}/")
            if self.lexical.num_docs() != counts["spans"]:
                raise IndexUnavailable(
                    f"generation {pointer.dir.name} is inconsistent: the lexical index does "
                    "not match the catalog"
                )
            self.lexical.search(["rag-mcp-open-check"], 1)  # opens the postings of both fields
            if (src / gen.PAGES).is_dir():
                self.pages = LexicalIndex.private_copy(
                    src / gen.PAGES, self.manifest.get("checksums"), f"{gen.PAGES}/")
            self.vectors = store_class(settings).open_reader(
                settings, src, str(self.manifest.get("vector_collection", "")))
            if not self.vectors.holds(self.manifest.get("vectors")):
                raise IndexUnavailable(
                    f"generation {pointer.dir.name} is inconsistent: the vector store does not "
                    "match the manifest"
                )
            self.counts = counts
        except RagError:
            self.close()
            raise
        except Exception as exc:  # sqlite/tantivy/chroma damage surfaces as many types
            self.close()
            raise IndexUnavailable(
                f"generation {pointer.dir.name} cannot be read ({type(exc).__name__})"
            ) from exc

    def close(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        for name in ("lexical", "pages"):
            index: LexicalIndex | None = getattr(self, name, None)
            if index is not None:
                index.close()
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)
            self._copy = None
        if self.catalog is not None:
            self.catalog.close()
        if self._pin is not None:
            self._pin.release()
            self._pin = None


def check_existing(settings: Settings, pointer: gen.Pointer, manifest: dict[str, Any], *,
                   fully: bool = False) -> bool:
    """The check a ``rag-index`` run makes of the published generation: ``quick_verify``, and
    when that cannot vouch for it (or ``fully``) open it as a server would. True when it was
    opened fully. Raises ``IndexUnavailable`` on damage."""
    if not fully and quick_verify(pointer.dir, manifest):
        return False
    OpenIndex(settings, pointer).close()
    return True


class IndexHandle:
    """The index a server reads: reopens when ``rag-index`` publishes a new generation.

    ``get()`` costs one ``stat`` when nothing changed. A failed open is remembered for a moment
    so a broken index does not make every query retry the whole open.
    """

    RETRY_SECONDS = 1.0

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.base = settings.index_path
        self._lock = threading.Lock()
        self._open: OpenIndex | None = None
        self._retired: list[OpenIndex] = []
        self._error: IndexUnavailable | None = None
        self._error_stamp: Any = None
        self._error_at = 0.0

    def _unavailable(self, why: str) -> IndexUnavailable:
        return IndexUnavailable(
            f"{why}; build it with `{index_command(self.settings)}`",
            details={"command": index_command(self.settings)},
        )

    def _open_at(self, stamp: Any) -> OpenIndex | None:
        """The open generation if ``stamp`` is still its pointer's."""
        cur = self._open
        return cur if cur is not None and stamp == cur.pointer.stamp else None

    def get(self) -> OpenIndex:
        stamp = gen.pointer_stamp(self.base)
        if (ready := self._open_at(stamp)) is not None:
            return ready
        with self._lock:
            if (ready := self._open_at(stamp)) is not None:
                return ready
            cur = self._open
            if (self._error is not None and stamp == self._error_stamp
                    and time.monotonic() - self._error_at < self.RETRY_SECONDS):
                raise self._error
            try:
                pointer = gen.read_pointer(self.base)
                if pointer is None:
                    raise self._unavailable(f"no index for {self.settings.root} yet")
                fresh = OpenIndex(self.settings, pointer)
            except IndexUnavailable as exc:
                if "build it with" not in exc.message and "--rebuild" not in exc.message:
                    exc = IndexUnavailable(
                        f"{exc.message}; rebuild it with "
                        f"`{index_command(self.settings, rebuild=True)}`",
                        details={"command": index_command(self.settings, rebuild=True)},
                    )
                self._error, self._error_stamp, self._error_at = exc, stamp, time.monotonic()
                raise exc from None
            self._error = None
            if cur is not None:
                # Queries in flight may still use the old generation: close it on the next swap.
                for old in self._retired:
                    old.close()
                self._retired = [cur]
            self._open = fresh
            log.info("opened index generation %d (%d spans)", fresh.generation,
                     fresh.counts["spans"])
            return fresh

    def current(self) -> OpenIndex | None:
        """The open generation if it is still the published one (one ``stat``), else None:
        never opens anything, so it is safe on an event loop."""
        return self._open_at(gen.pointer_stamp(self.base))

    def close(self) -> None:
        with self._lock:
            for old in self._retired:
                old.close()
            self._retired = []
            if self._open is not None:
                self._open.close()
                self._open = None
