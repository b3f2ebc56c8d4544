"""kill -9 during an index run, and readers in other processes while a writer publishes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from rag_mcp.config import load_settings
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.handle import OpenIndex
from tests.repo_helpers import write_repo

HASH = "test-hash-64"


def check_consistent(root: Path) -> int:
    """Assert the published generation is whole; returns its span count (0: none yet)."""
    s = load_settings({"root": str(root), "embed_model": HASH})
    pointer = gen.read_pointer(s.index_path)
    if pointer is None:
        return 0
    idx = OpenIndex(s, pointer)  # verifies manifest == catalog == lexical == vectors
    try:
        assert idx.catalog is not None
        rows = idx.catalog.all_spans()
        ids = [r.id for r in rows]
        assert len(ids) == len(set(ids)), "duplicate span IDs"
        assert len(rows) == idx.manifest["spans"]
        files = idx.catalog.files()
        assert {r.span.path for r in rows} <= set(files)
        return len(rows)
    finally:
        idx.close()


def rag_index_cmd(root: Path) -> list[str]:
    return [sys.executable, "-m", "indexers.cli", "--root", str(root), "--model", HASH, "-q"]


@pytest.mark.slow
def test_kill_9_at_random_moments_leaves_a_consistent_index(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    rng = random.Random(1234)
    write_repo(root, 120, 0)
    subprocess.run(rag_index_cmd(root), check=True)
    expected = check_consistent(root)
    assert expected > 0
    # The kill moments are drawn over the length of a run like the killed ones (an update of
    # every file), timed here: the machine's speed varies, a constant would miss the runs.
    write_repo(root, 120, 100)
    t0 = time.monotonic()
    subprocess.run(rag_index_cmd(root), check=True)
    run = time.monotonic() - t0
    kills = 0
    for round_ in range(1, 13):
        write_repo(root, 120, round_)  # every run has real work to do
        proc = subprocess.Popen(rag_index_cmd(root))
        time.sleep(rng.uniform(0.05, run))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        assert check_consistent(root) == expected  # old or new generation, never half
        if kills >= 4 and round_ >= 6:
            break
    assert kills >= 3
    subprocess.run(rag_index_cmd(root), check=True)
    assert check_consistent(root) == expected
    s = load_settings({"root": str(root), "embed_model": HASH})
    leftovers = [p.name for p in s.index_path.iterdir() if p.name.startswith("tmp-")]
    assert leftovers == []
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    cat = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    texts = {r.span.symbol for r in cat.of_path("pkg0/mod0.py")}
    cat.close()
    assert "func_0_0" in texts


READER = textwrap.dedent("""
    import os, sys, time, orjson
    from rag_mcp.config import load_settings
    from rag_mcp.deps import build_deps
    from rag_mcp.search.records import QueryParams
    from rag_mcp.embed import load_embedder
    from rag_mcp.embed.pool import EmbedderPool
    s = load_settings({"root": sys.argv[1], "embed_model": "test-hash-64"})
    deps = build_deps(s, models=EmbedderPool(
        s, lambda m, b: load_embedder(m, b, cache_dir=s.model_cache_path)))
    ok = failed = 0
    gens = set()
    errors = []
    stop = sys.argv[2]  # the writer is done when this file exists
    deadline = time.monotonic() + 600  # a bound, never reached unless the test itself broke
    while not (os.path.exists(stop) and ok > 10) and time.monotonic() < deadline:
        try:
            a = deps.queries.query(QueryParams(query=f"function {ok % 12} of module", k=5))
            assert a.hits, "no hits"
            gens.add(a.index_generation)
            ok += 1
            if ok == 1:
                open(sys.argv[3], "w").close()  # answering from the first generation
        except Exception as e:
            failed += 1
            errors.append(f"{type(e).__name__}: {e}")
    out = {"ok": ok, "failed": failed, "gens": sorted(gens), "errors": errors[:5]}
    print(orjson.dumps(out).decode())
""")


@pytest.mark.slow
def test_readers_never_see_a_half_written_generation(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write_repo(root, 60, 0)
    subprocess.run(rag_index_cmd(root), check=True)
    stop = tmp_path / "writer-done"
    # The readers query until the writer is done, however long its runs take on a busy machine.
    ready = [tmp_path / f"reader-{i}-ready" for i in range(2)]
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(root), str(stop), str(r)],
                                stdout=subprocess.PIPE, text=True) for r in ready]
    deadline = time.monotonic() + 300
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in readers), "a reader died"
        time.sleep(0.05)
    for variant in range(1, 4):
        write_repo(root, 60, variant)
        subprocess.run(rag_index_cmd(root), check=True)
    stop.touch()
    results = [orjson.loads(r.communicate(timeout=600)[0]) for r in readers]
    for res in results:
        assert res["failed"] == 0, res["errors"]
        assert res["ok"] > 10
    assert any(len(res["gens"]) > 1 for res in results), results  # they followed CURRENT


def _cached_vectors(root: Path) -> int:
    import sqlite3

    path = root / ".rag" / "embcache.sqlite"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return int(db.execute("SELECT count(*) FROM vectors").fetchone()[0])
    except sqlite3.OperationalError:  # the table is not created yet
        return 0
    finally:
        db.close()


def _default_sigint() -> None:
    # A child started from a shell without job control inherits SIGINT ignored; Ctrl-C is what
    # this test sends, so give the child the normal disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_on_a_cold_index_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write_repo(root, 160, 0)  # 1,920 distinct spans: the run takes seconds, so Ctrl-C lands
    total = 160 * 12
    proc = subprocess.Popen([*rag_index_cmd(root)[:-1], "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while _cached_vectors(root) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert b"interrupted" in err and b"run it again to resume" in err
    assert b"Traceback" not in err and out == b""
    s = load_settings({"root": str(root), "embed_model": HASH})
    assert gen.read_pointer(s.index_path) is None  # nothing half-done was published
    assert not [p for p in s.index_path.iterdir() if p.name.startswith("tmp-")]
    kept = _cached_vectors(root)
    assert 0 < kept < total

    again = subprocess.run([*rag_index_cmd(root)[:-1], "--json"], capture_output=True,
                           check=True)
    stats = orjson.loads(again.stdout)
    assert stats["published"] and stats["spans_total"] == total
    assert stats["embedded"] == total - kept  # only what the stopped run had not embedded
    assert check_consistent(root) == total
