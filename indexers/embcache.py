"""A persistent cache of computed vectors, keyed by content key, outside the generations.

Embedding is nearly the whole cost of a cold index. Every vector is written here as soon as it is
computed, so a run stopped by Ctrl-C or ``kill -9`` resumes where it stopped, and a rebuild, a
chunker upgrade, a branch switch back or a second checkout re-embeds only text the model has never
seen. Keys carry the model identity, so vectors of two models never mix. The file sits in the
index folder and is shared by every repository indexed there; entries unused for longest go first
when it outgrows its cap.

Being disposable, a damaged file (cut short, overwritten, not a database) never stops an index
run: it is moved aside with a warning and a fresh cache starts (tests/test_hostile_index.py).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

MAX_ROWS = 500_000  # ~800 MB of 384-dimension vectors

log = logging.getLogger(__name__)
T = TypeVar("T")


class EmbeddingCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            self._db = self._reset(exc)

    def _open(self) -> sqlite3.Connection:
        # Several indexers (one per repository) may share the file: wait for each other's writes.
        db = sqlite3.connect(str(self.path), timeout=60)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            cols = {r[1] for r in db.execute("PRAGMA table_info(vectors)")}
            if cols and "used" not in cols:  # an older layout: the cache is disposable
                db.execute("DROP TABLE vectors")
            db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL, "
                "used INTEGER NOT NULL DEFAULT 0)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors(used)")
            db.execute("SELECT COUNT(*) FROM vectors").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _reset(self, exc: sqlite3.DatabaseError) -> sqlite3.Connection:
        """Move the damaged file (and its WAL) aside and start an empty cache."""
        db = getattr(self, "_db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            part = self.path.with_name(self.path.name + suffix)
            if part.exists():
                part.replace(part.with_name(f"{part.name}.damaged-{stamp}"))
        log.warning("the embedding cache %s was unreadable (%s); moved it aside and started "
                    "a fresh one: vectors are computed again", self.path.name, exc)
        return self._open()

    def _guard(self, op: Callable[[], T], fallback: Callable[[], T]) -> T:
        try:
            return op()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise  # another indexer holds it past the timeout: not damage
            self._db = self._reset(exc)
            return fallback()

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        return self._guard(lambda: self._get(keys), dict)

    def _get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        now = int(time.time())
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            marks = ",".join("?" * len(chunk))
            for key, blob in self._db.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({marks})", chunk):
                out[key] = np.frombuffer(blob, dtype=np.float32)
            self._db.execute(f"UPDATE vectors SET used=? WHERE key IN ({marks})", [now, *chunk])
        self._db.commit()
        return out

    def put(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        self._guard(lambda: self._put(keys, vectors), lambda: self._put(keys, vectors))

    def _put(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        now = int(time.time())
        self._db.executemany(
            "INSERT OR REPLACE INTO vectors (key, vec, used) VALUES (?, ?, ?)",
            ((k, vectors[i].tobytes(), now) for i, k in enumerate(keys)),
        )
        self._db.commit()

    def prune(self, keep: Iterable[str], *, max_rows: int = MAX_ROWS) -> int:
        """Drop the least recently used entries beyond ``max_rows``, never one in ``keep``."""
        return self._guard(lambda: self._prune(keep, max_rows), lambda: 0)

    def _prune(self, keep: Iterable[str], max_rows: int) -> int:
        total = self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        excess = total - max_rows
        if excess <= 0:
            return 0
        keep_set = set(keep)
        doomed: list[str] = []
        for (key,) in self._db.execute("SELECT key FROM vectors ORDER BY used, rowid"):
            if key not in keep_set:
                doomed.append(key)
                if len(doomed) >= excess:
                    break
        for i in range(0, len(doomed), 500):
            chunk = doomed[i : i + 500]
            self._db.execute(f"DELETE FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                             chunk)
        self._db.commit()
        return len(doomed)

    def count(self) -> int:
        return self._guard(
            lambda: int(self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]),
            lambda: 0)

    def close(self) -> None:
        self._db.close()

