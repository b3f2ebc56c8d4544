"""What checking the index costs a ``rag-index`` run that finds nothing to update.

A run that finds nothing to update checks the existing index quickly (every file present with
its recorded size, files up to 1 MiB hashed, larger ones hashed only when their mtime moved,
small HNSW graphs read); ``--verify`` opens it as a server would (every byte hashed, every
graph read, catalog, lexical index and vectors opened and counted). Both run here side by side,
alternating, on Django 5.1.4's library and docs (bench/speed/large_repo.py's large tree), as
real ``rag-index`` subprocesses. The index is built once with ``--model`` (the check's cost
follows the index's bytes, not the model's quality; the default ``test-hash-64`` builds in
minutes, its vectors are 64-dimensional: ``--model all-MiniLM-L6-v2 --backend onnx-int8`` gives
the 384-dimensional store users have). Prints markdown and rewrites the "noop_check" section of
docs/BENCHMARKS.md.

    .venv/bin/python -m bench.speed.noop_check [--rounds 5] [--model M] [--backend B]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from bench._report import WORK, md_table, median, write_section
from bench.speed.large_repo import DJANGO, LARGE_IGNORE, prepare

BASE = WORK / "noop"


def index_cmd(root: Path, idx: Path, model: str, backend: str, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "indexers.cli", "--root", str(root), "--index-dir", str(idx),
           "--model", model, "--json", *extra]
    if backend:
        cmd += ["--embed-backend", backend]
    for pat in LARGE_IGNORE:
        cmd += ["--ignore", pat]
    return cmd


def timed(cmd: list[str]) -> dict[str, Any]:
    """Wall seconds of one process, and the run's own seconds from its JSON."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rag-index failed ({proc.returncode}): {err.decode()[-2000:]}")
    stats = orjson.loads(out.splitlines()[-1])
    return {"wall": wall, "run": stats["seconds"], "walk": stats["walk_seconds"],
            "published": stats["published"],
            "rebuilt": stats["rebuilt"]}


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default="test-hash-64")
    ap.add_argument("--backend", default="")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    tree, _small = prepare()
    idx = BASE / (args.model + (f"-{args.backend}" if args.backend else ""))
    t0 = time.perf_counter()
    cold = timed(index_cmd(tree, idx, args.model, args.backend))  # a no-op if it exists
    print(f"index ready in {time.perf_counter() - t0:.1f} s "
          f"({'built' if cold['published'] else 'existing'})", file=sys.stderr)
    gen_dirs = sorted(idx.glob("*/gen-*"))
    size_mb = du(gen_dirs[-1]) / 1e6 if gen_dirs else 0.0
    quick: list[dict[str, Any]] = []
    full: list[dict[str, Any]] = []
    load = [os.getloadavg()[1]]
    for _ in range(args.rounds):  # alternating, so both see the same load
        quick.append(timed(index_cmd(tree, idx, args.model, args.backend)))
        full.append(timed(index_cmd(tree, idx, args.model, args.backend, "--verify")))
    load.append(os.getloadavg()[1])
    assert not any(r["published"] for r in quick + full), "a no-op run published a generation"
    rows = []
    for name, runs in (("`rag-index` (quick check)", quick), ("`rag-index --verify`", full)):
        rows.append([name, median([r["run"] - r["walk"] for r in runs]),
                     median([r["walk"] for r in runs]), median([r["run"] for r in runs]),
                     median([r["wall"] for r in runs])])
    q = median([r["run"] - r["walk"] for r in quick])
    f = median([r["run"] - r["walk"] for r in full])
    body = "\n".join([
        "## No-op re-index: the check of the existing index",
        "",
        "`python -m bench.speed.noop_check" + (f" --model {args.model}" if args.model
                                               != "test-hash-64" else "")
        + (f" --backend {args.backend}" if args.backend else "") + "`",
        "",
        f"Django {DJANGO}'s library and docs, the large tree of the "
        f"large-repository benchmark; index built with `{args.model}`, one generation of "
        f"{size_mb:.1f} MB on disk. Median of {args.rounds} runs of each, alternating (load "
        f"average {load[0]:.1f} before, {load[-1]:.1f} after, on 2 cores shared with other "
        "jobs): the run's own seconds (`--json`'s `seconds`: lock, check, walk), its walk alone, "
        "the difference (the check, mostly), and the process's wall time (Python start-up and "
        "imports included).",
        "",
        md_table(["run", "check s (run minus walk)", "walk s", "run s", "process s"], rows),
        "",
        f"The quick check takes {q / f:.0%} of the full one's time here ({q:.3f} s against "
        f"{f:.3f} s). Damage written into a file moves its mtime, which the quick check "
        "compares; what it cannot see (bit rot, or damage with its mtime put back) "
        "`rag-index --verify` and every server start still find, and a run that builds on the "
        "existing index always opens it fully first.",
    ])
    print(body)
    if not args.no_write:
        write_section("noop_check", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
