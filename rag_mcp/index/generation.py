"""Index generations on disk: publish atomically, read consistently, one writer at a time.

Layout under ``<index_dir>/<collection>/``::

    CURRENT            {"generation": 7, "dir": "gen-000007"}, replaced atomically
    writer.lock        flock held by the one indexing process (its pid inside, for messages)
    watcher.lock       flock held by the one process watching the tree (rag-index/rag-mcp --watch)
    CACHEDIR.TAG       marks the folder as regenerable (bford.info/cachedir): walkers, ours
                       included, and backup tools skip it, wherever the index lies
    gen-000007/        a complete, immutable generation
        manifest.json  schema/chunker version, model, dimension, config hash, counts (written last)
        spans.sqlite   every file (content hash) and span record (rag_mcp.index.catalog)
        lexical/       the tantivy BM25 index of the spans
        pages/         the same of whole pages of prose (docs, wiki pages, text), one document each
        chroma/        the vectors (embedded store only; a Chroma server keeps them otherwise)
        .readers       flock(LOCK_SH) by every process that has the generation open
    tmp-000008-<pid>/  a generation being written; never read, removed after a crash

A writer copies the current generation into a ``tmp-`` folder, applies its changes there, writes
the manifest, renames the folder to ``gen-N`` and only then replaces CURRENT. A ``kill -9`` at any
moment leaves CURRENT on a complete generation. Readers open the generation CURRENT names and
re-check CURRENT (one stat) before each query, so a new generation is picked up without restart
and a half-written one is never seen. Chroma's embedded store is single-process and an open
client does not see another process's writes, which is why generations are copies, not one
shared mutable store.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rag_mcp.errors import IndexBusy, IndexUnavailable

SCHEMA_VERSION = 1
CURRENT = "CURRENT"
MANIFEST = "manifest.json"
CATALOG = "spans.sqlite"
LEXICAL = "lexical"
PAGES = "pages"
CHROMA = "chroma"
READERS = ".readers"
LOCK = "writer.lock"
#: the Cache Directory Tagging marker: an index can be rebuilt from its repository
CACHE_TAG = "CACHEDIR.TAG"
CACHE_TAG_TEXT = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
                  b"# This file is a cache directory tag created by rag-mcp (rag-index).\n"
                  b"# The folder holds a search index that can be rebuilt from its repository.\n"
                  b"# For information about cache directory tags see https://bford.info/cachedir/\n")
WATCH_LOCK = "watcher.lock"


def gen_dir_name(n: int) -> str:
    return f"gen-{n:06d}"


@dataclass(frozen=True, slots=True)
class Pointer:
    generation: int
    dir: Path
    stamp: tuple[int, int]  # (inode, mtime_ns) of CURRENT when read


#: CURRENT and a manifest are small JSON files; anything longer is damage (or /dev/zero)
MAX_POINTER_BYTES = 4096
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def read_small(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes: never blocks on a FIFO, never
    follows a symlink (to /dev/zero, say), never reads without end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", str(path))
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path.name} is larger than {limit:,} bytes")
    return data, st


def read_pointer(base: Path) -> Pointer | None:
    """The generation CURRENT names, or None when there is no index yet."""
    cur = base / CURRENT
    try:
        raw, st = read_small(cur, MAX_POINTER_BYTES)
        data = orjson.loads(raw)
        n = int(data["generation"])
        name = str(data["dir"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexUnavailable(
            f"the index pointer {CURRENT} is damaged ({type(exc).__name__})"
        ) from exc
    if name != gen_dir_name(n):
        raise IndexUnavailable(f"the index pointer {CURRENT} names an unexpected folder")
    return Pointer(n, base / name, (st.st_ino, st.st_mtime_ns))


def tag_cache_dir(base: Path) -> None:
    """Write ``CACHEDIR.TAG`` into ``base`` once: another index lying inside a repository (an
    ``--index-dir`` of an earlier run, a nested project's ``.rag``) is then never indexed as
    that repository's files, and backup tools leave it out. Best effort: an index on a
    read-only or odd file system works without it."""
    try:
        fd = os.open(base / CACHE_TAG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:  # already there (or not writable: the lock's own open reports that)
        return
    try:
        os.write(fd, CACHE_TAG_TEXT)
    finally:
        os.close(fd)


def clear_non_file(path: Path) -> None:
    """Remove whatever stands where the regular file ``path`` belongs (a directory, a FIFO, a
    symlink): damage that needs no manual deletion. Call only while holding the writer lock, or
    for the lock file itself."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    elif not stat.S_ISREG(st.st_mode):
        path.unlink()


def pointer_stamp(base: Path) -> tuple[int, int] | None:
    try:
        st = (base / CURRENT).stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def read_manifest(gen_dir: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(read_small(gen_dir / MANIFEST, MAX_MANIFEST_BYTES)[0])
    except FileNotFoundError:
        raise IndexUnavailable(f"the index generation {gen_dir.name} has no manifest") from None
    except (OSError, ValueError) as exc:
        raise IndexUnavailable(
            f"the manifest of {gen_dir.name} is damaged ({type(exc).__name__})"
        ) from exc
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise IndexUnavailable(
            f"the index was written by another version of rag-mcp (schema "
            f"{data.get('schema_version') if isinstance(data, dict) else '?'}, "
            f"this one reads {SCHEMA_VERSION})"
        )
    return data


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: object) -> None:
    clear_non_file(path)  # a directory or FIFO in its place would fail the rename
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def fsync_tree(path: Path) -> None:
    """Flush every file of a finished generation before it is published."""
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        with contextlib.suppress(OSError):
            _fsync_dir(Path(dirpath))


class WriterLock:
    """Exclusive lock on an index; ``wait=False`` fails at once with the holder's pid.

    ``name=WATCH_LOCK`` is the same kind of lock for the watcher role: one process per index
    turns file events into index runs, any other watcher only reads.
    """

    def __init__(self, base: Path, name: str = LOCK) -> None:
        self.base = base
        self.name = name
        self._fd: int | None = None

    def acquire(self, *, wait: bool, on_wait: Any = None) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        tag_cache_dir(self.base)
        clear_non_file(self.base / self.name)  # a directory there needs no manual deletion
        fd = os.open(self.base / self.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                if not wait:
                    what = "is watching" if self.name == WATCH_LOCK else "is writing"
                    raise IndexBusy(
                        f"another rag-index (pid {holder}) {what} this index; "
                        "wait for it to finish or stop it", details={"pid": holder}
                    ) from None
                if on_wait is not None:
                    on_wait(holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


class ReaderPin:
    """A shared lock on a generation folder, so the writer's clean-up leaves it alone."""

    def __init__(self, gen_dir: Path) -> None:
        self._fd: int | None = None
        try:
            fd = os.open(gen_dir / READERS, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            return  # a read-only index folder: nothing can delete it under us either
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _in_use(gen_dir: Path) -> bool:
    try:
        fd = os.open(gen_dir / READERS, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def collect_garbage(base: Path, keep: int) -> list[str]:
    """Remove leftover tmp folders and generations older than ``keep - 1`` that nobody reads.

    Call only while holding the writer lock. Returns the names removed.
    """
    removed: list[str] = []
    if not base.is_dir():
        return removed
    for child in base.iterdir():
        name = child.name
        if name.startswith("tmp-") and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(name)
        elif name.startswith(f".{CURRENT}.") and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                child.unlink()
    return removed + drop_old_generations(base, keep)


def drop_old_generations(base: Path, keep: int) -> list[str]:
    """Remove the generations older than ``keep - 1`` that nobody reads; tmp folders stay.

    A writer about to publish generation ``keep`` may call it before publishing: CURRENT still
    names ``keep - 1``, which stays, and a reader still on an older one holds its ``.readers``
    lock. Call only while holding the writer lock. Returns the names removed.
    """
    removed: list[str] = []
    if not base.is_dir():
        return removed
    for child in base.iterdir():
        name = child.name
        if name.startswith("gen-") and child.is_dir():
            try:
                n = int(name[4:])
            except ValueError:
                continue
            if n < keep - 1 and not _in_use(child):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(name)
    return removed


def next_generation(base: Path) -> int:
    """One more than the highest generation number on disk (published or not)."""
    highest = 0
    if base.is_dir():
        for child in base.iterdir():
            for prefix in ("gen-", "tmp-"):
                if child.name.startswith(prefix):
                    with contextlib.suppress(ValueError):
                        highest = max(highest, int(child.name[len(prefix):].split("-")[0]))
    return highest + 1


def make_tmp_dir(base: Path, n: int) -> Path:
    tmp = base / f"tmp-{n:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def copy_generation(src: Path, dst: Path) -> None:
    """Copy the catalog and the lexical index of a generation as the starting point of the next
    one (the vector store carries its own over: ``VectorStore.carry_over``)."""
    shutil.copy2(src / CATALOG, dst / CATALOG)
    for name in (LEXICAL, PAGES):
        if (src / name).is_dir():
            shutil.copytree(src / name, dst / name,
                            ignore=shutil.ignore_patterns(".tantivy-*.lock"))


def publish(base: Path, tmp: Path, n: int) -> Path:
    """Make ``tmp`` generation ``n``: rename it, then point CURRENT at it (atomically)."""
    fsync_tree(tmp)
    final = base / gen_dir_name(n)
    os.rename(tmp, final)
    _fsync_dir(base)
    write_json_atomic(base / CURRENT, {"generation": n, "dir": final.name,
                                       "published_at": time.time()})
    return final
