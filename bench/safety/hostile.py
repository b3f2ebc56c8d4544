"""Hostile input and faults at full size: the figures of docs/SECURITY.md.

    .venv/bin/python -m bench.safety.hostile [--study NAME ...] [--seconds 60]

Studies (tests/test_hostile_*.py and tests/test_llm.py are their pass/fail versions, smaller):
paths (200+ crafted span IDs, a symlink race), secrets (the fake-secret corpus through every
channel; false redactions from bench/safety/redaction_fp.py), traffic (malformed messages over stdio
and HTTP), crash (20 seeded kill -9 of rag-index), concurrency (a writer and 4 readers x 500
queries), damage (every index file deleted, truncated, garbage), ollama (the faults of the local
model), load (8 HTTP clients + 1 stdio client for --seconds, with the bundled model), slow (a
slowloris: --slow half-open requests held open while new clients come in). Each study
prints its markdown and rewrites its own section of docs/SECURITY.md. Work goes to
bench/.work/hostile.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import orjson

from bench._report import ROOT, WORK, md_table, pct, write_section
from bench.safety.slow_http import study_slow
from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import RagError
from rag_mcp.llm import LocalLLM
from rag_mcp.search.reader import open_inside
from tests import hostile_cases as hc
from tests import hostile_io as hio
from tests.mcp_helpers import over_stdio
from tests.ollama_fake import FakeOllama, refused_url
from tests.test_crash import write_repo

SECURITY_MD = ROOT / "docs" / "SECURITY.md"
REFUSED = {"E_INVALID_ARGUMENT", "E_NOT_FOUND"}
CMD = ".venv/bin/python -m bench.safety.hostile"


def hash_settings(root: Path, work: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": hc.HASH,
                          "log_dir": str(work / "logs"), **kw})


def cli_env(work: Path, **extra: str) -> dict[str, str]:
    return {**hio.server_env(work / "logs"), "RAG_EMBED_MODEL": hc.HASH,
            "PYTHONPATH": str(ROOT), **extra}


def rag_index(root: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "indexers.cli", "--root", str(root), "-q",
                           *extra], env=env, capture_output=True, text=True, check=False)


# --- 1. path escapes -----------------------------------------------------------------------------


def study_paths(work: Path, args: argparse.Namespace) -> str:
    fx = hc.build_path_repo(work)
    with FakeOllama() as fake:
        s = hash_settings(fx.root, work, local_llm="1", llm_host=fake.url)
        run_index(s)
        ids = {i.rsplit(":", 2)[0]: i for i in hio.catalog_ids(s)}
        hc.swap_after_index(fx, {k: ids[k] for k in ("swap/file.py", "swapdir/inner/mod.py",
                                                      "swapfifo/pipe.py")})
        cases = hc.path_cases(fx)
        rows: dict[str, Counter[str]] = {}

        async def run() -> None:
            async with hio.session(s) as (client, _):
                for tool, arg in (("rag_get_span", "span_id"), ("fetch", "id")):
                    for c in cases:
                        r = await client.call_tool(tool, {arg: c.span_id})
                        code = hio.answer_code(r)
                        row = rows.setdefault(c.family, Counter())
                        row[code if code in REFUSED else "other"] += 1
                        # Any answer with text to a hostile ID counts as an escape.
                        row["escapes"] += code == "ok" or hc.escaped(hio.everything(r))
                strs = [c.span_id for c in cases if isinstance(c.span_id, str)]
                for i in range(0, len(strs), 20):
                    r = await client.call_tool("local_llm_rag_query", {
                        "question": "what is here?", "span_ids": strs[i:i + 20]})
                    rows.setdefault("local LLM span_ids (20 a call)", Counter())[
                        hio.answer_code(r) if hio.answer_code(r) in REFUSED else "other"] += 1

        anyio.run(run)
        prompts = len(fake.prompts())
    race = symlink_race(work / "race", args.race_reads)
    table = [[fam, sum(v for k, v in c.items() if k != "escapes"), c["E_INVALID_ARGUMENT"],
              c["E_NOT_FOUND"], c["other"], c["escapes"]] for fam, c in sorted(rows.items())]
    total = [sum(r[i] for r in table) for i in range(1, 6)]
    return "\n".join([
        "### Path escapes", "",
        f"{len(cases)} crafted span IDs, each sent to `rag_get_span` and to `fetch` "
        f"({2 * len(cases)} calls), and in batches of 20 as `local_llm_rag_query` span_ids.",
        "", md_table(["family", "calls", "E_INVALID_ARGUMENT", "E_NOT_FOUND", "other", "escapes"],
                     table + [["**total**", *total]]), "",
        f"Prompts that reached the local model: {prompts}. Symlink race (a directory swapped "
        f"for a symlink to outside the root {race['swaps']:,} times while it was read "
        f"{args.race_reads:,} times): escapes {race['escaped']}, reads "
        f"{race['read']:,}, refused {race['refused']:,}."])


def symlink_race(base: Path, reads: int) -> Counter[str]:
    root = base / "repo"
    (root / "race" / "dir").mkdir(parents=True)
    (root / "race" / "dir" / "f.txt").write_text("inside\n")
    (base / "out").mkdir()
    (base / "out" / "f.txt").write_text(hc.CANARY + "\n")
    stop = threading.Event()
    out: Counter[str] = Counter()

    def swapper() -> None:
        while not stop.is_set():
            os.rename(root / "race" / "dir", base / "parked")
            os.symlink(base / "out", root / "race" / "dir")
            os.unlink(root / "race" / "dir")
            os.rename(base / "parked", root / "race" / "dir")
            out["swaps"] += 1

    t = threading.Thread(target=swapper)
    t.start()
    try:
        for _ in range(reads):
            try:
                data = open_inside(root, "race/dir/f.txt")
                out["escaped" if hc.CANARY.encode() in data else "read"] += 1
            except RagError:
                out["refused"] += 1
    finally:
        stop.set()
        t.join()
    return out


# --- 2. secrets ----------------------------------------------------------------------------------


def study_secrets(work: Path, args: argparse.Namespace) -> str:
    repo = hc.build_secret_repo(work / "repo")
    leaks: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    with FakeOllama() as fake:
        s = hash_settings(repo.root, work, local_llm="1", llm_host=fake.url)
        run_index(s)
        ids = hio.catalog_ids(s)

        def count(channel: str, output: str | bytes) -> None:
            calls[channel] += 1
            leaks[channel] += len(hc.leaks(output, repo))

        async def run() -> None:
            async with hio.session(s) as (client, _):
                for sid in ids:
                    for ch, tool, a in (("rag_get_span", "rag_get_span", {"span_id": sid}),
                                        ("rag_get_span", "rag_get_span",
                                         {"span_id": sid, "context_lines": 5}),
                                        ("fetch", "fetch", {"id": sid})):
                        count(ch, hio.everything(await client.call_tool(tool, a)))
                for path in sorted({p for p, _, _ in repo.planted}):
                    words = path.replace("/", " ").replace("_", " ").replace(".", " ")
                    r = await client.call_tool("rag_query", {
                        "query": f"{words} token key password", "path": path,
                        "include_text": True, "tau": 0.0, "k": 20})
                    count("rag_query include_text + previews", hio.everything(r))
                for kind in sorted({k for _, k, _ in repo.planted}):
                    q = kind.replace("_", " ")
                    count("rag_query previews", hio.everything(
                        await client.call_tool("rag_query", {"query": q, "k": 20, "tau": 0})))
                    count("search", hio.everything(await client.call_tool("search",
                                                                          {"query": q})))
                for i in range(0, len(ids), 20):
                    await client.call_tool("local_llm_rag_query", {
                        "question": "which credentials are used?", "span_ids": ids[i:i + 20]})
                for q in ("github token", "aws keys", "database password", "private key"):
                    await client.call_tool("local_llm_rag_query", {"question": q, "k": 10})
                for q in ("Rotate before release. Old tokens are revoked.", "Keys go to the "
                          "vault. Ask ops.", "Loads settings; the default token is"):
                    p = await client.get_prompt("explain_code", {"question": q})
                    count("explain_code prompt", orjson.dumps(p.model_dump(mode="json")))
                # A token in a file name: the masked ID it is shown under reads back.
                for path in [p for p, _, sec in repo.planted if sec in p]:
                    r = await client.call_tool("rag_query", {"query": "deploy notes",
                                                             "path": path, "tau": 0.0})
                    count("masked IDs read back", hio.everything(r))
                    for h in (r.structuredContent or {}).get("hits", []):
                        got = await client.call_tool("rag_get_span", {"span_id": h["id"]})
                        count("masked IDs read back", hio.everything(got))

        anyio.run(run)
        for extra in (["--spans", "--json"], ["--status", "--json"]):
            out = rag_index(repo.root, cli_env(work), *extra).stdout
            calls["rag-index " + extra[0]] = out.count("\n")
            leaks["rag-index " + extra[0]] = len(hc.leaks(out, repo))
        calls["local LLM prompt"] = len(fake.prompts()) // 2
        leaks["local LLM prompt"] = len(hc.leaks(fake.raw_bodies(), repo))
    logged = b"".join(p.read_bytes() for p in (work / "logs").glob("*.jsonl*"))
    calls["JSONL log"] = logged.count(b"\n")
    leaks["JSONL log"] = len(hc.leaks(logged, repo))
    fp = false_redactions(work)
    kinds = {k for _, k, _ in repo.planted}
    exts = Counter(Path(p).suffix or Path(p).name for p, _, _ in repo.planted)
    return "\n".join([
        "### Secrets", "",
        f"{len(repo.planted)} fake secrets of {len(kinds)} kinds planted in "
        f"{len({p for p, _, _ in repo.planted})} indexed files ("
        + ", ".join(f"{n} {e}" for e, n in exts.most_common(10)) + ", ...; code, config, "
        f"Markdown, comments, headings, docstrings), and {len(repo.skipped)} in credential files "
        "the walker must skip (.env, id_rsa, .npmrc, *.pem, service-account JSON, ...): "
        f"{len({p for p, _ in repo.skipped} & {i.rsplit(':', 2)[0] for i in ids})} of those "
        "were indexed.", "",
        md_table(["channel", "calls or lines", "secrets leaked"],
                 [[ch, calls[ch], leaks[ch]] for ch in calls]), "",
        "False redactions (`bench/safety/redaction_fp.py`, every redaction in non-test source "
        "counted as false until judged): " + fp + "."])


def false_redactions(work: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "bench.safety.redaction_fp"], capture_output=True,
                         text=True, cwd=ROOT, check=False).stdout
    (work / "redaction_fp.md").write_text(out)
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]
            for r in out.splitlines() if r.startswith("| ") and r.count("|") == 7}
    own, kit, total = rows.get("rag-mcp"), rows.get("**evaluation kit**"), rows.get("**total**")
    if not own or not total:
        return "the script printed no table (see bench/.work/hostile/secrets/redaction_fp.md)"
    return (f"{own[2]} redactions in {own[1]} lines of the rag-mcp tree ({own[4]} per 10k "
            "lines)" + (f"; {kit[2]} in {kit[1]} lines of the evaluation kit's corpora (the 26 "
                        f"semble repositories, SWE-bench Lite, docs, docstring and CoSQA sets; "
                        f"{kit[4]} per 10k lines)" if kit else "")
            + f"; {total[2]} in {total[1]} lines of all of it plus 13 libraries ({total[4]} per "
            "10k lines; target ≤ 1)")


# --- 3. malformed traffic ------------------------------------------------------------------------


def study_traffic(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 40, 0)
    run_index(hash_settings(root, work))
    reports = [hio.stdio_traffic(root, work), hio.http_traffic(root, work)]
    table = [[r.channel, r.cases, r.answered, r.crashes, len(r.traces), len(r.uncoded),
              len(r.server_errors), ", ".join(f"{k} {v}" for k, v in sorted(r.replies.items()))]
             for r in reports]
    return "\n".join([
        "### Malformed traffic", "",
        "Each hostile message (invalid JSON, wrong types, missing and extra fields, unknown "
        "tools and methods, 10 MB arguments, nesting to 200,000 levels, control characters, "
        "invalid UTF-8 and unpaired surrogates) is followed by a valid `rag_query`.", "",
        md_table(["transport", "hostile messages", "valid follow-ups answered", "crashes",
                  "outputs with a stack trace", "errors without a code", "HTTP 5xx",
                  "how the hostile ones were answered"], table), "",
        "Over stdio the SDK drops a line it cannot parse without answering it (JSON-RPC asks "
        "for a parse error with a null id); the follow-up shows the server lived on."])


# --- 4. kill -9 while indexing -------------------------------------------------------------------


def study_crash(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 200, 0)
    env = cli_env(work)
    s = hash_settings(root, work)
    t0 = time.monotonic()
    rag_index(root, env)
    full = time.monotonic() - t0
    rng = random.Random(20240501)
    rows, good = [], 0
    for k in range(1, args.kills + 1):
        write_repo(root, 200, k)
        for _attempt in range(5):  # a run that finished before its moment is not a kill: redraw
            at = rng.uniform(0.05, full)
            proc = subprocess.Popen([sys.executable, "-m", "indexers.cli", "--root", str(root),
                                     "-q"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(at)
            killed = proc.poll() is None
            if killed:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            if killed:
                break
            write_repo(root, 200, k + 1000 * (_attempt + 1))
        spans, problems = hio.consistency(s)
        rerun = rag_index(root, env)
        spans2, problems2 = hio.consistency(s)
        tmp_left = [p.name for p in s.index_path.iterdir() if p.name.startswith("tmp-")]
        ok = not problems and not problems2 and rerun.returncode == 0 and spans2 == 2400 \
            and not tmp_left
        good += ok
        rows.append([k, f"{at:.2f}", "yes" if killed else "no (finished)", spans,
                     "; ".join(problems[:2]) or "none", spans2,
                     "; ".join(problems2[:2]) or ("none" if not tmp_left else str(tmp_left))])
    return "\n".join([
        "### kill -9 while indexing", "",
        f"200 files (2,400 spans), every file changed before each run; rag-index killed at "
        f"a seeded random moment within its {full:.1f} s run, then a normal run. Consistent = "
        "the manifest agrees with the catalog, the lexical index and the vectors, no span ID "
        "twice, every stored text matches its ID, every vector present, every span of an "
        "unchanged file reads back.", "",
        f"**Consistent: {good}/{args.kills}.**", "",
        md_table(["kill", "at (s)", "killed", "spans after the kill", "problems",
                  "spans after a normal run", "problems"], rows)])


# --- 5. readers while a writer publishes ---------------------------------------------------------


def study_concurrency(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 200, 0)
    env = cli_env(work)
    rag_index(root, env)
    per = args.queries // 4
    # Paced (20 ms between queries) so the 2,000 queries span several publishes.
    readers = [subprocess.Popen([sys.executable, "-c", hio.READER, str(root), str(per), str(i),
                                 "0.02"], stdout=subprocess.PIPE, text=True, env=env)
               for i in range(4)]
    runs = 0
    while any(r.poll() is None for r in readers):
        runs += 1
        write_repo(root, 200, runs)
        rag_index(root, env)
    results = [orjson.loads(r.communicate()[0]) for r in readers]
    rows = [[i, r["ok"], r["failed"], r["half"], len(r["generations"]),
             "; ".join(r["errors"][:2]) or "none"] for i, r in enumerate(results)]
    failed = sum(r["failed"] for r in results)
    half = sum(r["half"] for r in results)
    return "\n".join([
        "### Readers while a writer publishes", "",
        f"4 reader processes x {per} `rag_query` calls (20 ms apart) while rag-index "
        f"re-indexed 200 changed files {runs} times; each answer is checked against the catalog "
        "of the generation that gave it.", "",
        f"**Failed queries: {failed}; queries that saw a half-written generation: {half}.**", "",
        md_table(["reader", "answered", "failed", "half-written", "generations seen", "errors"],
                 rows)])


# --- 6. damaged index ----------------------------------------------------------------------------


def study_damage(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 100, 0)  # 1,200 vectors: past Chroma's threshold for an HNSW graph on disk
    pristine = work / "pristine"
    rag_index(root, cli_env(work, RAG_INDEX_DIR=str(pristine)))
    query = {"query": "function 3 of module 7 variant", "k": 3}
    want: list[str] = []
    rows: list[list[object]] = []
    tally: Counter[str] = Counter()

    async def case(idx: Path, target: str, how: str) -> list[object]:
        env = cli_env(work, RAG_INDEX_DIR=str(idx))
        first, recovered = "?", "-"
        try:
            async with over_stdio(root, env=env) as s:
                r = await s.call_tool("rag_query", query)
                code = hio.answer_code(r)
                if code == "ok":
                    got = [h["id"] for h in (r.structured_content or {})["hits"]]
                    first = "unharmed" if not want or got == want else "WRONG ANSWER"
                    if not want:
                        want.extend(got)
                    return [target, how, first, "-"]
                message = hio.text(r)
                m = re.search(r"`(rag-index [^`]*)`", message)
                first = f"{code}" + (" with the fix" if m else " WITHOUT the fix")
                if m:
                    fix = m.group(1).split()[1:]
                    done = subprocess.run([sys.executable, "-m", "indexers.cli", *fix, "-q"],
                                          env=env, capture_output=True, text=True)
                    again = await s.call_tool("rag_query", query)
                    ok = hio.answer_code(again) == "ok" and [h["id"] for h in (
                        again.structured_content or {})["hits"]] == want
                    recovered = "yes" if ok and done.returncode == 0 else \
                        f"NO ({done.returncode}: {done.stderr.strip()[-80:]})"
        except Exception as exc:  # the server process died: that is the figure
            first = first if first != "?" else f"SERVER DIED ({type(exc).__name__})"
        return [target, how, first, recovered]

    anyio.run(case, pristine, "(none)", "-")
    for target in hc.damage_targets(pristine):
        for how in hc.DAMAGES:
            idx = work / "idx"
            shutil.rmtree(idx, ignore_errors=True)
            shutil.copytree(pristine, idx)
            hc.damage(idx / target, how)
            row = anyio.run(case, idx, re.sub(r"[0-9a-f-]{32,}", "<id>", target), how)
            rows.append(row)
            tally[str(row[2]).split(" (")[0]] += 1
    return "\n".join([
        "### Damaged index", "",
        f"Every file of an index of 100 files (1,200 spans) deleted, cut to half or filled with "
        f"random bytes, one at a time ({len(rows)} cases); a stdio server starts on it and "
        "answers `rag_query`; when it names a fix, the fix is run and the same server asked "
        "again.", "",
        "**" + "; ".join(f"{k}: {v}" for k, v in tally.most_common()) + "**", "",
        md_table(["file", "damage", "first answer", "after the fix"], rows)])


# --- 7. Ollama faults ----------------------------------------------------------------------------


async def fault_calls(s: Settings, trials: int, extra: dict[str, str]
                      ) -> tuple[Counter[str], list[float], float]:
    """Codes and durations of ``trials`` local-LLM calls, and of the first rag_health (which
    probes Ollama)."""
    codes: Counter[str] = Counter()
    took: list[float] = []
    async with hio.session(s) as (client, _):
        t0 = time.perf_counter()
        await client.call_tool("rag_health", {})
        health = time.perf_counter() - t0
        for _ in range(trials):
            t0 = time.perf_counter()
            r = await client.call_tool("local_llm_rag_query",
                                       {"question": "what does func_1_2 do?", **extra})
            took.append(time.perf_counter() - t0)
            codes[hio.answer_code(r)] += 1
    return codes, took, health


def study_ollama(work: Path, args: argparse.Namespace) -> str:
    root = work / "repo"
    write_repo(root, 20, 0)
    run_index(hash_settings(root, work))
    timeout = 2.0
    rows = []
    for fault in ("refused", "hang", "trickle", "garbage", "wrong_shape", "cut", "unknown_model"):
        mode = {"refused": "ok", "unknown_model": "ok"}.get(fault, fault)
        with FakeOllama(mode, trickle_every=0.2) as fake:
            host = refused_url() if fault == "refused" else fake.url
            s = hash_settings(root, work, local_llm="1", llm_host=host, llm_timeout=str(timeout))
            extra = {"model": "nope:1b"} if fault == "unknown_model" else {}
            codes, took, health = anyio.run(fault_calls, s, args.trials, extra)
            model_calls = []
            llm = LocalLLM(host, "qwen2.5-coder:3b", timeout=timeout, context_tokens=4096)
            for _ in range(args.trials):
                t0 = time.perf_counter()
                with contextlib.suppress(RagError):
                    llm.chat("system", "user", model=extra.get("model"), max_tokens=16)
                model_calls.append(time.perf_counter() - t0)
        rows.append([fault, args.trials, codes["E_LLM_UNAVAILABLE"],
                     ", ".join(f"{k} {v}" for k, v in codes.items() if k != "E_LLM_UNAVAILABLE")
                     or "-", f"{max(model_calls):.2f}", f"{max(took):.2f}", f"{health:.2f}"])
    return "\n".join([
        "### Local LLM faults", "",
        f"`local_llm_rag_query` against a loopback server speaking Ollama's API through the "
        f"official client, `llm.timeout_seconds = {timeout:g}`. The model call is timed alone "
        "(`LocalLLM.chat`) and as the whole tool call, which also retrieves the spans first; "
        "`rag_health` probes Ollama with a 1 s deadline.", "",
        md_table(["fault", "tool calls", "E_LLM_UNAVAILABLE", "other answers",
                  "slowest model call (s)", "slowest tool call (s)", "rag_health (s)"], rows)])


# --- 8. load -------------------------------------------------------------------------------------

LOAD_QUERIES = [
    "where are span IDs parsed and validated?", "how does redaction find AWS keys",
    "retry with backoff", "what happens when the index is damaged", "rate limit for HTTP",
    "how are generations published atomically", "tree-sitter query files for languages",
    "embedding cache resume after kill", "how is the confidence threshold tau calibrated",
    "rag_get_span stale span moved", "Origin allow list", "JSONL log rotation",
    "chunk markdown at headings", "Ollama timeout", "symlink refused O_NOFOLLOW",
    "BM25 tantivy tokenizer camelCase", "reciprocal rank fusion", "max_bytes budget",
]


def study_load(work: Path, args: argparse.Namespace) -> str:
    # A snapshot: other people edit this tree, and a span edited mid-run would answer E_STALE.
    root = work / "rag-mcp"
    for part in ("rag_mcp", "indexers", "tools", "tests", "docs", "bench", "configs"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns(
            ".work", "__pycache__", ".rag", "*.png"))
    index = work / "index"
    s = load_settings({"root": str(root), "index_dir": str(index), "log_dir": str(work / "l")})
    t0 = time.monotonic()
    run_index(s)
    index_s = time.monotonic() - t0
    env = {"RAG_INDEX_DIR": str(index), "HF_HUB_OFFLINE": "1"}
    server = hio.HttpProc(root, work / "logs", work / "http.err", extra_env=env)
    lat: dict[str, list[float]] = {"http": [], "stdio": []}
    errors: list[str] = []
    calls: Counter[str] = Counter()
    rss: dict[str, list[int]] = {"http": [], "stdio": []}

    async def client_loop(name: str, session: Any, rng: random.Random, until: float) -> None:
        last: list[str] = []
        while time.monotonic() < until:
            pick = rng.random()
            q = rng.choice(LOAD_QUERIES)
            if pick < 0.45 or not last:
                tool, a = "rag_query", {"query": q, "k": 5}
            elif pick < 0.6:
                tool, a = "rag_query", {"query": q, "k": 3, "include_text": True}
            elif pick < 0.8:
                tool, a = "rag_get_span", {"span_id": rng.choice(last), "context_lines": 2}
            elif pick < 0.9 and name == "http":
                tool, a = rng.choice([("search", {"query": q}), ("fetch", {"id": last[0]})])
            else:
                tool, a = "rag_health", {}
            t = time.perf_counter()
            try:
                r = await session.call_tool(tool, a)
                bad = r.is_error
            except Exception as exc:  # counted as an error; the loop goes on
                bad, r = True, exc
            lat[name].append((time.perf_counter() - t) * 1000)
            calls[name] += 1
            if bad:
                errors.append(f"{name} {tool}: {str(r)[:120]}")
            elif tool == "rag_query":
                last = [h["id"] for h in r.structured_content["hits"]] or last

    async def run() -> None:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with AsyncExitStack() as stack:
            stdio = await stack.enter_async_context(
                over_stdio(root, env={**hio.server_env(work / "logs"), **env}))
            sessions = []
            for _ in range(8):
                read, write = await stack.enter_async_context(
                    streamable_http_client(server.url))
                sess = await stack.enter_async_context(ClientSession(read, write))
                await sess.initialize()
                sessions.append(sess)
            stdio_pid = stdio_server_pid()
            warm = time.monotonic() + 8
            async with anyio.create_task_group() as tg:
                for i, sess in enumerate(sessions):
                    tg.start_soon(client_loop, "http", sess, random.Random(i), warm)
                tg.start_soon(client_loop, "stdio", stdio, random.Random(99), warm)
            rss["http"].append(hio.rss_kb(server.proc.pid))
            rss["stdio"].append(hio.rss_kb(stdio_pid))
            lat["http"].clear()
            lat["stdio"].clear()
            errors.clear()
            calls.clear()
            until = time.monotonic() + args.seconds
            async with anyio.create_task_group() as tg:
                for i, sess in enumerate(sessions):
                    tg.start_soon(client_loop, "http", sess, random.Random(100 + i), until)
                tg.start_soon(client_loop, "stdio", stdio, random.Random(7), until)
            rss["http"].append(hio.rss_kb(server.proc.pid))
            rss["stdio"].append(hio.rss_kb(stdio_pid))

    try:
        anyio.run(run)
    finally:
        server.close()
    rows = [[name, calls[name], sum(e.startswith(name) for e in errors),
             f"{pct(lat[name], 50):.1f}", f"{pct(lat[name], 95):.1f}",
             f"{rss[name][0] / 1024:.0f}", f"{rss[name][1] / 1024:.0f}",
             f"{(rss[name][1] / rss[name][0] - 1) * 100:+.1f}%"] for name in ("http", "stdio")]
    return "\n".join([
        "### Load", "",
        f"This repository indexed with the bundled model ({index_s:.0f} s); 8 HTTP client "
        f"sessions on one `rag-mcp serve --http` and 1 stdio session on its own `rag-mcp` for "
        f"{args.seconds} s of mixed calls (rag_query with and without text, rag_get_span with "
        "context, search, fetch, rag_health) after an 8 s warm-up; RSS after the warm-up and at "
        "the end. Latency is what the client sees, on a shared 2-core machine.", "",
        md_table(["transport", "calls", "errors", "median ms", "P95 ms", "RSS start MB",
                  "RSS end MB", "RSS growth"], rows), "",
        ("Errors: " + "; ".join(errors[:5])) if errors else "Errors: none."])


def stdio_server_pid() -> int:
    """The newest ``rag_mcp serve`` child of this process (the stdio server just started)."""
    kids = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    for pid in reversed(kids):
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"rag_mcp" in cmd and b"--http" not in cmd:
            return int(pid)
    raise RuntimeError("no stdio server child found")


STUDIES: dict[str, Callable[[Path, argparse.Namespace], str]] = {
    "paths": study_paths, "secrets": study_secrets, "traffic": study_traffic,
    "crash": study_crash, "concurrency": study_concurrency, "damage": study_damage,
    "ollama": study_ollama, "load": study_load, "slow": study_slow,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", action="append", choices=sorted(STUDIES))
    ap.add_argument("--seconds", type=int, default=60, help="length of the load study")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--queries", type=int, default=2000, help="across the 4 readers")
    ap.add_argument("--trials", type=int, default=5, help="calls per Ollama fault")
    ap.add_argument("--race-reads", type=int, default=20_000)
    ap.add_argument("--slow", type=int, default=400, help="slow requests held open")
    args = ap.parse_args(argv)
    for name in args.study or list(STUDIES):
        work = WORK / "hostile" / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        t0 = time.monotonic()
        body = STUDIES[name](work, args)
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        body += (f"\n\n_{time.monotonic() - t0:.0f} s, load average {load} at the end; "
                 f"`{CMD} --study {name}`._")
        sys.stdout.write(body + "\n\n")
        sys.stdout.flush()
        write_section(f"hostile-{name}", body, path=SECURITY_MD)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
