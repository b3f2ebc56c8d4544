"""Files a repository may hold that the index once got wrong: names no span ID can carry back,
hard links, a file of ten thousand headings, text in a legacy encoding.

Each test is a finding's reproduction recipe: index a small repository holding the file, then
ask through the tools. The rule is the same for all: index only what can be read back, and read
back exactly what was indexed.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from indexers import walk
from indexers.chunking import MAX_SPANS_PER_FILE
from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.generation import CATALOG, read_pointer
from rag_mcp.index.spans import MAX_PATH_LEN
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.mcp_helpers import hash_deps


def index(root: Path, tmp_path: Path) -> Settings:
    s = load_settings({"root": str(root), "embed_model": hc.HASH,
                       "index_dir": str(tmp_path / "index")})
    run_index(s)
    return s


def span_ids(s: Settings) -> dict[str, list[str]]:
    pointer = read_pointer(s.index_path)
    assert pointer is not None
    cat = Catalog(pointer.dir / CATALOG, readonly=True)
    try:
        out: dict[str, list[str]] = {}
        for r in cat.all_spans():
            out.setdefault(r.span.path, []).append(r.id)
        return out
    finally:
        cat.close()


def test_every_indexed_name_can_be_read_back(tmp_path: Path) -> None:
    """A backslash, a drive-like name and a path over the ID limit were indexed, then every
    rag_get_span on their IDs was refused: the walker skips them now, and every span it keeps
    reads back."""
    root = tmp_path / "repo"
    deep = root / "/".join(["d" * 60] * 17)  # 17 * 61 = 1,037 characters of folders
    deep.mkdir(parents=True)
    (deep / "far.py").write_text("def far():\n    return 'far away'\n")
    (root / "back\\slash.py").write_text("def back():\n    return 'back slash'\n")
    (root / "c:drive.py").write_text("def drive():\n    return 'drive letter'\n")
    (root / "ok.py").write_text("def fine():\n    return 'fine'\n")
    found = walk.walk(root)
    assert [c.rel for c in found.files] == ["ok.py"]
    assert found.skipped["bad_name"] == 2 and found.skipped["long_path"] == 1
    s = index(root, tmp_path)
    ids = span_ids(s)
    assert set(ids) == {"ok.py"}
    deps = hash_deps(s)
    try:
        for sid in ids["ok.py"]:
            assert hio.direct(deps, "rag_get_span", span_id=sid)[0] == "ok"
    finally:
        deps.close()
    assert len(f"{'x' * MAX_PATH_LEN}:999999999-999999999:{'0' * 12}") <= 1100


def test_the_walker_skips_hard_links(tmp_path: Path) -> None:
    """The reader refuses a file with other names (one may be outside the root); the walker
    indexed it anyway, so its spans were found and never readable."""
    outside = tmp_path / "outside.py"
    outside.write_text("def outside():\n    return 'not in the repository'\n")
    root = tmp_path / "repo"
    root.mkdir()
    os.link(outside, root / "linked.py")
    (root / "plain.py").write_text("def plain():\n    return 1\n")
    found = walk.walk(root)
    assert [c.rel for c in found.files] == ["plain.py"]
    assert found.skipped["hard_link"] == 1
    m = walk.IgnoreMatcher(root)
    assert m.check("linked.py") == "hard_link"  # the watcher's rule too


def test_one_file_cannot_flood_the_index_with_spans(tmp_path: Path) -> None:
    """A 200 KB file of 10,000 headings became 10,000 spans."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "headings.md").write_text("".join(f"## Heading {i}\nline {i}\n\n"
                                              for i in range(10_000)))
    (root / "small.md").write_text("# Small\n\nA normal document.\n")
    s = index(root, tmp_path)
    ids = span_ids(s)
    assert 0 < len(ids["headings.md"]) <= MAX_SPANS_PER_FILE
    assert len(ids["small.md"]) == 1
    deps = hash_deps(s)
    try:  # the windows read back, and every line is still in some span
        code, text = hio.direct(deps, "rag_get_span", span_id=ids["headings.md"][-1])
        assert code == "ok" and "Heading 9999" in text
    finally:
        deps.close()


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_legacy_encodings_are_indexed_as_their_text(tmp_path: Path, encoding: str) -> None:
    """A Latin-1 file was decoded as UTF-8 with U+FFFD for every accented letter, silently."""
    root = tmp_path / "repo"
    root.mkdir()
    body = ("# Größe der Straße\n\nDer Käfer läuft über die Straße; ein café à la carte.\n"
            "Übergröße, Maß und Fuß.\n") * 3
    (root / "notes.md").write_bytes(body.encode(encoding))
    s = index(root, tmp_path)
    deps = hash_deps(s)
    try:
        code, text = hio.direct(deps, "rag_query", query="Straße Käfer", k=1,
                                include_text=True)
        assert code == "ok" and "\ufffd" not in text, text
        got = orjson.loads(text.rsplit("\n", 1)[-1])
        assert "Der Käfer läuft über die Straße" in got["hits"][0]["text"]
        sid = got["hits"][0]["id"]
        code, text = hio.direct(deps, "rag_get_span", span_id=sid)
        assert code == "ok" and "Übergröße, Maß und Fuß." in text  # read back, same digest
    finally:
        deps.close()
