"""Keep an index fresh while files change: ``rag-index --watch`` and ``rag-mcp --watch``.

File-system events (``watchdog``: inotify on Linux) are filtered by the walker's own ignore rules
and gathered into one batch of changed paths until the tree has been quiet for
``watch.debounce_ms``; the batch becomes one incremental run that examines only those paths
(``run_index(paths=...)``): a save costs a few stats, the edited file's re-chunking and the
embedding of its changed spans only. A branch switch touching hundreds of files arrives as a
burst of events and is indexed as one batch; while git holds its ``index.lock`` the batch keeps
waiting. A change of a ``.gitignore``/``.ragignore``, lost events (inotify queue overflow) and a
periodic reconciliation fall back to a full walk, which is cheap when nothing else changed.

Watches: the root itself, plus one recursive watch per top-level folder the walker would enter,
so ``.git``, ``node_modules``, ``.venv``, build output and the index folder cost no inotify watch
and no event storm during a build (a root with very many top-level folders gets one recursive
watch instead).

One watcher per index across processes: ``watcher.lock`` (``rag_mcp.index.generation``). A second
watcher logs that another process (pid) keeps the index fresh, stays a plain reader and takes
over if that process stops. Each run still takes the writer lock without waiting: when a manual
``rag-index`` holds it, the batch is kept and retried.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from indexers.debounce import Batch
from indexers.pipeline import RunCancelled, RunStats, run_index
from indexers.progress import Progress
from indexers.walk import IgnoreMatcher
from rag_mcp.config import Settings, find_git_root, index_base
from rag_mcp.embed import Embedder, load_embedder
from rag_mcp.errors import IndexBusy, RagError
from rag_mcp.index import generation as gen

log = logging.getLogger(__name__)

RULE_FILES = frozenset({".gitignore", ".ragignore"})
MAX_TOP_WATCHES = 64  # beyond this many top-level folders, one recursive watch on the root
RECONCILE_SECONDS = 600.0  # a full walk now and then catches anything events missed
TAKEOVER_SECONDS = 2.0  # how often a reader tries to become the watcher
RETRY_MAX_SECONDS = 30.0
# Opens, reads and folder mtimes are left out at the inotify level: the indexer itself reads every
# file it indexes, and those events would otherwise flood the queue during a run.
EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent,
]


class _OverflowAlarm(logging.Handler):
    """watchdog reports a kernel event-queue overflow only in its log: ask for a full walk."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(logging.WARNING)
        self.batch = batch

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in str(record.msg).lower():
            self.batch.add(None)


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.w = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        for i, raw in enumerate((event.src_path, event.dest_path if kind == "moved" else "")):
            if not raw:
                continue
            path = os.fsdecode(raw)
            if event.is_directory and os.path.dirname(path) == str(self.w.root):
                self.w.top_level_changed(os.path.basename(path),
                                         exists=kind == "created" or (kind == "moved" and i == 1))
            self.w.saw(path, event.is_directory)


