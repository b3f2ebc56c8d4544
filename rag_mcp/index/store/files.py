"""What the embedded store's files look like on disk, for the checks before Chroma opens them.

Chroma's native HNSW loader can crash the whole process (SIGSEGV) on truncated or garbage
segment files (chroma-core/chroma#7238, #7069; tests/test_hostile_index.py), so a reader checks
a generation's files before any store opens them: the checksums its manifest records
(``rag_mcp.index.handle``) and, for the one file whose bytes change legitimately, the graph's
structure (``check_graphs``).
"""

from __future__ import annotations

import struct
from pathlib import Path

from rag_mcp.errors import IndexUnavailable

#: HNSW files Chroma rewrites in place the first time another process loads the collection
#: (it finishes applying its write-ahead log then): only their sizes are fixed once published.
SIZE_ONLY = frozenset({"data_level0.bin", "length.bin"})


def rewritten_on_open(name: str) -> bool:
    """Whether Chroma rewrites the file on every open (its SQLite bookkeeping): no checksum."""
    return name.startswith("chroma.sqlite3")


def _links_point_nowhere(data: Path, raw: bytes) -> bool:
    import numpy as np

    size = struct.unpack_from("<Q", raw, 28)[0]  # size_data_per_element
    max_m0 = struct.unpack_from("<Q", raw, 68)[0]
    cur = struct.unpack_from("<Q", raw, 20)[0]  # cur_element_count
    blob = np.fromfile(data, dtype="<u4")
    if (blob.size * 4) % size:
        return True
    # only the elements the header counts: the rest of the file is allocated, not written
    rows = blob.reshape(-1, size // 4)[:cur]
    total = blob.size * 4 // size
    counts = rows[:, 0] & 0xFFFF
    links = rows[:, 1:1 + max_m0]
    used = np.arange(max_m0)[None, :] < counts[:, None]
    if (counts > max_m0).any() or (links[used] >= total).any():
        return True
    # the vectors (offsetData to label_offset): a NaN passed every other check and reached the
    # client as a schema error
    offset, label_at = struct.unpack_from("<Q", raw, 44)[0], struct.unpack_from("<Q", raw, 36)[0]
    if offset < label_at <= size:
        return not bool(np.isfinite(rows.view("<f4")[:, offset // 4 : label_at // 4]).all())
    return False


def _bad_norms(norms: Path, cur: int) -> bool:
    import numpy as np

    n = np.fromfile(norms, dtype="<f4")[:cur]
    return not (np.isfinite(n).all() and (n >= 0).all() and (n < 1e6).all())


def check_graphs(gen_dir: Path, max_bytes: int | None = None) -> None:
    """Refuse an HNSW graph whose links point nowhere, before Chroma's loader follows them.

    ``data_level0.bin`` is only size-checked by the manifest (see ``SIZE_ONLY``), yet garbage in
    it makes the native search crash the process. Its layout is hnswlib's, described by the
    checksummed ``header.bin`` (a 4-byte version, then offsetLevel0, max_elements,
    cur_element_count, size_data_per_element, label_offset, offsetData, maxlevel, enterpoint,
    maxM, maxM0, ...): each element starts with a link count (low 16 bits) and maxM0 neighbour
    ids, then the vector. Every count must be at most maxM0, every neighbour an element of the
    file and every vector component a number; every norm
    in ``length.bin`` must be a finite non-negative float (garbage there gives wrong answers
    rather than a crash). Headers of another shape are left to Chroma, and so are graphs over
    ``max_bytes`` when it is given (a quick check).
    """
    for header in gen_dir.glob("chroma/*/header.bin"):
        data = header.with_name("data_level0.bin")
        raw = header.read_bytes()
        if len(raw) != 100 or not data.is_file() or (
                max_bytes is not None and data.stat().st_size > max_bytes):
            continue
        size = struct.unpack_from("<Q", raw, 28)[0]
        offset = struct.unpack_from("<Q", raw, 44)[0]  # offsetData: after the links
        max_m0 = struct.unpack_from("<Q", raw, 68)[0]
        if not (0 < size < 1 << 20 and 0 < max_m0 < 4096 and offset == 4 * (1 + max_m0)
                and size % 4 == 0):
            rel = header.relative_to(gen_dir).as_posix()
            raise IndexUnavailable(f"generation {gen_dir.name} is damaged: {rel} is not a graph "
                                   "header")
        norms = header.with_name("length.bin")
        bad: Path | None = data if _links_point_nowhere(data, raw) else None
        if bad is None and norms.is_file() and _bad_norms(norms,
                                                          struct.unpack_from("<Q", raw, 20)[0]):
            bad = norms
        if bad is not None:
            raise IndexUnavailable(f"generation {gen_dir.name} is damaged: "
                                   f"{bad.relative_to(gen_dir).as_posix()} changed since it "
                                   "was written")
