"""``rag-eval``: measure retrieval on your own repository, through the same path as ``rag_query``.

This is the command-line edge (arguments, files, stdout, and the docstring starter set, which
drives the indexer); the evaluation itself is ``rag_mcp.eval.run``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import orjson

from rag_mcp.config import Settings, index_base, load_settings
from rag_mcp.errors import InvalidArgument, NotFound, RagError
from rag_mcp.eval.metrics import FileLines
from rag_mcp.eval.run import eval_settings, render, report_json, run_eval, run_lines
from rag_mcp.eval.sets import (
    Documented,
    EvalQuery,
    docstring_set,
    dump_queries,
    load_queries,
    strip_docstrings,
)
from rag_mcp.search.query import MAX_K

DESCRIPTION = """\
Measure retrieval on your own repository: every query goes through the same path as the
rag_query tool, and rag-eval prints MRR@10, hit@1/3/5/10, nDCG@10, the tokens of the top 5
against the tokens of the whole files they come from, latency P50/P95, and the queries that
missed. No query file yet? --docstrings asks questions made from the repository's own
docstrings and doc comments (Python docstrings; JSDoc, Javadoc, Go, Rust, C#, Ruby and other
comments right above a function: the first sentence is the question, the function is the
answer, and the documentation is hidden from a temporary index for that run)."""

EPILOG = """\
query file: one JSON object a line,
  {"id": "q1", "query": "where are retries configured",
   "gold": [{"path": "src/http.py", "start_line": 10, "end_line": 42}]}
paths relative to the root, lines 1-based and inclusive. A result is relevant when it is in a
gold file and covers at least half of the gold lines (the rule of the shared evaluation kit's
score.py, so --out files score the same there).

examples:
  rag-eval questions.jsonl                  score the index of the enclosing git repository
  rag-eval questions.jsonl --json --out run.jsonl
  rag-eval questions.jsonl --tau auto       what rag_query's default threshold returns
  rag-eval --docstrings 100 --save-queries q.jsonl

