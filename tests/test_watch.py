"""Watch mode: real inotify events, real index runs, real processes for the lock and Ctrl-C.

The fast deterministic model keeps runs short; every wait is bounded by a timeout and nothing
asserts on a duration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from indexers.debounce import Batch
from indexers.pipeline import RunCancelled, run_index
from indexers.status import index_status, list_spans
from indexers.watch import BackgroundWatcher, Watcher
from rag_mcp.config import Settings, load_settings
from rag_mcp.embed import Embedder, load_embedder
from rag_mcp.index import generation as gen
from tests.mcp_helpers import answer, over_stdio, text

HASH = "test-hash-64"
WAIT = 60.0  # generous: the CI machine is shared


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, "watch_debounce_ms": "100",
                          **kw})


def wait_until(cond: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def symbols(s: Settings) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    try:
        rows = list_spans(s, None)
    except Exception:  # no index yet
        return {}
    for r in rows:
        out.setdefault(r["path"], set()).add(r["symbol"] or r["heading"] or "")
    return out


def generation(s: Settings) -> int:
    p = gen.read_pointer(s.index_path)
    return p.generation if p else 0


def funcs(*names: str) -> str:
    return "\n\n".join(f"def {n}(x):\n    return x + {len(n)}\n" for n in names)


@pytest.fixture
def watching() -> Iterator[Callable[[Settings], Watcher]]:
    started: list[BackgroundWatcher] = []

    def start(s: Settings) -> Watcher:
        w = Watcher(s)
        assert w.claim()
        started.append(BackgroundWatcher(w).start())
        wait_until(lambda: w.history, "the catch-up run")
        return w

    yield start
    for bw in started:
        bw.stop()


# -- batching ---------------------------------------------------------------------------------

def test_batch_gathers_a_burst_and_stops_on_request() -> None:
    b = Batch(debounce=0.5, max_delay=60.0)
    stop = threading.Event()

    def burst() -> None:
        for i in range(300):
            b.add(f"src/f{i}.py")

    t = threading.Thread(target=burst)
    t.start()
    t.join()
    got = b.take(stop)
    assert got == ({f"src/f{i}.py" for i in range(300)}, False)
    b.add(None)
    assert b.take(stop) == (set(), True)
    stop.set()
    assert b.take(stop) is None
    assert b.take(threading.Event(), idle_timeout=0.05) is None  # nothing pending


def test_batch_waits_while_git_is_busy() -> None:
    b = Batch(debounce=0.0, max_delay=0.0)
    busy = [True]
    taken: list[Any] = []
    t = threading.Thread(target=lambda: taken.append(b.take(threading.Event(),
                                                            lambda: busy[0])))
    b.add("a.py")
    t.start()
    t.join(0.5)
    assert t.is_alive() and not taken  # git holds index.lock: keep gathering
    b.add("b.py")
    busy[0] = False
    t.join(WAIT)
    assert taken == [({"a.py", "b.py"}, False)]


# -- the pipeline's fast path -----------------------------------------------------------------

def test_known_paths_update_equals_a_full_walk(make_repo: Callable[..., Path]) -> None:
    root = make_repo({
        "src/a.py": funcs("alpha", "beta"), "src/b.py": funcs("gamma"),
        "pkg/sub/c.py": funcs("delta"), "pkg/sub/d.md": "# Title\n\ntext\n",
        "docs/x.md": "# X\n\nabout x\n", ".gitignore": "*.log\n",
    })
    s = settings_for(root)
    run_index(s)
    (root / "src/a.py").write_text(funcs("alpha", "beta_changed"))
    (root / "src/new.py").write_text(funcs("epsilon"))
    (root / "src/b.py").unlink()
    os.rename(root / "pkg/sub", root / "pkg/moved")
    (root / "blob").write_bytes(b"\x00\x01binary" * 50)  # skipped for its content
    (root / "debug.log").write_text("ignored\n")
    touched = ["src/a.py", "src/new.py", "src/b.py", "pkg/sub", "pkg/moved", "blob",
               "debug.log", "no/such/file.py"]
    st = run_index(s, paths=touched)
    assert st.published and st.files_deleted == 3 and st.files_changed == 4
    assert st.skipped["binary"] == 1
    got = symbols(s)
    assert got["src/a.py"] == {"alpha", "beta_changed"} and "src/b.py" not in got
    assert set(got) >= {"pkg/moved/c.py", "pkg/moved/d.md", "src/new.py"}
    assert not any(p.startswith("pkg/sub/") for p in got)
    full = run_index(s)  # a full walk finds nothing the fast path missed
    assert not full.published and full.files_total == st.files_total
    assert index_status(s)["stale_files"] == 0


def test_content_skipped_files_do_not_defeat_the_noop(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"a.py": funcs("alpha")})
    (root / "data").write_bytes(b"\x00" * 300)
    s = settings_for(root)
    first = run_index(s)
    assert first.skipped["binary"] == 1
    again = run_index(s)
    assert not again.published and again.generation == first.generation
    assert again.skipped["binary"] == 1
    (root / "data").write_text("now text\n")
    third = run_index(s, paths=["data"])
    assert third.published and "data" in symbols(s)


class CountingEmbedder:
    """The hash model, counting texts and stopping the run after ``stop_after`` calls."""

    def __init__(self, s: Settings, cancel: threading.Event, stop_after: int) -> None:
        self.inner: Embedder = load_embedder(HASH, s.embed_backend,
                                             cache_dir=s.model_cache_path)
        self.dim = self.inner.dim
        self.cancel, self.stop_after, self.calls, self.texts = cancel, stop_after, 0, 0

    def embed_documents(self, texts: Any, max_tokens: int = 0) -> Any:
        self.calls += 1
        self.texts += len(texts)
        if self.calls >= self.stop_after:
            self.cancel.set()
        return self.inner.embed_documents(texts, max_tokens)


def test_a_stopped_run_publishes_nothing_and_resumes(make_repo: Callable[..., Path]) -> None:
    root = make_repo({f"m{i}.py": funcs(*(f"f{i}_{j}" for j in range(8))) for i in range(80)})
    s = settings_for(root)
    cancel = threading.Event()
    first = CountingEmbedder(s, cancel, stop_after=2)
    with pytest.raises(RunCancelled):
        run_index(s, embedder_factory=lambda: cast(Embedder, first), cancel=cancel)
    assert gen.read_pointer(s.index_path) is None
    assert not [p for p in s.index_path.iterdir() if p.name.startswith("tmp-")]
    assert 0 < first.texts < 640
    second = CountingEmbedder(s, threading.Event(), stop_after=10**9)
    st = run_index(s, embedder_factory=lambda: cast(Embedder, second))
    assert st.published and st.spans_total == 640
    assert second.texts == 640 - first.texts  # only what the stopped run had not embedded


# -- the watcher in process -------------------------------------------------------------------

def test_edit_reembeds_only_the_changed_span(make_repo: Callable[..., Path],
                                            watching: Callable[[Settings], Watcher]) -> None:
    root = make_repo({"src/a.py": funcs("alpha", "beta", "gamma"), "README.md": "# Hi\n"})
    s = settings_for(root)
    w = watching(s)
    g0 = generation(s)
    (root / "src/a.py").write_text(funcs("alpha", "beta_two", "gamma"))
    wait_until(lambda: "beta_two" in symbols(s).get("src/a.py", set()), "the edit")
    # CURRENT moves before the watcher records the run (it collects garbage in between)
    wait_until(lambda: len(w.history) == 2, "the run's record")
    paths, full, st = w.history[-1]
    assert paths == {"src/a.py"} and not full
    assert st.files_changed == 1 and st.embedded == 1 and st.vectors_reused == 2
    assert generation(s) == g0 + 1
    assert w.batch.pending() == 0


def test_deletes_renames_and_ignore_rules(make_repo: Callable[..., Path],
                                         watching: Callable[[Settings], Watcher]) -> None:
    root = make_repo({"src/a.py": funcs("alpha"), "lib/deep/b.py": funcs("beta"),
                      "notes.md": "# Notes\n\nsome notes\n", ".gitignore": "*.log\ndata/\n",
                      "data/x.py": funcs("ignored_at_first")})
    (root / "node_modules/x").mkdir(parents=True)
    s = settings_for(root)
    w = watching(s)
    g0 = generation(s)
    # ignored paths: no batch at all
    (root / "node_modules/x/index.js").write_text("module.exports = 1\n")
    (root / "debug.log").write_text("noise\n")
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    os.rename(root / "lib", root / "lib2")  # a top-level folder renamed
    os.rename(root / "src/a.py", root / "src/a2.py")
    (root / "notes.md").unlink()
    want = {"src/a2.py", "lib2/deep/b.py", ".gitignore"}
    wait_until(lambda: set(symbols(s)) == want, "deletes and renames")
    seen = set().union(*(p for p, _, _ in list(w.history)[1:]))
    assert not any(p.startswith(("node_modules", ".git/", ".rag")) or p.endswith(".log")
                   for p in seen), seen
    # the new top-level folder is watched too
    (root / "lib2/deep/c.py").write_text(funcs("gamma"))
    wait_until(lambda: "lib2/deep/c.py" in symbols(s), "a file in the renamed folder")
    # a rules change walks the whole tree: newly ignored files leave the index, newly
    # included ones enter it, and their folder is watched from then on
    (root / ".gitignore").write_text("*.log\nlib2/\n")
    wait_until(lambda: not any(p.startswith("lib2/") for p in symbols(s))
               and "data/x.py" in symbols(s), "the new rules")
    (root / "data/y.py").write_text(funcs("delta"))
    wait_until(lambda: "data/y.py" in symbols(s), "a file in a folder no longer ignored")
    assert any(full for _, full, _ in w.history)
    assert generation(s) > g0 and index_status(s)["stale_files"] == 0


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def test_branch_switch_is_one_batch(make_repo: Callable[..., Path],
                                    watching: Callable[[Settings], Watcher]) -> None:
    root = make_repo({f"pkg{i % 10}/m{i}.py": funcs(f"main_{i}") for i in range(200)})
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "other")
    for i in range(200):
        (root / f"pkg{i % 10}/m{i}.py").write_text(funcs(f"other_{i}"))
    for i in range(0, 200, 4):
        (root / f"pkg{i % 10}/m{i}.py").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "other")
    git(root, "checkout", "-q", "main")
    # git holds index.lock for the whole checkout; the longer quiet time only absorbs a loaded
    # machine delivering the last events late
    s = settings_for(root, watch_debounce_ms="1000")
    w = watching(s)
    before = len(w.history)
    git(root, "checkout", "-q", "other")
    wait_until(lambda: sum(len(v) for v in symbols(s).values()) == 150
               and all("other" in next(iter(v)) for v in symbols(s).values()), "the switch")
    # all of the switch is published; a later save's record marks the end of its records
    (root / "sentinel.txt").write_text("end\n")
    wait_until(lambda: any("sentinel.txt" in p for p, _, _ in w.history), "the sentinel")
    runs = [st for p, _, st in list(w.history)[before:] if st.published
            and "sentinel.txt" not in p]
    assert len(runs) == 1, [(len(p), st.files_changed) for p, _, st in w.history]
    assert runs[0].files_changed == 150 and runs[0].files_deleted == 50


# -- real processes: one watcher per index, Ctrl-C --------------------------------------------

def _default_sigint() -> None:
    # A shell without job control starts background jobs with SIGINT ignored, and a child
    # inherits that; Ctrl-C is what this test sends, so give the child the normal disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def watch_proc(root: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RAG_EMBED_MODEL": HASH, "RAG_WATCH_DEBOUNCE_MS": "100"}
    with open(log, "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "indexers.cli", "--root", str(root),
                                 "--watch"], stderr=err, stdout=subprocess.DEVNULL, env=env,
                                preexec_fn=_default_sigint)


def test_second_watcher_reads_then_takes_over(make_repo: Callable[..., Path],
                                              tmp_path: Path) -> None:
    root = make_repo({"a.py": funcs("alpha")})
    s = settings_for(root)
    log1, log2 = tmp_path / "w1.log", tmp_path / "w2.log"
    first = watch_proc(root, log1)
    second = None
    try:
        wait_until(lambda: generation(s) >= 1, "the first watcher's catch-up run")
        second = watch_proc(root, log2)
        wait_until(lambda: "already watches" in log2.read_text(), "the reader's log line")
        assert f"pid {first.pid}" in log2.read_text()
        (root / "b.py").write_text(funcs("beta"))
        wait_until(lambda: "b.py" in symbols(s), "the first watcher indexing")
        first.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop, exit 0
        assert first.wait(WAIT) == 0
        assert "stopped watching" in log1.read_text()
        wait_until(lambda: "now watches" in log2.read_text(), "the takeover")
        (root / "c.py").write_text(funcs("gamma"))
        wait_until(lambda: "c.py" in symbols(s), "the second watcher indexing")
        second.send_signal(signal.SIGTERM)
        assert second.wait(WAIT) == 0
        assert "Traceback" not in log1.read_text() + log2.read_text()
        assert not [p for p in s.index_path.iterdir() if p.name.startswith("tmp-")]
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.anyio
async def test_rag_mcp_watch_serves_fresh_results(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"src/a.py": funcs("alpha"), "README.md": "# Demo\n\nA demo.\n"})
    env = {"RAG_EMBED_MODEL": HASH, "RAG_WATCH_DEBOUNCE_MS": "100"}
    async with over_stdio(root, env=env, args=("--watch",)) as session:
        import anyio

        async def query(q: str) -> dict[str, Any]:
            r = await session.call_tool("rag_query", {"query": q, "tau": 0.0})
            return answer(r) if not r.is_error else {}

        async def until(cond: Callable[[dict[str, Any]], bool], q: str) -> dict[str, Any]:
            with anyio.fail_after(WAIT):
                while True:
                    got = await query(q)
                    if cond(got):
                        return got
                    await anyio.sleep(0.05)

        await until(lambda r: bool(r.get("hits")), "alpha")  # the server indexed at start
        (root / "src/b.py").write_text(funcs("compute_invoice_total"))
        got = await until(lambda r: any(h["symbol"] == "compute_invoice_total"
                                        for h in r.get("hits", [])), "compute_invoice_total")
        assert got["hits"][0]["path"] == "src/b.py"
        (root / "src/b.py").unlink()
        await until(lambda r: not any(h["path"] == "src/b.py" for h in r.get("hits", [])),
                    "compute_invoice_total")
        health = await session.call_tool("rag_health", {})
        assert health.structured_content is not None
        assert health.structured_content["stale_files"] == 0


@pytest.mark.anyio
async def test_health_and_queries_say_how_fresh(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"src/a.py": funcs("alpha"), "src/b.py": funcs("beta"),
                      "src/c.py": funcs("gamma")})
    s = settings_for(root)
    run_index(s)
    (root / "src/a.py").write_text(funcs("alpha", "alpha_two"))  # changed
    (root / "src/c.py").unlink()  # deleted
    (root / "src/d.py").write_text(funcs("delta"))  # added
    (root / "src/b.py").touch()  # same content, new mtime: not a change
    async with over_stdio(root, env={"RAG_EMBED_MODEL": HASH}) as session:
        import anyio

        health = await session.call_tool("rag_health", {})
        assert health.structured_content is not None
        assert health.structured_content["stale_files"] == 3
        # a query never waits for the walk: the count follows within the refresh interval
        with anyio.fail_after(WAIT):
            while True:
                r = await session.call_tool("rag_query", {"query": "alpha", "tau": 0.0})
                if answer(r).get("stale_files") == 3:
                    break
                await anyio.sleep(0.2)
        assert "3 file(s) changed since it was built" in text(r)
        run_index(s)
        with anyio.fail_after(WAIT):  # health may answer from a count up to 2 s old
            while True:
                health = await session.call_tool("rag_health", {})
                assert health.structured_content is not None
                if health.structured_content["stale_files"] == 0:
                    break
                await anyio.sleep(0.2)
        assert health.structured_content["generation"] == 2
