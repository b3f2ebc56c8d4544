"""Updating a copied generation's vectors: the Rust-bindings path and what readers find after it.

An incremental ``rag-index`` writes its vectors through chromadb's Rust bindings alone
(``EmbeddedStore.open_update``) and leaves every published HNSW graph saved whole, so that no
reader replays Chroma's log, and none writes into a published generation while doing so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index import generation as gen
from rag_mcp.index.handle import OpenIndex, verify_checksums
from rag_mcp.index.store import EmbeddedStore
from tests.repo_helpers import write_repo

HASH = "test-hash-64"


def settings_at(root: Path, index: Path) -> Settings:
    # a fixed collection name, so a copy of the repository and its index is the same index
    return load_settings({"root": str(root), "embed_model": HASH, "index_dir": str(index),
                          "collection": "big"})


def hnsw_files(gen_dir: Path) -> dict[str, str]:
    """sha256 of every file of the generation's HNSW graphs, by relative path."""
    return {p.relative_to(gen_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(gen_dir.glob("chroma/*/*")) if p.is_file()}


def read_back(s: Settings) -> tuple[int, list[tuple[str, float]]]:
    """Open the published generation as a server does, count it and run one query."""
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    idx = OpenIndex(s, pointer)
    try:
        assert idx.vectors is not None
        probe = np.ones(64, dtype=np.float32) / 8.0
        return idx.vectors.count(), idx.vectors.query(probe, 5)
    finally:
        idx.close()


@pytest.fixture(scope="module")
def big_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """1,200 spans: Chroma saves its graph at 1,000 records, so 200 would be left in its log
    had the indexer not saved them at the end of the cold run."""
    base = tmp_path_factory.mktemp("big")
    root = base / "repo"
    write_repo(root, 100)
    run_index(settings_at(root, base / "index"))
    return root, base / "index"


def copy_index(big: tuple[Path, Path], dest: Path) -> Settings:
    root, index = big
    shutil.copytree(root, dest / "repo")
    shutil.copytree(index, dest / "index")
    return settings_at(dest / "repo", dest / "index")


def unapplied_log(gen_dir: Path) -> int:
    """Records of the collection's log that its saved HNSW graph does not hold yet: what every
    process that opens the generation would replay."""
    db = sqlite3.connect(f"file:{gen_dir / gen.CHROMA / 'chroma.sqlite3'}?mode=ro", uri=True)
    try:
        (last,) = db.execute("SELECT COALESCE(MAX(seq_id), 0) FROM embeddings_queue").fetchone()
        (saved,) = db.execute(
            "SELECT m.seq_id FROM max_seq_id m JOIN segments s ON s.id = m.segment_id "
            "WHERE s.scope = 'VECTOR'").fetchone()
    finally:
        db.close()
    return int(last) - int(saved)


def test_a_cold_index_leaves_no_log_for_readers_to_replay(big_index: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    """A reader that replayed a log would spend time on every opening, build a graph that
    differs from one opening to the next, and save it inside a published generation."""
    s = copy_index(big_index, tmp_path)
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    assert unapplied_log(pointer.dir) == 0
    before = hnsw_files(pointer.dir)
    first, second = read_back(s), read_back(s)
    assert first == second and first[0] == 1200
    assert hnsw_files(pointer.dir) == before
    verify_checksums(pointer.dir, gen.read_manifest(pointer.dir))


@pytest.mark.parametrize("edit", ["one function", "only a new mtime"])
def test_readers_never_write_into_a_generation_an_incremental_run_published(
        big_index: tuple[Path, Path], tmp_path: Path, edit: str) -> None:
    """With the graph saved after every write, a reader has nothing to replay; had the writer left
    a log behind, the reader would save the graph itself, inside a published generation (caught
    here by the file hashes and the checksums)."""
    s = copy_index(big_index, tmp_path)
    target = tmp_path / "repo" / "pkg3" / "mod3.py"
    if edit == "one function":
        target.write_text(target.read_text().replace("variant 0.'", "variant 9.'", 1))
    else:  # no vector is written: the final count alone must apply and save the old log
        os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    stats = run_index(s)
    assert stats.published and stats.embedded == (1 if edit == "one function" else 0)
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    before = hnsw_files(pointer.dir)
    assert before, "no HNSW graph on disk"
    count, hits = read_back(s)
    assert count == 1200 and len(hits) == 5
    assert hnsw_files(pointer.dir) == before
    verify_checksums(pointer.dir, gen.read_manifest(pointer.dir))


def test_the_rust_path_stores_what_chromadb_s_python_client_stores(
        big_index: tuple[Path, Path], tmp_path: Path) -> None:
    pointer = gen.read_pointer(settings_at(*big_index).index_path)
    assert pointer is not None
    name = str(gen.read_manifest(pointer.dir)["vector_collection"])
    shutil.copytree(pointer.dir / gen.CHROMA, tmp_path / "keys")
    reader = EmbeddedStore.open(tmp_path / "keys", name, create=False)
    old = sorted(reader.all_keys())[:25]
    reader.close()
    rng = np.random.default_rng(3)
    new = rng.standard_normal((40, 64)).astype(np.float32)
    new /= np.linalg.norm(new, axis=1, keepdims=True)
    keys = [f"new-{i}" for i in range(40)]
    stores = {}
    for rust in (True, False):
        folder = tmp_path / f"rust-{rust}"
        shutil.copytree(pointer.dir / gen.CHROMA, folder)
        store = EmbeddedStore.open_update(folder, name, rust=rust)
        try:
            assert type(store._col).__name__ == ("RustCollection" if rust else "Collection")
            store.add(keys, new)
            store.delete(old)
            assert store.count() == 1200 + 40 - 25
        finally:
            store.close()
        stores[rust] = EmbeddedStore.open(folder, name, create=False)
    try:
        fast, slow = stores[True], stores[False]
        assert fast.all_keys() == slow.all_keys()
        sample = sorted(fast.all_keys())[::50] + keys[:5]
        a, b = fast.vectors(sample), slow.vectors(sample)
        assert a.keys() == b.keys() == set(sample)
        assert all(np.array_equal(a[k], b[k]) for k in sample)
        # the graphs themselves may differ (Chroma inserts a batch with two threads), so the
        # searches are compared where the answer is certain: each new vector finds itself
        for i, q in enumerate(new[:10]):
            for store in (fast, slow):
                key, sim = store.query(q, 3)[0]
                assert key == f"new-{i}" and sim == pytest.approx(1.0, abs=1e-5)
    finally:
        for store in stores.values():
            store.close()


def test_an_incremental_run_does_not_import_chromadb(tmp_path: Path) -> None:
    """chromadb's Python layer costs ~1 s to import and 0.2 s to tear down: after a one-file edit
    only its Rust bindings may load, and the new vector must read back where chromadb finds it."""
    root = tmp_path / "repo"
    write_repo(root, 5)
    s = settings_at(root, tmp_path / "index")
    run_index(s)
    target = root / "pkg2" / "mod2.py"
    target.write_text(target.read_text() + "\n\ndef brand_new(y):\n    return y - 7\n")
    script = textwrap.dedent(f"""
        import sys
        from indexers.pipeline import run_index
        from rag_mcp.config import load_settings
        s = load_settings({{"root": {str(root)!r}, "embed_model": {HASH!r},
                            "index_dir": {str(tmp_path / "index")!r}, "collection": "big"}})
        st = run_index(s)
        assert st.published and st.embedded == 1, st
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("chromadb",
                                                                  "chromadb_rust_bindings")))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
    loaded = out.stdout.strip()
    assert "'chromadb_rust_bindings'" in loaded and "'chromadb'" not in loaded, loaded
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    idx = OpenIndex(s, pointer)
    try:
        assert idx.catalog is not None and idx.vectors is not None
        row = next(r for r in idx.catalog.all_spans() if r.span.symbol == "brand_new")
        vec = idx.vectors.vectors([row.emb_key])[row.emb_key]
        assert idx.vectors.query(vec, 1)[0][0] == row.emb_key
    finally:
        idx.close()


def test_readers_use_the_rust_path_and_find_what_the_python_client_finds(
        big_index: tuple[Path, Path], tmp_path: Path) -> None:
    pointer = gen.read_pointer(settings_at(*big_index).index_path)
    assert pointer is not None
    name = str(gen.read_manifest(pointer.dir)["vector_collection"])
    folder = tmp_path / "copy"
    shutil.copytree(pointer.dir / gen.CHROMA, folder)
    fast = EmbeddedStore.open(folder, name, create=False)
    slow = EmbeddedStore.open(folder, name, create=False, rust=False)
    try:
        assert type(fast._col).__name__ == "RustCollection"
        assert type(slow._col).__name__ == "Collection"
        assert fast.count() == slow.count() == 1200
        keys = sorted(fast.all_keys())
        assert keys == sorted(slow.all_keys())
        sample = keys[::97]
        a, b = fast.vectors([*sample, "no-such-key"]), slow.vectors(sample)
        assert a.keys() == b.keys() == set(sample)  # an unknown key is simply absent
        assert all(a[k].dtype == np.float32 and np.array_equal(a[k], b[k]) for k in sample)
        assert fast.existing([*sample[:3], "no-such-key"]) == set(sample[:3])
        # Each reader replays the 200 records left in Chroma's log into its own copy of the
        # graph (two threads insert them) and the search is approximate, so the two are not
        # compared hit for hit: each returns cosines that match the vectors it names, best
        # first, and finds most of the exact top 10.
        every = fast.vectors(keys)
        matrix = np.stack([every[k] for k in keys])
        rng = np.random.default_rng(5)
        recall = {"fast": [], "slow": []}
        for q in rng.standard_normal((5, 64)).astype(np.float32):
            q /= np.linalg.norm(q)
            exact = {keys[i] for i in np.argsort(-(matrix @ q))[:10]}
            for label, store in (("fast", fast), ("slow", slow)):
                hits = store.query(q, 10)
                sims = [sim for _, sim in hits]
                assert len(hits) == 10 and sims == sorted(sims, reverse=True)
                assert sims == pytest.approx([float(every[k] @ q) for k, _ in hits], abs=1e-5)
                recall[label].append(len(exact & {k for k, _ in hits}) / 10)
        assert np.mean(recall["fast"]) >= 0.6 and np.mean(recall["slow"]) >= 0.6, recall
        # more neighbours than vectors: as many as the graph reaches, no error
        assert 1000 <= len(fast.query(q, 5000)) <= 1200
    finally:
        fast.close()
        slow.close()


def test_a_reader_falls_back_to_the_python_client_when_the_rust_path_cannot_open(
        big_index: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rag_mcp.index.store.rust as rust_module

    pointer = gen.read_pointer(settings_at(*big_index).index_path)
    assert pointer is not None
    name = str(gen.read_manifest(pointer.dir)["vector_collection"])
    shutil.copytree(pointer.dir / gen.CHROMA, tmp_path / "copy")  # readers replay the log
    monkeypatch.setattr(rust_module, "_BINDINGS_RELEASE", "0.0.0")  # "another chromadb"
    store = EmbeddedStore.open(tmp_path / "copy", name, create=False)
    try:
        assert type(store._col).__name__ == "Collection"
        assert store.count() == 1200
    finally:
        store.close()
