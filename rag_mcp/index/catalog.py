"""The span catalog: one SQLite file per index generation with every file and span record.

It is the manifest's detail (each file's content hash and its span IDs) and the metadata side of
retrieval: dense and lexical hits come back as keys, and the catalog turns them into spans and
applies the ``kind``/``path``/``language`` filters.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rag_mcp.errors import IndexUnavailable
from rag_mcp.index.spans import Span

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    content_hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    language TEXT NOT NULL,
    kind TEXT NOT NULL,
    n_lines INTEGER NOT NULL,
    n_bytes INTEGER NOT NULL,
    fallback TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS spans (
    sid INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    digest TEXT NOT NULL,
    kind TEXT NOT NULL,
    language TEXT NOT NULL,
    symbol TEXT,
    parent TEXT,
    heading TEXT,
    preview TEXT NOT NULL,
    byte_len INTEGER NOT NULL,
    file_hash TEXT NOT NULL,
    emb_key TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS spans_path ON spans(path);
CREATE INDEX IF NOT EXISTS spans_emb ON spans(emb_key);
CREATE INDEX IF NOT EXISTS spans_id ON spans(id);
"""

_SPAN_COLS = (
    "sid, id, path, start_line, end_line, digest, kind, language, symbol, parent, heading, "
    "preview, byte_len, file_hash, emb_key, meta"
)


@dataclass(frozen=True, slots=True)
class FileRecord:
    path: str
    content_hash: str
    size: int
    mtime_ns: int
    language: str
    kind: str
    n_lines: int
    n_bytes: int
    fallback: str = ""


@dataclass(frozen=True, slots=True)
class SpanRow:
    """A span as the catalog holds it: the public record plus its storage keys."""

    sid: int
    span: Span
    emb_key: str

    @property
    def id(self) -> str:
        return self.span.id


def _row_to_span(row: tuple, chunker_version: str) -> SpanRow:
    (sid, _id, path, start, end, dig, kind, lang, symbol, parent, heading, preview, blen, fhash,
     emb_key, meta) = row
    meta_t: tuple[tuple[str, str], ...] = ()
    if meta:
        meta_t = tuple((str(k), str(v)) for k, v in orjson.loads(meta))
    span = Span(path=path, start_line=start, end_line=end, digest=dig, kind=kind, language=lang,
                symbol=symbol, parent=parent, heading=heading, preview=preview, byte_len=blen,
                file_hash=fhash, chunker_version=chunker_version, meta=meta_t)
    return SpanRow(sid, span, emb_key)


class _Rows:
    """A cursor's rows, fetched at once so a damaged page raises where it is caught."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class _Guarded:
    """A read-only connection whose damage is ``IndexUnavailable`` with the fix: a catalog
    damaged under a running server answered E_INTERNAL until the server was restarted.

    A published catalog never changes, so SQLite keeps the pages it has read (``immutable``)
    and a file rewritten under the server would be noticed only on a page not read yet: answers
    would mix the old catalog with the new bytes, or not, as the page cache happens to hold
    them. The file's size, modification time and inode, checked with one ``stat`` per call,
    make any change to it damage at once."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self._path = path
        self._stamp = _stamp(path)

    def execute(self, sql: str, params: Sequence[object] = ()) -> _Rows:
        try:
            if _stamp(self._path) != self._stamp:
                raise sqlite3.DatabaseError("the file changed after it was published")
            return _Rows(self._db.execute(sql, params).fetchall())
        except (sqlite3.DatabaseError, OSError) as exc:
            raise IndexUnavailable(
                f"the catalog of {self._path.parent.name} is damaged ({exc}); run `rag-index` "
                "on the repository to repair it") from exc

    def close(self) -> None:
        self._db.close()


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


