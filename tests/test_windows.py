"""Line windows, the fallback chunker: exact windows, trimming, and coverage properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexers.windows import line_windows
from rag_mcp.index.spans import split_lines


def ranges(chunks) -> list[tuple[int, int]]:
    return [(c.start_line, c.end_line) for c in chunks]


def test_windows_step_by_window_minus_overlap():
    lines = [f"line {i}" for i in range(1, 101)]
    chunks = line_windows(lines, window=40, overlap=10, kind="code", reason="unsupported_language")
    assert ranges(chunks) == [(1, 40), (31, 70), (61, 100)]
    assert [c.preview for c in chunks] == ["line 1", "line 31", "line 61"]
    assert {(c.kind, c.fallback, c.symbol, c.heading) for c in chunks} == {
        ("code", "unsupported_language", None, None)
    }


def test_short_file_is_one_window_and_defaults_apply():
    chunks = line_windows(["a", "b", "c"])
    assert ranges(chunks) == [(1, 3)]
    assert (chunks[0].kind, chunks[0].fallback) == ("code", "")


def test_windows_are_trimmed_to_non_blank_lines():
    text = "\n\n  first  \nx\n\n\ny\n\n\n\nlast\n\n"
    chunks = line_windows(split_lines(text), window=5, overlap=1, kind="text", reason="parse_error")
    assert ranges(chunks) == [(3, 4), (7, 7), (11, 11)]
    assert [c.preview for c in chunks] == ["first", "y", "last"]


def test_window_left_inside_the_previous_one_by_trimming_is_dropped():
    # windows of 4 every 2 lines: [1-4] then [3-6], which trims to 3-4, already covered
    lines = ["a", "b", "c", "d", "", ""]
    assert ranges(line_windows(lines, window=4, overlap=2)) == [(1, 4)]


def test_blank_and_empty_files_have_no_windows():
    assert line_windows([]) == []
    assert line_windows(["", "  ", "\t", "\r"]) == []


def test_crlf_lines_from_split_lines():
    lines = split_lines("a\r\n\r\nb\r\n")
    assert ranges(line_windows(lines, window=2, overlap=0)) == [(1, 1), (3, 3)]


@pytest.mark.parametrize(("window", "overlap"), [(0, 0), (10, 10), (10, 11), (5, -1)])
def test_bad_window_arguments_raise(window, overlap):
    with pytest.raises(ValueError):
        line_windows(["x"], window=window, overlap=overlap)


LINES = st.lists(st.sampled_from(["", " ", "\t", "x", "  indented", "é日🙂", "}"]), max_size=120)


@st.composite
def window_args(draw) -> tuple[int, int]:
    window = draw(st.integers(1, 15))
    return window, draw(st.integers(0, window - 1))


@settings(max_examples=200, deadline=None)
@given(LINES, window_args())
def test_windows_cover_every_non_blank_line(lines, args):
    window, overlap = args
    chunks = line_windows(lines, window=window, overlap=overlap, reason="r")
    nonblank = {i + 1 for i, line in enumerate(lines) if line.strip()}
    covered: set[int] = set()
    for prev, c in zip([None, *chunks], chunks, strict=False):
        assert c.start_line in nonblank and c.end_line in nonblank
        assert c.end_line - c.start_line + 1 <= window
        assert c.preview == lines[c.start_line - 1].strip()
        assert c.fallback == "r"
        if prev is not None:
            # sorted, each window adds lines, and consecutive windows share at most `overlap`
            assert prev.start_line < c.start_line and prev.end_line < c.end_line
            assert prev.end_line - c.start_line + 1 <= overlap
        covered.update(range(c.start_line, c.end_line + 1))
    assert nonblank <= covered


def test_window_that_trimming_makes_part_of_the_next_is_dropped():
    # [1-2] trims to 2-2, [2-3] to 2-3: one window, not two nested ones
    assert ranges(line_windows(["", "x", "y"], window=2, overlap=1)) == [(2, 3)]
