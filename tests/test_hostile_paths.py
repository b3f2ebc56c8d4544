"""Path escapes: 200+ crafted span IDs through every tool that reads files, and races.

The figure (bench/safety/hostile.py, docs/SECURITY.md): escapes = 0, every case answered with
``E_INVALID_ARGUMENT`` or ``E_NOT_FOUND``.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import anyio
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import RagError
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.generation import CATALOG, read_pointer
from rag_mcp.search.reader import open_inside
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.mcp_helpers import answer
from tests.ollama_fake import FakeOllama

REFUSED = {"E_INVALID_ARGUMENT", "E_NOT_FOUND"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def catalog_ids(s: Settings) -> dict[str, str]:
    pointer = read_pointer(s.index_path)
    assert pointer is not None
    cat = Catalog(pointer.dir / CATALOG, readonly=True)
    try:
        return {r.span.path: r.id for r in cat.all_spans()}
    finally:
        cat.close()


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[hc.PathFixture, Settings]:
    base = tmp_path_factory.mktemp("paths")
    fx = hc.build_path_repo(base)
    s = load_settings({"root": str(fx.root), "embed_model": hc.HASH,
                       "log_dir": str(base / "logs"), "local_llm": "1"})
    run_index(s)
    ids = catalog_ids(s)
    assert not any(p.startswith(("link_", "src/link_up")) or p.endswith(("passwd.md", "secret.py"))
                   for p in ids), "the walker indexed a symlink"
    hc.swap_after_index(fx, {k: ids[k] for k in ("swap/file.py", "swapdir/inner/mod.py",
                                                  "swapfifo/pipe.py")})
    return fx, s


def test_the_case_list_covers_every_family(fixture: tuple[hc.PathFixture, Settings]) -> None:
    cases = hc.path_cases(fixture[0])
    assert len(cases) >= 200
    families = Counter(c.family for c in cases)
    assert set(families) == {"dotdot", "encoded", "absolute", "windows", "nul", "overlong",
                             "unicode", "symlink", "swapped", "shape", "type"}
    assert families["swapped"] == 3


@pytest.mark.anyio
@pytest.mark.parametrize("tool,arg", [("rag_get_span", "span_id"), ("fetch", "id")])
async def test_every_crafted_id_is_refused(fixture: tuple[hc.PathFixture, Settings],
                                           tool: str, arg: str) -> None:
    fx, s = fixture
    wrong: list[str] = []
    async with hio.session(s) as (client, _):
        for case in hc.path_cases(fx):
            r = await client.call_tool(tool, {arg: case.span_id})
            code = hio.answer_code(r)
            if code not in REFUSED or hc.escaped(hio.everything(r)):
                wrong.append(f"{case.label} -> {code}: {hio.text(r)[:100]}")
        # The session still serves the real spans after all that.
        ok = await client.call_tool(tool, {arg: catalog_ids(s)["src/app/retry.py"]})
        assert hio.answer_code(ok) == "ok" and "def retry" in hio.everything(ok)
    assert wrong == []


@pytest.mark.anyio
async def test_crafted_ids_never_reach_the_local_model(fixture: tuple[hc.PathFixture, Settings]
                                                       ) -> None:
    fx, s = fixture
    cases = [c.span_id for c in hc.path_cases(fx) if isinstance(c.span_id, str)]
    with FakeOllama() as fake:
        s2 = load_settings({"root": s.root, "embed_model": hc.HASH, "log_dir": str(s.log_path),
                            "local_llm": "1", "llm_host": fake.url})
        async with hio.session(s2) as (client, _):
            for i in range(0, len(cases), 20):
                r = await client.call_tool("local_llm_rag_query", {
                    "question": "what is in these files?", "span_ids": cases[i:i + 20]})
                assert hio.answer_code(r) in REFUSED
                assert not hc.escaped(hio.everything(r))
        assert fake.prompts() == []  # refused before any prompt was built


@pytest.mark.anyio
async def test_path_filters_never_reach_outside(fixture: tuple[hc.PathFixture, Settings]) -> None:
    fx, s = fixture
    filters = ["../", "../outside", "/etc", "..\\outside", "C:/", "src/../../", "**/../../*",
               "link_sibling/", "link_etc/**", "swapdir/**", "src/link_up/**", "\x00", "x" * 600,
               "%2e%2e/", "\uff0e\uff0e/", "~/"]
    async with hio.session(s) as (client, _):
        for f in filters:
            r = await client.call_tool("rag_query", {"query": "secret password passwd root",
                                                     "path": f, "include_text": True,
                                                     "tau": 0.0})
            out = hio.everything(r)
            assert not hc.escaped(out), f
            if not r.is_error:
                for h in answer(r)["hits"]:  # only spans the walker indexed
                    assert not h["path"].startswith(("link_", "src/link_up")), f


@pytest.mark.anyio
async def test_swapped_files_never_block_or_leak_through_include_text(
        fixture: tuple[hc.PathFixture, Settings]) -> None:
    """A FIFO where an indexed file was would block a plain open until a writer came."""
    fx, s = fixture
    with anyio.fail_after(60):
        async with hio.session(s) as (client, _):
            for prefix in ("swapfifo/", "swap/", "swapdir/"):
                r = await client.call_tool("rag_query", {"query": "swapped fifo inside",
                                                         "path": prefix, "include_text": True,
                                                         "tau": 0.0})
                assert hio.answer_code(r) == "ok"
                hits = answer(r)["hits"]
                assert hits and all(h["stale"] for h in hits), prefix  # the indexed text, marked
                assert not hc.escaped(hio.everything(r))


def test_directory_swapped_for_a_symlink_while_reading(tmp_path: Path) -> None:
    """Checking each component and then opening the whole path would follow a directory swapped
    for a symlink in between; opening one component at a time with O_NOFOLLOW cannot."""
    root = tmp_path / "repo"
    (root / "race" / "dir").mkdir(parents=True)
    (root / "race" / "dir" / "f.txt").write_text("inside\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f.txt").write_text(hc.CANARY + "\n")
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            os.rename(root / "race" / "dir", tmp_path / "parked")
            os.symlink(tmp_path / "out", root / "race" / "dir")
            os.unlink(root / "race" / "dir")
            os.rename(tmp_path / "parked", root / "race" / "dir")
            swaps += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(4000):
            try:
                data = open_inside(root, "race/dir/f.txt")
                outcomes["escaped" if hc.CANARY.encode() in data else "read"] += 1
            except RagError as exc:
                outcomes[exc.code] += 1
    finally:
        stop.set()
        thread.join()
    assert swaps > 0 and outcomes["escaped"] == 0, outcomes
    assert set(outcomes) <= {"read", "E_NOT_FOUND", "E_STALE"}, outcomes


@pytest.mark.anyio
async def test_a_file_grown_huge_after_indexing_is_not_read(make_repo) -> None:  # type: ignore[no-untyped-def]
    root = make_repo({"src/grow.py": "def grows():\n    return 1\n"})
    s = load_settings({"root": str(root), "embed_model": hc.HASH})
    run_index(s)
    sid = catalog_ids(s)["src/grow.py"]
    os.truncate(root / "src" / "grow.py", 3 * 1024**3)  # sparse: 3 GB of zeros, no disk used
    async with hio.session(s) as (client, _):
        r = await client.call_tool("rag_get_span", {"span_id": sid})
        assert hio.answer_code(r) == "E_STALE" and "grew past" in hio.text(r)
        q = await client.call_tool("rag_query", {"query": "grows", "include_text": True})
        assert hio.answer_code(q) == "ok"
