"""Retrieval on languages, libraries and a docs tree the evaluation kit does not have.

The kit's code sets are Python (requests, click, CoSQA, SWE-bench) and lodash's JavaScript; issue
4's targets are also checked on held-out sets of other libraries and languages. This bench builds
such sets the way `rag-eval --docstrings` does (``indexers.eval_set.write_documented_copy``: the
first sentence of the comment right above a function is the question, the function is the gold,
and every such comment is hidden from the corpus), from real packages no one here wrote: npm
tarballs and Debian's source-carrying -dev packages (Go, Rust, Ruby, PHP). On each set it runs the
kit's BM25 baselines (40-line windows, whole files) and our retrieval (dense, lexical, hybrid
through rag-eval's path, the default int8 model), scored by the kit's rule. Prints markdown and
rewrites the "heldout" section of docs/BENCHMARKS.md.

    .venv/bin/python -m bench.quality.heldout [--limit 200] [--no-write]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench._report import WORK, md_table, write_section
from bench.quality.runs import Run, score_run, service_run
from bench.quality.sets import EvalSet, add_kit_arg, ensure_kit, settings_for, use_kit
from bench.quality.windows import bm25_windows_run

HERE = WORK / "heldout"
BACKEND = "onnx-int8"


@dataclass(frozen=True)
class Source:
    label: str
    language: str
    kind: str  # "npm" or "deb"
    spec: str  # npm name@version, Debian package=version
    subdir: str  # the library's own tree inside the unpacked archive
    #: "doc comments" (rag-eval --docstrings) or "headings" (the kit's docs recipe)
    questions: str = "doc comments"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.label.split()[0].lower()).strip("-")


SOURCES = (
    Source("axios 1.7.9", "JavaScript", "npm", "axios@1.7.9", "package/lib"),
    Source("rxjs 7.8.1", "TypeScript", "npm", "rxjs@7.8.1", "package/src"),
    Source("gin 1.8.1", "Go", "deb", "golang-github-gin-gonic-gin-dev=1.8.1-1",
           "usr/share/gocode/src/github.com/gin-gonic/gin"),
    Source("cobra 1.6.1", "Go", "deb", "golang-github-spf13-cobra-dev=1.6.1-1",
           "usr/share/gocode/src/github.com/spf13/cobra"),
    Source("regex-syntax 0.6.27", "Rust", "deb", "librust-regex-syntax-dev=0.6.27-1",
           "usr/share/cargo/registry/regex-syntax-0.6.27"),
    Source("rack 2.2.22", "Ruby", "deb", "ruby-rack=2.2.22-0+deb12u1",
           "usr/share/rubygems-integration/all/gems/rack-2.2.22/lib"),
    Source("symfony/console 5.4.53", "PHP", "deb", "php-symfony-console=5.4.53+dfsg-0+deb12u1",
           "usr/share/php/Symfony/Component/Console"),
    Source("npm 10.9.2 docs", "Markdown", "npm", "npm@10.9.2", "package/docs/content",
           questions="headings"),
)


def fetch(src: Source) -> Path:
    """The library's source tree, downloaded and unpacked once (bench/.work is git-ignored)."""
    dest = HERE / "src" / src.slug
    if dest.is_dir():
        return dest / src.subdir
    dl = HERE / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if src.kind == "npm":
        out = subprocess.run(["npm", "pack", src.spec, "--silent"], cwd=dl, check=True,
                             capture_output=True, text=True).stdout.split()[-1]
        with tarfile.open(dl / out) as tar:
            tar.extractall(tmp, filter="data")
    else:
        name = src.spec.split("=")[0]
        subprocess.run(["apt-get", "download", "-q", src.spec], cwd=dl, check=True,
                       capture_output=True)
        deb = next(p for p in dl.glob(f"{name}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    tmp.rename(dest)
    return dest / src.subdir


def build_set(src: Source, tree: Path, limit: int) -> EvalSet:
    """Questions and a corpus with the documentation hidden, as `rag-eval --docstrings` makes
    them, or, for a docs tree, the kit's own docs recipe (a section's heading is the question
    and is blanked in the corpus); kept in the kit's set layout (corpus/ + queries.jsonl)."""
    from indexers.eval_set import write_documented_copy
    from rag_mcp.config import load_settings

    d = HERE / "sets" / src.slug
    shutil.rmtree(d, ignore_errors=True)
    if src.questions == "headings":
        subprocess.run([sys.executable, str(ensure_kit() / "make_docs_set.py"), "--src", str(tree),
                        "--out", str(d), "--per-page", "3", "--no-query", "", "--drop", "",
                        "--name", src.slug, "--source", src.spec, "--id-prefix", src.slug],
                       check=True, capture_output=True)
        with (d / "queries.jsonl").open(encoding="utf-8") as fh:
            return EvalSet(src.slug, d, [orjson.loads(line) for line in fh if line.strip()])
    settings = load_settings({"root": str(tree), "index_dir": str(HERE / "scratch")},
                             environ={})
    queries = [q.to_json() for q in write_documented_copy(settings, d / "corpus", limit)]
    (d / "queries.jsonl").write_bytes(b"".join(orjson.dumps(q) + b"\n" for q in queries))
    return EvalSet(src.slug, d, queries)


# fp32, spans read whole (bench.quality.sets.settings_for): the reference of the speed target
REFERENCE = "onnx"


def measure(src: Source, limit: int, fp32: bool) -> tuple[list[object], list[object] | None]:
    from indexers.pipeline import run_index

    tree = fetch(src)
    ev = build_set(src, tree, limit)
    files = [p for p in (ev.dir / "corpus").rglob("*") if p.is_file()]
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    index = HERE / "index"
    t0 = time.perf_counter()
    st = run_index(settings_for(ev, "", BACKEND, index_dir=index))
    print(f"{src.label}: {len(ev.queries)} questions, {len(files)} files, {lines:,} lines, "
          f"{st.spans_total:,} spans ({time.perf_counter() - t0:.0f} s)", flush=True)
    runs = {
        "bm25-w40": Run(ev.name, "bm25-w40", bm25_windows_run(ev)),
        "bm25-file": Run(ev.name, "bm25-file", bm25_windows_run(ev, unit="file")),
        "dense": service_run(ev, BACKEND, "dense", fusion="dense", index_dir=index),
        "lexical": service_run(ev, BACKEND, "lexical", fusion="lexical", index_dir=index),
        "hybrid": service_run(ev, BACKEND, "hybrid", index_dir=index),
    }
    m = {name: score_run(ev, run) for name, run in runs.items()}
    h, w40 = m["hybrid"], m["bm25-w40"]["MRR@10"]
    legs = max(m["dense"]["MRR@10"], m["lexical"]["MRR@10"])
    quality = "met" if h["MRR@10"] >= 1.3 * w40 and h["MRR@10"] > legs else "missed"
    share = h["tok@5"] / h["file_tok@5"] if h.get("file_tok@5") else 0.0
    cost = "met" if share <= 0.15 and h["hit@5"] >= m["bm25-w40"]["hit@5"] else "missed"
    row: list[object] = [
        src.label, src.language, len(ev.queries), f"{lines:,} / {lines / len(files):.0f}",
        st.spans_total,
        w40, m["bm25-file"]["MRR@10"], m["dense"]["MRR@10"], m["lexical"]["MRR@10"],
        h["MRR@10"], f"{h['MRR@10'] / w40:.2f}x" if w40 else "-",
        f"{h['hit@5']:.3f} ({m['bm25-w40']['hit@5']:.3f})", h["hit@10"],
        f"{share:.1%}", quality, cost]
    if not fp32:
        return row, None
    run_index(settings_for(ev, "", REFERENCE, index_dir=index))
    ref = score_run(ev, service_run(ev, REFERENCE, "hybrid-fp32", index_dir=index))
    ref_dense = score_run(ev, service_run(ev, REFERENCE, "dense-fp32", fusion="dense",
                                          index_dir=index))
    diff = h["MRR@10"] - ref["MRR@10"]
    return row, [src.label, m["dense"]["MRR@10"], ref_dense["MRR@10"], h["MRR@10"],
                 ref["MRR@10"], f"{diff:+.3f}", "met" if diff >= -0.01 else "missed"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=200, help="questions per library at most")
    ap.add_argument("--only", help="comma-separated slugs (axios, gin, ...): a partial run, "
                                   "printed only")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--no-fp32", action="store_true",
                    help="skip the fp32 reference (its indexes embed every span again)")
    add_kit_arg(ap)
    args = ap.parse_args(argv)
    use_kit(args.kit)
    chosen = [s for s in SOURCES if not args.only or s.slug in args.only.split(",")]
    measured = [measure(s, args.limit, not args.no_fp32) for s in chosen]
    rows = [r for r, _ in measured]
    ref_rows = [r for _, r in measured if r is not None]
    table = md_table(["library", "language", "questions", "lines / per file", "spans",
                      "BM25 40-line", "BM25 file", "dense", "lexical", "hybrid (default)",
                      "hybrid / BM25 40",
                      "hit@5 (BM25 40-line)", "hit@10", "tokens top 5 / their files",
                      "MRR@10 >= 1.3x BM25 40-line, above both legs",
                      "tokens <= 15%, hit@5 >= BM25 40-line's"], rows)
    ref_table = md_table(["library", "dense int8, 160 tokens", "dense fp32, whole window",
                          "hybrid int8, 160 tokens (default)", "hybrid fp32, whole window",
                          "default - fp32", "at most 0.01 below fp32"], ref_rows)
    print(table)
    if ref_rows:
        print("\n" + ref_table)
    if args.no_write or args.only or args.no_fp32:
        return 0
    write_section("heldout", "## Held-out sets: other languages, another docs tree\n\n"
                  "`python -m bench.quality.heldout`\n\n"
                  "Libraries the evaluation kit does not have, in languages it does not cover "
                  "(its code sets are Python and lodash's JavaScript), and another project's "
                  "Markdown documentation, from npm and from Debian's source-carrying -dev "
                  "packages at pinned versions. Code questions are made as `rag-eval "
                  "--docstrings` makes them: the first sentence of the comment right above a "
                  "function (JSDoc, TSDoc, Go, Rust, YARD, PHPDoc) is the query, the function "
                  f"the gold, at most {args.limit} per library, test files and functions "
                  "excluded, and every such comment is hidden from the corpus all systems "
                  "search; a Go comment starting with the function's name loses that word (it "
                  "would answer the question itself). The docs tree's questions come from the "
                  "kit's own docs recipe (`make_docs_set.py`, 3 headings a page at most: the "
                  "heading is the query and is blanked in the corpus). MRR@10 by the kit's rule "
                  "(same file, half the gold lines covered); the kit's BM25 baselines run on the "
                  "same corpus; dense, lexical and hybrid are rag-eval's path over our spans "
                  "with the default int8 model. The share of tokens grows as files shrink: five "
                  "answers of 20-40 lines are a large part of files of 80 lines.\n\n" + table
                  + "\n\nThe default model (int8 weights, spans read to 160 tokens) against "
                  "the reference of the speed target, the fp32 model reading each span's whole "
                  "window, on the "
                  "same sets (MRR@10, rag-eval's path):\n\n" + ref_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
