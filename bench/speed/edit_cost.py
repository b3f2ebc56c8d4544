"""What keeping an index fresh costs as it grows: one incremental run for a one-file edit.

On the indexes bench/speed/large_repo.py built (a ~30k-line and a ~330k-line tree of Django's sdist,
default backend), the same file is edited several times; each edit is one ``run_index`` with the
edited path (what a watcher runs), timed in process with the model already loaded. Then a reader
opens the new generation and answers one dense query, which is what a server pays when ``CURRENT``
moves. Both sizes run with the embedded store and with a Chroma server (``chroma run`` on
loopback; the server-mode index is filled from the embedding cache, nothing is re-embedded).
Prints markdown and rewrites the "edit_cost" section of docs/BENCHMARKS.md.

    .venv/bin/python -m bench.speed.edit_cost [--edits 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._report import WORK, md_table, median, write_section
from bench.speed.freshness import probe_text, save
from bench.speed.large_repo import BASE as LARGE
from bench.speed.large_repo import LARGE_IGNORE, TREE, index_sizes, prepare

FILE = "django/forms/fields.py"  # in both trees, so both sizes edit the same text
OUT = WORK / "edit_cost"


@contextlib.contextmanager
def chroma_server(path: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = Path(sys.executable).with_name("chroma")
    proc = subprocess.Popen([str(exe), "run", "--path", str(path), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2):
                    break
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)


def settings_for(root: Path, index_dir: Path, ignore: Sequence[str], chroma_url: str = "") -> Any:
    from rag_mcp.config import load_settings

    return load_settings({"root": str(root), "index_dir": str(index_dir), "ignore": list(ignore),
                          "chroma_url": chroma_url})


def reopen(s: Any) -> float:
    """Seconds for a reader to open the current generation and answer one dense query."""
    from rag_mcp.index import generation as gen
    from rag_mcp.index.handle import OpenIndex

    t0 = time.perf_counter()
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    idx = OpenIndex(s, pointer)
    try:
        assert idx.vectors is not None
        idx.vectors.query(np.full(int(idx.manifest["dim"]), 0.05, dtype=np.float32), 20)
        return time.perf_counter() - t0
    finally:
        idx.close()


def measure(s: Any, emb: Any, edits: int) -> dict[str, Any]:
    from indexers.pipeline import run_index

    path = Path(s.root) / FILE
    original = path.read_text(encoding="utf-8")
    runs: list[float] = []
    reads: list[float] = []
    try:
        for i in range(edits):
            save(path, probe_text(original, f"edit_cost_probe_{i}_{time.time_ns() % 10**8}"))
            t0 = time.perf_counter()
            st = run_index(s, paths=[FILE], embedder_factory=lambda: emb)
            runs.append(time.perf_counter() - t0)
            assert st.published and st.embedded >= 1, st
            reads.append(reopen(s))
    finally:
        save(path, original)
        run_index(s, paths=[FILE], embedder_factory=lambda: emb)
    sizes = index_sizes(Path(s.index_dir))
    copied = sum(v for k, v in sizes.items() if k != "embcache")
    return {"run_p50": median(runs), "run_max": max(runs), "reopen_p50": median(reads),
            "copied_mb": copied / 1e6, "spans": st.spans_total,
            "load": os.getloadavg()[1]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edits", type=int, default=7)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from rag_mcp.config import load_settings
    from rag_mcp.embed import load_embedder

    prepare()
    trees = {"30k": (LARGE / "django-30k", LARGE / "idx-small-onnx", ()),
             "330k": (TREE, LARGE / "idx-large-onnx", LARGE_IGNORE)}
    missing = [str(idx) for _, idx, _ in trees.values() if not idx.is_dir()]
    if missing:
        raise SystemExit(f"run `python -m bench.speed.large_repo` first (missing {missing})")
    base = load_settings({})
    emb = load_embedder(base.embed_model, base.embed_backend, cache_dir=base.model_cache_path)
    rows = []
    OUT.mkdir(parents=True, exist_ok=True)
    for size, (root, idx, ignore) in trees.items():
        r = measure(settings_for(root, idx, ignore), emb, args.edits)
        rows.append([size, r["spans"], "embedded", r["run_p50"], r["run_max"], r["reopen_p50"],
                     r["copied_mb"], f"{r['load']:.1f}"])
        print(rows[-1], file=sys.stderr)
        server_idx = OUT / f"idx-{size}-server"
        if not (server_idx / "embcache.sqlite").exists():
            server_idx.mkdir(parents=True, exist_ok=True)
            shutil.copy2(idx / "embcache.sqlite", server_idx / "embcache.sqlite")
        with chroma_server(OUT / f"chroma-{size}") as url:
            s = settings_for(root, server_idx, ignore, url)
            from indexers.pipeline import run_index

            run_index(s, embedder_factory=lambda: emb)  # fills the server from the cache
            r = measure(s, emb, args.edits)
        rows.append([size, r["spans"], "Chroma server", r["run_p50"], r["run_max"],
                     r["reopen_p50"], r["copied_mb"], f"{r['load']:.1f}"])
        print(rows[-1], file=sys.stderr)
    body = "\n".join([
        "## Keeping a large index fresh: one edit", "", "`python -m bench.speed.edit_cost`", "",
        f"{args.edits} edits of `{FILE}` (a probe function replaced each time, one span to "
        "embed), each followed by the incremental run a watcher makes for it (`run_index` with "
        "the edited path, in process, model loaded) and by a reader opening the new generation "
        "and answering one dense query. The copy is what every run duplicates into its new "
        "generation (catalog, lexical index, and the vectors when embedded).", "",
        md_table(["tree", "spans", "vector store", "one-file run P50 s", "max s",
                  "reader reopen + query P50 s", "copied per run MB", "load avg (5 min)"],
                 rows), ""])
    print(body)
    if not args.no_write:
        write_section("edit_cost", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
