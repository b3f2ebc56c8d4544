"""Index a real mid-size repository no one here wrote and report where the time goes.

    python -m bench.speed.indexing [--package flask==3.1.0] [--backend onnx] [--quick]
                                [--rounds 3] [--baseline REV] [--incremental-only]

Measured in one run, side by side: chunking alone (one process, and a pool of two), the model's
raw throughput on exactly the texts the indexer embeds, the cold end-to-end `rag-index` (a fresh
index folder and an empty embedding cache), its peak RSS and size on disk, a no-op re-run, and an
incremental run after editing one file, against the CLI's bare start-up. Beside it, the floor of
any process that embeds (start Python, import the model's runtime, load the model, embed one span)
and the same one-file edit in a process that stays up with its model loaded (what `--watch` does
per save). Writes the "index" section of docs/BENCHMARKS.md.

``--baseline REV`` runs the `rag-index` of an older commit (``git archive``, as
bench/speed/latency.py does) on its own copy of the repository and its own index, built first from a
copy of this run's embedding cache; bare start-up, no-op and incremental runs then alternate between
the two trees round by round, and the table gains their before/after. ``--incremental-only`` skips
chunking, the model and the cold run: it builds each index from the embedding cache the last full
run left (bench/.work/index-bench), so a change can be measured in a minute; it prints, writes
nothing.
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
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench._report import ROOT, WORK, md_table, median, write_section


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
    from rag_mcp.index.spans import span_text

    root, rels, budget = args
    spans = 0
    texts: list[str] = []
    for rel in rels:
        text = (Path(root) / rel).read_bytes().decode("utf-8", "replace")
        fc = chunk_file(rel, text, budget_chars=budget, window_lines=40, window_overlap=10)
        spans += len(fc.chunks)
        for ch in fc.chunks:
            t = span_text(fc.lines, ch.start_line, ch.end_line)
            texts.append(ch.embedding_text(rel, t))
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


def run_cli(args: list[str], env: dict[str, str], tree: Path | None = None
            ) -> tuple[float, str]:
    """``python -m indexers.cli`` of this checkout, or of ``tree`` (run from there, so that its
    folder comes first on ``sys.path``) with the same installed dependencies."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "indexers.cli", *args], env=env,
                         cwd=tree or ROOT, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, out.stdout


@dataclass
class Tree:
    """One `rag-index` (this checkout, or a baseline's source) with its own repository copy and
    index, and what the rounds measured for it."""

    label: str
    source: Path | None  # None: this checkout
    root: Path
    index_dir: Path
    help_t: list[float] = field(default_factory=list)
    noop_t: list[float] = field(default_factory=list)
    incr_t: list[float] = field(default_factory=list)
    embedded: list[int] = field(default_factory=list)

    def env(self, backend: str) -> dict[str, str]:
        return {**os.environ, "RAG_INDEX_DIR": str(self.index_dir), "RAG_EMBED_BACKEND": backend}

    def run(self, args: list[str], backend: str) -> tuple[float, str]:
        return run_cli(["--root", str(self.root), *args], self.env(backend), self.source)


def copy_repo(src: Path, root: Path, files: list[str] | None) -> None:
    """Copy the unpacked sdist; with ``files``, keep only those (a --quick run)."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(src, root)
    if files is not None:
        keep = set(files)
        for p in list(root.rglob("*")):
            if p.is_file() and p.relative_to(root).as_posix() not in keep:
                p.unlink()


def prepare(tree: Tree, src: Path, files: list[str] | None, seed_cache: Path | None,
            backend: str) -> None:
    """A fresh copy of the repository and a cold index built from a copy of ``seed_cache``."""
    copy_repo(src, tree.root, files)
    shutil.rmtree(tree.index_dir, ignore_errors=True)
    tree.index_dir.mkdir(parents=True)
    if seed_cache is not None and seed_cache.is_file():
        shutil.copy2(seed_cache, tree.index_dir / "embcache.sqlite")
    tree.run(["-q"], backend)


def rounds(trees: list[Tree], target: str, n: int, backend: str) -> None:
    """Bare start-up, a no-op and a one-file edit per tree, in turn, ``n`` times; the order of the
    trees alternates so neither always runs right after the other's heavy run."""
    for i in range(n):
        for t in trees if i % 2 == 0 else trees[::-1]:
            # three bare start-ups a round: at ~0.1 s they are the noisiest of the three
            t.help_t += [run_cli(["--help"], t.env(backend), t.source)[0] for _ in range(3)]
            t.noop_t.append(t.run(["-q"], backend)[0])
            with (t.root / target).open("a", encoding="utf-8") as fh:
                fh.write(f"\n\ndef added_by_bench_{i}(x):\n    return x + {i}\n")
            secs, out = t.run(["--json"], backend)
            t.incr_t.append(secs)
            t.embedded.append(orjson.loads(out)["embedded"])
        print(" · ".join(f"{t.label}: help {t.help_t[-1]:.2f} s, no-op {t.noop_t[-1]:.2f} s, "
                         f"incremental {t.incr_t[-1]:.2f} s" for t in trees), flush=True)


