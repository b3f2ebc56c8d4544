"""``rag-eval``: measure retrieval on your own repository, through the same path as ``rag_query``.

The command-line edge only: arguments, the query and run files, and what is printed. The
evaluation is ``rag_mcp.eval.run.evaluate``; the docstring starter set (it drives the indexer)
is ``indexers.eval_set``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

import orjson

from rag_mcp.config import load_settings
from rag_mcp.errors import InvalidArgument, RagError
from rag_mcp.eval.run import evaluate, render, report_json, run_lines
from rag_mcp.eval.sets import dump_queries, load_queries
from rag_mcp.search.records import MAX_K

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
    if not 1 <= args.k <= MAX_K:
        raise InvalidArgument(f"--k must be from 1 to {MAX_K}")
    if (args.queries is None) == (args.docstrings is None):
        raise InvalidArgument("give a query file, or --docstrings to build questions")
    if args.docstrings is not None and args.docstrings < 1:
        raise InvalidArgument("--docstrings N needs N >= 1")
    settings = load_settings({"root": args.root, "index_dir": args.index_dir},
                             config_file=args.config)
    with contextlib.ExitStack() as stack:
        if args.docstrings is not None:
            from indexers.eval_set import docstring_index  # the chunkers: only when asked

            settings, queries = stack.enter_context(
                docstring_index(settings, args.docstrings, quiet=not args.verbose))
            if args.save_queries:
                Path(args.save_queries).write_bytes(dump_queries(queries))
        else:
            queries = load_queries(Path(args.queries))
        report = evaluate(settings, queries, k=args.k, tau=args.tau, fusion=args.fusion,
                          rerank=True if args.rerank else None, file_level=args.file_level)
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