exit codes: 0 done, 2 bad arguments or query file, 3 nothing to ask (--docstrings),
5 no index (run rag-index first), 130 interrupted.
"""


def write_documented_copy(settings: Settings, dest: Path, limit: int) -> list[EvalQuery]:
    """Copy the repository's indexable files to ``dest`` with their documentation hidden (line
    numbers kept) and return up to ``limit`` questions made from it: Python docstrings, and the
    comment right above a function in every other language the chunker parses."""
    from indexers import walk
    from indexers.doc_comments import COMMENTS, strip_doc_comments
    from indexers.languages import code_language_for_path

    root = settings.root_path
    walked = walk.walk(root, max_file_bytes=settings.max_file_bytes,
                       extra_ignore=settings.ignore, index_dir=index_base(settings))
    sources: dict[str, str] = {}
    languages: dict[str, str] = {}
    for c in walked.files:
        lang = code_language_for_path(c.rel)
        if lang is None or lang != "python" and lang not in COMMENTS:
            continue
        try:
            sources[c.rel] = c.abs_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        languages[c.rel] = lang

    def strip(rel: str, text: str) -> tuple[str, list[Documented]]:
        lang = languages[rel]
        if lang == "python":
            return strip_docstrings(text)
        return strip_doc_comments(text, lang, budget_chars=settings.chunk_chars)

    stripped, queries = docstring_set(sources, limit=limit, strip=strip)
    if not queries:
        raise NotFound(
            f"found no documented function under {root} to ask about (each needs a docstring "
            "or a comment right above it whose first sentence has 3 or more words); write a "
            "query file instead")
    for c in walked.files:
        out = dest / c.rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if c.rel in stripped:
            out.write_text(stripped[c.rel], encoding="utf-8")
        else:
            shutil.copyfile(c.abs_path, out)
    return queries


def docstring_index(settings: Settings, limit: int, *, quiet: bool
                    ) -> tuple[Settings, list[EvalQuery], Path]:
    """Index a copy of the repository with its documentation hidden; questions from it.

    The copy lives in a temporary folder; its index goes under the repository's own index
    folder (its own collection), so the embedding cache there is shared and a second run embeds
    only what changed.
    """
    from indexers.pipeline import run_index
    from indexers.progress import Progress

    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-"))
    copy = tmp / settings.root_path.name
    try:
        queries = write_documented_copy(settings, copy, limit)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    name = f"{settings.collection_name[:40]}-docstrings"
    s2 = replace(settings, root=str(copy), index_dir=str(index_base(settings)), collection=name)
    run_index(s2, progress=Progress(quiet=quiet))
    return s2, queries, tmp


def _tau(value: str) -> float | None:
    if value.strip().lower() == "auto":
        return None
    try:
        tau = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'auto': {value!r}") from None
    if not 0.0 <= tau <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1, or 'auto'")
    return tau


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rag-eval", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("queries", nargs="?", help="the query file (JSONL, format below)")
    ap.add_argument("--root", help="repository root (default: the enclosing git root)")
    ap.add_argument("--config", metavar="FILE", help="a TOML file with any subset of the knobs")
    ap.add_argument("--index-dir", help="where the index lives (default <root>/.rag)")
    ap.add_argument("--k", type=int, default=10, help=f"results per query, 1-{MAX_K} (default 10)")
    ap.add_argument("--tau", type=_tau, default=0.0, metavar="TAU|auto",
                    help="confidence threshold: 0 (default) measures the ranking itself; "
                         "'auto' uses rag_query's calibrated default")
    ap.add_argument("--fusion", choices=("convex", "rrf", "dense", "lexical"),
                    help="how the two legs combine (default: rag_query's, convex)")
    ap.add_argument("--rerank", action="store_true",
                    help="rerank with query.reranker_model (a local cross-encoder)")
    ap.add_argument("--file-level", action="store_true",
                    help="relevance by file only (is the right file in the top k?)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--out", metavar="RUN.jsonl", help="write the run file (the kit's format)")
    ap.add_argument("--docstrings", nargs="?", const=200, type=int, metavar="N",
                    help="no query file: ask up to N (200) questions made from the repository's "
                         "docstrings and doc comments, hidden from a temporary index")
    ap.add_argument("--save-queries", metavar="FILE",
                    help="with --docstrings: also write the questions (they are only fair "
                         "against an index without docstrings)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    return ap


def _run(args: argparse.Namespace) -> int:
    from rag_mcp.deps import build_deps  # the same wiring as the server (reranker included)

    if not 1 <= args.k <= MAX_K:
        raise InvalidArgument(f"--k must be from 1 to {MAX_K}")
    if (args.queries is None) == (args.docstrings is None):
        raise InvalidArgument("give a query file, or --docstrings to build questions")
    settings = load_settings({"root": args.root, "index_dir": args.index_dir},
                             config_file=args.config)
    tmp: Path | None = None
    if args.docstrings is not None:
        if args.docstrings < 1:
            raise InvalidArgument("--docstrings N needs N >= 1")
        settings, queries, tmp = docstring_index(settings, args.docstrings,
                                                 quiet=not args.verbose)
        if args.save_queries:
            Path(args.save_queries).write_bytes(dump_queries(queries))
    else:
        queries = load_queries(Path(args.queries))
    deps = build_deps(eval_settings(settings, args.k))
    try:
        deps.repo().handle.get()  # no index: say how to build it before asking anything
        report = run_eval(deps.queries, queries, k=args.k, tau=args.tau, fusion=args.fusion,
                          rerank=True if args.rerank else None,
                          lines_of=FileLines(settings.root), file_level=args.file_level)
    finally:
        deps.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(settings.index_path, ignore_errors=True)
    if args.out:
        Path(args.out).write_bytes(run_lines(report.outcomes))
    if args.json:
        sys.stdout.write(orjson.dumps(report_json(report), option=orjson.OPT_INDENT_2).decode()
                         + "\n")
    else:
        sys.stdout.write(render(report) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except RagError as exc:
        sys.stderr.write(f"rag-eval: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("rag-eval: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
