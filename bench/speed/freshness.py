"""Freshness: time from saving a file to ``rag_query`` returning the change, over real processes.

A copy of a real ~30k-line tree (a slice of Django's sdist, see bench/speed/large_repo.py) is
indexed once with the bundled model; then ``rag-mcp serve --watch`` runs over stdio with a real MCP
client session (``--mode separate``: ``rag-index --watch`` and a plain ``rag-mcp``). Each edit
replaces a probe function in one of a few source files with a new one carrying a never-seen
identifier, saved like an editor does (write a temporary file, rename it over the original); the
client then asks ``rag_query`` for that identifier until a hit shows it. The clock starts just
before the save. The index side (save -> the new generation published, read from CURRENT) and the
reader side (published -> answered) are reported apart. Prints markdown and rewrites the "freshness"
section of docs/BENCHMARKS.md.

    .venv/bin/python -m bench.speed.freshness [--edits 50] [--mode server|separate|both] [--render]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench._report import WORK, md_table, median, pct, write_section

BASE = WORK / "freshness"
SOURCE_PARTS = ("django/core", "django/forms", "django/http", "docs/intro")
TARGETS = ("django/forms/fields.py", "django/http/request.py", "django/core/paginator.py",
           "django/core/validators.py", "django/forms/widgets.py")
PROBE_START = "# --- freshness probe ---"
TIMEOUT = 30.0
RESULTS = BASE / "results.json"


def prepare_repo(fresh: bool) -> Path:
    from bench.speed.large_repo import TREE, prepare

    prepare()
    repo = BASE / "repo"
    if fresh and repo.exists():
        shutil.rmtree(repo)
    if not repo.is_dir():
        for part in SOURCE_PARTS:
            shutil.copytree(TREE / part, repo / part,
                            ignore=shutil.ignore_patterns("locale", "__pycache__"))
    for rel in TARGETS:  # drop probes a previous (interrupted) run left behind
        p = repo / rel
        text = p.read_text(encoding="utf-8")
        if PROBE_START in text:
            p.write_text(text.split("\n" + PROBE_START)[0] + "\n", encoding="utf-8")
    return repo


def env(repo: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_CACHE_SIZE": "0",
            "RAG_LOG_DIR": str(BASE / "logs"), "RAG_INDEX_DIR": str(BASE / "index")}


def save(path: Path, text: str) -> None:
    """Save like an editor: a temporary file renamed over the original."""
    tmp = path.with_name(f".{path.name}.swp-save")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def probe_text(original: str, ident: str) -> str:
    base = original.split("\n" + PROBE_START)[0].rstrip("\n")
    return (f"{base}\n\n{PROBE_START}\n\ndef {ident}(items, rate=0.2):\n"
            f'    """Total of the items with tax applied ({ident})."""\n'
            f"    return sum(items) * (1 + rate)\n")


def published_at(repo: Path) -> tuple[int, float]:
    from rag_mcp.config import load_settings

    s = load_settings({"root": str(repo), "index_dir": str(BASE / "index")})
    data = orjson.loads((s.index_path / "CURRENT").read_bytes())
    return int(data["generation"]), float(data.get("published_at", 0.0))


@contextlib.asynccontextmanager
async def session(repo: Path, watch_in_server: bool) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    args = ["-m", "rag_mcp", "serve", "--root", str(repo)] + (["--watch"] if watch_in_server
                                                              else [])
    params = StdioServerParameters(command=sys.executable, args=args, env=env(repo))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def measure(repo: Path, edits: int, watch_in_server: bool, seed: int) -> dict[str, Any]:
    from bench.speed.large_repo import _server_pid, _vm_hwm

    rng = random.Random(seed)
    load_before = os.getloadavg()[1]  # the machine is shared: say how busy it was
    indexer = None
    if not watch_in_server:
        indexer = subprocess.Popen(
            [sys.executable, "-m", "indexers.cli", "--root", str(repo), "--watch", "-q"],
            env=env(repo), stderr=open(BASE / "watch.log", "ab"), preexec_fn=_default_sigint)
    rows: list[dict[str, float]] = []
    rss: dict[str, float] = {}
    try:
        async with session(repo, watch_in_server) as s:
            server = _server_pid(repo)
            for q in ("paginate a list", "validate an email address"):  # warm-up
                await s.call_tool("rag_query", {"query": q})
            await anyio.sleep(3.0)  # the watcher's catch-up walk and model load
            originals = {rel: (repo / rel).read_text(encoding="utf-8") for rel in TARGETS}
            pids = {"server": server} | ({"watcher": indexer.pid} if indexer else {})
            cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
            for i in range(edits):
                rel = TARGETS[i % len(TARGETS)]
                ident = f"invoice_total_{i}_{rng.randrange(16**6):06x}"
                text = probe_text(originals[rel], ident)
                t0 = time.time()
                save(repo / rel, text)
                found = await wait_for(s, ident, rel, t0)
                gen, pub = published_at(repo)
                rows.append({"total": found, "index": pub - t0, "reader": t0 + found - pub,
                             "generation": gen})
                await anyio.sleep(rng.uniform(0.3, 1.0))
            cpu = {k: (cpu_seconds(v) - cpu0[k]) / max(1, edits) for k, v in pids.items()}
            for rel, text in originals.items():
                save(repo / rel, text)
            await anyio.sleep(1.5)
            rss["server"] = _vm_hwm(server)
            if indexer is not None:
                rss["watcher"] = _vm_hwm(indexer.pid)
    finally:
        if indexer is not None:
            indexer.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
            try:
                indexer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                indexer.kill()
                indexer.wait()
                raise SystemExit("rag-index --watch did not stop on SIGINT within 60 s") from None
    tot = [r["total"] for r in rows]
    return {"p50": median(tot), "p95": pct(tot, 95), "max": max(tot), "n": len(rows),
            "index_p50": median([r["index"] for r in rows]),
            "reader_p50": median([r["reader"] for r in rows]),
            "generations": rows[-1]["generation"] - rows[0]["generation"] + 1 if rows else 0,
            "load": os.getloadavg()[1], "load_before": load_before, "rss": rss,
            "cpu_per_edit": cpu}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): a load-independent cost."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _default_sigint() -> None:
    # Started from `nohup ... &` (no job control), this process and its children ignore SIGINT;
    # the watcher is stopped with SIGINT like a user's Ctrl-C, so give it the normal disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def wait_for(s: Any, ident: str, rel: str, t0: float) -> float:
    """Seconds from ``t0`` until rag_query returns the probe's span."""
    while time.time() - t0 < TIMEOUT:
        r = await s.call_tool("rag_query", {"query": ident, "k": 3, "tau": 0.0})
        sc = r.structured_content or {}
        for hit in sc.get("hits", []):
            if hit["path"] == rel and ident in (hit.get("symbol") or "") + hit.get("preview", ""):
                return time.time() - t0
        await anyio.sleep(0.01)
    raise SystemExit(f"the edit of {rel} ({ident}) was not visible after {TIMEOUT:.0f} s")


