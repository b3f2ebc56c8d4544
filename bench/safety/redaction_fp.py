"""Count redactions on real source trees: every one in library code is a false-positive suspect.

Scans the rag-mcp tree itself, the evaluation kit's corpora (``../shared/eval``: the 26
semble repositories, the docs, docstring, CoSQA and SWE-bench Lite sets) and the sources of
installed libraries, cut into ~10 KB spans the way the server returns them, and prints markdown
to stdout: lines scanned, redactions by kind, redactions per 10,000 lines, each hit in non-test
code (so a person can judge it) and a sample of hits in test code (fake keys there are
expected), plus the redaction speed in µs per KB.

    .venv/bin/python -m bench.safety.redaction_fp [--lib NAME ...] [--tree DIR ...] [--no-eval]
        [--samples N]
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import tarfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench._report import ROOT, machine, md_table
from rag_mcp.index.spans import is_test_path as product_test_path
from rag_mcp.search.redact import find_secrets, redact

DEFAULT_LIBS = ("requests", "click", "urllib3", "pydantic", "starlette", "httpx", "aiohttp",
                "oauthlib", "jwt", "mcp", "huggingface_hub", "chromadb", "transformers")
SUFFIXES = {".py", ".pyi", ".md", ".rst", ".txt", ".json", ".yaml", ".yml", ".toml", ".cfg",
            ".ini", ".env", ".sh", ".scm", ".lock", ".html", ".js", ".mjs", ".cjs", ".jsx", ".ts",
            ".tsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".go", ".rs", ".java", ".rb", ".php", ".cs",
            ".bats", ".mdx", ".kt", ".swift", ".scala", ".cxx", ".hh", ".ipp", ".rake"}
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache",
             ".ruff_cache", ".pytest_cache", ".hypothesis", ".work"}
SPAN_BYTES = 10_000
WORK = ROOT / "bench" / ".work" / "redaction_fp"
EVAL_LABELS = ("semble/", "swebench", "eval-")
MAX_FILE_BYTES = 2_000_000


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    line: int
    kind: str
    excerpt: str
    in_tests: bool


def is_test_path(rel: Path) -> bool:
    """Test code holds fake keys on purpose: its hits are reported apart."""
    return bool(set(rel.parts) & {"fixtures", "testdata"}) or product_test_path(rel.as_posix())


def source_files(root: Path, exclude: tuple[Path, ...] = ()) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(p in SKIP_DIRS for p in rel.parts[:-1]) or any(path.is_relative_to(e)
                                                               for e in exclude):
            continue
        if path.is_file() and path.suffix in SUFFIXES and path.stat().st_size <= MAX_FILE_BYTES:
            out.append(path)
    return out


def shared_eval() -> Path | None:
    """../shared/eval beside the checkout (or beside the folder of git worktrees)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "eval").is_dir():
            return base / "shared" / "eval"
    return None


def eval_trees() -> list[tuple[str, Path]]:
    """The kit's corpora as (label, root); the tarred ones unpacked once under bench/.work."""
    kit = shared_eval()
    if kit is None:
        return []
    out: list[tuple[str, Path]] = []
    for name, tar in (("semble", kit / "semble" / "repos.tar.xz"),
                      ("swebench", kit / "sets" / "swebench_lite.tar.xz")):
        dest = WORK / name
        if not dest.is_dir() and tar.is_file():
            dest.mkdir(parents=True)
            with tarfile.open(tar) as tf:
                tf.extractall(dest, filter="data")
        if name == "semble":
            out += [(f"semble/{p.name}", p) for p in sorted(dest.iterdir()) if p.is_dir()]
        else:
            out.append((name, dest))
    for name in ("docs", "docstring", "cosqa"):
        if (kit / "sets" / name / "corpus").is_dir():
            out.append((f"eval-{name}", kit / "sets" / name / "corpus"))
    return out


def spans(text: str) -> list[tuple[int, str]]:
    """Cut ``text`` at line ends into ~10 KB spans, as (first line number, span text)."""
    out, lines, size, first = [], [], 0, 1
    for i, line in enumerate(text.splitlines(keepends=True), 1):
        lines.append(line)
        size += len(line)
        if size >= SPAN_BYTES:
            out.append((first, "".join(lines)))
            lines, size, first = [], 0, i + 1
    if lines:
        out.append((first, "".join(lines)))
    return out


