"""Debouncing file events into batches: one index run per burst of changes, not per event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

GIT_WAIT_SECONDS = 30.0  # longest wait for a git operation (index.lock) to finish


class Batch:
    """Changed paths gathered from events until the tree is quiet for ``debounce`` seconds.

    A continuous stream of events (a build, a long checkout) is cut after ``max_delay`` so the
    index never falls far behind, unless ``busy()`` says a git operation is still under way.
    """

    def __init__(self, debounce: float, max_delay: float) -> None:
        self.debounce = debounce
        self.max_delay = max_delay
        self._cond = threading.Condition()
        self._paths: set[str] = set()
        self._full = False
        self._first = 0.0
        self._last = 0.0

    def add(self, rel: str | None) -> int:
        """Record a changed path (None: the whole tree); returns how many are pending."""
        with self._cond:
            now = time.monotonic()
            if not self._paths and not self._full:
                self._first = now
            self._last = now
            if rel is None:
                self._full = True
            else:
                self._paths.add(rel)
            self._cond.notify_all()
            return len(self._paths) + self._full

    def pending(self) -> int:
        with self._cond:
            return len(self._paths) + self._full

    def put_back(self, paths: set[str], full: bool) -> None:
        with self._cond:
            if not self._paths and not self._full:
                self._first = self._last = time.monotonic()
            self._paths |= paths
            self._full = self._full or full

    def take(self, stop: threading.Event, busy: Callable[[], bool] = lambda: False,
             idle_timeout: float | None = None) -> tuple[set[str], bool] | None:
        """Wait for a batch; None when ``stop`` is set or ``idle_timeout`` passed with none."""
        idle_until = None if idle_timeout is None else time.monotonic() + idle_timeout
        with self._cond:
            while not stop.is_set():
                now = time.monotonic()
                if self._paths or self._full:
                    quiet = now - self._last >= self.debounce
                    overdue = now - self._first >= self.max_delay
                    if (quiet or overdue) and not (busy() and now - self._first < GIT_WAIT_SECONDS):
                        paths, full = self._paths, self._full
                        self._paths, self._full = set(), False
                        return paths, full
                    wait = max(0.01, min(self.debounce - (now - self._last), 0.25))
                else:
                    if idle_until is not None and now >= idle_until:
                        return None
                    wait = 0.25 if idle_until is None else max(0.01, min(idle_until - now, 0.25))
                # short waits: stop is an Event, not this condition, and Ctrl-C must get through
                self._cond.wait(wait)
        return None
