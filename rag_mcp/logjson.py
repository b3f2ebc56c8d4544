"""The JSONL log: one orjson line per tool call, size-rotated, never fatal.

A line records what was asked and how it went (tool, client, query with any secret masked or
its hash, k, tau, counts, scores, timings, bytes, redactions, span ID, error code) and never span
text or secrets. Lines are appended with O_APPEND in a single write, so several server processes
can share one file; the rotation check takes an flock so two processes never rotate at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from rag_mcp.search.redact import redact

log = logging.getLogger(__name__)

QUERY_CHARS = 200
LOG_NAME = "rag-mcp.jsonl"


def iso_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class ToolLog:
    """Appends tool-call records to ``<dir>/rag-mcp.jsonl``."""

    def __init__(self, directory: Path, *, max_bytes: int, backups: int,
                 queries: str = "plain") -> None:
        self.dir = directory
        self.path = directory / LOG_NAME
        self.max_bytes = max_bytes
        self.backups = backups
        self.queries = queries
        self._lock = threading.Lock()
        self.failures = 0

    def query_field(self, query: object) -> dict[str, Any]:
        """How a query appears in the log: truncated text, a sha256, or nothing."""
        if not isinstance(query, str) or self.queries == "off":
            return {}
        if self.queries == "hash":
            return {"query_sha256": hashlib.sha256(query.encode("utf-8", "replace")).hexdigest()}
        # A client may paste a credential into a query; the log keeps the words, not the secret.
        return {"query": redact(query)[0][:QUERY_CHARS]}

    def write(self, record: dict[str, Any]) -> bool:
        """Append one record; returns False (and counts the failure) instead of raising."""
        try:
            line = orjson.dumps({"ts": iso_now(), **record},
                                option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n"
            with self._lock:
                self._maybe_rotate(len(line))
                try:
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                except FileNotFoundError:  # the folder is made on first use, or was removed
                    self.dir.mkdir(parents=True, exist_ok=True)
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            return True
        except Exception:  # a full disk or a read-only folder must never fail a tool call
            self.failures += 1
            if self.failures in (1, 10, 100):
                log.warning("could not write the tool log at %s (%d failures so far)",
                            self.path, self.failures)
            return False

    def _maybe_rotate(self, incoming: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + incoming <= self.max_bytes:
            return
        lock_fd = os.open(self.dir / f".{LOG_NAME}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:  # another process may have rotated while we waited
                if self.path.stat().st_size + incoming <= self.max_bytes:
                    return
            except FileNotFoundError:
                return
            if self.backups <= 0:
                self.path.unlink(missing_ok=True)
                return
            for i in range(self.backups - 1, 0, -1):
                src = self.path.with_name(f"{LOG_NAME}.{i}")
                if src.exists():
                    os.replace(src, self.path.with_name(f"{LOG_NAME}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{LOG_NAME}.1"))
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            os.close(lock_fd)
