"""The index run's progress lines: counts, rate, ETA, plain lines off a terminal, quiet."""

from __future__ import annotations

import io
from pathlib import Path

from indexers.pipeline import run_index
from indexers.progress import Progress, fmt_duration
from rag_mcp.config import load_settings
from rag_mcp.embed.fake import HASH_MODEL
from tests.repo_helpers import write_repo


def test_fmt_duration() -> None:
    assert fmt_duration(0) == "0:00"
    assert fmt_duration(59.9) == "0:59"
    assert fmt_duration(61) == "1:01"
    assert fmt_duration(3 * 3600 + 5 * 60 + 7) == "3:05:07"
    assert fmt_duration(-5) == "0:00"


def test_plain_lines_count_rate_and_eta() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, interval=0.0)
    p.start(10)
    p.advance(spans=1)
    first = out.getvalue().splitlines()[-1]
    assert first.startswith("indexing: 0/10 files · 1 span (0 embedded) · ")
    assert "ETA" not in first  # no file done yet: no basis for an estimate
    p.advance(files=4, spans=41, embedded=42)
    last = out.getvalue().splitlines()[-1]
    assert "4/10 files · 42 spans (42 embedded)" in last and ", ETA " in last
    p.log("loading the model")
    assert out.getvalue().splitlines()[-1] == "loading the model"


def test_quiet_prints_nothing_and_interval_throttles() -> None:
    out = io.StringIO()
    q = Progress(out, quiet=True, tty=False, interval=0.0)
    q.start(3)
    q.advance(files=1, spans=5)
    q.log("hidden")
    q.finish()
    assert out.getvalue() == ""
    # an interval longer than any machine's uptime: the first line must not depend on it (it
    # was never drawn on a machine up for less than the interval, monotonic time counting from 0)
    slow = Progress(out, tty=False, interval=1e9)
    slow.start(3)
    slow.advance(files=1)  # the first line is drawn at once ...
    slow.advance(files=1)  # ... the next not before the interval
    assert len(out.getvalue().splitlines()) == 1


def test_terminal_bar_is_redrawn_in_place_and_cleared() -> None:
    out = io.StringIO()
    p = Progress(out, tty=True, interval=0.0)
    p.start(4)
    p.advance(files=2, spans=8, embedded=8)
    drawn = out.getvalue()
    assert drawn.startswith("\r") and "\n" not in drawn and " 50% " in drawn
    p.finish()
    assert out.getvalue().endswith("\r")  # the bar line is blanked for the summary


def test_each_run_counts_from_zero() -> None:
    """A watcher reuses one Progress for every update: its counts ran on ("22/12 files")."""
    out = io.StringIO()
    p = Progress(out, tty=False, interval=0.0)
    p.start(12)
    p.advance(files=12, spans=30, embedded=30)
    p.start(3)
    p.advance(files=1, spans=2)
    assert out.getvalue().splitlines()[-1].startswith("indexing: 1/3 files · 2 spans (0 ")


def test_walking_is_shown_and_throttled() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, interval=1e9)  # longer than any uptime, as above
    p.walking(0)
    p.walking(5_000)  # a walk quicker than the interval logs no partial count
    assert out.getvalue() == ""
    slow = io.StringIO()
    slow_walk = Progress(slow, tty=False, interval=0.0)
    slow_walk.walking(5)
    assert slow.getvalue().splitlines() == ["walking the tree: 5 files found"]
    screen = io.StringIO()
    Progress(screen, tty=True, interval=1e9).walking(3)  # a terminal shows it at once
    assert "walking the tree: 3 files found" in screen.getvalue()
    p.start(5_000)
    p.advance(files=1)  # the run's first line is drawn at once after the walk's
    assert out.getvalue().splitlines()[-1].startswith("indexing: 1/5,000 files")
    quiet = Progress(out, quiet=True, tty=False, interval=0.0)
    quiet.walking(7)
    assert "7 files" not in out.getvalue()


def test_an_index_run_reports_walking_and_files_as_they_are_stored(tmp_path: Path) -> None:
    """A run whose spans fit in one embedding pool showed "0/N files" until its end: files
    count once stored, skipped ones included, and the walk reports what it found."""
    root = tmp_path / "repo"
    write_repo(root, 6, 0)
    (root / "empty_after_read.md").write_bytes(b"\x00\x01binary")
    out = io.StringIO()
    s = load_settings({"root": str(root), "embed_model": HASH_MODEL,
                       "index_dir": str(tmp_path / "index")})
    run_index(s, progress=Progress(out, tty=False, interval=0.0))
    lines = out.getvalue().splitlines()
    assert any(line.startswith("walking the tree: ") for line in lines)
    counts = [line.split(" files")[0].removeprefix("indexing: ") for line in lines
              if line.startswith("indexing: ")]
    assert counts[0] == "1/7" and counts[-1] == "7/7", counts
