from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rag_mcp.errors import IndexBusy, IndexUnavailable
from rag_mcp.index import generation as gen


def _fake_gen(base: Path, n: int) -> Path:
    tmp = gen.make_tmp_dir(base, n)
    (tmp / gen.MANIFEST).write_bytes(orjson.dumps({"schema_version": gen.SCHEMA_VERSION}))
    return gen.publish(base, tmp, n)


def test_publish_moves_current_atomically(tmp_path: Path) -> None:
    base = tmp_path / "idx"
    base.mkdir()
    assert gen.read_pointer(base) is None
    _fake_gen(base, 1)
    p = gen.read_pointer(base)
    assert p is not None and p.generation == 1 and p.dir.name == "gen-000001"
    _fake_gen(base, 2)
    assert gen.read_pointer(base).generation == 2  # type: ignore[union-attr]
    assert gen.next_generation(base) == 3


def test_damaged_pointer_and_manifest_are_index_unavailable(tmp_path: Path) -> None:
    base = tmp_path / "idx"
    base.mkdir()
    (base / gen.CURRENT).write_text("{not json")
    with pytest.raises(IndexUnavailable, match="damaged"):
        gen.read_pointer(base)
    d = _fake_gen(base, 1)
    (d / gen.MANIFEST).write_text("")
    with pytest.raises(IndexUnavailable, match="manifest"):
        gen.read_manifest(d)
    (d / gen.MANIFEST).write_bytes(orjson.dumps({"schema_version": 999}))
    with pytest.raises(IndexUnavailable, match="another version"):
        gen.read_manifest(d)


def test_garbage_collection_keeps_pinned_generations(tmp_path: Path) -> None:
    base = tmp_path / "idx"
    base.mkdir()
    for n in (1, 2, 3, 4):
        _fake_gen(base, n)
    pin = gen.ReaderPin(base / "gen-000001")
    leftover = base / "tmp-000009-123"
    leftover.mkdir()
    removed = gen.collect_garbage(base, keep=4)
    assert "gen-000002" in removed and "tmp-000009-123" in removed
    assert (base / "gen-000001").exists()  # a reader holds it
    assert (base / "gen-000003").exists() and (base / "gen-000004").exists()
    pin.release()
    gen.collect_garbage(base, keep=4)
    assert not (base / "gen-000001").exists()


def test_second_writer_waits_or_fails_fast(tmp_path: Path) -> None:
    base = tmp_path / "idx"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path;"
         "from rag_mcp.index.generation import WriterLock;"
         f"l = WriterLock(Path({str(base)!r})); l.acquire(wait=False); print('held', flush=True);"
         "sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = gen.WriterLock(base)
        with pytest.raises(IndexBusy, match=f"pid {holder.pid}"):
            lock.acquire(wait=False)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(10)
    lock = gen.WriterLock(base)
    lock.acquire(wait=False)
    assert lock.held and (base / gen.LOCK).read_text() == str(os.getpid())
    lock.release()
