"""Reading span text back from the repository: strictly inside the root, stale-aware.

A span ID is only honoured when the catalog holds it (so a crafted path never reaches the file
system), and even then the path is re-checked here: no absolute paths, no ``..``, no NUL, no
symlink anywhere along the way (the walker never indexes symlinks, so one found now means the
tree changed under us: each component is opened with ``openat`` and ``O_NOFOLLOW``), only a
regular file is read (never a FIFO or a device), and never more than ``MAX_READ_BYTES``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rag_mcp.errors import InvalidArgument, NotFound, RagError, Stale
from rag_mcp.index import documents
from rag_mcp.index.spans import decode_text, digest, make_span_id, span_text, split_lines

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


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a FIFO planted where an indexed file was must not wait for a writer.
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
#: never read more than this from one file (a file swapped for a huge one after indexing)
MAX_READ_BYTES = 64 * 1024 * 1024


def _refusal(dir_fd: int, part: str, rel: str, exc: OSError) -> RagError:
    """Why ``part`` (inside ``dir_fd``) could not be opened, as the error the caller sees."""
    if exc.errno == errno.ENOENT:
        # It was indexed, so it existed: the index is behind the tree, not the ID wrong.
        return Stale(f"{rel} no longer exists; re-run rag-index")
    try:
        st = os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return NotFound(f"{rel} cannot be read")
    if stat.S_ISLNK(st.st_mode):
        return NotFound(f"{rel} is now a symbolic link; rag-mcp only reads regular files")
    if exc.errno == errno.ENOTDIR:
        return Stale(f"{rel} no longer exists; re-run rag-index")
    return NotFound(f"{rel} cannot be read")


def open_inside(root: Path, rel: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``root/rel``: ``Stale`` when it is gone or grew past ``max_bytes``,
    ``NotFound`` for a symlink or a non-regular file, ``InvalidArgument`` for a path that could
    escape the root.

    The path is walked one component at a time with ``openat`` and ``O_NOFOLLOW``: checking
    each component with ``lstat`` and then opening the whole path would leave a window in
    which a directory swapped for a symlink is followed (tests/test_hostile_paths.py races it).
    """
    parts = check_relpath(rel)
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        raise NotFound(f"the repository root {root} cannot be read") from None
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(fd, part, rel, exc) from None
            os.close(fd)
            fd = nxt
        try:
            ffd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _refusal(fd, parts[-1], rel, exc) from None
    finally:
        os.close(fd)
    try:
        st = os.fstat(ffd)
        if not stat.S_ISREG(st.st_mode):
            raise NotFound(f"{rel} is not a regular file")
        if st.st_nlink > 1:
            # A hard link is the same file under another name, possibly outside the root: one
            # swapped in after indexing would read it (its lines around a matching span).
            raise NotFound(f"{rel} is a hard link to a file that has other names; rag-mcp "
                           "does not read hard-linked files")
        os.set_blocking(ffd, True)
        with os.fdopen(ffd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    finally:
        os.close(ffd)
    if len(data) > max_bytes:
        raise Stale(f"{rel} grew past {max_bytes:,} bytes since it was indexed; re-run rag-index")
    return data


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
    if _unchanged(lines, start, end, want):
        return start
    starts = [i + 1 for i, line in enumerate(lines) if line == first_line]
    starts.sort(key=lambda s: abs(s - start))
    for s in starts:
        if s + n - 1 <= len(lines) and digest("\n".join(lines[s - 1:s - 1 + n])) == want:
            return s
    return None


def file_lines(root: Path, rel: str, *, max_bytes: int = MAX_READ_BYTES) -> list[str]:
    """The file's lines as the indexer numbered them (``open_inside``'s checks apply); a PDF's
    are the lines of its extracted text."""
    data = open_inside(root, rel, max_bytes=max_bytes)
    if documents.is_document(rel):
        try:
            return split_lines(documents.extract(rel, data).text)
        except documents.Unreadable as exc:
            raise Stale(f"{rel} can no longer be read ({exc.reason}); re-run rag-index",
                        details={"path": rel}) from None
    return split_lines(decode_text(data))


def _unchanged(lines: list[str], start: int, end: int, want: str) -> bool:
    return 1 <= start <= end <= len(lines) and digest("\n".join(lines[start - 1:end])) == want


def join_parts(root: Path, rel: str, parts: list[tuple[int, int, str]],
               *, max_bytes: int = MAX_READ_BYTES) -> tuple[int, int, str] | None:
    """``(start, end, text)`` of the one line range covering ``parts`` (``(start, end,
    digest)`` of indexed spans of one file), read from the file now; None when any part no
    longer matches the file (or the file cannot be read): then nothing is joined."""
    try:
        lines = file_lines(root, rel, max_bytes=max_bytes)
    except RagError:
        return None
    if not all(_unchanged(lines, s, e, d) for s, e, d in parts):
        return None
    start, end = min(p[0] for p in parts), max(p[1] for p in parts)
    return start, end, span_text(lines, start, end)


def read_joined(root: Path, rel: str, start: int, end: int, want_digest: str,
                parts: list[tuple[int, int, str]], first_line: str, *, context_lines: int = 0,
                max_bytes: int = MAX_READ_BYTES) -> SpanText:
    """``read_span`` for a range that rag_query joined from adjacent spans (``parts``).

    The range's digest was taken from the file when the parts still matched it, so: parts
    unchanged and digest equal, the text; parts unchanged but another digest, an ID that never
    named this range (``E_NOT_FOUND``); a part changed, the range found moved or ``E_STALE``."""
    lines = file_lines(root, rel, max_bytes=max_bytes)
    if all(_unchanged(lines, s, e, d) for s, e, d in parts):
        if not _unchanged(lines, start, end, want_digest):
            raise NotFound(f"no span {make_span_id(rel, start, end, want_digest)} in the index; "
                           "use an id returned by rag_query")
        return _span_text(lines, rel, start, end, start, want_digest, context_lines)
    return _read_lines(lines, rel, start, end, want_digest, first_line, context_lines)


def read_span(root: Path, rel: str, start: int, end: int, want_digest: str, first_line: str,
              *, context_lines: int = 0, max_bytes: int = MAX_READ_BYTES) -> SpanText:
    """Current text of a span: exact, moved (``stale``), or ``E_STALE`` when it changed.

    The text is whole: callers redact first and cap after, so a secret is never cut in half
    at the budget's edge (a half secret no longer matches its pattern)."""
    lines = file_lines(root, rel, max_bytes=max_bytes)
    return _read_lines(lines, rel, start, end, want_digest, first_line, context_lines)


def _read_lines(lines: list[str], rel: str, start: int, end: int, want_digest: str,
                first_line: str, context_lines: int) -> SpanText:
    found = locate(lines, start, end, want_digest, first_line)
    if found is None:
        raise Stale(
            f"{rel} changed since it was indexed and the span {start}-{end} is no longer there; "
            "re-run rag-index, then query again",
            details={"path": rel},
        )
    return _span_text(lines, rel, start, end, found, want_digest, context_lines)


def _span_text(lines: list[str], rel: str, start: int, end: int, found: int, want_digest: str,
               context_lines: int) -> SpanText:
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
