"""The code chunker's last step: its drafts made to tile the file.

``indexers.code`` lays a file out as drafts, one per definition or group of statements; they may
overlap at their edges, start or end on blank lines, or leave stray lines no node claimed.
``tile`` turns them into the file's chunks: sorted, disjoint, bounded by non-blank lines, and
covering every non-blank line of the file.
"""

from __future__ import annotations

from rag_mcp.index.spans import Chunk

PREVIEW_CHARS = 200

#: (first row, last row, symbol, parent, preview, context, meta), rows 0-based and inclusive
Draft = tuple[int, int, "str | None", "str | None", str, str, tuple[tuple[str, str], ...]]


def preview_of(line: str) -> str:
    """A span's one-line preview as the chunker stores it."""
    return line.strip().lstrip("\ufeff")[:PREVIEW_CHARS]


def tile(drafts: list[Draft], lines: list[str]) -> list[Chunk]:
    """Make the drafts tile the file: sorted, disjoint, on non-blank lines, covering them all."""
    drafts.sort(key=lambda draft: draft[0])
    spans: list[list] = []
    for first, last, symbol, parent, preview, context, meta in drafts:
        if spans:
            first = max(first, spans[-1][1] + 1)
        while first <= last and not lines[first].strip():
            first += 1
        while last >= first and not lines[last].strip():
            last -= 1
        if first > last:
            continue
        if spans:
            row = first - 1
            while row > spans[-1][1] and not lines[row].strip():
                row -= 1
            spans[-1][1] = row  # stray lines no node claimed go to the span above
        spans.append([first, last, symbol, parent, preview, context, meta])
    head = next(row for row, line in enumerate(lines) if line.strip())
    tail = len(lines) - 1 - next(n for n, line in enumerate(reversed(lines)) if line.strip())
    if not spans:
        # text the grammar saw as nothing at all (a lone BOM, zero-width spaces)
        return [Chunk(head + 1, tail + 1, "code", preview=preview_of(lines[head]))]
    spans[0][0] = min(spans[0][0], head)
    spans[-1][1] = max(spans[-1][1], tail)
    return [
        Chunk(first + 1, last + 1, "code", symbol, parent, preview=preview, context=context,
              meta=meta)
        for first, last, symbol, parent, preview, context, meta in spans
    ]