class Catalog:
    """Access to one generation's ``spans.sqlite``; thread-safe for readers."""

    def __init__(self, path: Path, *, readonly: bool) -> None:
        self.path = path
        self._db: Any
        if readonly:
            # immutable=1: a published generation never changes, so SQLite may skip locking.
            uri = f"file:{path}?mode=ro&immutable=1"
            self._db = _Guarded(sqlite3.connect(uri, uri=True, check_same_thread=False), path)
        else:
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=DELETE")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._chunker_version = self.get_meta("chunker_version") or ""

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- meta --------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
        if key == "chunker_version":
            self._chunker_version = value

    # -- writing -----------------------------------------------------------------------------
    def commit(self) -> None:
        with self._lock:
            self._db.commit()

    def put_file(self, rec: FileRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?)",
                (rec.path, rec.content_hash, rec.size, rec.mtime_ns, rec.language, rec.kind,
                 rec.n_lines, rec.n_bytes, rec.fallback),
            )

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        with self._lock:
            self._db.execute("UPDATE files SET size=?, mtime_ns=? WHERE path=?",
                             (size, mtime_ns, path))

    def remove_file(self, path: str) -> list[tuple[int, str]]:
        """Delete a file and its spans; returns the removed ``(sid, emb_key)`` pairs."""
        with self._lock:
            gone = self._db.execute("SELECT sid, emb_key FROM spans WHERE path=?",
                                    (path,)).fetchall()
            self._db.execute("DELETE FROM spans WHERE path=?", (path,))
            self._db.execute("DELETE FROM files WHERE path=?", (path,))
        return [(int(s), str(k)) for s, k in gone]

    def add_span(self, span: Span, emb_key: str, text: str) -> int:
        meta = orjson.dumps([list(p) for p in span.meta]).decode() if span.meta else ""
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO spans (id, path, start_line, end_line, digest, kind, language, "
                "symbol, parent, heading, preview, byte_len, file_hash, emb_key, meta, text) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (span.id, span.path, span.start_line, span.end_line, span.digest, span.kind,
                 span.language, span.symbol, span.parent, span.heading, span.preview,
                 span.byte_len, span.file_hash, emb_key, meta, text),
            )
        return int(cur.lastrowid or 0)

    # -- reading -----------------------------------------------------------------------------
    def files(self) -> dict[str, FileRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM files").fetchall()
        return {r[0]: FileRecord(*r) for r in rows}

    def file(self, path: str) -> FileRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM files WHERE path=?", (path,)).fetchone()
        return FileRecord(*row) if row else None

    def emb_keys(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT DISTINCT emb_key FROM spans")}

    def _select(self, where: str, params: Sequence[object]) -> list[SpanRow]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_SPAN_COLS} FROM spans WHERE {where}",
                                    params).fetchall()
        return [_row_to_span(r, self._chunker_version) for r in rows]

    def _select_in(self, column: str, values: Sequence[object]) -> list[SpanRow]:
        out: list[SpanRow] = []
        for i in range(0, len(values), 500):
            chunk = list(values[i : i + 500])
            out += self._select(f"{column} IN ({','.join('?' * len(chunk))})", chunk)
        return out

    def by_sids(self, sids: Sequence[int]) -> dict[int, SpanRow]:
        return {r.sid: r for r in self._select_in("sid", sids)}

    def by_emb_keys(self, keys: Sequence[str]) -> dict[str, list[SpanRow]]:
        out: dict[str, list[SpanRow]] = {}
        for r in self._select_in("emb_key", keys):
            out.setdefault(r.emb_key, []).append(r)
        return out

    def by_id(self, span_id: str) -> SpanRow | None:
        rows = self._select("id=?", (span_id,))
        return rows[0] if rows else None

    def with_digest(self, path: str, digest: str) -> list[SpanRow]:
        return self._select("path=? AND digest=?", (path, digest))

    def within(self, path: str, start_line: int, end_line: int) -> list[SpanRow]:
        """The spans of ``path`` inside lines ``start_line..end_line``, in line order."""
        return sorted(self._select("path=? AND start_line>=? AND end_line<=?",
                                   (path, start_line, end_line)),
                      key=lambda r: r.span.start_line)

    def of_path(self, path: str) -> list[SpanRow]:
        return sorted(self._select("path=?", (path,)), key=lambda r: r.span.start_line)

    def all_spans(self) -> list[SpanRow]:
        return sorted(self._select("1=1", ()), key=lambda r: (r.span.path, r.span.start_line))

    def text(self, sid: int) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT text FROM spans WHERE sid=?", (sid,)).fetchone()
        return row[0] if row else None

    def texts(self, sids: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        with self._lock:
            for i in range(0, len(sids), 500):
                chunk = list(sids[i : i + 500])
                q = f"SELECT sid, text FROM spans WHERE sid IN ({','.join('?' * len(chunk))})"
                out.update((int(s), t) for s, t in self._db.execute(q, chunk))
        return out

    def counts(self) -> dict[str, object]:
        """Totals for status and health: files, spans, spans by language and by kind."""
        with self._lock:
            files = self._db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            spans = self._db.execute("SELECT COUNT(*) FROM spans").fetchone()[0]
            by_lang = dict(self._db.execute(
                "SELECT language, COUNT(*) FROM spans GROUP BY language ORDER BY 2 DESC"))
            by_kind = dict(self._db.execute(
                "SELECT kind, COUNT(*) FROM spans GROUP BY kind ORDER BY 2 DESC"))
            fallback = dict(self._db.execute(
                "SELECT fallback, COUNT(*) FROM files WHERE fallback != '' GROUP BY fallback"))
        return {"files": int(files), "spans": int(spans), "by_language": by_lang,
                "by_kind": by_kind, "fallback": fallback}

    def path_bytes(self, paths: Iterable[str]) -> dict[str, int]:
        paths = list(set(paths))
        out: dict[str, int] = {}
        with self._lock:
            for i in range(0, len(paths), 500):
                chunk = paths[i : i + 500]
                q = f"SELECT path, n_bytes FROM files WHERE path IN ({','.join('?' * len(chunk))})"
                out.update((p, int(n)) for p, n in self._db.execute(q, chunk))
        return out
