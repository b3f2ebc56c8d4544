"""A damaged index, kill -9 while indexing, readers while a writer publishes, hostile ignore files.

CI runs small versions (every index file damaged once, 2 kills, 4 readers x 40 queries);
bench/safety/hostile.py runs the full studies (every file x delete/truncate/garbage, 20 kills, 4
readers x 500 queries) and prints the figures into docs/SECURITY.md. tests/test_crash.py covers the
generation mechanics; these check what a user sees.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import orjson
import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index import generation as gen
from rag_mcp.index.handle import file_checksums
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.test_crash import rag_index_cmd, write_repo

QUERY = {"query": "retry with exponential backoff", "k": 3}


def settings_at(root: Path, index_dir: Path) -> Settings:
    return load_settings({"root": str(root), "embed_model": hc.HASH, "index_dir": str(index_dir)})


async def hit_ids(s: Settings) -> tuple[str, object]:
    async with hio.session(s) as (client, _):
        r = await client.call_tool("rag_query", QUERY)
        code = hio.answer_code(r)
        return code, ([h["id"] for h in r.structured_content["hits"]]  # type: ignore[index]
                      if code == "ok" else hio.text(r))


def test_every_damaged_file_is_refused_with_the_fix_then_rebuilt(sample_repo: Path,
                                                                 tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    run_index(settings_at(sample_repo, pristine))
    want = anyio.run(hit_ids, settings_at(sample_repo, pristine))[1]
    targets = hc.damage_targets(pristine)
    assert len(targets) >= 15 and any(t.endswith("manifest.json") for t in targets)
    outcomes: dict[str, str] = {}

    async def one(i: int, target: str, how: str) -> None:
        idx = tmp_path / f"idx{i}"
        shutil.copytree(pristine, idx)
        hc.damage(idx / target, how)
        s = settings_at(sample_repo, idx)
        async with hio.session(s) as (client, _):
            r = await client.call_tool("rag_query", QUERY)
            code = hio.answer_code(r)
            health = await client.call_tool("rag_health", {})
            assert hio.answer_code(health) == "ok"  # health answers whatever the damage
            if code == "ok":
                assert r.structured_content is not None
                got = [h["id"] for h in r.structured_content["hits"]]
                outcomes[f"{target} {how}"] = "unharmed" if got == want else f"WRONG {got}"
                return
            message = hio.text(r)
            outcomes[f"{target} {how}"] = code
            assert code == "E_INDEX_UNAVAILABLE", message
            assert f"rag-index --root {sample_repo}" in message, message  # the fix is named
            run_index(s, rebuild="--rebuild" in message)  # the user runs the command given
            again = await client.call_tool("rag_query", QUERY)  # the same server, recovered
            assert again.structured_content is not None and not again.is_error, hio.text(again)
            assert [h["id"] for h in again.structured_content["hits"]] == want

    for i, target in enumerate(targets):
        anyio.run(one, i, target, hc.DAMAGES[i % 3])  # each file once, the modes in turn
        shutil.rmtree(tmp_path / f"idx{i}")
    assert not [k for k, v in outcomes.items() if v.startswith("WRONG")], outcomes
    assert sum(v == "E_INDEX_UNAVAILABLE" for v in outcomes.values()) >= 8, outcomes


@pytest.fixture(scope="module")
def hnsw_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An index large enough that Chroma persists an HNSW graph (its sync threshold is 1,000)."""
    base = tmp_path_factory.mktemp("hnsw")
    root = base / "repo"
    write_repo(root, 100, 0)
    run_index(settings_at(root, base / "index"))
    return root, base / "index"


def test_checksums_stop_damaged_vectors_before_chroma_loads_them(
        hnsw_index: tuple[Path, Path], tmp_path: Path) -> None:
    """Garbage in data_level0.bin or a cut header.bin crashes the process inside Chroma's loader
    (SIGSEGV), garbage norms in length.bin give wrong answers; with checksums (sizes for the files
    Chroma rewrites on first load) and the graph check, the generation is refused first."""
    root, pristine = hnsw_index
    idx = tmp_path / "idx"
    shutil.copytree(pristine, idx)
    pointer = gen.read_pointer(settings_at(root, idx).index_path)
    assert pointer is not None
    bins = sorted(pointer.dir.glob("chroma/*/*.bin"))
    assert {p.name for p in bins} >= {"data_level0.bin", "header.bin"}
    manifest = orjson.loads((pointer.dir / gen.MANIFEST).read_bytes())
    manifest["checksums"] = file_checksums(pointer.dir)  # what the writer is to record
    assert not any(k.startswith("chroma/chroma.sqlite3") for k in manifest["checksums"])
    (pointer.dir / gen.MANIFEST).write_bytes(orjson.dumps(manifest))
    assert anyio.run(hit_ids, settings_at(root, idx))[0] == "ok"  # intact: opens and answers
    for name, how in (("data_level0.bin", "garbage"), ("header.bin", "truncate"),
                      ("length.bin", "garbage"), ("data_level0.bin", "truncate")):
        case = tmp_path / f"{name}-{how}"
        shutil.copytree(idx, case)
        case_dir = case / pointer.dir.relative_to(idx)
        hc.damage(next(case_dir.glob(f"chroma/*/{name}")), how)
        code, message = anyio.run(hit_ids, settings_at(root, case))
        assert code == "E_INDEX_UNAVAILABLE" and "--rebuild" in str(message), message
        assert name in str(message)


