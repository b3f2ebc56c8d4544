"""One index run: walk, diff against the current generation, chunk, embed, publish.

Only new or changed files are read and re-chunked (``indexers.changes`` finds them, from a walk
or from the paths a file watcher saw change); only spans whose embedded text is new to the index
(and to the embedding cache) reach the model; spans of deleted files disappear. Chunking runs in a
thread while the model embeds in the main thread (ONNX Runtime releases the GIL), so both cores
work. Everything is written into a private ``tmp-`` generation and published atomically
(rag_mcp.generation), which is what makes ``kill -9`` at any moment safe; a run stopped by Ctrl-C
or ``cancel`` leaves the published index as it was and keeps the vectors computed so far.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from indexers import changes, chunking, walk
from indexers.embcache import EmbeddingCache
from indexers.progress import Progress
from rag_mcp import generation as gen
from rag_mcp.catalog import Catalog, FileRecord
from rag_mcp.config import Settings, git_head, index_base
from rag_mcp.embed import Embedder, load_embedder, model_identity
from rag_mcp.errors import IndexUnavailable
from rag_mcp.index import file_checksums, open_vectors
from rag_mcp.lexical import LexicalIndex, name_tokens, tokenize
from rag_mcp.spans import Span, content_hash, digest, embedding_key, embedding_text, span_text

EMBED_FLUSH = 512  # texts gathered before embedding: larger pools batch by length better
EMBED_SLICE = 128  # texts per model call, taken in length order from the pool


class RunCancelled(Exception):
    """The run was asked to stop (``cancel`` set); nothing was published."""


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


@dataclass
class _Work:
    """One changed file after chunking, handed from the chunking thread to the writer."""

    cand: walk.Candidate
    record: FileRecord | None  # None: the file turned out unindexable (binary, secret, ...)
    skip: str = ""
    spans: list[tuple[Span, str, str]] = field(default_factory=list)  # (span, text, embedded)


def _incompatible(manifest: dict[str, Any], settings: Settings, identity: str) -> str:
    """Why the base generation cannot be extended ("" when it can)."""
    if manifest.get("chunker_version") != chunking.CHUNKER_VERSION:
        return "the chunker changed"
    if manifest.get("model_identity") != identity:
        return f"the embedding model changed to {settings.embed_model} ({settings.embed_backend})"
    if manifest.get("config_hash") != settings.index_config_hash():
        return "index settings changed"
    if manifest.get("store") != ("http" if settings.chroma_url else "embedded"):
        return "the vector store changed"
    return ""


def _vector_collection(settings: Settings, identity: str) -> str:
    # One collection per model: a Chroma collection has one dimension, and a server shared by
    # readers of the previous generation must keep that model's vectors until they move on.
    from hashlib import sha1

    return f"{settings.collection_name}-v{sha1(identity.encode()).hexdigest()[:8]}"


class _Run:
    def __init__(self, settings: Settings, progress: Progress, rebuild: bool,
                 embedder_factory: Callable[[], Embedder] | None,
                 paths: Collection[str] | None = None,
                 cancel: threading.Event | None = None) -> None:
        self.s = settings
        self.p = progress
        self.rebuild = rebuild
        self.paths = paths
        self.cancel = cancel or threading.Event()
        self.skipped_files: changes.SkippedFiles = {}
        self.base = settings.index_path
        self.identity = model_identity(settings.embed_model, settings.embed_backend)
        self.vcol = _vector_collection(settings, self.identity)
        self.stats = RunStats(root=settings.root)
        self._factory = embedder_factory
        self._embedder: Embedder | None = None
        self.dim = 0

    def embedder(self) -> Embedder:
        if self._embedder is None:
            if self._factory is not None:
                self._embedder = self._factory()
            else:
                self.p.log(f"loading embedding model {self.s.embed_model} "
                           f"({self.s.embed_backend})")
                self._embedder = load_embedder(
                    self.s.embed_model, self.s.embed_backend, cache_dir=self.s.model_cache_path,
                    threads=self.s.embed_threads, batch_size=self.s.embed_batch)
            self.dim = self._embedder.dim
        return self._embedder

    # -- phase 1: what changed ---------------------------------------------------------------
    def open_base(self) -> tuple[gen.Pointer | None, dict[str, Any] | None, Catalog | None]:
        try:
            pointer = gen.read_pointer(self.base)
            if pointer is None:
                return None, None, None
            manifest = gen.read_manifest(pointer.dir)
            catalog = Catalog(pointer.dir / gen.CATALOG, readonly=True)
            # A watcher's small update skips this full scan of the catalog (0.1 s per run at
            # 18k spans): the new generation is verified whole before it is published anyway.
            if self.paths is None and catalog.counts()["spans"] != manifest.get("spans"):
                catalog.close()
                raise IndexUnavailable("catalog and manifest disagree")
            return pointer, manifest, catalog
        except IndexUnavailable as exc:
            self.stats.rebuilt = f"the existing index is damaged ({exc.message})"
            return None, None, None
        except Exception as exc:  # a garbage sqlite file raises sqlite3.DatabaseError, etc.
            self.stats.rebuilt = f"the existing index is damaged ({type(exc).__name__})"
            return None, None, None

    # -- phase 2: chunk in a thread ----------------------------------------------------------
    def chunk_one(self, c: walk.Candidate) -> _Work:
        try:
            data = c.abs_path.read_bytes()
        except OSError:
            return _Work(c, None, "unreadable")
        reason = walk.check_content(c.rel, data)
        if reason:
            return _Work(c, None, reason)
        text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
        fc = chunking.chunk_file(c.rel, text, budget_chars=self.s.chunk_chars,
                                 window_lines=self.s.window_lines,
                                 window_overlap=self.s.window_overlap)
        fhash = content_hash(data)
        rec = FileRecord(c.rel, fhash, c.size, c.mtime_ns, fc.language, fc.kind,
                         len(fc.lines), len(data), fc.fallback)
        work = _Work(c, rec)
        for ch in fc.chunks:
            t = span_text(fc.lines, ch.start_line, ch.end_line)
            span = Span(path=c.rel, start_line=ch.start_line, end_line=ch.end_line,
                        digest=digest(t), kind=ch.kind, language=fc.language, symbol=ch.symbol,
                        parent=ch.parent, heading=ch.heading, preview=ch.preview[:1000],
                        byte_len=len(t.encode("utf-8", "surrogatepass")), file_hash=fhash,
                        chunker_version=chunking.CHUNKER_VERSION, meta=ch.meta)
            emb = embedding_text(c.rel, ch.symbol or ch.heading, ch.context, t)
            work.spans.append((span, t, emb))
        return work

    def producer(self, todo: list[walk.Candidate], out: queue.Queue, stop: threading.Event
                 ) -> None:
        def put(item: object) -> bool:
            # A bounded put that gives up once the writer stopped (error, Ctrl-C, cancel), so a
            # long-lived watcher process never keeps a thread blocked on a dead queue.
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            for c in todo:
                t0 = time.perf_counter()
                work = self.chunk_one(c)
                self.stats.chunk_seconds += time.perf_counter() - t0  # parsing only, no waits
                if not put(work):
                    return
        except BaseException as exc:  # surface in the main thread, never die silently
            put(exc)
        finally:
            put(None)

    # -- phase 3: write ----------------------------------------------------------------------
    def run(self, wait: bool) -> RunStats:
        t_start = time.perf_counter()
        s, st = self.s, self.stats
        lock = gen.WriterLock(self.base)
        lock.acquire(wait=wait, on_wait=lambda pid: self.p.log(
            f"waiting for another rag-index (pid {pid}) to finish with this index"))
        tmp: Path | None = None
        base_catalog: Catalog | None = None
        try:
            gen.collect_garbage(self.base, keep=0)  # tmp folders of crashed runs
            pointer, manifest, base_catalog = self.open_base()
            reuse = pointer is not None and manifest is not None and not self.rebuild
            if self.rebuild and pointer is not None:
                st.rebuilt = "--rebuild"
            elif reuse and manifest is not None:
                why = _incompatible(manifest, s, self.identity)
                if why:
                    st.rebuilt, reuse = why, False
            if st.rebuilt:
                self.p.log(f"rebuilding the index: {st.rebuilt}")
            old = base_catalog.files() if (reuse and base_catalog) else {}
            base_manifest = manifest if reuse else None
            skipped = changes.skipped_from_manifest(base_manifest)

            t0 = time.perf_counter()
            if base_manifest is not None and self.paths is not None:
                cs = changes.from_paths(s, self.paths, old, skipped,
                                        base_manifest.get("skipped_paths", {}))
            else:
                if self.paths is not None:
                    self.p.log("no index to update yet: indexing the whole tree")
                cs = changes.from_walk(s, old, skipped)
            st.walk_seconds = time.perf_counter() - t0
            st.files_total = cs.present
            if reuse and cs.empty:
                assert manifest is not None and pointer is not None
                st.generation = pointer.generation
                self._fill_counts_from(manifest, st)
                st.files_unchanged = cs.present
                st.seconds = time.perf_counter() - t_start
                return st

            n = gen.next_generation(self.base)
            tmp = gen.make_tmp_dir(self.base, n)
            if reuse and pointer is not None:
                gen.copy_generation(pointer.dir, tmp, with_vectors=not s.chroma_url)
            present_keys = base_catalog.emb_keys() if (reuse and base_catalog) else set()
            if base_catalog is not None:
                base_catalog.close()
                base_catalog = None
            self.write(tmp, n, cs, present_keys, base_manifest)
            gen.publish(self.base, tmp, n)
            tmp = None
            st.generation, st.published = n, True
            gen.collect_garbage(self.base, keep=n)
            st.seconds = time.perf_counter() - t_start
            return st
        finally:
            if base_catalog is not None:
                base_catalog.close()
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            lock.release()

    @staticmethod
    def _fill_counts_from(manifest: dict[str, Any], st: RunStats) -> None:
        st.spans_total = int(manifest.get("spans", 0))
        st.by_language = dict(manifest.get("by_language", {}))
        st.by_kind = dict(manifest.get("by_kind", {}))
        st.fallback.update(manifest.get("fallback", {}))
        st.skipped.update(manifest.get("skipped", {}))

    def write(self, tmp: Path, n: int, cs: changes.ChangeSet, present: set[str],
              base_manifest: dict[str, Any] | None) -> None:
        s, st = self.s, self.stats
        changed, touched, deleted = cs.changed, cs.touched, cs.deleted
        self.skipped_files = dict(cs.skipped_files)
        catalog = Catalog(tmp / gen.CATALOG, readonly=False)
        lexical = LexicalIndex(tmp / gen.LEXICAL, create=True)
        vectors = open_vectors(s, tmp, self.vcol, create=True)
        # Shared by every repository indexed under the same index folder: keys carry the model
        # identity, and the same file in two checkouts (or two commits) is embedded once.
        cache = EmbeddingCache(index_base(s) / "embcache.sqlite")
        stop = threading.Event()
        try:
            if base_manifest is not None:
                self.dim = int(base_manifest.get("dim") or 0)
            for c in touched:
                catalog.touch_file(c.rel, c.size, c.mtime_ns)
            dropped: list[str] = []
            for path in [*deleted, *(c.rel for c in changed)]:
                gone = catalog.remove_file(path)
                if gone:
                    lexical.delete(sid for sid, _ in gone)
                    dropped += [k for _, k in gone]
                    st.spans_removed += len(gone)
            st.files_deleted = len(deleted)
            st.files_unchanged = cs.present - len(changed)

            self.p.start(len(changed))
            q: queue.Queue = queue.Queue(maxsize=64)
            th = threading.Thread(target=self.producer, args=(changed, q, stop), daemon=True)
            th.start()
            pending: dict[str, str] = {}  # key -> embedded text, waiting for the model
            waiting = 0  # files stored whose spans are still in ``pending``
            added: set[str] = set()
            while True:
                if self.cancel.is_set():
                    raise RunCancelled("the index run was stopped")
                item = q.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                self._store_work(item, catalog, lexical, present, added, pending)
                waiting += 1
                if len(pending) >= EMBED_FLUSH:
                    self._flush(pending, vectors, cache, added)
                if not pending:
                    # a file counts as done once its spans are embedded: the ETA then follows
                    # the model, not the chunker running ahead of it
                    self.p.advance(files=waiting)
                    waiting = 0
            th.join()
            self._flush(pending, vectors, cache, added)
            self.p.advance(files=waiting)

            live = catalog.emb_keys()
            orphans = sorted((present | added) - live)
            if not s.chroma_url:
                vectors.delete(orphans)
            elif base_manifest is not None:
                # A server is shared with readers of the previous generation: delete what the
                # previous run orphaned, one generation late.
                prev = set(base_manifest.get("orphans", []))
                vectors.delete(sorted(prev - live))
            counts = catalog.counts()
            catalog.set_meta("chunker_version", chunking.CHUNKER_VERSION)
            catalog.commit()
            lexical.commit()
            n_vec = vectors.count() if not s.chroma_url else len(live)
            if lexical.num_docs() != counts["spans"] or (not s.chroma_url and n_vec != len(live)):
                raise IndexUnavailable(
                    f"verification failed: {counts['spans']} spans, {lexical.num_docs()} lexical "
                    f"documents, {n_vec} vectors for {len(live)} keys"
                )
            st.spans_total = int(counts["spans"])  # type: ignore[call-overload]
            st.by_language = dict(counts["by_language"])  # type: ignore[call-overload]
            st.by_kind = dict(counts["by_kind"])  # type: ignore[call-overload]
            st.fallback = Counter(counts["fallback"])  # type: ignore[call-overload]
            st.skipped = cs.skipped_paths + Counter(r for _, _, r in self.skipped_files.values())
            manifest = {
                "schema_version": gen.SCHEMA_VERSION,
                "chunker_version": chunking.CHUNKER_VERSION,
                "model": s.embed_model,
                "backend": s.embed_backend,
                "model_identity": self.identity,
                "dim": self.dim,
                "config_hash": s.index_config_hash(),
                "generation": n,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "created_ts": time.time(),
                "root": s.root,
                "collection": s.collection_name,
                "vector_collection": self.vcol,
                "store": "http" if s.chroma_url else "embedded",
                "git_head": git_head(Path(s.root)),
                "files": counts["files"],
                "spans": counts["spans"],
                "vectors": n_vec,
                "by_language": counts["by_language"],
                "by_kind": counts["by_kind"],
                "skipped": dict(st.skipped),
                "skipped_paths": dict(cs.skipped_paths),
                "skipped_files": {k: list(v) for k, v in sorted(self.skipped_files.items())},
                "fallback": counts["fallback"],
                "orphans": orphans if s.chroma_url else [],
                "run": {k: v for k, v in st.to_dict().items()
                        if k not in ("by_language", "by_kind", "skipped", "fallback")},
            }
            cache.prune(live)
        finally:
            stop.set()
            self.p.finish()
            cache.close()
            catalog.close()
            vectors.close()
        # Checksums of the closed files, so a reader refuses a damaged generation before any
        # store opens it (Chroma's HNSW loader can crash the process on a bad segment file).
        manifest["checksums"] = file_checksums(tmp)
        (tmp / gen.MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def _store_work(self, w: _Work, catalog: Catalog, lexical: LexicalIndex, present: set[str],
                    added: set[str], pending: dict[str, str]) -> None:
        st = self.stats
        if w.record is None:
            c = w.cand
            self.skipped_files[c.rel] = (c.size, c.mtime_ns, w.skip)
            return
        st.files_changed += 1
        catalog.put_file(w.record)
        for span, text, emb in w.spans:
            key = embedding_key(self.identity, emb)
            sid = catalog.add_span(span, key, text)
            lexical.add(sid, tokenize(text), name_tokens(span.path, span.symbol or span.heading))
            if key in present or key in added:
                st.vectors_reused += 1
            else:
                pending[key] = emb
        st.spans_added += len(w.spans)
        self.p.advance(spans=len(w.spans))

    def _flush(self, pending: dict[str, str], vectors: Any, cache: EmbeddingCache,
               added: set[str]) -> None:
        if not pending:
            return
        keys = list(pending)
        cached = cache.get(keys)
        if self.s.chroma_url:
            on_server = vectors.existing([k for k in keys if k not in cached])
            added.update(on_server)
            self.stats.vectors_reused += len(on_server)
            keys = [k for k in keys if k not in on_server]
        todo = [k for k in keys if k not in cached]
        if cached:
            ck = [k for k in keys if k in cached]
            vectors.add(ck, np.stack([cached[k] for k in ck]))
            added.update(ck)
            self.stats.vectors_reused += len(ck)
            if not self.dim:
                self.dim = int(next(iter(cached.values())).shape[0])
        # Slices of similar length: each keeps the model's length batching, lands in the cache
        # at once (a stopped run loses at most one slice) and is a point where cancel is seen.
        todo.sort(key=lambda k: len(pending[k]))
        for i in range(0, len(todo), EMBED_SLICE):
            if self.cancel.is_set():
                raise RunCancelled("the index run was stopped")
            part = todo[i : i + EMBED_SLICE]
            t0 = time.perf_counter()
            vecs = self.embedder().embed_documents([pending[k] for k in part])
            self.stats.embed_seconds += time.perf_counter() - t0
            cache.put(part, vecs)
            vectors.add(part, vecs)
            added.update(part)
            self.stats.embedded += len(part)
            self.p.advance(embedded=len(part))
        pending.clear()


def run_index(settings: Settings, *, rebuild: bool = False, wait: bool = True,
              progress: Progress | None = None,
              embedder_factory: Callable[[], Embedder] | None = None,
              paths: Collection[str] | None = None,
              cancel: threading.Event | None = None) -> RunStats:
    """Bring the index of ``settings.root`` up to date; returns what the run did.

    Args:
        paths: repo-relative files or folders known to have changed (a file watcher's batch);
            only they are examined. None walks the whole tree.
        cancel: set it from another thread to stop the run; it raises ``RunCancelled`` and
            publishes nothing (vectors already computed stay in the embedding cache).
    """
    run = _Run(settings, progress or Progress(quiet=True), rebuild, embedder_factory, paths,
               cancel)
    return run.run(wait)
