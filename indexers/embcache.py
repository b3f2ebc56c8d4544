"""A persistent cache of computed vectors, keyed by content key, outside the generations.

Embedding is nearly the whole cost of a cold index. Every vector is written here as soon as it is
computed, so a run stopped by Ctrl-C or ``kill -9`` resumes where it stopped, and a rebuild, a
chunker upgrade, a branch switch back or a second checkout re-embeds only text the model has never
seen. Keys carry the model identity, so vectors of two models never mix. The file sits in the
index folder and is shared by every repository indexed there; entries unused for longest go first
when it outgrows its cap.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

MAX_ROWS = 500_000  # ~800 MB of 384-dimension vectors


class EmbeddingCache:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Several indexers (one per repository) may share the file: wait for each other's writes.
        self._db = sqlite3.connect(str(path), timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(vectors)")}
        if cols and "used" not in cols:  # an older layout: the cache is disposable, start over
            self._db.execute("DROP TABLE vectors")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL, "
            "used INTEGER NOT NULL DEFAULT 0)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors(used)")

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
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
        vectors = np.asarray(vectors, dtype=np.float32)
        now = int(time.time())
        self._db.executemany(
            "INSERT OR REPLACE INTO vectors (key, vec, used) VALUES (?, ?, ?)",
            ((k, vectors[i].tobytes(), now) for i, k in enumerate(keys)),
        )
        self._db.commit()

    def prune(self, keep: Iterable[str], *, max_rows: int = MAX_ROWS) -> int:
        """Drop the least recently used entries beyond ``max_rows``, never one in ``keep``."""
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
        return int(self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])

    def close(self) -> None:
        self._db.close()