class Watcher:
    """Turns file events under ``settings.root`` into incremental index runs."""

    def __init__(self, settings: Settings, *, on_pending: Callable[[int], None] | None = None,
                 on_published: Callable[[int], None] | None = None,
                 progress: Progress | None = None, rebuild: bool = False,
                 embedder_factory: Callable[[], Embedder] | None = None) -> None:
        self.s = settings
        self.root = Path(os.path.realpath(settings.root))
        self.on_pending = on_pending or (lambda n: None)
        self.on_published = on_published or (lambda g: None)
        self.progress = progress
        self.rebuild = rebuild
        self.batch = Batch(settings.watch_debounce_ms / 1000.0,
                           max(2.0, 10 * settings.watch_debounce_ms / 1000.0))
        self.stop_event = threading.Event()
        # the last batches and what their runs did, for `--watch` messages and tests
        self.history: deque[tuple[frozenset[str], bool, RunStats]] = deque(maxlen=200)
        self.role = gen.WriterLock(settings.index_path, gen.WATCH_LOCK)
        self.observer: Any = None
        self._top: dict[str, Any] = {}  # top-level folder -> its watchdog watch
        self._matcher_lock = threading.Lock()
        self._matcher = self._new_matcher()
        self._factory = embedder_factory
        self._model: Embedder | None = None
        self._alarm = _OverflowAlarm(self.batch)
        git = find_git_root(self.root)
        self._git_lock = git / ".git" / "index.lock" if git else None
        self._retry = 0.0
        self._busy_pid: str | None = None

    # -- messages ------------------------------------------------------------------------------
    def say(self, message: str, *, level: int = logging.INFO) -> None:
        if self.progress is not None and not self.progress.quiet:
            self.progress.log(f"rag-index: {message}")
        else:
            log.log(level, "%s", message)

    # -- the watcher role --------------------------------------------------------------------
    def claim(self, *, announce: bool = True) -> bool:
        """Become the one watcher of this index; False (and a log line) when another is."""
        try:
            self.role.acquire(wait=False)
            return True
        except IndexBusy as exc:
            if announce:
                self.say(f"another process (pid {exc.details.get('pid', '?')}) already watches "
                         f"{self.s.root} and keeps its index fresh; this one only reads the "
                         "index (it takes over if that process stops)", level=logging.WARNING)
            return False

    # -- events ------------------------------------------------------------------------------
    def _new_matcher(self) -> IgnoreMatcher:
        return IgnoreMatcher(self.root, self.s.ignore, index_dir=index_base(self.s),
                             max_file_bytes=self.s.max_file_bytes)

    def saw(self, path: str, is_dir: bool) -> None:
        """One path from an event: keep it if the walker would look at it."""
        rel = os.path.relpath(path, self.root)
        if rel == "." or rel.startswith(".."):
            return
        rel = rel.replace(os.sep, "/")
        if rel.rpartition("/")[2] in RULE_FILES:
            self.on_pending(self.batch.add(None))  # the rules changed: walk everything
            return
        with self._matcher_lock:
            if self._matcher.is_ignored(rel, is_dir):
                return
        self.on_pending(self.batch.add(rel))

    def top_level_changed(self, name: str, exists: bool) -> None:
        """A top-level folder appeared or went away: watch it, or drop its dead watch."""
        if self.observer is None or self._top.get("*") is not None:
            return
        old = self._top.pop(name, None)
        if old is not None:
            try:
                self.observer.unschedule(old)
            except (KeyError, RuntimeError):
                pass
        if exists:
            with self._matcher_lock:
                ignored = self._matcher.is_ignored(name, True)
            if not ignored:
                self._watch(name)

    def _watch(self, name: str) -> None:
        path = self.root / name if name != "*" else self.root
        try:
            self._top[name] = self.observer.schedule(self._handler, str(path), recursive=True,
                                                     event_filter=EVENT_TYPES)
        except OSError as exc:  # gone again, or the inotify watch limit: a full walk covers it
            self.say(f"cannot watch {name}: {exc.strerror or exc}", level=logging.WARNING)
            self.batch.add(None)

    def _top_names(self) -> list[str]:
        """Top-level folders the walker would enter."""
        names = []
        with os.scandir(self.root) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    with self._matcher_lock:
                        if not self._matcher.is_ignored(e.name, True):
                            names.append(e.name)
        return names

    def start_observer(self) -> None:
        self._handler = _Handler(self)
        self.observer = Observer()
        names = self._top_names()
        if len(names) > MAX_TOP_WATCHES:
            self._watch("*")
        else:
            self.observer.schedule(self._handler, str(self.root), recursive=False,
                                   event_filter=EVENT_TYPES)
            for name in names:
                self._watch(name)
        logging.getLogger("watchdog.observers.inotify").addHandler(self._alarm)
        self.observer.start()

    def stop_observer(self) -> None:
        logging.getLogger("watchdog.observers.inotify").removeHandler(self._alarm)
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)
            self.observer = None
            self._top.clear()

    # -- runs --------------------------------------------------------------------------------
    def embedder(self) -> Embedder:
        """One model for the life of the watcher: loading it per run would cost a second."""
        if self._model is None:
            self._model = self._factory() if self._factory else load_embedder(
                self.s.embed_model, self.s.embed_backend, cache_dir=self.s.model_cache_path,
                threads=self.s.embed_threads, batch_size=self.s.embed_batch)
        return self._model

    def _git_busy(self) -> bool:
        return self._git_lock is not None and self._git_lock.exists()

    def run_once(self, paths: set[str], full: bool) -> RunStats | None:
        """One index run for a batch; on failure the batch is kept for the next try."""
        if full:
            with self._matcher_lock:
                self._matcher = self._new_matcher()  # ignore files may have changed
            if self.observer is not None and "*" not in self._top:
                for name in set(self._top_names()) - set(self._top):  # e.g. no longer ignored
                    self._watch(name)
        t0 = time.perf_counter()
        try:
            stats = run_index(self.s, rebuild=self.rebuild, wait=False,
                              progress=self.progress or Progress(quiet=True),
                              embedder_factory=self.embedder,
                              paths=None if full else sorted(paths), cancel=self.stop_event)
        except IndexBusy as exc:
            self.batch.put_back(paths, full)
            pid = str(exc.details.get("pid", "?"))
            if pid != self._busy_pid:
                self.say(f"rag-index (pid {pid}) is writing this index; the "
                         f"{len(paths) or 'pending'} changed path(s) wait for it")
                self._busy_pid = pid
            self.stop_event.wait(0.5)
            return None
        except RunCancelled:
            self.batch.put_back(paths, full)
            return None
        except (RagError, OSError, ValueError) as exc:  # keep watching; say why, retry later
            self.batch.put_back(paths, full)
            self._retry = min(RETRY_MAX_SECONDS, max(1.0, self._retry * 2))
            what = exc.message if isinstance(exc, RagError) else f"{type(exc).__name__}: {exc}"
            self.say(f"index update failed ({what}); retrying in {self._retry:.0f} s",
                     level=logging.ERROR)
            self.stop_event.wait(self._retry)
            return None
        self._retry = 0.0
        self._busy_pid = None
        self.rebuild = False
        self.history.append((frozenset(paths), full, stats))
        self.on_pending(self.batch.pending())
        if stats.published:
            try:
                self.on_published(stats.generation)
            except Exception:  # a hook (e.g. a server warming the new generation) is optional
                log.warning("the on_published hook failed", exc_info=True)
            self.say(f"{'walked the tree' if full else f'{len(paths)} changed path(s)'}: "
                     f"{stats.files_changed} file(s) re-indexed, {stats.files_deleted} removed, "
                     f"{stats.embedded} span(s) embedded -> generation {stats.generation} in "
                     f"{time.perf_counter() - t0:.2f} s")
        return stats

    def loop(self) -> None:
        """Watch and index until ``stop_event`` is set (or Ctrl-C in the foreground)."""
        last_full = time.monotonic()
        while not self.stop_event.is_set():
            if not self.role.held:
                if not self.claim(announce=False):
                    self.stop_event.wait(TAKEOVER_SECONDS)
                    continue
                self.say(f"the other watcher stopped; this process now watches {self.s.root}")
            if self.observer is None:
                self.start_observer()  # before the catch-up walk: nothing slips in between
                self.run_once(set(), True)
                last_full = time.monotonic()
                if not self.stop_event.is_set() and self.history:
                    self.embedder()  # load the model now, not on the first save
                continue
            got = self.batch.take(self.stop_event, self._git_busy,
                                  idle_timeout=RECONCILE_SECONDS)
            if got is None:
                if not self.stop_event.is_set() and time.monotonic() - last_full > (
                        RECONCILE_SECONDS):
                    self.batch.add(None)
                continue
            paths, full = got
            self.run_once(paths, full)
            if full:
                last_full = time.monotonic()

    def close(self) -> None:
        self.stop_event.set()
        self.stop_observer()
        self.role.release()


