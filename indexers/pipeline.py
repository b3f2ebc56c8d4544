"""One index run: walk, diff against the current generation, chunk, embed, publish.

Only new or changed files are read and re-chunked (``indexers.changes`` finds them, from a walk
or from the paths a file watcher saw change); only spans whose embedded text is new to the index
(and to the embedding cache) reach the model; spans of deleted files disappear. Chunking runs in a
thread while the model embeds in the main thread (ONNX Runtime releases the GIL), so both cores
work. The model is loaded only once a span turns out to need it, in a thread of its own, while
the writer goes on storing spans and opening the vector store. Everything is written into a
private ``tmp-`` generation and published atomically (rag_mcp.index.generation), which is what makes
``kill -9`` at any moment safe; a run stopped by Ctrl-C or ``cancel`` leaves the published index
as it was and keeps the vectors computed so far.
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
from typing import TYPE_CHECKING, Any

import orjson

from indexers import changes, chunking, walk
from indexers.progress import Progress
from rag_mcp.config import Settings, git_head, index_base
from rag_mcp.embed.core import Embedder, load_embedder, model_identity
from rag_mcp.errors import IndexUnavailable
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog, FileRecord
from rag_mcp.index.lexical import name_tokens, tokenize
from rag_mcp.index.spans import (
    EMBED_TEXT_VERSION,
    Span,
    content_hash,
    digest,
    embedding_key,
    span_text,
)

if TYPE_CHECKING:
    import numpy as np

    from indexers.embcache import EmbeddingCache
    from rag_mcp.index.lexical import LexicalIndex
    from rag_mcp.index.store import VectorStore

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
    if manifest.get("embed_text_version", "1") != EMBED_TEXT_VERSION:
        return "the text the model reads for a span changed"
    if manifest.get("model_identity") != identity:
        same_model = (manifest.get("model"), manifest.get("backend")) == (
            settings.embed_model, settings.embed_backend)
        if same_model and manifest.get("embed_max_tokens", 0) != settings.embed_max_tokens:
            return f"embed.max_tokens changed to {settings.embed_max_tokens}"
        if same_model:  # new weights, or a new release computes this backend's vectors anew
            return (f"the vectors of {settings.embed_model} ({settings.embed_backend}) changed "
                    "(its weights or how this version computes them)")
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
        self.identity = model_identity(settings.embed_model, settings.embed_backend,
                                       cache_dir=settings.model_cache_path,
                                       max_tokens=settings.embed_max_tokens)
        self.vcol = _vector_collection(settings, self.identity)
        self.stats = RunStats(root=settings.root)
        self._factory = embedder_factory
        self._embedder: Embedder | None = None
        self._loader: threading.Thread | None = None
        self._loaded: Embedder | BaseException | None = None
        self.published: int | None = None  # the generation CURRENT names when the run starts
        self.dim = 0

    def start_loading(self) -> None:
        """Load the model in a thread, from the moment a span is known to need it.

        Building the ONNX Runtime session (~0.25 s) runs mostly without the GIL, so after a
        one-file edit it overlaps storing the spans and opening the vector store instead of
        adding to them. A run whose vectors are all in the embedding cache never loads it.
        """
        if self._embedder is not None or self._loader is not None:
            return
        if self._factory is None:
            self.p.log(f"loading embedding model {self.s.embed_model} ({self.s.embed_backend})")
        self._loader = threading.Thread(target=self._load, name="rag-index-model", daemon=True)
        self._loader.start()

    def _load(self) -> None:
        try:
            if self._factory is not None:
                self._loaded = self._factory()
            else:
                self._loaded = load_embedder(
                    self.s.embed_model, self.s.embed_backend, cache_dir=self.s.model_cache_path,
                    threads=self.s.embed_threads, batch_size=self.s.embed_batch)
        except BaseException as exc:  # raised again in the thread that asks for the model
            self._loaded = exc

    def finish_loading(self) -> None:
        # A model still being built must not outlive the run: a watcher would keep a stray
        # thread, and a CLI would tear the interpreter down under ONNX Runtime's feet.
        if self._loader is not None:
            self._loader.join()
            self._loader = None

    def embedder(self) -> Embedder:
        if self._embedder is None:
            self.start_loading()
            self.finish_loading()
            got, self._loaded = self._loaded, None
            if isinstance(got, BaseException):
                raise got
            assert got is not None
            self._embedder = got
            self.dim = got.dim
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
            emb = ch.embedding_text(c.rel, t)
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
            self.published = pointer.generation if pointer is not None else None
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
            self.finish_loading()
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
        # Imported here, not with the module: numpy, tantivy and the stores are ~0.15 s of
        # imports that a run finding nothing to update never needs.
        from indexers.embcache import EmbeddingCache
        from rag_mcp.index.handle import file_checksums, open_vectors
        from rag_mcp.index.lexical import LexicalIndex
        from rag_mcp.index.store import VectorStore

        s, st = self.s, self.stats
        changed, touched, deleted = cs.changed, cs.touched, cs.deleted
        self.skipped_files = dict(cs.skipped_files)
        self.p.start(len(changed))
        stop = threading.Event()
        # chunking starts first: its first file decides whether the model must load, the
        # sooner the better (see start_loading)
        q: queue.Queue = queue.Queue(maxsize=64)
        th = threading.Thread(target=self.producer, args=(changed, q, stop), daemon=True)
        th.start()
        vectors: VectorStore | None = None

        def store() -> VectorStore:
            # opened once the model is on its way, so the two overlap
            nonlocal vectors
            if vectors is None:
                if base_manifest is not None and not s.chroma_url:
                    # the copy of the previous generation's collection: see embedded_update
                    vectors = VectorStore.embedded_update(tmp / gen.CHROMA, self.vcol)
                else:
                    vectors = open_vectors(s, tmp, self.vcol, create=True)
            return vectors

        catalog: Catalog | None = None
        cache: EmbeddingCache | None = None
        try:
            catalog = Catalog(tmp / gen.CATALOG, readonly=False)
            lexical = LexicalIndex(tmp / gen.LEXICAL, create=True)
            # Shared by every repository indexed under the same index folder: keys carry the
            # model identity, and the same file in two checkouts (or two commits) is embedded
            # once.
            cache = EmbeddingCache(index_base(s) / "embcache.sqlite")
            if base_manifest is not None:
                self.dim = int(base_manifest.get("dim") or 0)
            for c in touched:
                catalog.touch_file(c.rel, c.size, c.mtime_ns)
            for path in [*deleted, *(c.rel for c in changed)]:
                gone = catalog.remove_file(path)
                if gone:
                    lexical.delete(sid for sid, _ in gone)
                    st.spans_removed += len(gone)
            st.files_deleted = len(deleted)
            st.files_unchanged = cs.present - len(changed)

            pending: dict[str, str] = {}  # key -> embedded text, waiting for the model
            cached: dict[str, np.ndarray] = {}  # vectors of pending keys read from the cache
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
                fresh = self._store_work(item, catalog, lexical, present, added, pending)
                if fresh and self._embedder is None and self._loader is None \
                        and not s.chroma_url:
                    # Until the model is loading, look each new key up at once: the first one
                    # the cache lacks starts the model (a Chroma server may still hold it,
                    # which only _flush can ask, so that store waits for _flush)
                    got = cache.get(fresh)
                    cached.update(got)
                    if len(got) < len(fresh):
                        self.start_loading()
                waiting += 1
                if len(pending) >= EMBED_FLUSH:
                    self._flush(pending, store(), cache, added, cached)
                if not pending:
                    # a file counts as done once its spans are embedded: the ETA then follows
                    # the model, not the chunker running ahead of it
                    self.p.advance(files=waiting)
                    waiting = 0
            th.join()
            # What does not need the last vectors runs before they are computed, while the
            # model may still be loading: opening the store, committing the catalog and the
            # lexical index, deleting generations no one needs any more.
            vec = store()
            counts = catalog.counts()
            catalog.set_meta("chunker_version", chunking.CHUNKER_VERSION)
            catalog.commit()
            lexical.commit()
            if self.published is not None:
                # what the clean-up after publishing would delete: older than the previous one
                gen.drop_old_generations(self.base, keep=self.published + 1)
            self._flush(pending, vec, cache, added, cached)
            self.p.advance(files=waiting)

            live = catalog.emb_keys()
            orphans = sorted((present | added) - live)
            if not s.chroma_url:
                vec.delete(orphans)
            elif base_manifest is not None:
                # A server is shared with readers of the previous generation: delete what the
                # previous run orphaned, one generation late.
                prev = set(base_manifest.get("orphans", []))
                vec.delete(sorted(prev - live))
            if not s.chroma_url and base_manifest is None:
                # A new collection saves its HNSW graph every 1,000 records only: the rest stays
                # in its log, and every reader that opens the generation would replay it, at
                # a cost (0.08-0.13 s at 2.2k vectors) and into a graph that differs from one
                # opening to the next (inserted by several threads), so the same query could
                # get other neighbours after a restart. Reopened for updating, the count below
                # applies the log once and saves the whole graph with it.
                vec.close()
                vectors = vec = VectorStore.embedded_update(tmp / gen.CHROMA, self.vcol)
            n_vec = vec.count() if not s.chroma_url else len(live)
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
                "embed_text_version": EMBED_TEXT_VERSION,
                "model": s.embed_model,
                "backend": s.embed_backend,
                "model_identity": self.identity,
                "dim": self.dim,
                "embed_max_tokens": s.embed_max_tokens,
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
            stop.set()  # the chunking thread gives up its next put
            self.p.finish()
            if cache is not None:
                cache.close()
            if catalog is not None:
                catalog.close()
            if vectors is not None:
                vectors.close()
        # Checksums of the closed files, so a reader refuses a damaged generation before any
        # store opens it (Chroma's HNSW loader can crash the process on a bad segment file).
        manifest["checksums"] = file_checksums(tmp)
        (tmp / gen.MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def _store_work(self, w: _Work, catalog: Catalog, lexical: LexicalIndex, present: set[str],
                    added: set[str], pending: dict[str, str]) -> list[str]:
        """Store one chunked file; returns the keys it added to ``pending``."""
        st = self.stats
        if w.record is None:
            c = w.cand
            self.skipped_files[c.rel] = (c.size, c.mtime_ns, w.skip)
            return []
        st.files_changed += 1
        catalog.put_file(w.record)
        fresh: list[str] = []
        for span, text, emb in w.spans:
            key = embedding_key(self.identity, emb)
            sid = catalog.add_span(span, key, text)
            lexical.add(sid, tokenize(text), name_tokens(span.path, span.symbol or span.heading))
            if key in present or key in added:
                st.vectors_reused += 1
            elif key not in pending:
                pending[key] = emb
                fresh.append(key)
        st.spans_added += len(w.spans)
        self.p.advance(spans=len(w.spans))
        return fresh

    def _flush(self, pending: dict[str, str], vectors: Any, cache: EmbeddingCache,
               added: set[str], looked_up: dict[str, np.ndarray]) -> None:
        if not pending:
            return
        import numpy as np

        keys = list(pending)
        cached = {k: looked_up.pop(k) for k in keys if k in looked_up}
        cached.update(cache.get([k for k in keys if k not in cached]))
        if self.s.chroma_url:
            on_server = vectors.existing([k for k in keys if k not in cached])
            added.update(on_server)
            self.stats.vectors_reused += len(on_server)
            keys = [k for k in keys if k not in on_server]
        todo = [k for k in keys if k not in cached]
        out_keys = [k for k in keys if k in cached]
        out_vecs = [cached[k] for k in out_keys]
        self.stats.vectors_reused += len(out_keys)
        if cached and not self.dim:
            self.dim = int(next(iter(cached.values())).shape[0])
        # Slices of similar length: each keeps the model's length batching, lands in the cache
        # at once (a stopped run loses at most one slice) and is a point where cancel is seen.
        todo.sort(key=lambda k: len(pending[k]))
        for i in range(0, len(todo), EMBED_SLICE):
            if self.cancel.is_set():
                raise RunCancelled("the index run was stopped")
            part = todo[i : i + EMBED_SLICE]
            t0 = time.perf_counter()
            vecs = self.embedder().embed_documents([pending[k] for k in part],
                                                   self.s.embed_max_tokens)
            self.stats.embed_seconds += time.perf_counter() - t0
            cache.put(part, vecs)
            out_keys += part
            out_vecs.extend(vecs)
            self.stats.embedded += len(part)
            self.p.advance(embedded=len(part))
        # One write per flush: each write to an updated store saves its whole HNSW graph
        # (VectorStore.embedded_update), and the tmp generation is thrown away on a crash anyway
        if out_keys:
            vectors.add(out_keys, np.stack(out_vecs))
            added.update(out_keys)
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
