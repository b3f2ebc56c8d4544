"""Progress for long index runs: a live bar on a terminal, a plain line every few seconds elsewhere.

Everything goes to stderr, so ``rag-index --status --json`` and pipes keep a clean stdout.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


def fmt_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Reports files and spans done, the span rate and an ETA for one index run."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False,
                 tty: bool | None = None, interval: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.total_files = 0
        self.files = 0
        self.spans = 0
        self.embedded = 0
        self._start = time.monotonic()
        # None until the first line: the first update is always drawn, however long the
        # machine has been up (monotonic time may start near 0 after a boot)
        self._last: float | None = None
        self._drawn = False

    def log(self, message: str) -> None:
        if self.quiet:
            return
        self._clear()
        print(message, file=self.stream, flush=True)

    def start(self, total_files: int) -> None:
        """A new run of ``total_files`` files: counts start from zero (a watcher reuses one
        ``Progress`` for every update; its counts ran on, "22/12 files")."""
        self.total_files = total_files
        self.files = self.spans = self.embedded = 0
        self._start = time.monotonic()
        self._last = None

    def walking(self, found: int) -> None:
        """The walk is listing the tree: ``found`` files so far (a huge tree takes a while,
        and silence looked like a hang)."""
        now = time.monotonic()
        # a terminal shows the count at once (it is redrawn in place); a log gets a line only
        # once the walk has taken an interval, so a quick walk never logs a partial count
        since = self._last if self._last is not None or self.tty else self._start
        if self.quiet or (since is not None and now - since < self.interval):
            return
        self._last = now
        text = f"walking the tree: {found:,} files found"
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r" + text[: width - 1].ljust(width - 1))
            self.stream.flush()
            self._drawn = True
        else:
            print(text, file=self.stream, flush=True)

    def advance(self, *, files: int = 0, spans: int = 0, embedded: int = 0) -> None:
        self.files += files
        self.spans += spans
        self.embedded += embedded
        now = time.monotonic()
        if self._last is None or now - self._last >= self.interval:
            self._last = now
            self._draw(now)

    def _line(self, now: float) -> tuple[str, str]:
        elapsed = max(now - self._start, 1e-6)
        rate = self.spans / elapsed
        eta = ""
        if self.files and self.total_files > self.files:
            eta = fmt_duration((self.total_files - self.files) * elapsed / self.files)
        counts = (f"{self.files:,}/{self.total_files:,} files · {self.spans:,} "
                  f"{'span' if self.spans == 1 else 'spans'} ({self.embedded:,} embedded) · "
                  f"{rate:,.0f} spans/s")
        return counts, eta

    def _draw(self, now: float) -> None:
        if self.quiet or not self.total_files:
            return
        counts, eta = self._line(now)
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns
            frac = self.files / self.total_files
            bar_w = 24
            filled = int(bar_w * frac)
            bar = "█" * filled + "░" * (bar_w - filled)
            text = f"indexing {bar} {frac:4.0%} · {counts}" + (f" · ETA {eta}" if eta else "")
            self.stream.write("\r" + text[: width - 1].ljust(width - 1))
            self.stream.flush()
            self._drawn = True
        else:
            print(f"indexing: {counts}" + (f", ETA {eta}" if eta else ""), file=self.stream,
                  flush=True)

    def _clear(self) -> None:
        if self._drawn and self.tty:
            width = shutil.get_terminal_size((100, 20)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")
            self.stream.flush()
            self._drawn = False

    def finish(self) -> None:
        self._clear()