class BackgroundWatcher:
    """A watcher on its own thread inside a server; ``stop()`` ends it."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self._thread = threading.Thread(target=self._run, name="rag-watch", daemon=True)

    def start(self) -> BackgroundWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.watcher.loop()
        except Exception:  # a watcher must never take the server down with it
            log.exception("the index watcher stopped")
        finally:
            self.watcher.close()

    def stop(self, timeout: float = 30.0) -> None:
        self.watcher.stop_event.set()  # also cancels a run in progress (RunCancelled)
        self._thread.join(timeout)


def start_background_watcher(settings: Settings, *,
                             on_pending: Callable[[int], None] | None = None,
                             on_published: Callable[[int], None] | None = None,
                             embedder_factory: Callable[[], Embedder] | None = None
                             ) -> BackgroundWatcher:
    """Keep the index fresh from a thread of this process (``rag-mcp --watch``).

    Args:
        on_pending: hears how many changed paths wait to be indexed (0 once indexed).
        on_published: hears each new generation right after it is published, on the watcher's
            thread: a server opens it there so the next query does not pay for the reopen.
        embedder_factory: the model to embed with (a server can share its query model; the
            embedders are thread-safe); default: load one for the life of the watcher.

    When another process already watches this index, this one logs so and only reads it.
    """
    w = Watcher(settings, on_pending=on_pending, on_published=on_published,
                embedder_factory=embedder_factory)
    w.claim()
    return BackgroundWatcher(w).start()


def watch_forever(settings: Settings, *, progress: Progress | None = None,
                  rebuild: bool = False) -> int:
    """``rag-index --watch``: index, then follow changes until Ctrl-C (exit 0)."""
    w = Watcher(settings, progress=progress, rebuild=rebuild)
    w.claim()
    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()

    def terminate(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    if in_main:
        signal.signal(signal.SIGTERM, terminate)  # `kill` stops as cleanly as Ctrl-C
    w.say(f"watching {settings.root} (Ctrl-C stops)")
    try:
        w.loop()
    except KeyboardInterrupt:
        w.say("stopped watching; the index is consistent (an interrupted update resumes from "
              "its saved vectors on the next run)")
    finally:
        w.close()
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    return 0
