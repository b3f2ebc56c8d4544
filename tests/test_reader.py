from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_mcp.errors import InvalidArgument, NotFound, Stale
from rag_mcp.index.spans import digest
from rag_mcp.search.reader import cap_text, check_relpath, open_inside, read_span


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("one\ntwo\nthree\nfour\n")
    (tmp_path / "outside.txt").write_text("secret outside\n")
    os.symlink(tmp_path / "outside.txt", root / "src" / "link.txt")
    os.symlink(tmp_path, root / "up")
    return root


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "src/../../x", "a\\b", "C:/x", "src//a.py",
                                 "./src/a.py", "", "a\x00b"])
def test_bad_relative_paths(rel: str) -> None:
    with pytest.raises(InvalidArgument):
        check_relpath(rel)


def test_open_inside_refuses_symlinks(tree: Path) -> None:
    assert open_inside(tree, "src/a.py").startswith(b"one")
    with pytest.raises(NotFound):
        open_inside(tree, "src/link.txt")
    with pytest.raises(NotFound):
        open_inside(tree, "up/outside.txt")
    with pytest.raises(Stale):
        open_inside(tree, "src/missing.py")
    with pytest.raises(NotFound):
        open_inside(tree, "src")


def test_read_span_exact_moved_and_changed(tree: Path) -> None:
    want = digest("two\nthree")
    r = read_span(tree, "src/a.py", 2, 3, want, "two")
    assert (r.text, r.stale, r.start_line) == ("two\nthree", False, 2)
    (tree / "src" / "a.py").write_text("zero\none\ntwo\nthree\nfour\n")
    r = read_span(tree, "src/a.py", 2, 3, want, "two")
    assert (r.start_line, r.end_line, r.stale) == (3, 4, True)
    assert r.id == f"src/a.py:3-4:{want}"
    (tree / "src" / "a.py").write_text("zero\none\ntwo\nTHREE\n")
    with pytest.raises(Stale):
        read_span(tree, "src/a.py", 2, 3, want, "two")
    r2 = read_span(tree, "src/a.py", 1, 1, digest("zero"), "zero", context_lines=1)
    assert r2.text == "zero\none"


def test_cap_text_marks_truncation() -> None:
    text = "\n".join(f"line {i} é" for i in range(1000))
    capped, cut = cap_text(text, 1000)
    assert cut and capped.endswith("[truncated]") and len(capped.encode()) <= 1000
    assert cap_text("short", 1000) == ("short", False)
