"""How many files of a served repository changed since its index generation was built."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Freshness:
    """Files changed since the last generation, recomputed in the background at most every
    ``ttl`` seconds so a query never waits for a repository walk; a watcher that knows the
    exact number pushes it with ``set``."""

    def __init__(self, compute: Callable[[], int | None], ttl: float = 10.0) -> None:
        self._compute = compute
        self.ttl = ttl
        self._value: int | None = None
        self._at = 0.0
        self._running = False
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        try:
            value = self._compute()
        except Exception:  # informative only: an unreadable tree must not break queries
            log.debug("freshness check failed", exc_info=True)
            value = None
        with self._lock:
            self._value, self._at, self._running = value, time.monotonic(), False

    def get(self) -> int | None:
        """The last count, never waiting; a stale one starts a recount in the background."""
        with self._lock:
            stale = time.monotonic() - self._at > self.ttl
            if stale and not self._running:
                self._running = True
                threading.Thread(target=self._refresh, daemon=True).start()
            return self._value

    def now(self, max_age: float = 2.0) -> int | None:
        """A count at most ``max_age`` seconds old, computed here if need be (health checks)."""
        with self._lock:
            if self._at and time.monotonic() - self._at <= max_age:
                return self._value
        self._refresh()
        return self._value

    def set(self, value: int) -> None:
        """A watcher that knows the exact number pushes it here."""
        with self._lock:
            self._value, self._at = value, time.monotonic()
