"""Embedding throughput and agreement of every backend, side by side on the same real code spans.

Spans are the functions and classes of installed libraries (requests, click), cut at 1,500
characters like the chunker and prefixed with path and symbol like the indexer's embedded text.
After a warm-up, backends take turns on each chunk of spans (so a neighbour's burst of load hits
them alike) and report their best and median round: the machines are shared. Load time and peak
RSS come from a fresh subprocess per backend. Prints markdown and rewrites the "embed" section of
docs/BENCHMARKS.md.

    .venv/bin/python -m bench.speed.embed_throughput [--spans 300] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import resource
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench._report import ROOT, WORK, md_table, median, pct, write_section
from bench.quality.sets import DEFAULT_READ
from rag_mcp.embed import load_embedder
from rag_mcp.embed.batching import MAX_BATCH_TOKENS, TokenCounter
from rag_mcp.embed.models import model_spec, offline, resolve_model
from rag_mcp.embed.onnx_export import export_dir, export_fp32
from rag_mcp.embed.onnx_runtime import OnnxEmbedder
from rag_mcp.embed.torch_backend import TorchEmbedder

MODEL = "all-MiniLM-L6-v2"
DEFAULT_CUT = DEFAULT_READ or 128
LIBS = ("requests", "click")
CHUNK_CHARS = 1500
CHUNK = 100  # spans per embed call in the timed rounds
QUERIES = (
    "send an HTTP request with a timeout", "parse command line options", "retry on failure",
    "read cookies from the response", "prompt the user for a password", "encode form data",
    "follow redirects", "format the help text", "open a file lazily", "validate a choice",
)


def units(path: Path, rel: str) -> list[str]:
    """Top-level functions and classes (methods of big classes), windows of 1,500 characters."""
    src = path.read_text(encoding="utf-8", errors="replace")
    lines = src.split("\n")
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    out: list[str] = []

    def emit(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, label: str) -> None:
        start = node.lineno - 1 - len(getattr(node, "decorator_list", []))
        end = node.end_lineno or node.lineno
        text = "\n".join(lines[start:end])
        if len(text) > CHUNK_CHARS and isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    emit(child, f"{label}.{child.name}")
            return
        piece: list[str] = []
        for line in text.split("\n"):
            if piece and sum(len(x) + 1 for x in piece) + len(line) > CHUNK_CHARS:
                out.append(f"{rel}\n{label}\n" + "\n".join(piece))
                piece = []
            piece.append(line)
        if any(x.strip() for x in piece):
            out.append(f"{rel}\n{label}\n" + "\n".join(piece))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            emit(node, node.name)
    return out


def corpus(n: int) -> list[str]:
    site = Path(sysconfig.get_paths()["purelib"])
    spans: list[str] = []
    for lib in LIBS:
        for path in sorted((site / lib).rglob("*.py")):
            spans += units(path, str(path.relative_to(site)))
    if not spans:
        sys.exit(f"no spans: install {', '.join(LIBS)} into this environment")
    random.Random(0).shuffle(spans)
    return spans[:n]


@dataclass
class Run:
    label: str
    docs: Callable[[Sequence[str]], np.ndarray]
    query: Callable[[str], np.ndarray]
    backend: str  # for the subprocess load measurement; "" = not measured that way
    times: list[float] = field(default_factory=list)
    vectors: np.ndarray | None = None
    latencies: list[float] = field(default_factory=list)


def load_and_rss(backend: str, cache_dir: Path) -> tuple[float, float]:
    """Seconds to load and embed one batch, and peak RSS in MB, in a fresh process.

    Peak RSS is VmHWM (Linux): ru_maxrss would carry this process's peak over fork and exec."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "t = time.perf_counter()\n"
        "from rag_mcp.embed import load_embedder\n"
        "e = load_embedder(sys.argv[1], sys.argv[2], cache_dir=Path(sys.argv[3]))\n"
        "e.embed_documents(['def f(x):\\n    return x'] * 32)\n"
        "hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
        "print(time.perf_counter() - t, hwm.split()[1])\n"
    )
    if backend == "st":
        code = code.replace(
            "from rag_mcp.embed import load_embedder\n"
            "e = load_embedder(sys.argv[1], sys.argv[2], cache_dir=Path(sys.argv[3]))\n"
            "e.embed_documents(",
            "from sentence_transformers import SentenceTransformer\n"
            "from rag_mcp.embed.models import resolve_model\n"
            "e = SentenceTransformer(str(resolve_model(sys.argv[1])), device='cpu')\n"
            "e.encode(")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code, MODEL, backend, str(cache_dir)],
                         capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        return float("nan"), float("nan")
    secs, rss_kb = out.stdout.split()
    return float(secs), float(rss_kb) / 1024