def seed_cache() -> bool:
    """Reuse the vectors bench/speed/large_repo.py computed for the same files (same paths, same
    text, same keys): the catch-up index then costs minutes less and measures nothing different."""
    from bench.speed.large_repo import BASE as LARGE

    src, dst = LARGE / "idx-small-onnx" / "embcache.sqlite", BASE / "index" / "embcache.sqlite"
    if dst.exists() or not src.exists():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return True


def backend_of(repo: Path) -> str:
    """The embedding backend the indexer and the server use here (configs, RAG_* variables)."""
    from rag_mcp.config import load_settings

    s = load_settings({"root": str(repo)})
    return f"{s.embed_backend}, {s.embed_max_tokens or 'all'} tokens of a span"


def cold_index(repo: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(repo), "-q"],
                   env=env(repo), check=True)
    return time.perf_counter() - t0


def render(saved: dict[str, Any], cmd: str) -> str:
    meta = saved["meta"]
    rows = []
    for key, label in (("server", "`rag-mcp --watch`"),
                       ("separate", "`rag-index --watch` + `rag-mcp`")):
        r = saved.get(key)
        if r is None:
            continue
        mem = " + ".join(f"{r['rss'][k]:.0f}" for k in ("server", "watcher") if k in r["rss"])
        verdict = ("met" if r["p50"] <= 1.0 and r["p95"] <= 2.0 else
                   f"missed: P50 {r['p50'] / 1.0:.1f}x, P95 {r['p95'] / 2.0:.1f}x the target")
        cpu = r.get("cpu_per_edit") or {}
        cpu_cell = " + ".join(f"{cpu[k]:.2f}" for k in ("server", "watcher") if k in cpu) or "?"
        rows.append([label, r["n"], r["p50"], r["p95"], r["max"], r["index_p50"],
                     r["reader_p50"], cpu_cell, mem,
                     f"{r['load_before']:.1f} / {r['load']:.1f}", r.get("measured_at", "?"),
                     verdict])
    seed_note = (", its embedding cache seeded by bench/speed/large_repo.py" if meta["seeded"]
                 else "")
    return "\n".join([
        "## Freshness: save to query", "", f"`{cmd}`", "",
        f"A copy of {', '.join(f'`{p}`' for p in SOURCE_PARTS)} from Django's sdist "
        f"({meta['files']:,} files, {meta['lines']:,} lines), indexed with the bundled model "
        f"(`{meta.get('backend', 'onnx')}`; the catch-up run took {meta['setup']:.1f} s"
        f"{seed_note}). Each of {meta['edits']} edits replaces a probe function in one of "
        f"{len(TARGETS)} files with a new identifier, saved as editors do (temporary file + "
        "rename), then `rag_query` is asked for it through a real MCP stdio session until a hit "
        "shows it. Debounce 200 ms (the default). Targets: P50 <= 1 s, P95 <= 2 s. The machine "
        "has 2 cores shared with other jobs: a 5-minute load average above 2 means every step "
        "(one span's embedding, the Chroma upsert, the fsyncs, the reader's reopen) waited for "
        "a core. CPU seconds per edit do not depend on that load; the server's include the "
        "`rag_query` calls the client polls with.", "",
        md_table(["watcher", "edits", "P50 s", "P95 s", "max s", "save -> published P50 s",
                  "published -> answered P50 s", "CPU s per edit (server + watcher)",
                  "peak RSS MB (server + watcher)",
                  "load avg 5 min (start / end)", "measured (UTC)", "target"], rows), ""])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--mode", choices=("server", "separate", "both"), default="both")
    ap.add_argument("--fresh", action="store_true", help="copy the tree and index it again")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--render", action="store_true",
                    help="measure nothing: print (and write) the section from results.json")
    args = ap.parse_args(argv)
    cmd = "python -m bench.speed.freshness" + (f" --mode {args.mode}"
                                              if args.mode != "both" else "")
    saved = orjson.loads(RESULTS.read_bytes()) if RESULTS.is_file() else {}
    if not args.render:
        BASE.mkdir(parents=True, exist_ok=True)
        if args.fresh:
            shutil.rmtree(BASE / "index", ignore_errors=True)
        repo = prepare_repo(args.fresh)
        seeded = seed_cache()
        setup = cold_index(repo)
        lines, files = 0, 0
        for p in repo.rglob("*"):
            if p.is_file():
                files += 1
                lines += p.read_bytes().count(b"\n")
        saved["meta"] = {"files": files, "lines": lines, "setup": setup, "seeded": seeded,
                         "edits": args.edits, "backend": backend_of(repo)}
        modes = {"server": [True], "separate": [False], "both": [True, False]}[args.mode]
        for m in modes:
            r = anyio.run(measure, repo, args.edits, m, args.seed)
            # kept as soon as it exists: a later failure loses nothing
            saved["server" if m else "separate"] = {
                **r, "measured_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
            RESULTS.write_bytes(orjson.dumps(saved, option=orjson.OPT_INDENT_2))
    body = render(saved, cmd)
    print(body)
    if not args.no_write:
        write_section("freshness", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
