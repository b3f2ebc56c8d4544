"""Faults an independent attack found: each test is that finding's reproduction recipe.

Black-box where the finding was: the rag-index command line, a real stdio server process, an
MCP client session. docs/SECURITY.md reports the same cases at full size (bench/safety/hostile.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index import generation as gen
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.mcp_helpers import hash_deps
from tests.repo_helpers import write_repo

QUERY = {"query": "function of module variant", "k": 3}


def settings_at(root: Path, index_dir: Path) -> Settings:
    return load_settings({"root": str(root), "embed_model": hc.HASH, "index_dir": str(index_dir)})


def rag_index(root: Path, index_dir: Path, *extra: str, timeout: float = 300
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(root),
                           "--model", hc.HASH, "--index-dir", str(index_dir), *extra],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def no_traceback(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]


async def answer(s: Settings) -> tuple[str, str]:
    async with hio.session(s) as (client, _):
        r = await client.call_tool("rag_query", QUERY)
        return hio.answer_code(r), hio.text(r)


def current_dir(s: Settings) -> Path:
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    return pointer.dir


def flip_bit(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.fixture
def small_index(tmp_path: Path) -> tuple[Path, Path, Settings]:
    root = tmp_path / "repo"
    write_repo(root, 12, 0)
    index = tmp_path / "index"
    s = settings_at(root, index)
    run_index(s)
    return root, index, s


# --- the index carries no damage forward, and repairs itself -----------------------------------


def test_an_incremental_run_never_reblesses_a_damaged_generation(
        small_index: tuple[Path, Path, Settings]) -> None:
    root, index, s = small_index
    lexical = max((p for p in (current_dir(s) / "lexical").iterdir() if p.suffix == ".store"),
                  key=lambda p: p.stat().st_size)
    flip_bit(lexical)
    os.utime(root / "pkg0" / "mod0.py")  # any source file touched: an incremental run
    p = rag_index(root, index)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "damage" in (p.stdout + p.stderr).lower(), p.stdout + p.stderr  # and says so
    assert anyio.run(answer, s)[0] == "ok"


@pytest.mark.parametrize("damage", ["delete chroma", "delete lexical", "flip catalog",
                                    "flip lexical", "truncate catalog"])
def test_plain_rag_index_repairs_what_status_reports(small_index: tuple[Path, Path, Settings],
                                                     damage: str) -> None:
    root, index, s = small_index
    how, what = damage.split()
    target = {"chroma": current_dir(s) / "chroma", "lexical": current_dir(s) / "lexical",
              "catalog": current_dir(s) / "spans.sqlite"}[what]
    if how == "delete":
        shutil.rmtree(target)
    elif how == "flip":
        files = [target] if target.is_file() else sorted(target.iterdir())
        flip_bit(max(files, key=lambda f: f.stat().st_size))
    else:
        os.truncate(target, target.stat().st_size // 2)
    status = rag_index(root, index, "--status")
    no_traceback(status)
    assert "damage" in (status.stdout + status.stderr).lower(), status.stdout
    p = rag_index(root, index)  # nothing else changed
    no_traceback(p)
    assert p.returncode == 0 and "up to date" not in p.stdout, p.stdout + p.stderr
    assert anyio.run(answer, s)[0] == "ok"
    again = rag_index(root, index, "--status")
    assert "damage" not in (again.stdout + again.stderr).lower(), again.stdout


def test_deleted_vector_rows_are_damage_that_rag_index_repairs(
        small_index: tuple[Path, Path, Settings]) -> None:
    """Rows deleted from the vector store with nothing else changed: "up to date" before."""
    from rag_mcp.index.store.chroma import chromadb, client_settings

    root, index, s = small_index
    client = chromadb().PersistentClient(path=str(current_dir(s) / "chroma"),
                                         settings=client_settings())
    vectors = client.list_collections()[0]
    vectors.delete(ids=vectors.get(limit=3)["ids"])
    del vectors, client
    status = rag_index(root, index, "--status")
    no_traceback(status)
    assert "damage" in (status.stdout + status.stderr).lower(), status.stdout
    p = rag_index(root, index)
    no_traceback(p)
    assert p.returncode == 0 and "up to date" not in p.stdout, p.stdout + p.stderr
    assert anyio.run(answer, s)[0] == "ok"


@pytest.mark.parametrize("name", ["CURRENT", "writer.lock"])
def test_a_directory_where_a_file_belongs_needs_no_manual_deletion(
        small_index: tuple[Path, Path, Settings], name: str) -> None:
    root, index, s = small_index
    target = s.index_path / name
    if target.exists():
        target.unlink()
    target.mkdir()
    (target / "junk").write_text("x")
    p = rag_index(root, index)
    no_traceback(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert anyio.run(answer, s)[0] == "ok"


def test_current_as_a_fifo_hangs_neither_the_server_nor_the_indexer(
        small_index: tuple[Path, Path, Settings]) -> None:
    root, index, s = small_index
    fifo = s.index_path / "CURRENT"
    fifo.unlink()
    os.mkfifo(fifo)
    got: list[tuple[str, str]] = []
    t = threading.Thread(target=lambda: got.append(anyio.run(answer, s)), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # unblock the reader stuck in open(), then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
    assert got, "the server hung opening CURRENT"
    code, message = got[0]
    assert code == "E_INDEX_UNAVAILABLE" and "rag-index" in message, message
    p = rag_index(root, index, timeout=120)
    no_traceback(p)
    assert p.returncode == 0 and anyio.run(answer, s)[0] == "ok"


# --- a hard link swapped in after indexing -------------------------------------------------------


def test_a_hard_link_swapped_in_after_indexing_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    span = "def handler(event):\n    return event\n"
    (root / "src" / "app.py").write_text(span)
    s = settings_at(root, tmp_path / "index")
    run_index(s)
    outside = tmp_path / "outside.txt"
    outside.write_text(span + "".join(f"OUTSIDE-{i}\n" for i in range(50)))
    (root / "src" / "app.py").unlink()
    os.link(outside, root / "src" / "app.py")
    deps = hash_deps(s)
    try:
        for sid in hio.catalog_ids(s):
            code, out = hio.direct(deps, "rag_get_span", span_id=sid, context_lines=200)
            assert "OUTSIDE-" not in out and code != "ok", out[:300]
    finally:
        deps.close()


# --- where the index cannot be written ---------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a small tmpfs (root only; CI runs as root): a full or read-only disk for real."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                           capture_output=True, text=True, check=False)
        if p.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({p.stderr.strip()}): needs root")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.parametrize("where", ["under a file", "under /proc"])
def test_an_unwritable_index_location_gets_a_coded_message_naming_index_dir(
        tmp_path: Path, where: str) -> None:
    root = tmp_path / "repo"
    write_repo(root, 3, 0)
    (tmp_path / "a-file").write_text("x")
    index = tmp_path / "a-file" / "idx" if where == "under a file" else Path("/proc/no-index")
    p = rag_index(root, index)
    no_traceback(p)
    assert p.returncode == 2, p.stderr
    assert "E_INVALID_ARGUMENT" in p.stderr and "--index-dir" in p.stderr, p.stderr


def test_a_full_disk_is_named_with_the_fix(tmp_path: Path,
                                           tmpfs: Callable[[str], Path]) -> None:
    root = tmp_path / "repo"
    write_repo(root, 30, 0)
    p = rag_index(root, tmpfs("200k") / "idx")
    no_traceback(p)
    assert p.returncode == 5 and "disk full" in p.stderr and "--index-dir" in p.stderr, p.stderr


def test_a_read_only_disk_is_named_and_its_intact_index_is_served(
        tmp_path: Path, tmpfs: Callable[[str], Path]) -> None:
    root = tmp_path / "repo"
    write_repo(root, 12, 0)
    disk = tmpfs("20m")
    assert rag_index(root, disk / "idx").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    assert anyio.run(answer, settings_at(root, disk / "idx"))[0] == "ok"  # served read-only
    os.utime(root / "pkg0" / "mod0.py")
    (root / "pkg0" / "mod0.py").write_text("def changed():\n    return 1\n")
    p = rag_index(root, disk / "idx")
    no_traceback(p)
    assert p.returncode == 5 and "read-only" in p.stderr and "--index-dir" in p.stderr, p.stderr
    assert "rebuild" not in p.stderr


def test_a_huge_folder_that_is_no_repository_is_not_indexed_without_asking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from indexers import cli

    big = tmp_path / "downloads"
    big.mkdir()
    monkeypatch.setattr(cli, "LARGE_ROOT_FILES", 50)
    for i in range(60):
        (big / f"f{i}.txt").write_text("x")
    monkeypatch.chdir(big)
    assert cli.main(["--model", hc.HASH, "--index-dir", str(tmp_path / "idx")]) == 2
    assert not (tmp_path / "idx").exists()
    assert cli.main(["--model", hc.HASH, "--index-dir", str(tmp_path / "idx"), "--yes",
                     "-q"]) == 0
    assert cli.main([str(big), "--model", hc.HASH, "--index-dir", str(tmp_path / "idx"),
                     "-q"]) == 0  # a path given: the user chose it


# --- a hostile .gitignore ------------------------------------------------------------------------


def test_a_hostile_gitignore_hangs_neither_indexing_nor_serving(tmp_path: Path) -> None:
    """``*?*?...*?b`` and ``**/`` x 20 took the walker's backtracking wildcard translation
    minutes per path (git needs milliseconds), and held the GIL so no tool answered."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("*?" * 12 + "b\n" + "**/" * 20 + "x\n")
    for i in range(60):
        d = root / "d" / "/".join(["sub"] * (i % 8))
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file_{'a' * 40}_{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    (root / "d" / "x").write_text("ignored by **/x\n")
    p = rag_index(root, tmp_path / "idx", timeout=120)  # a hang fails here
    assert p.returncode == 0, p.stderr
    s = settings_at(root, tmp_path / "idx")
    assert not any(i.startswith("d/x:") for i in hio.catalog_ids(s))
    assert len({i.rsplit(":", 2)[0] for i in hio.catalog_ids(s) if i.startswith("d/")}) == 60

    async def calls() -> list[str]:
        async with hio.session(s) as (client, _):
            return [hio.answer_code(await client.call_tool(t, a)) for t, a in (
                ("rag_health", {}), ("rag_query", {"query": "return value", "k": 3}))]

    got: list[list[str]] = []
    t = threading.Thread(target=lambda: got.append(anyio.run(calls)), daemon=True)
    t.start()
    t.join(60)
    assert got == [["ok", "ok"]]


# --- damage under a running server -------------------------------------------------------------


def test_cutting_lexical_files_under_a_running_server_never_kills_it(tmp_path: Path) -> None:
    """tantivy memory-maps its segments: a file cut short under a reader killed the server with
    SIGBUS (the client saw "Connection closed"). The server now reads a private copy."""
    root = tmp_path / "repo"
    write_repo(root, 150, 0)
    s = load_settings({"root": str(root), "embed_model": hc.HASH})
    run_index(s)
    srv = hio.RawStdio(root, tmp_path / "logs", tmp_path / "stderr.txt").start()
    try:
        for rid in (10, 11):  # a new query each time: an answer from the cache proves nothing
            srv.send(hc._call("rag_query", {"query": f"function {rid} of module {rid}"}, rid))
            msg, _ = srv.until(rid)
            assert msg is not None and "result" in msg, msg
            for f in (current_dir(s) / "lexical").iterdir():
                if f.is_file() and f.suffix in (".idx", ".term", ".pos", ".fast", ".store"):
                    os.truncate(f, 0)
        srv.send(hc._call("rag_query", {"query": "variant of module twelve"}, 12))
        msg, _ = srv.until(12)
        assert srv.proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-2000:]
        assert msg is not None and "result" in msg, msg
    finally:
        srv.close()