FLOOR = """\
import sys
from rag_mcp.config import load_settings
from rag_mcp.embed import load_embedder
s = load_settings({"embed_backend": sys.argv[1]})
m = load_embedder(s.embed_model, s.embed_backend, cache_dir=s.model_cache_path)
m.embed_documents(["def added(x):\\n    return x + 1"], s.embed_max_tokens)
"""


@dataclass
class Floor:
    """What no separate process can go below, and what a process that stays up pays instead."""

    model_t: list[float] = field(default_factory=list)
    warm_t: list[float] = field(default_factory=list)

    def rows(self, help_s: float) -> list[list[object]]:
        m, w = median(self.model_t), median(self.warm_t)
        return [
            ["floor: a process that only loads the model and embeds one span",
             f"{m:.2f} s median of {len(self.model_t)} ({m / help_s:.1f}x bare start-up)"],
            ["the same one-file edit in a process that stays up (`--watch`, in-process run)",
             f"{w:.2f} s median of {len(self.warm_t)} ({w / help_s:.1f}x bare start-up)"],
        ]


def measure_floor(t: Tree, target: str, n: int, backend: str) -> Floor:
    """The model's start-up floor in fresh processes, then ``n`` one-file edits indexed by one
    long-lived in-process pipeline with its model loaded once (what a watcher does per save)."""
    from indexers.pipeline import run_index
    from rag_mcp.config import load_settings
    from rag_mcp.embed import load_embedder

    f = Floor()
    env = t.env(backend)
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", FLOOR, backend], env=env, cwd=ROOT, check=True)
        f.model_t.append(time.perf_counter() - t0)
    s = load_settings({"root": str(t.root), "index_dir": str(t.index_dir),
                       "embed_backend": backend})
    model = load_embedder(s.embed_model, backend, cache_dir=s.model_cache_path,
                          threads=s.embed_threads, batch_size=s.embed_batch)
    run_index(s, embedder_factory=lambda: model)  # opens the index once, as a watcher has
    for i in range(n):
        with (t.root / target).open("a", encoding="utf-8") as fh:
            fh.write(f"\n\ndef added_in_process_{i}(x):\n    return x - {i}\n")
        t0 = time.perf_counter()
        st = run_index(s, embedder_factory=lambda: model)
        f.warm_t.append(time.perf_counter() - t0)
        assert st.embedded >= 1, st
    return f


