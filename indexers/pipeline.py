"""One index run: walk, diff against the current generation, chunk, embed, publish.

Only new or changed files are read and re-chunked (``indexers.changes`` finds them, from a walk
or from the paths a file watcher saw change; ``indexers.chunk_feed`` chunks them in a thread);
only spans whose embedded text is new to the index (and to the embedding cache) reach the model
(``indexers.vector_writer``); spans of deleted files disappear. The model is loaded only once a
span turns out to need it, in a thread of its own (``indexers.model_loader``), while the writer
goes on storing spans and opening the vector store. Everything is written into a private
``tmp-`` generation and published atomically (``rag_mcp.index.generation``), which is what makes
``kill -9`` at any moment safe; a run stopped by Ctrl-C or ``cancel`` leaves the published index
as it was and keeps the vectors computed so far.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from indexers import changes, chunking, manifest
from indexers.chunk_feed import ChunkFeed, Work
from indexers.model_loader import ModelLoader
from indexers.progress import Progress
from indexers.vector_writer import RunCancelled, VectorWriter
from rag_mcp.config import Settings, index_base
from rag_mcp.embed import Embedder, model_identity
from rag_mcp.errors import IndexUnavailable
from rag_mcp.index import documents
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.handle import OpenIndex, check_existing, verify_generation
from rag_mcp.index.lexical import PAGE_KINDS, name_tokens, tokenize
from rag_mcp.index.spans import embedding_key
from rag_mcp.index.store import store_class

if TYPE_CHECKING:
    from rag_mcp.index.lexical import LexicalIndex

__all__ = ["RunCancelled", "RunStats", "run_index"]


@dataclass
class RunStats:
    root: str
    generation: int = 0
    published: bool = False
    rebuilt: str = ""
    files_total: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    spans_total: int = 0
    spans_added: int = 0
    spans_removed: int = 0
    embedded: int = 0
    vectors_reused: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    fallback: Counter[str] = field(default_factory=Counter)
    #: documents not read, by path: encrypted, damaged, without text, or of a format not read
    not_read: dict[str, str] = field(default_factory=dict)
    by_language: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    walk_seconds: float = 0.0
    chunk_seconds: float = 0.0
    embed_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["skipped"] = dict(self.skipped)
        d["fallback"] = dict(self.fallback)
        return d

    def counts_from(self, counts: dict[str, Any]) -> None:
        """Totals of a manifest or of a catalog's ``counts()``."""
        self.spans_total = int(counts.get("spans", 0))
        self.by_language = dict(counts.get("by_language", {}))
        self.by_kind = dict(counts.get("by_kind", {}))
        self.fallback = Counter(counts.get("fallback", {}))


