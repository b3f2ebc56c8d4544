"""A persistent cache of computed vectors, keyed by content key, outside the generations.

Embedding is nearly the whole cost of a cold index. Every vector is written here as soon as it is
computed, so a run stopped by Ctrl-C or ``kill -9`` resumes where it stopped, and a rebuild, a
chunker upgrade or a branch switch back re-embeds only text the model has never seen. Keys carry
the model identity, so vectors of two models never mix.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


class EmbeddingCache:
    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(str(path))
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)"
        )

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            q = f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})"
            for key, blob in self._db.execute(q, chunk):
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        self._db.executemany(
            "INSERT OR REPLACE INTO vectors (key, vec) VALUES (?, ?)",
            ((k, vectors[i].tobytes()) for i, k in enumerate(keys)),
        )
        self._db.commit()

    def prune(self, keep: Iterable[str], *, spare: int) -> int:
        """Drop the oldest entries outside ``keep`` beyond ``spare`` of them; returns how many."""
        keep_set = set(keep)
        rows = self._db.execute("SELECT rowid, key FROM vectors ORDER BY rowid").fetchall()
        extra = [rowid for rowid, key in rows if key not in keep_set]
        doomed = extra[: max(0, len(extra) - spare)]
        for i in range(0, len(doomed), 500):
            chunk = doomed[i : i + 500]
            self._db.execute(f"DELETE FROM vectors WHERE rowid IN ({','.join('?' * len(chunk))})",
                             chunk)
        self._db.commit()
        return len(doomed)

    def close(self) -> None:
        self._db.close()