def excerpt(span: str, start: int, end: int, width: int = 150) -> str:
    line_start = span.rfind("\n", 0, start) + 1
    line_end = span.find("\n", end)
    line_end = len(span) if line_end < 0 else line_end
    shown = (span[line_start:start] + "»" + span[start:end][:60]
             + ("…" if end - start > 60 else "") + "«" + span[end:line_end])
    shown = shown.strip().replace("|", "\\|").replace("`", "'")
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def scan(label: str, root: Path, files: list[Path]) -> tuple[int, int, int, float, list[Hit]]:
    """Lines, bytes and files scanned, CPU seconds spent in redact(), and every hit."""
    n_lines = n_bytes = 0
    seconds = 0.0
    hits: list[Hit] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        n_lines += text.count("\n") + (not text.endswith("\n"))
        n_bytes += len(text)
        rel = f"{label}/{path.relative_to(root)}"
        for first, span in spans(text):
            # CPU time, not wall time: the benchmark machines are shared and often loaded.
            t0 = time.process_time()
            redact(span)
            seconds += time.process_time() - t0
            for r in find_secrets(span):
                line = first + span.count("\n", 0, r.start)
                hits.append(Hit(rel, line, r.kind, excerpt(span, r.start, r.end),
                                is_test_path(path.relative_to(root))))
    return n_lines, n_bytes, len(files), seconds, hits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", help="library under site-packages (repeatable)")
    ap.add_argument("--tree", action="append", default=[], help="any other source tree")
    ap.add_argument("--no-eval", action="store_true", help="skip ../shared/eval's corpora")
    ap.add_argument("--samples", type=int, default=5, help="test-code samples shown per kind")
    args = ap.parse_args(argv)
    site = Path(sysconfig.get_paths()["purelib"])
    trees = [("rag-mcp", ROOT, source_files(ROOT, (ROOT / "tests/fixtures/secrets",)))]
    trees += [(lib, site / lib, source_files(site / lib)) for lib in (args.lib or DEFAULT_LIBS)
              if (site / lib).is_dir()]
    if not args.no_eval:
        trees += [(label, root, source_files(root)) for label, root in eval_trees()]
    trees += [(Path(t).name, Path(t), source_files(Path(t))) for t in args.tree]

    rows: list[list[object]] = []
    all_hits: list[Hit] = []
    tot_files = tot_lines = tot_bytes = 0
    tot_seconds = 0.0
    for label, root, files in trees:
        n_lines, n_bytes, n_files, seconds, hits = scan(label, root, files)
        src = sum(not h.in_tests for h in hits)
        rows.append([label, n_files, n_lines, src, len(hits) - src,
                     f"{src * 10_000 / max(n_lines, 1):.3f}"])
        tot_files += n_files
        tot_lines += n_lines
        tot_bytes += n_bytes
        tot_seconds += seconds
        all_hits += hits
    src_hits = [h for h in all_hits if not h.in_tests]
    test_hits = [h for h in all_hits if h.in_tests]
    kit = [r for r in rows if str(r[0]).startswith(EVAL_LABELS)]
    if kit:
        k_lines, k_src = sum(int(r[2]) for r in kit), sum(int(r[3]) for r in kit)
        rows.append(["**evaluation kit**", sum(int(r[1]) for r in kit), k_lines, k_src,
                     sum(int(r[4]) for r in kit), f"{k_src * 10_000 / max(k_lines, 1):.3f}"])
    rows.append(["**total**", tot_files, tot_lines, len(src_hits), len(test_hits),
                 f"{len(src_hits) * 10_000 / max(tot_lines, 1):.3f}"])

    out = ["## Redaction false positives on real source", "",
           md_table(["tree", "files", "lines", "redactions in source", "redactions in tests",
                     "source redactions / 10k lines"], rows), "",
           "Every redaction in non-test source counts against the target (at most 1 false "
           "redaction per 10k lines) until a person judges it below, so the last column is an "
           "upper bound on the false-redaction rate.", "",
           f"Redaction speed: {tot_seconds * 1e6 / max(tot_bytes / 1000, 1):.1f} µs of CPU per KB "
           f"({tot_bytes / 1e6:.1f} MB in ~10 KB spans, {tot_seconds:.2f} s in `redact`).", ""]
    by_kind: dict[str, Counter[bool]] = defaultdict(Counter)
    for h in all_hits:
        by_kind[h.kind][h.in_tests] += 1
    if by_kind:
        out += ["### By kind", "", md_table(["kind", "in source", "in tests"],
                [[k, c[False], c[True]] for k, c in sorted(by_kind.items())]), ""]
    out += ["### Every redaction in non-test source (judge each: true or false positive)", ""]
    out += [f"- `{h.path}:{h.line}` **{h.kind}**: `{h.excerpt}`" for h in src_hits] or ["- none"]
    out += ["", f"### Sample of redactions in test code (up to {args.samples} per kind)", ""]
    shown: Counter[str] = Counter()
    for h in test_hits:
        if shown[h.kind] < args.samples:
            shown[h.kind] += 1
            out.append(f"- `{h.path}:{h.line}` **{h.kind}**: `{h.excerpt}`")
    if not test_hits:
        out.append("- none")
    out += ["", f"_Measured {machine()}._"]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
