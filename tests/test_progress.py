"""The index run's progress lines: counts, rate, ETA, plain lines off a terminal, quiet."""

from __future__ import annotations

import io

from indexers.progress import Progress, fmt_duration


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
    slow = Progress(out, tty=False, interval=3600.0)
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
