"""A large real repository end to end: cold index, no-op re-index, query latency, RSS, disk.

The repository is Django 5.1.4's source distribution from PyPI (nobody here wrote it). The large
tree is its library and its documentation (``django/`` and ``docs/``; translations and the test
suite left out with ``--ignore``), over 300k lines; the small tree is a ~30k-line slice of the
same code and docs (``django/core``, ``django/forms``, ``django/http``, ``docs/intro``), so the
query-latency ratio measures size, not a different kind of content.

Every step runs the real commands in subprocesses: ``rag-index`` for the cold and no-op runs
(peak RSS and CPU time from ``wait4``), ``rag-mcp`` over stdio with a real MCP client session for
queries (its peak RSS read from /proc). The model's raw throughput is measured in the same run on
spans of the same tree. Results are kept in bench/.work/large/results.json so a later step can be
redone without the long cold index (``--redo``). Prints markdown and rewrites the "large_repo"
section of docs/BENCHMARKS.md.

    .venv/bin/python -m bench.speed.large_repo [--backends onnx,onnx-int8] [--redo noop,query]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench._report import WORK, md_table, median, pct, write_section

DJANGO = "5.1.4"
BASE = WORK / "large"
SDIST = WORK / "downloads" / f"Django-{DJANGO}.tar.gz"
TREE = BASE / f"Django-{DJANGO}"
LARGE_IGNORE = ("locale/", "/tests/", "/js_tests/")
SMALL_PARTS = ("django/core", "django/forms", "django/http", "docs/intro")
RESULTS = BASE / "results.json"
QUERIES = (
    "how are database migrations applied", "QuerySet filter with Q objects",
    "validate a form field", "render a template with a context", "CSRF protection middleware",
    "send an email with attachments", "set a cookie on the response", "password hashing",
    "URL routing with path converters", "serialize a model to JSON", "cache a view",
    "custom management command", "file upload handler", "signals sent when a model is saved",
    "paginate a list of objects", "timezone aware datetimes", "select_related vs "
    "prefetch_related", "HttpResponseRedirect", "class based generic views", "ModelForm save",
    "static files storage", "session backends", "translation of strings in templates",
    "raw SQL queries", "database transactions atomic", "custom user model", "WSGI handler",
    "StreamingHttpResponse", "validate an email address", "slugify", "ManyToManyField through",
    "admin list_display", "permission checks", "test client", "logging configuration",
    "settings DEBUG", "ALLOWED_HOSTS", "get_object_or_404", "reverse a URL name",
    "clean method of a form", "manage.py runserver", "content types framework",
    "aggregate and annotate", "F expressions", "deploy with gunicorn", "security checklist",
    "asynchronous views", "template filters", "messages framework", "localflavor",
)


def sh(cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=True, text=True, **kw)


def prepare() -> tuple[Path, Path]:
    """The large and the small tree (downloaded and extracted once)."""
    if not SDIST.is_file():
        SDIST.parent.mkdir(parents=True, exist_ok=True)
        sh([sys.executable, "-m", "pip", "download", f"django=={DJANGO}", "--no-deps",
            "--no-binary", ":all:", "-d", str(SDIST.parent)])
    if not TREE.is_dir():
        BASE.mkdir(parents=True, exist_ok=True)
        with tarfile.open(SDIST) as tar:
            tar.extractall(BASE, filter="data")
    small = BASE / "django-30k"
    if not small.is_dir():
        for part in SMALL_PARTS:
            shutil.copytree(TREE / part, small / part,
                            ignore=shutil.ignore_patterns("locale", "__pycache__"))
    return TREE, small


def count_lines(root: Path, ignore: Sequence[str]) -> tuple[int, int, int]:
    """(files, lines, bytes) of what the indexer would read: the walk plus the content rules."""
    from indexers import walk

    files = lines = size = 0
    for c in walk.walk(root, extra_ignore=ignore).files:
        data = c.abs_path.read_bytes()
        if walk.check_content(c.rel, data) is None:
            files += 1
            lines += data.count(b"\n")
            size += len(data)
    return files, lines, size


# Runs a module and, at exit, writes the process's own peak RSS (VmHWM) to $BENCH_HWM_FILE.
# ru_maxrss from wait4 would not do: Linux carries the parent's resident size over fork and exec
# into the child's maximum, and this process holds a model after measuring raw throughput.
LAUNCH = (
    "import atexit, os, runpy, sys\n"
    "def hwm():\n"
    "    with open('/proc/self/status') as f:\n"
    "        kb = [x.split()[1] for x in f if x.startswith('VmHWM')][0]\n"
    "    with open(os.environ['BENCH_HWM_FILE'], 'w') as out:\n"
    "        out.write(kb)\n"
    "atexit.register(hwm)\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


def index_cmd(root: Path, idx: Path, backend: str, ignore: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-c", LAUNCH, "indexers.cli", "--root", str(root),
           "--index-dir", str(idx), "--embed-backend", backend, "--json"]
    for pat in ignore:
        cmd += ["--ignore", pat]
    return cmd


def timed_run(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run a process; wall time, CPU time and peak RSS from wait4, and its JSON stdout."""
    hwm_file = BASE / "hwm.txt"
    hwm_file.unlink(missing_ok=True)
    load_before = os.getloadavg()[1]
    t0 = time.perf_counter()
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                env={**os.environ, "HF_HUB_OFFLINE": "1",
                                     "BENCH_HWM_FILE": str(hwm_file)})
        assert proc.stdout is not None
        out = proc.stdout.read()
        _pid, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])}... failed ({proc.returncode}); see {log}")
    cpu = ru.ru_utime + ru.ru_stime
    # The machine is shared: the load average says how much of it the run actually had.
    return {"wall": wall, "cpu": cpu, "cores": cpu / wall if wall else 0.0,
            "rss_mb": int(hwm_file.read_text()) / 1024, "stats": orjson.loads(out),
            "load_before": load_before, "load_after": os.getloadavg()[1],
            "measured_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def index_sizes(idx: Path) -> dict[str, int]:
    """Bytes of the current generation's parts and of the embedding cache."""
    # the write-ahead log too: until a checkpoint, SQLite keeps the new rows there
    out = {"embcache": sum(du(f) for f in idx.glob("embcache.sqlite*"))}
    for cur in idx.glob("*/CURRENT"):
        gen_dir = cur.parent / orjson.loads(cur.read_bytes())["dir"]
        for part in ("spans.sqlite", "lexical", "chroma"):
            out[part] = du(gen_dir / part)
    return out


def raw_throughput(root: Path, ignore: Sequence[str], backend: str, n: int = 640
                   ) -> dict[str, Any]:
    """spans/s of the model alone on ``n`` embedded texts of this tree, cut as the indexer does."""
    from indexers import chunking, walk
    from rag_mcp.config import load_settings
    from rag_mcp.embed import load_embedder
    from rag_mcp.index.spans import span_text

    s = load_settings({"root": str(root), "embed_backend": backend})
    cands = walk.walk(root, extra_ignore=ignore).files
    texts: list[str] = []
    for c in cands[:: max(1, len(cands) // 200)]:
        data = c.abs_path.read_bytes()
        if walk.check_content(c.rel, data):
            continue
        fc = chunking.chunk_file(c.rel, data.decode("utf-8", "replace"),
                                 budget_chars=s.chunk_chars, window_lines=s.window_lines,
                                 window_overlap=s.window_overlap)
        for ch in fc.chunks:
            t = span_text(fc.lines, ch.start_line, ch.end_line)
            texts.append(ch.embedding_text(c.rel, t))
    texts = texts[:n]
    emb = load_embedder(s.embed_model, backend, cache_dir=s.model_cache_path,
                        batch_size=s.embed_batch)
    emb.embed_documents(texts[:32], s.embed_max_tokens)  # warm-up
    best = cores = 0.0
    load_before = os.getloadavg()[1]
    for _ in range(2):
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(texts), 128):  # the pipeline's slice size
            emb.embed_documents(texts[i : i + 128], s.embed_max_tokens)
        wall = time.perf_counter() - t0
        if len(texts) / wall > best:
            best, cores = len(texts) / wall, (time.process_time() - c0) / wall
    return {"spans_per_s": best, "n": len(texts), "cores": cores, "load_before": load_before,
            "load_after": os.getloadavg()[1],
            "measured_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


async def _query_session(root: Path, idx: Path, ignore: Sequence[str], rounds: int
                         ) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    # The same ignore patterns as the index, so the server's freshness walk agrees with it.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_CACHE_SIZE": "0",
           "RAG_LOG_DIR": str(BASE / "logs"), "RAG_IGNORE": ",".join(ignore)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rag_mcp", "serve", "--root", str(root), "--index-dir", str(idx)], env=env)
    lat: list[float] = []
    server_ms: list[float] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        pid = _server_pid(root)
        for q in QUERIES[:5]:  # warm-up: the model and the index load on first use
            await session.call_tool("rag_query", {"query": q})
        for _ in range(rounds):
            for q in QUERIES:
                t0 = time.perf_counter()
                r = await session.call_tool("rag_query", {"query": q, "k": 5})
                lat.append((time.perf_counter() - t0) * 1000)
                if r.is_error or not r.structured_content:
                    raise SystemExit(f"rag_query failed: {r.content}")
                server_ms.append(float(r.structured_content.get("took_ms") or 0.0))
        rss = _vm_hwm(pid)
    return {"p50": median(lat), "p95": pct(lat, 95), "server_p50": median(server_ms),
            "server_p95": pct(server_ms, 95), "n": len(lat), "server_rss_mb": rss,
            "load": os.getloadavg()[1]}


def _server_pid(root: Path) -> int:
    """The rag-mcp child of this process serving ``root``."""
    me = str(os.getpid())
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = (p / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"rag_mcp" in cmd and str(root).encode() in cmd:
            return int(p.name)
    raise SystemExit("cannot find the rag-mcp server process")


def _vm_hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_results() -> dict[str, Any]:
    return orjson.loads(RESULTS.read_bytes()) if RESULTS.is_file() else {}


def save_results(res: dict[str, Any]) -> None:
    RESULTS.write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2))


def step(res: dict[str, Any], key: str, redo: set[str], fn: Any) -> Any:
    phase = key.split(":")[0]
    if key not in res or phase in redo or key in redo:
        print(f"[large_repo] {key} ...", file=sys.stderr, flush=True)
        res[key] = fn()
        save_results(res)
    return res[key]


def render(res: dict[str, Any], backends: list[str], cmd: str) -> str:
    lg, sm = res["lines:large"], res["lines:small"]
    out = [f"## Large repository (Django {DJANGO})", "", f"`{cmd}`", "",
           f"Large: Django {DJANGO}'s sdist from PyPI, `django/` and `docs/` (ignored: "
           f"{', '.join(f'`{p}`' for p in LARGE_IGNORE)}) — {lg[0]:,} files, {lg[1]:,} lines, "
           f"{lg[2] / 1e6:.1f} MB. Small: {', '.join(f'`{p}`' for p in SMALL_PARTS)} of the same "
           f"tree — {sm[0]:,} files, {sm[1]:,} lines. Cold runs start with no index and no "
           "embedding cache; the ONNX export of the model already exists.", ""]
    rows = []
    for b in backends:
        for tree in ("large", "small"):
            cold = res.get(f"cold:{tree}:{b}")
            if not cold:
                continue
            st = cold["stats"]
            e2e = st["embedded"] / cold["wall"]
            rows.append([f"`{b}`", tree, cold.get("measured_at", "?"), _load(cold),
                         cold["wall"] / 60, st["spans_total"], st["walk_seconds"],
                         st["chunk_seconds"], st["embed_seconds"],
                         cold["wall"] - st["embed_seconds"], e2e,
                         st["embedded"] / cold["cpu"], f"{cold['cores']:.2f}",
                         round(cold["rss_mb"])])
    out += ["Cold index of the large tree (`rag-index` in a subprocess; CPU time from `wait4`, "
            "peak RSS is the process's own VmHWM). Rows are kept in "
            "`bench/.work/large/results.json` and may come from different runs: each says when "
            "and under what load (5-minute load average of this 2-core machine, shared with other "
            "jobs; above 2 the run did not have both cores to itself).", "",
            md_table(["backend", "tree", "measured (UTC)", "load avg before / after",
                      "wall min", "spans", "walk s", "chunking s (CPU in the chunking thread)",
                      "embedding s", "everything but embedding s", "spans/s end to end",
                      "spans per CPU second", "cores busy (CPU s / wall s)",
                      "indexer peak RSS MB"], rows), ""]
    rows = []
    for b in backends:
        raw = res.get(f"raw:{b}")
        if raw:
            rows.append([f"`{b}`", raw.get("measured_at", "?"), _load(raw), raw["n"],
                         raw["spans_per_s"], _num(raw.get("cores"), 2)])
    out += ["The model alone on texts of the large tree, cut as the indexer cuts them, in slices "
            "of 128 (best of 2 passes; compare it with the cold runs' spans/s only at a similar "
            "load, and with their spans per CPU second otherwise):", "",
            md_table(["backend", "measured (UTC)", "load avg before / after", "texts",
                      "spans/s", "cores busy"], rows), ""]
    rows = []
    for b in backends:
        noop = res.get(f"noop:large:{b}")
        size = res.get(f"size:large:{b}")
        if not noop or not size:
            continue
        rows.append([f"`{b}`", median([r["wall"] for r in noop]),
                     median([r["stats"]["seconds"] for r in noop]),
                     round(max(r["rss_mb"] for r in noop)),
                     (size.get("spans.sqlite", 0)) / 1e6, size.get("lexical", 0) / 1e6,
                     size.get("chroma", 0) / 1e6, size.get("embcache", 0) / 1e6])
    out += ["No-op re-index (nothing changed; median of 3 runs; the process time includes "
            "Python start-up and imports) and the index on disk:", "",
            md_table(["backend", "no-op process s", "no-op run s", "no-op peak RSS MB",
                      "catalog MB", "lexical MB", "vectors MB", "embedding cache MB"], rows),
            ""]
    rows = []
    for b in backends:
        big, small = res.get(f"query:large:{b}"), res.get(f"query:small:{b}")
        if not big or not small:
            continue
        rows.append([f"`{b}`", small["p50"], small["p95"], big["p50"], big["p95"],
                     f"{big['p50'] / small['p50']:.2f}x", small["server_p50"],
                     big["server_p50"], f"{big['server_p50'] / small['server_p50']:.2f}x",
                     round(small["server_rss_mb"]), round(big["server_rss_mb"]),
                     f"{_num(small.get('load'))} / {_num(big.get('load'))}"])
    out += [f"`rag_query` through a real MCP stdio session, {len(QUERIES)} queries x 2 rounds "
            "after 5 warm-up queries, memo cache off (client round trip, and `took_ms`: the "
            "server's own time, which leaves out the stdio hop and the client):", "",
            md_table(["backend", "30k P50 ms", "30k P95 ms", "300k P50 ms", "300k P95 ms",
                      "P50 growth", "30k server P50 ms", "300k server P50 ms",
                      "server P50 growth", "server peak RSS MB (30k)",
                      "server peak RSS MB (300k)", "load avg (30k / 300k)"], rows), ""]
    out += targets(res, backends)
    return "\n".join(out)


def _num(x: float | None, digits: int = 1) -> str:
    return "?" if x is None else f"{x:.{digits}f}"


def _load(step: dict[str, Any]) -> str:
    return f"{_num(step.get('load_before'))} / {_num(step.get('load_after'))}"


def targets(res: dict[str, Any], backends: list[str]) -> list[str]:
    """The issue's targets against what was measured, one line per backend."""
    out = ["Targets: no-op re-index <= 5 s; query P50 at 300k within 1.5x of 30k; "
           "server RSS <= 600 MB; indexer RSS <= 1.5 GB; both cores busy while indexing.", ""]
    for b in backends:
        cold, noop = res.get(f"cold:large:{b}"), res.get(f"noop:large:{b}")
        big, small = res.get(f"query:large:{b}"), res.get(f"query:small:{b}")
        if not (cold and noop and big and small):
            continue
        noop_s = median([r["wall"] for r in noop])
        growth = big["p50"] / small["p50"]
        server_growth = big["server_p50"] / small["server_p50"]
        rss = max(small["server_rss_mb"], big["server_rss_mb"])
        checks = [
            f"no-op {noop_s:.2f} s {'met' if noop_s <= 5 else 'MISSED'}",
            f"P50 growth {growth:.2f}x round trip / {server_growth:.2f}x server "
            f"{'met' if max(growth, server_growth) <= 1.5 else 'MISSED'}",
            f"server RSS {rss:.0f} MB {'met' if rss <= 600 else 'MISSED'}",
            f"indexer RSS {cold['rss_mb']:.0f} MB {'met' if cold['rss_mb'] <= 1536 else 'MISSED'}",
            f"cores {cold['cores']:.2f} {'met' if cold['cores'] >= 1.5 else 'MISSED'} "
            f"(load {_load(cold)})",
        ]
        out.append(f"- `{b}`: " + "; ".join(checks))
    return out + [""]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="onnx,onnx-int8")
    ap.add_argument("--redo", default="", help="steps to run again: cold, raw, noop, size, "
                                               "query (or a full key like query:large:onnx)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    redo = {x for x in args.redo.split(",") if x}
    large, small = prepare()
    res = load_results()
    if "cold" in redo:
        redo |= {"noop", "size", "query"}
    step(res, "lines:large", redo, lambda: count_lines(large, LARGE_IGNORE))
    step(res, "lines:small", redo, lambda: count_lines(small, ()))
    log = BASE / "large_repo.log"
    for b in backends:
        for name, root, ignore in (("small", small, ()), ("large", large, LARGE_IGNORE)):
            idx = BASE / f"idx-{name}-{b}"

            def cold(idx: Path = idx, root: Path = root, ignore: Sequence[str] = ignore,
                     b: str = b) -> dict[str, Any]:
                shutil.rmtree(idx, ignore_errors=True)
                return timed_run(index_cmd(root, idx, b, ignore), log)

            step(res, f"cold:{name}:{b}", redo, cold)
            if name == "large":
                step(res, f"raw:{b}", redo, lambda b=b: raw_throughput(large, LARGE_IGNORE, b))
                step(res, f"noop:{name}:{b}", redo, lambda idx=idx, root=root, ignore=ignore,
                     b=b: [timed_run(index_cmd(root, idx, b, ignore), log) for _ in range(3)])
                step(res, f"size:{name}:{b}", redo, lambda idx=idx: index_sizes(idx))
            step(res, f"query:{name}:{b}", redo, lambda idx=idx, root=root, ignore=ignore:
                 anyio.run(_query_session, root, idx, ignore, args.rounds))
    cmd = "python -m bench.speed.large_repo" + (f" --backends {args.backends}"
                                          if args.backends != "onnx,onnx-int8" else "")
    body = render(res, backends, cmd)
    print(body)
    if not args.no_write:
        write_section("large_repo", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