def test_the_writer_records_checksums(hnsw_index: tuple[Path, Path]) -> None:
    root, index = hnsw_index
    pointer = gen.read_pointer(settings_at(root, index).index_path)
    assert pointer is not None
    manifest = orjson.loads((pointer.dir / gen.MANIFEST).read_bytes())
    assert manifest.get("checksums") == file_checksums(pointer.dir)


@pytest.mark.parametrize("how", ["truncate", "garbage"])
def test_a_damaged_embedding_cache_does_not_stop_rag_index(sample_repo: Path, how: str) -> None:
    s = load_settings({"root": str(sample_repo), "embed_model": hc.HASH})
    run_index(s)
    hc.damage(s.index_path.parent / "embcache.sqlite", how)
    (sample_repo / "src" / "app" / "new.py").write_text("def brand_new():\n    return 42\n")
    assert run_index(s).spans_total > 0


@pytest.mark.slow
def test_kill_9_leaves_an_index_that_reads_back(tmp_path: Path) -> None:
    """Two seeded kills, each followed by a deep check; then a normal run reads back whole."""
    root = tmp_path / "repo"
    write_repo(root, 60, 0)
    s = load_settings({"root": str(root), "embed_model": hc.HASH})
    t0 = time.monotonic()
    subprocess.run(rag_index_cmd(root), check=True)
    full = time.monotonic() - t0
    rng = random.Random(7)
    for round_ in (1, 2):
        write_repo(root, 60, round_)
        proc = subprocess.Popen(rag_index_cmd(root))
        time.sleep(rng.uniform(0.1, full))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        spans, problems = hio.consistency(s)
        assert spans > 0 and problems == []
    subprocess.run(rag_index_cmd(root), check=True)
    spans, problems = hio.consistency(s)
    assert spans == 60 * 12 and problems == []


@pytest.mark.slow
def test_four_readers_never_see_a_half_written_generation(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write_repo(root, 60, 0)
    subprocess.run(rag_index_cmd(root), check=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    readers = [subprocess.Popen([sys.executable, "-c", hio.READER, str(root), "40", str(i)],
                                stdout=subprocess.PIPE, text=True, env=env) for i in range(4)]
    for variant in (1, 2):
        write_repo(root, 60, variant)
        subprocess.run(rag_index_cmd(root), check=True)
    results = [orjson.loads(r.communicate(timeout=600)[0]) for r in readers]
    assert all(r["failed"] == 0 and r["half"] == 0 for r in results), [
        (r["failed"], r["half"], r["errors"]) for r in results]
    assert sum(r["ok"] for r in results) == 160


#: .gitignore lines that kept a backtracking matcher busy for minutes: the first against any
#: long name that misses it (git needs 5 ms), the second against any deep path (git itself
#: needs 90 s at depth 12 there)
HOSTILE_IGNORE = ["*?*?*?*?*?*?*?*?*?*?*?*?b", "**/" * 20 + "x", "*a" * 12 + "b",
                  "**/*a" * 8 + "b"]


def test_hostile_ignore_patterns_do_not_hold_up_rag_index(tmp_path: Path) -> None:
    """Each line alone kept the walker's former regex translation busy past minutes on these
    names; a linear-time matcher finishes the whole run in seconds. The bound is generous (a
    slow, loaded machine passes) and far below the broken version's minutes."""
    root = tmp_path / "repo"
    deep = "/".join(["dd"] * 12)
    files = {f"{c * 40}.py": f"def f_{c}():\n    return 1\n" for c in "acdefg"}
    files.update({f"{deep}/{c * 30}.py": "VALUE = 1\n" for c in "ac"})
    files.update({f"{deep}/x": "ignored\n", "a" * 30 + "b": "ignored\n"})
    for rel, body in {**files, ".gitignore": "\n".join(HOSTILE_IGNORE) + "\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    out = subprocess.run([*rag_index_cmd(root)[:-1], "--json"], capture_output=True, text=True,
                         timeout=60, check=True)
    stats = orjson.loads(out.stdout)
    assert stats["files_total"] == 9  # the .gitignore, six long names, two deep files
    assert stats["skipped"].get("gitignore") == 2