def test_current_as_a_link_to_dev_zero_is_damage_not_a_hang(
        small_index: tuple[Path, Path, Settings]) -> None:
    root, index, s = small_index
    (s.index_path / "CURRENT").unlink()
    (s.index_path / "CURRENT").symlink_to("/dev/zero")
    got: list[tuple[str, str]] = []
    t = threading.Thread(target=lambda: got.append(anyio.run(answer, s)), daemon=True)
    t.start()
    t.join(60)
    assert got and got[0][0] == "E_INDEX_UNAVAILABLE", got
    p = rag_index(root, index, timeout=120)
    no_traceback(p)
    assert p.returncode == 0 and anyio.run(answer, s)[0] == "ok"


def test_nan_vectors_are_damage_that_rag_index_repairs(tmp_path: Path) -> None:
    """NaN written into the stored vectors passed the structural check and reached the client
    as a schema error; now the generation is refused with the fix, and rag-index rebuilds it."""
    import struct

    root = tmp_path / "repo"
    write_repo(root, 100, 0)  # > 1,000 spans: Chroma persists an HNSW graph
    index = tmp_path / "index"
    s = settings_at(root, index)
    run_index(s)
    header = next(current_dir(s).glob("chroma/*/header.bin")).read_bytes()
    size, label_at, offset = (struct.unpack_from("<Q", header, at)[0] for at in (28, 36, 44))
    data = next(current_dir(s).glob("chroma/*/data_level0.bin"))
    with data.open("r+b") as fh:
        fh.seek(5 * size + offset)
        fh.write(struct.pack("<f", float("nan")) * ((label_at - offset) // 4))
    code, message = anyio.run(answer, s)
    assert code == "E_INDEX_UNAVAILABLE" and "rag-index" in message, message
    status = rag_index(root, index, "--status")
    assert "DAMAGED" in status.stdout, status.stdout
    p = rag_index(root, index)
    no_traceback(p)
    assert p.returncode == 0 and anyio.run(answer, s)[0] == "ok"


def test_a_catalog_rewritten_after_every_page_was_read_is_still_damage(tmp_path: Path) -> None:
    from rag_mcp.errors import IndexUnavailable
    from rag_mcp.index.catalog import Catalog

    root = tmp_path / "repo"
    write_repo(root, 4, 0)
    s = settings_at(root, tmp_path / "index")
    run_index(s)
    path = current_dir(s) / "spans.sqlite"
    cat = Catalog(path, readonly=True)
    sids = [r.sid for r in cat.all_spans()]  # SQLite now holds every page it needs
    path.write_bytes(os.urandom(path.stat().st_size))
    with pytest.raises(IndexUnavailable, match="rag-index"):
        cat.by_sids(sids)  # answered from those pages, it would mix old rows with new bytes
    cat.close()


def test_a_catalog_damaged_under_a_running_server_is_unavailable_not_internal(
        tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write_repo(root, 150, 0)  # spans over many pages of the catalog
    s = settings_at(root, tmp_path / "index")
    run_index(s)

    async def run() -> list[str]:
        codes = []
        async with hio.session(s) as (client, _):
            r = await client.call_tool("rag_query", QUERY)
            codes.append(hio.answer_code(r))
            catalog = current_dir(s) / "spans.sqlite"
            catalog.write_bytes(os.urandom(catalog.stat().st_size))
            for i in range(3):  # new queries (no cache), spans read by ID
                r = await client.call_tool("rag_query", {"query": f"module {i * 40} variant",
                                                         "include_text": True, "k": 10})
                codes.append(hio.answer_code(r))
                assert "rag-index" in hio.text(r) or codes[-1] == "ok", hio.text(r)
        return codes

    codes = anyio.run(run)
    # every call after the rewrite, whatever pages SQLite still holds from before it
    assert codes == ["ok", "E_INDEX_UNAVAILABLE", "E_INDEX_UNAVAILABLE", "E_INDEX_UNAVAILABLE"], \
        codes


# --- a run that finds nothing to update checks the index quickly ------------------------------


def test_a_noop_run_checks_quickly_and_verify_checks_every_byte(
        small_index: tuple[Path, Path, Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """A no-op rag-index opened the whole index as a server would (every byte hashed, every
    store opened): it now compares sizes and mtimes of large files and hashes small ones;
    --verify still reads everything. Here every file counts as large."""
    from rag_mcp.index import handle

    root, index, s = small_index
    monkeypatch.setattr(handle, "QUICK_HASH_BYTES", 0)
    d = current_dir(s)
    manifest = gen.read_manifest(d)
    assert handle.quick_verify(d, manifest)
    catalog = d / gen.CATALOG
    st = catalog.stat()
    flip_bit(catalog)  # damage written into a file moves its mtime: seen
    with pytest.raises(handle.IndexUnavailable, match="changed since it was written"):
        handle.quick_verify(d, manifest)
    os.utime(catalog, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... unless it is put back
    assert handle.quick_verify(d, manifest)
    assert not run_index(s).published  # the quick check cannot see it: nothing to update
    stats = run_index(s, verify=True)  # every byte: found, said and repaired
    assert stats.published and "damaged" in stats.rebuilt
    assert anyio.run(answer, s)[0] == "ok"
    del manifest["stats"]  # a manifest written before stats were recorded: verify fully
    assert not handle.quick_verify(current_dir(s), manifest)


def test_a_run_with_changes_opens_the_base_fully_before_building_on_it(
        small_index: tuple[Path, Path, Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage the quick check cannot see is never carried into the next generation."""
    from rag_mcp.index import handle

    root, index, s = small_index
    monkeypatch.setattr(handle, "QUICK_HASH_BYTES", 0)
    catalog = current_dir(s) / gen.CATALOG
    st = catalog.stat()
    flip_bit(catalog)
    os.utime(catalog, ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / "pkg0" / "mod0.py").write_text("def changed():\n    return 'changed'\n")
    stats = run_index(s)
    assert stats.published and "damaged" in stats.rebuilt
    assert anyio.run(answer, s)[0] == "ok"
