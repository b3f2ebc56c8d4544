"""Reading span text back from the repository: strictly inside the root, stale-aware.

A span ID is only honoured when the catalog holds it (so a crafted path never reaches the file
system), and even then the path is re-checked here: no absolute paths, no ``..``, no NUL, no
symlink anywhere along the way (the walker never indexes symlinks, so one found now means the
tree changed under us), and the final open uses ``O_NOFOLLOW``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rag_mcp.errors import InvalidArgument, NotFound, Stale
from rag_mcp.spans import digest, make_span_id, split_lines

TRUNCATED = "\n[truncated]"


def check_relpath(rel: str) -> list[str]:
    """Components of a repo-relative POSIX path; raises ``InvalidArgument`` for anything else."""
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/") or (
            len(rel) > 1 and rel[1] == ":"):
        raise InvalidArgument("the path must be relative to the repository root")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidArgument("the path must not contain empty, '.' or '..' components")
    return parts


def open_inside(root: Path, rel: str) -> bytes:
    """The bytes of ``root/rel``: ``Stale`` when it is gone, ``NotFound`` for a symlink or a
    non-regular file, ``InvalidArgument`` for a path that could escape the root."""
    parts = check_relpath(rel)
    cur = root
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            # It was indexed, so it existed: the index is behind the tree, not the ID wrong.
            raise Stale(f"{rel} no longer exists; re-run rag-index") from None
        except OSError:
            raise NotFound(f"{rel} cannot be read") from None
        if stat.S_ISLNK(st.st_mode):
            raise NotFound(f"{rel} is now a symbolic link; rag-mcp only reads regular files")
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise Stale(f"{rel} no longer exists; re-run rag-index")
    try:
        fd = os.open(cur, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotFound(f"{rel} is now a symbolic link") from None
        raise NotFound(f"{rel} cannot be read") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotFound(f"{rel} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SpanText:
    id: str  # the current ID (differs from the requested one when the span moved)
    path: str
    start_line: int
    end_line: int
    text: str
    stale: bool


def locate(lines: list[str], start: int, end: int, want: str, first_line: str) -> int | None:
    """Start line of the unchanged span text, searching from its old place outwards."""
    n = end - start + 1
    if 1 <= start and end <= len(lines) and digest("\n".join(lines[start - 1:end])) == want:
        return start
    starts = [i + 1 for i, line in enumerate(lines) if line == first_line]
    starts.sort(key=lambda s: abs(s - start))
    for s in starts:
        if s + n - 1 <= len(lines) and digest("\n".join(lines[s - 1:s - 1 + n])) == want:
            return s
    return None


def read_span(root: Path, rel: str, start: int, end: int, want_digest: str, first_line: str,
              *, context_lines: int = 0) -> SpanText:
    """Current text of a span: exact, moved (``stale``), or ``E_STALE`` when it changed.

    The text is whole: callers redact first and cap after, so a secret is never cut in half
    at the budget's edge (a half secret no longer matches its pattern)."""
    data = open_inside(root, rel)
    lines = split_lines(data.decode("utf-8", errors="replace").lstrip("\ufeff"))
    found = locate(lines, start, end, want_digest, first_line)
    if found is None:
        raise Stale(
            f"{rel} changed since it was indexed and the span {start}-{end} is no longer there; "
            "re-run rag-index, then query again",
            details={"path": rel},
        )
    n = end - start + 1
    new_start, new_end = found, found + n - 1
    lo = max(1, new_start - context_lines)
    hi = min(len(lines), new_end + context_lines)
    return SpanText(
        id=make_span_id(rel, new_start, new_end, want_digest), path=rel, start_line=new_start,
        end_line=new_end, text="\n".join(lines[lo - 1:hi]), stale=found != start,
    )


def cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to ``max_bytes`` of UTF-8 (at a line end when possible), marked visibly."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text, False
    budget = max(0, max_bytes - len(TRUNCATED))
    cut = raw[:budget].decode("utf-8", errors="ignore")
    nl = cut.rfind("\n")
    if nl > len(cut) // 2:
        cut = cut[:nl]
    return cut + TRUNCATED, True