class _Run:
    def __init__(self, settings: Settings, progress: Progress, rebuild: bool,
                 embedder_factory: Callable[[], Embedder] | None,
                 paths: Collection[str] | None = None,
                 cancel: threading.Event | None = None, verify: bool = False) -> None:
        self.s = settings
        self.verify = verify
        self.checked_fully = False  # the base generation was opened as a server would
        self.p = progress
        self.rebuild = rebuild
        self.paths = paths
        self.cancel = cancel or threading.Event()
        self.skipped_files: changes.SkippedFiles = {}
        self.base = settings.index_path
        self.identity = model_identity(settings.embed_model, settings.embed_backend,
                                       cache_dir=settings.model_cache_path,
                                       max_tokens=settings.embed_max_tokens)
        self.vcol = manifest.vector_collection(settings, self.identity)
        self.store = store_class(settings)
        self.stats = RunStats(root=settings.root)
        self.model = ModelLoader(settings, progress, embedder_factory)
        self.published: int | None = None  # the generation CURRENT names when the run starts

    # -- phase 1: what changed ---------------------------------------------------------------
    def open_base(self) -> tuple[gen.Pointer | None, dict[str, Any] | None, Catalog | None]:
        try:
            pointer = gen.read_pointer(self.base)
            if pointer is None:
                return None, None, None
            base_manifest = gen.read_manifest(pointer.dir)
            if self.paths is None:
                # A full run checks the base quickly first (sizes, small files' checksums, the
                # mtimes of large ones): a run that finds nothing to update stops there. One
                # that builds on the base opens it as a server would first (``full_check``).
                self.checked_fully = check_existing(self.s, pointer, base_manifest,
                                                    fully=self.verify)
            else:
                # A watcher's small update checks the bytes it is about to copy, not the counts.
                verify_generation(pointer.dir, base_manifest)
            catalog = Catalog(pointer.dir / gen.CATALOG, readonly=True)
            return pointer, base_manifest, catalog
        except IndexUnavailable as exc:
            self.stats.rebuilt = f"the existing index is damaged ({exc.message})"
            return None, None, None
        except Exception as exc:  # a garbage sqlite file raises sqlite3.DatabaseError, etc.
            self.stats.rebuilt = f"the existing index is damaged ({type(exc).__name__})"
            return None, None, None

    def full_check(self, pointer: gen.Pointer) -> bool:
        """Before building on the base: open it as a server would (checksums, graphs, the
        counts of catalog, lexical index and vectors), since damage copied into the next
        generation would get fresh checksums there and be served as sound. False (and said)
        when it is damaged."""
        if self.checked_fully or self.paths is not None:
            return True
        try:
            OpenIndex(self.s, pointer).close()
        except IndexUnavailable as exc:
            self.stats.rebuilt = f"the existing index is damaged ({exc.message})"
            self.p.log(f"rebuilding the index: {self.stats.rebuilt}")
            return False
        self.checked_fully = True
        return True

    def extendable(self, pointer: gen.Pointer | None,
                   base_manifest: dict[str, Any] | None) -> bool:
        """Whether the run starts from the base generation; says why it rebuilds otherwise."""
        st = self.stats
        reuse = pointer is not None and base_manifest is not None and not self.rebuild
        if self.rebuild and pointer is not None:
            st.rebuilt = "--rebuild"
        elif reuse and base_manifest is not None:
            why = manifest.incompatible(base_manifest, self.s, self.identity, self.store.kind)
            if why:
                st.rebuilt, reuse = why, False
        if st.rebuilt:
            self.p.log(f"rebuilding the index: {st.rebuilt}")
        return reuse

    def find_changes(self, old: dict[str, Any], base_manifest: dict[str, Any] | None
                     ) -> changes.ChangeSet:
        skipped = changes.skipped_from_manifest(base_manifest)
        t0 = time.perf_counter()
        if base_manifest is not None and self.paths is not None:
            cs = changes.from_paths(self.s, self.paths, old, skipped,
                                    base_manifest.get("skipped_paths", {}))
        else:
            if self.paths is not None:
                self.p.log("no index to update yet: indexing the whole tree")
            cs = changes.from_walk(self.s, old, skipped, on_progress=self.p.walking)
        self.stats.walk_seconds = time.perf_counter() - t0
        self.stats.files_total = cs.present
        return cs

    # -- the run -----------------------------------------------------------------------------
    def run(self, wait: bool) -> RunStats:
        t_start = time.perf_counter()
        st = self.stats
        lock = gen.WriterLock(self.base)
        lock.acquire(wait=wait, on_wait=lambda pid: self.p.log(
            f"waiting for another rag-index (pid {pid}) to finish with this index"))
        tmp: Path | None = None
        base_catalog: Catalog | None = None
        try:
            gen.collect_garbage(self.base, keep=0)  # tmp folders of crashed runs
            pointer, base_manifest, base_catalog = self.open_base()
            self.published = pointer.generation if pointer is not None else None
            if not self.extendable(pointer, base_manifest):
                base_manifest = None
            try:
                old = (base_catalog.files()
                       if base_manifest is not None and base_catalog is not None else {})
            except sqlite3.DatabaseError as exc:  # a catalog the quick check vouched for
                st.rebuilt = f"the existing index is damaged ({type(exc).__name__})"
                self.p.log(f"rebuilding the index: {st.rebuilt}")
                base_manifest, old = None, {}
            cs = self.find_changes(old, base_manifest)
            if (base_manifest is not None and pointer is not None and not cs.empty
                    and not self.full_check(pointer)):
                # damage the quick check could not see: rebuild from nothing
                base_manifest, old = None, {}
                if base_catalog is not None:
                    base_catalog.close()
                    base_catalog = None
                cs = self.find_changes(old, None)
            if base_manifest is not None and pointer is not None and cs.empty:
                st.generation = pointer.generation
                st.counts_from(base_manifest)
                st.skipped.update(base_manifest.get("skipped", {}))
                st.not_read = documents_not_read(changes.skipped_from_manifest(base_manifest))
                st.files_unchanged = cs.present
                st.seconds = time.perf_counter() - t_start
                return st
            n = gen.next_generation(self.base)
            tmp = gen.make_tmp_dir(self.base, n)
            present: set[str] = set()
            if base_manifest is not None and pointer is not None and base_catalog is not None:
                gen.copy_generation(pointer.dir, tmp)
                self.store.carry_over(pointer.dir, tmp)
                present = base_catalog.emb_keys()
            if base_catalog is not None:
                base_catalog.close()
                base_catalog = None
            self.write(tmp, n, cs, present, base_manifest)
            gen.publish(self.base, tmp, n)
            tmp = None
            st.generation, st.published = n, True
            gen.collect_garbage(self.base, keep=n)
            st.seconds = time.perf_counter() - t_start
            return st
        finally:
            self.model.join()
            if base_catalog is not None:
                base_catalog.close()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            lock.release()

    def write(self, tmp: Path, n: int, cs: changes.ChangeSet, present: set[str],
              base_manifest: dict[str, Any] | None) -> None:
        """Apply ``cs`` to the copy of the base generation in ``tmp`` and write its manifest."""
        # Imported here, not with the module: numpy, tantivy and the stores are ~0.15 s of
        # imports that a run finding nothing to update never needs.
        from rag_mcp.index.handle import file_checksums, file_stats
        from rag_mcp.index.lexical import LexicalIndex

        self.skipped_files = dict(cs.skipped_files)
        self.p.start(len(cs.changed))
        # chunking starts first: its first file decides whether the model must load, the
        # sooner the better (see ModelLoader)
        feed = ChunkFeed(self.s, cs.changed)
        catalog: Catalog | None = None
        vectors: VectorWriter | None = None
        try:
            catalog = Catalog(tmp / gen.CATALOG, readonly=False)
            lexical = LexicalIndex(tmp / gen.LEXICAL, create=True)
            pages = LexicalIndex(tmp / gen.PAGES, create=True)
            vectors = self.vector_writer(tmp, present, base_manifest)
            self.forget(cs, catalog, lexical, pages)
            for work in feed:
                self.check_cancel()
                self.store_file(work, catalog, lexical, pages, vectors)
            self.check_cancel()
            self.stats.chunk_seconds = feed.seconds
            pages.commit()
            counts = self.commit(catalog, lexical, vectors)
            vectors.drain()
            live = catalog.emb_keys()
            earlier = list(base_manifest.get("orphans", [])) if base_manifest else []
            n_vectors, orphans = vectors.finish(live, earlier)
            if lexical.num_docs() != counts["spans"] or n_vectors != len(live):
                raise IndexUnavailable(
                    f"verification failed: {counts['spans']} spans, {lexical.num_docs()} lexical "
                    f"documents, {n_vectors} vectors for {len(live)} keys")
            record = self.record(n, counts, cs, vectors, n_vectors, orphans)
        finally:
            feed.stop()  # the chunking thread gives up its next put
            self.p.finish()
            if vectors is not None:
                vectors.close()
            if catalog is not None:
                catalog.close()
        # Checksums of the closed files, so a reader refuses a damaged generation before any
        # store opens it (Chroma's HNSW loader can crash the process on a bad segment file).
        record["checksums"] = file_checksums(tmp)
        record["stats"] = file_stats(tmp, record["checksums"])
        (tmp / gen.MANIFEST).write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))

    def vector_writer(self, tmp: Path, present: set[str],
                      base_manifest: dict[str, Any] | None) -> VectorWriter:
        from indexers.embcache import EmbeddingCache

        update = base_manifest is not None
        return VectorWriter(
            present=present, shared=self.store.shared, model=self.model, progress=self.p,
            open_store=lambda: self.store.open_writer(self.s, tmp, self.vcol, update=update),
            # Shared by every repository indexed under the same index folder: keys carry the
            # model identity, and the same file in two checkouts (or two commits) is embedded
            # once.
            cache=EmbeddingCache(index_base(self.s) / "embcache.sqlite"),
            cancel=self.cancel, max_tokens=self.s.embed_max_tokens,
            dim=int((base_manifest or {}).get("dim") or 0))

    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise RunCancelled("the index run was stopped")

    def forget(self, cs: changes.ChangeSet, catalog: Catalog, lexical: LexicalIndex,
               pages: LexicalIndex) -> None:
        """Drop the spans (and page) of deleted and changed files; note the touched files' new
        mtimes."""
        st = self.stats
        for c in cs.touched:
            catalog.touch_file(c.rel, c.size, c.mtime_ns)
        for path in [*cs.deleted, *(c.rel for c in cs.changed)]:
            gone = catalog.remove_file(path)
            if gone:
                lexical.delete(sid for sid, _ in gone)
                pages.delete([min(sid for sid, _ in gone)])
                st.spans_removed += len(gone)
        st.files_deleted = len(cs.deleted)
        st.files_unchanged = cs.present - len(cs.changed)

    def store_file(self, w: Work, catalog: Catalog, lexical: LexicalIndex, pages: LexicalIndex,
                   vectors: VectorWriter) -> None:
        """Store one chunked file's record and spans; its vectors go to ``vectors``; a page of
        prose also goes whole into ``pages``, keyed by its first span's sid."""
        # A file counts once stored (the model is at most one pool of spans behind, so the ETA
        # still follows it); counted only when its spans were embedded, a run whose spans fit
        # in one pool showed "0/N files" until its end, and skipped files never counted.
        self.p.advance(files=1, spans=len(w.spans))
        if w.record is None:
            c = w.cand
            self.skipped_files[c.rel] = (c.size, c.mtime_ns, w.skip)
            return
        self.stats.files_changed += 1
        catalog.put_file(w.record)
        first = 0
        for span, text, emb in w.spans:
            key = embedding_key(self.identity, emb)
            sid = catalog.add_span(span, key, text)
            first = first or sid
            lexical.add(sid, tokenize(text), name_tokens(span.path, span.symbol or span.heading))
            vectors.want(key, emb)
        if first and w.spans[0][0].kind in PAGE_KINDS:
            pages.add(first, tokenize("\n".join(t for _, t, _ in w.spans)),
                      name_tokens(w.spans[0][0].path, None))
        self.stats.spans_added += len(w.spans)
        vectors.file_stored()

    def commit(self, catalog: Catalog, lexical: LexicalIndex,
               vectors: VectorWriter) -> dict[str, Any]:
        """What does not need the last vectors runs before they are computed, while the model
        may still be loading: opening the store, committing the catalog and the lexical index,
        deleting generations no one needs any more. Returns the catalog's counts."""
        vectors.open()
        counts = catalog.counts()
        catalog.set_meta("chunker_version", chunking.CHUNKER_VERSION)
        catalog.commit()
        lexical.commit()
        if self.published is not None:
            # what the clean-up after publishing would delete: older than the previous one
            gen.drop_old_generations(self.base, keep=self.published + 1)
        return counts

    def record(self, n: int, counts: dict[str, Any], cs: changes.ChangeSet,
               vectors: VectorWriter, n_vectors: int, orphans: list[str]) -> dict[str, Any]:
        """Fill the run's statistics and return the generation's manifest."""
        st = self.stats
        st.counts_from(counts)
        st.skipped = manifest.skipped_total(cs, self.skipped_files)
        st.not_read = documents_not_read(self.skipped_files)
        st.embedded, st.embed_seconds = vectors.embedded, vectors.embed_seconds
        st.vectors_reused = vectors.reused
        return manifest.build(self.s, identity=self.identity, store_kind=self.store.kind,
                              generation=n, dim=vectors.dim, counts=counts, vectors=n_vectors,
                              orphans=orphans, cs=cs, skipped_files=self.skipped_files,
                              run=st.to_dict())


def documents_not_read(skipped_files: changes.SkippedFiles) -> dict[str, str]:
    """The documents among the skipped files, with the reason each was not read."""
    return {rel: reason for rel, (_, _, reason) in sorted(skipped_files.items())
            if reason in documents.REASONS}


def run_index(settings: Settings, *, rebuild: bool = False, wait: bool = True,
              progress: Progress | None = None,
              embedder_factory: Callable[[], Embedder] | None = None,
              paths: Collection[str] | None = None,
              cancel: threading.Event | None = None, verify: bool = False) -> RunStats:
    """Bring the index of ``settings.root`` up to date; returns what the run did.

    Args:
        paths: repo-relative files or folders known to have changed (a file watcher's batch);
            only they are examined. None walks the whole tree.
        cancel: set it from another thread to stop the run; it raises ``RunCancelled`` and
            publishes nothing (vectors already computed stay in the embedding cache).
        verify: open the existing index as a server would even when nothing changed (a run
            that finds nothing to update checks it quickly: ``quick_verify``).
    """
    run = _Run(settings, progress or Progress(quiet=True), rebuild, embedder_factory, paths,
               cancel, verify)
    return run.run(wait)
