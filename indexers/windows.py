"""Fixed line windows: the fallback for files no parser understands or that fail to parse."""

from __future__ import annotations

from rag_mcp.index.spans import Chunk

_PREVIEW_CHARS = 120


def line_windows(
    lines: list[str],
    *,
    window: int = 40,
    overlap: int = 10,
    kind: str = "code",
    reason: str = "",
) -> list[Chunk]:
    """Cut ``lines`` (as from ``split_lines``) into overlapping windows of ``window`` lines.

    Windows start every ``window - overlap`` lines and are trimmed to start and end on non-blank
    lines; a window left empty by trimming, or lying inside its neighbour after trimming, is
    dropped. Every non-blank line lies in at least one window. ``reason`` says why the file
    fell back to windows and is recorded as ``Chunk.fallback``.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1 line, got {window}")
    if not 0 <= overlap < window:
        raise ValueError(f"overlap must be in 0..{window - 1} lines, got {overlap}")
    nonblank = [bool(line.strip()) for line in lines]
    chunks: list[Chunk] = []
    prev_end = -1
    step = window - overlap
    for start in range(0, len(lines), step):
        lo, hi = start, min(start + window, len(lines)) - 1
        while lo < hi and not nonblank[lo]:
            lo += 1
        while hi > lo and not nonblank[hi]:
            hi -= 1
        # hi <= prev_end: trimming left only lines the previous window already holds
        if nonblank[lo] and hi > prev_end:
            if chunks and chunks[-1].start_line == lo + 1:
                chunks.pop()  # same first line after trimming: this window holds the last one
            chunks.append(Chunk(
                start_line=lo + 1,
                end_line=hi + 1,
                kind=kind,
                preview=lines[lo].strip()[:_PREVIEW_CHARS],
                fallback=reason,
            ))
            prev_end = hi
        if start + window >= len(lines):
            break
    return chunks