def int8_hardware() -> str:
    """Which int8 dot-product instructions this CPU has: they decide what int8 gains."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU flags"
    flags = set(next((ln for ln in text.splitlines() if ln.startswith("flags")), "").split())
    have = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    vnni = "with" if {"avx512_vnni", "avx_vnni"} & flags else "without"
    return f"CPU flags {', '.join(have) or 'none of avx2/avx512/vnni'} ({vnni} VNNI)"


def neighbours(vectors: np.ndarray, k: int) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1)[:, :k]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spans", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="0: all cores")
    ap.add_argument("--max-tokens", type=int, default=DEFAULT_CUT,
                    help="tokens of a span the rows 'spans read to N tokens' read (default: "
                         f"embed.max_tokens of configs/default.toml, {DEFAULT_CUT})")
    ap.add_argument("--cache-dir", type=Path, default=WORK / "model-cache")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run; writes nothing")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if args.quick:
        args.spans, args.rounds, args.queries = 40, 1, 20
    offline()
    t_start, load_before = time.perf_counter(), os.getloadavg()[0]
    texts = corpus(args.spans)
    spec = model_spec(resolve_model(MODEL), MODEL)
    counts = TokenCounter(spec).count(texts)
    tokens = [min(n, spec.max_tokens) for n in counts]
    cut = args.max_tokens
    cut_tokens = [min(n, cut) for n in counts]

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(spec.path), device="cpu")
    fp32 = load_embedder(MODEL, "onnx", cache_dir=args.cache_dir, threads=args.threads)
    int8 = load_embedder(MODEL, "onnx-int8", cache_dir=args.cache_dir, threads=args.threads)
    unfused_file = export_dir(MODEL, spec, args.cache_dir) / "bench-unfused.onnx"
    if not unfused_file.is_file():
        export_fp32(spec, unfused_file, fuse=False)
    unfused = OnnxEmbedder(MODEL, "onnx", spec, unfused_file, threads=args.threads)
    torch_e = TorchEmbedder(MODEL, spec, args.threads, 32)

    def st_docs(batch: Sequence[str]) -> np.ndarray:
        return st.encode(list(batch), batch_size=32, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)

    runs = [
        Run("sentence-transformers fp32, defaults (baseline)", st_docs,
            lambda q: st_docs([q])[0], "st"),
        Run("torch, token-sorted batches", torch_e.embed_documents, torch_e.embed_query,
            "torch"),
        Run("ONNX fp32, unfused export", unfused.embed_documents, unfused.embed_query, ""),
        Run("ONNX fp32, fused (`onnx`)", fp32.embed_documents, fp32.embed_query, "onnx"),
        Run("ONNX int8 (`onnx-int8`), whole window", int8.embed_documents, int8.embed_query,
            "onnx-int8"),
        Run(f"ONNX fp32, spans read to {cut} tokens",
            lambda b: fp32.embed_documents(b, cut), fp32.embed_query, ""),
        Run(f"ONNX int8, spans read to {cut} tokens"
            + (" (the default)" if cut == DEFAULT_CUT else ""),
            lambda b: int8.embed_documents(b, cut), int8.embed_query, ""),
    ]
    for run in runs:  # warm-up: first runs allocate and tune
        run.docs(texts[:16])
        run.query(QUERIES[0])
    # Interleave finely: each round embeds the spans in chunks (as the indexer does, 512 at most
    # per call), every backend takes each chunk in turn, and the order rotates, so a burst of
    # load from a neighbour hits all backends alike instead of one backend's whole round.
    step = max(1, min(CHUNK, -(-len(texts) // 3)))
    chunks = [(i, texts[i : i + step]) for i in range(0, len(texts), step)]
    for r in range(args.rounds):
        elapsed = [0.0] * len(runs)
        parts: list[list[np.ndarray]] = [[] for _ in runs]
        for c, (_start, chunk) in enumerate(chunks):
            shift = (r * len(chunks) + c) % len(runs)
            for k in [*range(shift, len(runs)), *range(shift)]:
                t0 = time.perf_counter()
                parts[k].append(np.asarray(runs[k].docs(chunk), dtype=np.float32))
                elapsed[k] += time.perf_counter() - t0
        for k, run in enumerate(runs):
            run.times.append(elapsed[k])
            run.vectors = np.concatenate(parts[k])
    for run in runs:
        for i in range(args.queries):
            t0 = time.perf_counter()
            run.query(QUERIES[i % len(QUERIES)])
            run.latencies.append((time.perf_counter() - t0) * 1000)
    loads = {run.backend: load_and_rss(run.backend, args.cache_dir)
             for run in runs if run.backend}

    base = min(runs[0].times)
    rows = []
    for run in runs:
        best = min(run.times)
        secs, rss = loads.get(run.backend, (float("nan"), float("nan")))
        read = cut_tokens if "read to" in run.label else tokens
        rows.append([run.label, len(texts) / best, len(texts) / median(run.times),
                     sum(read) / best, f"{base / best:.2f}x",
                     f"{median(runs[0].times) / median(run.times):.2f}x",
                     pct(run.latencies, 50), pct(run.latencies, 95),
                     "-" if secs != secs else f"{secs:.1f}", "-" if rss != rss else int(rss)])
    table = md_table(["backend", "spans/s (best)", "spans/s (median)", "tokens/s",
                      "vs baseline (best)", "(median)", "query P50 ms", "query P95 ms",
                      "cold load s", "peak RSS MB"], rows)

    fast = min(runs[6].times)
    ratio, ratio_med = base / fast, median(runs[0].times) / median(runs[6].times)
    target = (f"Target: int8 reading {cut} tokens at least 3x the baseline's spans/s: "
              f"{ratio:.2f}x best, {ratio_med:.2f}x median, "
              f"{'met' if min(ratio, ratio_med) >= 3 else 'missed'}. Its retrieval quality "
              "against the fp32 model is in \"Embedding backends\" under \"Retrieval quality\".")

    ref = runs[0].vectors
    v32, v8, v8cut = runs[3].vectors, runs[4].vectors, runs[6].vectors
    assert ref is not None and v32 is not None and v8 is not None and v8cut is not None
    q32 = np.stack([fp32.embed_query(q) for q in QUERIES])
    q8 = np.stack([int8.embed_query(q) for q in QUERIES])
    k = min(10, len(texts) - 1)
    agree = []
    for label, a, b in (("ONNX fp32 vs sentence-transformers", v32, ref),
                        ("ONNX int8 vs ONNX fp32", v8, v32),
                        (f"ONNX int8 read to {cut} tokens vs ONNX fp32", v8cut, v32)):
        cos = (a * b).sum(axis=1)
        overlap = np.mean([len(set(x) & set(y)) / k
                           for x, y in zip(neighbours(a, k), neighbours(b, k), strict=True)])
        agree.append([label, float(cos.mean()), float(cos.min()), float(overlap)])
    qcos = (q8 * q32).sum(axis=1)
    agree.append(["int8 vs fp32, the 10 queries", float(qcos.mean()), float(qcos.min()), "-"])
    agree_table = md_table(["vectors", "mean cosine", "min cosine", f"top-{k} overlap"], agree)

    long_frac = sum(t >= spec.max_tokens for t in tokens) / len(tokens)
    cut_frac = sum(t > cut for t in counts) / len(counts)
    cmd = ".venv/bin/python -m bench.speed.embed_throughput" + (
        f" --spans {args.spans} --rounds {args.rounds}" if not args.quick else " --quick")
    body = (
        f"## Embedding throughput\n\n`{cmd}`\n\n"
        f"{len(texts)} spans from {', '.join(LIBS)} (functions and classes, at most "
        f"{CHUNK_CHARS} characters, path and symbol prefixed), {np.mean(tokens):.0f} tokens "
        f"on average after truncation, {long_frac:.0%} cut at {spec.max_tokens}; "
        f"{np.mean(cut_tokens):.0f} on average and {cut_frac:.0%} cut in the rows that read "
        f"{cut} tokens of a span (`embed.max_tokens`; queries are read whole). "
        f"Batch 32 spans (at most {MAX_BATCH_TOKENS} padded tokens a call except in "
        f"sentence-transformers' own `encode`), threads {args.threads or 'all'}; "
        f"{args.rounds} rounds, each backend taking "
        f"each chunk of {step} spans in turn; "
        f"query latency over {args.queries} single queries. Cold load and RSS: a fresh process "
        "that loads the backend and embeds one batch (the ONNX files already exported). "
        "sentence-transformers' `encode` sorts each call's texts by character length itself; "
        "the other rows sort by token count.\n\n"
        f"{int8_hardware()}; 1-minute load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after.\n\n"
        f"{table}\n\n{target}\n\n"
        f"Agreement on the same spans (top-{k} overlap: nearest neighbours of each span within "
        "the set):\n\n"
        f"{agree_table}\n\n"
        "Cosine against full-window vectors measures how much a long span's vector moves, not "
        "what retrieval loses: the MRR@10 of each setting on the evaluation sets is in "
        "\"Embedding backends\" under \"Retrieval quality\".\n"
    )
    print(body)
    print(f"(ran {time.perf_counter() - t_start:.0f} s; max RSS of this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    if not (args.quick or args.no_write):
        write_section("embed", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
