"""Index a real mid-size repository no one here wrote and report where the time goes.

    python -m bench.index_bench [--package flask==3.1.0] [--backend onnx] [--quick]

Measured in one run, side by side: chunking alone (one process, and a pool of two), the model's
raw throughput on exactly the texts the indexer embeds, the cold end-to-end `rag-index` (a fresh
index folder and an empty embedding cache), its peak RSS and size on disk, a no-op re-run, and an
incremental run after editing one file, against the CLI's bare start-up. Writes the "index"
section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson

from bench._report import WORK, md_table, median, write_section


def fetch_sdist(spec: str) -> Path:
    """Download and unpack a PyPI sdist once (bench/.work is git-ignored)."""
    name, version = spec.split("==")
    dest = WORK / "repos" / f"{name}-{version}"
    if dest.is_dir():
        return dest
    dl = WORK / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                    ":all:", spec, "-d", str(dl)], check=True)
    archive = next(p for p in dl.iterdir()
                   if p.name.lower().startswith(f"{name.lower()}-{version}") and
                   p.name.endswith(".tar.gz"))
    (WORK / "repos").mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(WORK / "repos", filter="data")
    return dest


def _chunk_files(args: tuple[str, list[str], int]) -> tuple[int, int, list[str]]:
    from indexers.chunking import chunk_file
    from rag_mcp.spans import embedding_text, span_text

    root, rels, budget = args
    spans = 0
    texts: list[str] = []
    for rel in rels:
        text = (Path(root) / rel).read_bytes().decode("utf-8", "replace")
        fc = chunk_file(rel, text, budget_chars=budget, window_lines=40, window_overlap=10)
        spans += len(fc.chunks)
        for ch in fc.chunks:
            t = span_text(fc.lines, ch.start_line, ch.end_line)
            texts.append(embedding_text(rel, ch.symbol or ch.heading, ch.context, t))
    return len(rels), spans, texts


def chunking(root: Path, rels: list[str], procs: int) -> tuple[float, int, list[str]]:
    t0 = time.perf_counter()
    if procs == 1:
        _n, spans, texts = _chunk_files((str(root), rels, 1500))
    else:
        parts = [rels[i::procs] for i in range(procs)]
        with ProcessPoolExecutor(procs) as pool:
            results = list(pool.map(_chunk_files, [(str(root), p, 1500) for p in parts]))
        spans = sum(r[1] for r in results)
        texts = [t for r in results for t in r[2]]
    return time.perf_counter() - t0, spans, texts


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "indexers.cli", *args], env=env,
                         capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, out.stdout


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", default="flask==3.1.0")
    ap.add_argument("--backend", default="onnx")
    ap.add_argument("--quick", action="store_true", help="at most 40 files (a smoke run)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    src = fetch_sdist(args.package)
    root = WORK / "index-bench" / src.name
    shutil.rmtree(root.parent, ignore_errors=True)
    shutil.copytree(src, root)
    from indexers.walk import walk

    files = [c.rel for c in walk(root).files]
    if args.quick:
        files = files[:40]
        keep = set(files)
        for p in list(root.rglob("*")):
            if p.is_file() and p.relative_to(root).as_posix() not in keep:
                p.unlink()
    lines = sum(len((root / f).read_bytes().split(b"\n")) for f in files)
    print(f"{args.package}: {len(files)} files, {lines:,} lines", flush=True)

    t1, spans, texts = chunking(root, files, 1)
    t2, _, _ = chunking(root, files, 2)
    print(f"chunking: {len(files) / t1:,.0f} files/s (1 process), {len(files) / t2:,.0f} "
          f"files/s (2 processes), {spans:,} spans", flush=True)

    from rag_mcp.config import load_settings
    from rag_mcp.embed import load_embedder

    s = load_settings({"root": str(root), "embed_backend": args.backend})
    model = load_embedder(s.embed_model, args.backend, cache_dir=s.model_cache_path)
    model.embed_documents(texts[:32])  # warm-up
    t0 = time.perf_counter()
    model.embed_documents(texts)
    raw = time.perf_counter() - t0
    raw_rate = len(texts) / raw
    print(f"model raw: {raw_rate:.1f} spans/s ({args.backend})", flush=True)
    del model

    index_dir = WORK / "index-bench" / "index"
    env = {**os.environ, "RAG_INDEX_DIR": str(index_dir), "RAG_EMBED_BACKEND": args.backend}
    help_t = median([run_cli(["--help"], env)[0] for _ in range(3)])
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cold_t, out = run_cli(["--root", str(root), "--json"], env)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cold = orjson.loads(out)
    noop_t = median([run_cli(["--root", str(root), "-q"], env)[0] for _ in range(3)])
    target = root / files[len(files) // 2]
    incr: list[float] = []
    embedded: list[int] = []
    for i in range(3):
        with target.open("a", encoding="utf-8") as fh:
            fh.write(f"\n\ndef added_by_bench_{i}(x):\n    return x + {i}\n")
        t, o = run_cli(["--root", str(root), "--json"], env)
        incr.append(t)
        embedded.append(orjson.loads(o)["embedded"])
    gen_dirs = [p for p in index_dir.rglob("gen-*") if p.is_dir()]
    gen_size = du(max(gen_dirs, key=lambda p: p.name))
    cache_size = du(index_dir) - sum(du(p) for p in gen_dirs)

    e2e_rate = cold["spans_added"] / cold["seconds"]
    rows = [
        ["files / lines / spans", f"{len(files):,} / {lines:,} / {cold['spans_total']:,}"],
        ["chunking alone, 1 process", f"{len(files) / t1:,.0f} files/s, {spans / t1:,.0f} "
                                      "spans/s"],
        ["chunking alone, 2 processes", f"{len(files) / t2:,.0f} files/s, {spans / t2:,.0f} "
                                        "spans/s"],
        ["model raw throughput (same texts)", f"{raw_rate:.1f} spans/s"],
        ["cold index end to end", f"{cold['seconds']:.1f} s, {e2e_rate:.1f} spans/s "
                                  f"({e2e_rate / raw_rate:.0%} of raw)"],
        ["share of time embedding", f"{cold['embed_seconds'] / cold['seconds']:.0%} "
                                    f"(chunking {cold['chunk_seconds']:.1f} s in a thread)"],
        ["peak RSS of rag-index", f"{max(peak_kb, before) / 1024:,.0f} MB"],
        ["index size on disk", f"{gen_size / 1e6:.1f} MB generation + "
                               f"{cache_size / 1e6:.1f} MB embedding cache"],
        ["CLI bare start-up (`rag-index --help`)", f"{help_t:.2f} s"],
        ["no-op re-index (nothing changed)", f"{noop_t:.2f} s"],
        ["incremental after a one-file edit", f"{median(incr):.2f} s median of 3 "
                                              f"({median(incr) / help_t:.1f}x bare start-up, "
                                              f"{median(incr) / noop_t:.1f}x no-op)"],
        ["spans embedded by each incremental run", ", ".join(map(str, embedded))],
    ]
    table = md_table(["measure", f"{args.package} ({args.backend})"], rows)
    print(table)
    cmd = "python -m bench.index_bench" + (f" --package {args.package}"
                                           if args.package != "flask==3.1.0" else "")
    if args.backend != "onnx":
        cmd += f" --backend {args.backend}"
    write_section(f"index-{args.backend}", f"## Indexing a real repository ({args.backend})\n\n"
                  f"`{cmd}`\n\nThe {args.package} sdist from PyPI (code and its reST docs). "
                  "Chunking alone reads and chunks every file; the model's raw throughput embeds "
                  "exactly the texts the indexer embeds, length-sorted, in one call; the cold run "
                  "is `rag-index` in a fresh process with a fresh index folder and an empty "
                  "embedding cache.\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