def tree_rows(t: Tree, suffix: str = "") -> list[list[object]]:
    h, z, inc = median(t.help_t), median(t.noop_t), median(t.incr_t)
    return [
        [f"CLI bare start-up (`rag-index --help`){suffix}",
         f"{h:.2f} s median of {len(t.help_t)}"],
        [f"no-op re-index (nothing changed){suffix}", f"{z:.2f} s median of {len(t.noop_t)}"],
        [f"incremental after a one-file edit{suffix}",
         f"{inc:.2f} s median of {len(t.incr_t)} ({inc / h:.1f}x bare start-up, "
         f"{inc / z:.1f}x no-op)"],
    ]


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", default="flask==3.1.0")
    ap.add_argument("--backend", default="onnx")
    ap.add_argument("--quick", action="store_true",
                    help="at most 40 files (a smoke run; writes nothing)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="bare start-up / no-op / one-file edit rounds per tree")
    ap.add_argument("--baseline", metavar="REV",
                    help="also time the rag-index of this commit, alternating with this tree's")
    ap.add_argument("--incremental-only", action="store_true",
                    help="only the rounds, on indexes built from the last full run's cache")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    src = fetch_sdist(args.package)
    from indexers.walk import walk

    files = [c.rel for c in walk(src).files]
    if args.quick:
        files = files[:40]
    # the edit appends a function to a source file, as an edit in an editor would
    sources = [f for f in files if f.endswith(".py")] or files
    target = sources[len(sources) // 2]
    base_tree = None
    if args.baseline:
        from bench.speed.transport import baseline_tree

        base_tree = baseline_tree(args.baseline)
    rev = base_tree.name.removeprefix("baseline-") if base_tree else ""
    if args.incremental_only:
        return incremental_only(args, src, files, target, base_tree, rev)

    work = WORK / "index-bench"
    root = work / src.name
    shutil.rmtree(work, ignore_errors=True)
    only = files if args.quick else None
    copy_repo(src, root, only)
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
    model.embed_documents(texts[:32], s.embed_max_tokens)  # warm-up
    t0 = time.perf_counter()
    model.embed_documents(texts, s.embed_max_tokens)  # read as the indexer reads them
    raw = time.perf_counter() - t0
    raw_rate = len(texts) / raw
    print(f"model raw: {raw_rate:.1f} spans/s ({args.backend})", flush=True)
    del model

    cur = Tree("this tree", None, root, work / "index")
    cold_help = median([run_cli(["--help"], cur.env(args.backend))[0] for _ in range(3)])
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cold_t, out = cur.run(["--json"], args.backend)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cold = orjson.loads(out)
    print(f"cold index: {cold_t:.1f} s (bare start-up {cold_help:.2f} s)", flush=True)
    trees = [cur]
    if base_tree is not None:
        base = Tree(f"baseline {rev}", base_tree, work / f"{src.name}@{rev}",
                    work / f"index@{rev}")
        prepare(base, src, only, cur.index_dir / "embcache.sqlite", args.backend)
        trees = [base, cur]
    rounds(trees, target, args.rounds, args.backend)
    gen_dirs = [p for p in cur.index_dir.rglob("gen-*") if p.is_dir()]
    gen_size = du(max(gen_dirs, key=lambda p: p.name))
    cache_size = du(cur.index_dir) - sum(du(p) for p in gen_dirs)

    e2e_rate = cold["spans_added"] / cold["seconds"]
    rows: list[list[object]] = [
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
        *tree_rows(cur),
        ["spans embedded by each incremental run", ", ".join(map(str, cur.embedded))],
        *measure_floor(cur, target, args.rounds, args.backend).rows(median(cur.help_t)),
    ]
    note = ""
    if base_tree is not None:
        b = trees[0]
        rows += [*tree_rows(b, f", baseline {rev}"),
                 ["incremental, baseline / this tree",
                  f"{median(b.incr_t) / median(cur.incr_t):.1f}x faster "
                  f"({median(b.incr_t):.2f} s -> {median(cur.incr_t):.2f} s)"]]
        note = (f" Rows marked baseline {rev} are that commit's `rag-index` on its own copy of "
                "the repository and its own index (built from a copy of this run's embedding "
                "cache), in rounds alternating with this tree's, with the same installed "
                "dependencies.")
    table = md_table(["measure", f"{args.package} ({args.backend})"], rows)
    print(table)
    cmd = "python -m bench.speed.indexing" + (f" --package {args.package}"
                                           if args.package != "flask==3.1.0" else "")
    if args.backend != "onnx":
        cmd += f" --backend {args.backend}"
    if base_tree is not None:
        cmd += f" --baseline {rev}"
    if args.quick:  # a smoke run of 40 files says nothing about the repository
        return 0
    write_section(f"index-{args.backend}", f"## Indexing a real repository ({args.backend})\n\n"
                  f"`{cmd}`\n\nThe {args.package} sdist from PyPI (code and its reST docs). "
                  "Chunking alone reads and chunks every file; the model's raw throughput embeds "
                  "exactly the texts the indexer embeds, length-sorted, in one call; the cold run "
                  "is `rag-index` in a fresh process with a fresh index folder and an empty "
                  "embedding cache. Bare start-up, no-op and incremental runs are medians of "
                  f"{args.rounds} rounds; each incremental run follows the append of one new "
                  f"function to {target}. The floor is a fresh process that imports the model's "
                  "runtime, loads the model and embeds one span, which any one-shot run that "
                  "embeds pays; the long-lived row calls the indexing pipeline again in one "
                  "process that keeps its model loaded, as `--watch` does for each save."
                  + note + "\n\n" + table)
    return 0


def incremental_only(args: argparse.Namespace, src: Path, files: list[str], target: str,
                     base_tree: Path | None, rev: str) -> int:
    work = WORK / "index-bench-incremental"
    seed = WORK / "index-bench" / "index" / "embcache.sqlite"
    if not seed.is_file():
        print(f"no embedding cache at {seed}: the first index embeds everything", flush=True)
    trees = [Tree("this tree", None, work / src.name, work / "index")]
    if base_tree is not None:
        trees.insert(0, Tree(f"baseline {rev}", base_tree, work / f"{src.name}@{rev}",
                             work / f"index@{rev}"))
    for t in trees:
        prepare(t, src, files if args.quick else None, seed, args.backend)
    rounds(trees, target, args.rounds, args.backend)
    rows = [r for t in trees for r in tree_rows(t, f", {t.label}")]
    rows += measure_floor(trees[-1], target, args.rounds, args.backend).rows(
        median(trees[-1].help_t))
    if base_tree is not None:
        b, c = trees
        rows.append(["incremental, baseline / this tree",
                     f"{median(b.incr_t) / median(c.incr_t):.1f}x faster"])
    print(md_table(["measure", f"{args.package} ({args.backend})"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
