"""``rag-eval``: measure retrieval on your own repository, through the same path as ``rag_query``.

    rag-eval QUERIES.jsonl [--root R] [--k 10] [--json] [--out RUN.jsonl]
    rag-eval --docstrings [N] [--root R] [--save-queries Q.jsonl]

Every query goes through ``QueryService`` (what ``rag_query`` calls) with tau = 0 and the
response budgets lifted, so the ranking is what is measured. The scores follow the evaluation
kit's rule (rag_mcp.metrics); ``--out`` writes the kit's run-file format, so
``score.py QUERIES RUN.jsonl`` prints the same numbers.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from rag_mcp.config import Settings, index_base, load_settings
from rag_mcp.errors import InvalidArgument, NotFound, RagError
from rag_mcp.evalsets import EvalQuery, docstring_set, dump_queries, load_queries
from rag_mcp.metrics import FileLines, LineSpan, mean, score_query
from rag_mcp.query import MAX_K, QueryParams, QueryService

log = logging.getLogger("rag_mcp.evaluate")


@dataclass
class Outcome:
    """One query's results and scores."""

    query: EvalQuery
    results: list[LineSpan] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    took_ms: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Report:
    outcomes: list[Outcome]
    k: int
    summary: dict[str, Any]

    @property
    def missed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.metrics.get(f"hit@{min(self.k, 10)}")]


def eval_settings(settings: Settings, k: int) -> Settings:
    """The settings of an evaluation run: k spans a query, no byte or query-length budget."""
    return replace(settings, max_spans=max(k, 1), max_bytes=1 << 24, max_query_chars=1 << 20)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(outcomes: list[Outcome], k: int) -> dict[str, Any]:
    out: dict[str, Any] = {"queries": len(outcomes), "k": k}
    out.update({m: round(v, 4) for m, v in mean(o.metrics for o in outcomes).items()})
    tok, whole = out.get("tok@5"), out.get("file_tok@5")
    if tok is not None and whole:
        out["tokens_top5_vs_files"] = round(tok / whole, 4)  # the cost share; saving = 1 - it
    took = [o.took_ms for o in outcomes if o.error is None]
    out["latency_ms_p50"] = round(_pct(took, 50), 2)
    out["latency_ms_p95"] = round(_pct(took, 95), 2)
    out["errors"] = sum(1 for o in outcomes if o.error is not None)
    out["missed"] = sum(1 for o in outcomes if not o.metrics.get(f"hit@{min(k, 10)}"))
    return out


def run_eval(service: QueryService, queries: Sequence[EvalQuery], *, k: int = 10,
             tau: float = 0.0, fusion: str | None = None, rerank: bool | None = None,
             lines_of: Callable[[str], list[str] | None] | None = None,
             file_level: bool = False, min_overlap: float = 0.5) -> Report:
    """Ask every query through ``service`` and score it; one failed query never stops the run."""
    extra: dict[str, Any] = {"fusion": fusion} if fusion else {}
    outcomes: list[Outcome] = []
    for q in queries:
        o = Outcome(q)
        try:
            ans = service.query(QueryParams(query=q.query, k=k, tau=tau, rerank=rerank, **extra))
        except InvalidArgument as exc:  # this query's fault; an unusable index stops the run
            o.error = str(exc)
        else:
            o.took_ms = ans.took_ms
            o.results = [LineSpan(h.path, h.start_line, h.end_line) for h in ans.hits]
            o.ids = [h.id for h in ans.hits]
            o.scores = [h.score for h in ans.hits]
        o.metrics = score_query(q.gold, o.results, lines_of=lines_of, file_level=file_level,
                                min_overlap=min_overlap)
        outcomes.append(o)
    return Report(outcomes, k, summarize(outcomes, k))


def run_lines(outcomes: Sequence[Outcome]) -> bytes:
    """The kit's run-file format: ``{"id", "results": [{path, start_line, end_line}]}`` lines."""
    rows = []
    for o in outcomes:
        res = [{"path": r.path, "start_line": r.start_line, "end_line": r.end_line, "id": i,
                "score": s} for r, i, s in zip(o.results, o.ids, o.scores, strict=True)]
        rows.append(orjson.dumps({"id": o.query.id, "results": res}) + b"\n")
    return b"".join(rows)


def render(report: Report, *, show_missed: int = 20) -> str:
    s = report.summary
    lines = [f"{s['queries']} queries, k={report.k}"]
    lines.append("  ".join(f"{m} {s[m]:.3f}" for m in
                           ("MRR@10", "hit@1", "hit@3", "hit@5", "hit@10", "nDCG@10") if m in s))
    if "tokens_top5_vs_files" in s:
        share = s["tokens_top5_vs_files"]
        lines.append(f"tokens in the top 5: {s['tok@5']:,.0f} against {s['file_tok@5']:,.0f} in "
                     f"their whole files ({share:.1%}; a saving of {1 - share:.1%})")
    lines.append(f"latency P50 {s['latency_ms_p50']:.1f} ms, P95 {s['latency_ms_p95']:.1f} ms")
    if s["errors"]:
        lines.append(f"{s['errors']} queries failed")
    missed = report.missed
    if missed:
        lines.append(f"missed ({len(missed)}; no relevant span in the top {report.k}):")
        for o in missed[:show_missed]:
            g = o.query.gold[0]
            top = o.results[0] if o.results else None
            got = f"{top.path}:{top.start_line}-{top.end_line}" if top else (o.error or "nothing")
            lines.append(f"  {o.query.id}: {o.query.query[:70]!r} wants "
                         f"{g.path}:{g.start_line}-{g.end_line}, got {got}")
        if len(missed) > show_missed:
            lines.append(f"  ... and {len(missed) - show_missed} more (--json lists them all)")
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, Any]:
    out = dict(report.summary)
    out["missed_queries"] = [
        {"id": o.query.id, "query": o.query.query, "gold": o.query.to_json()["gold"],
         "top": [f"{r.path}:{r.start_line}-{r.end_line}" for r in o.results[:3]],
         **({"error": o.error} if o.error else {})}
        for o in report.missed]
    return out


def docstring_index(settings: Settings, limit: int, *, quiet: bool
                    ) -> tuple[Settings, list[EvalQuery], Path]:
    """Index a copy of the repository with every docstring hidden; questions from docstrings.

    The copy lives in a temporary folder; its index goes under the repository's own index
    folder (its own collection), so the embedding cache there is shared and a second run embeds
    only what changed.
    """
    # rag-eval is a command-line edge like rag-index: it may drive the indexer (lazily, so
    # importing this module stays light).
    from indexers import walk
    from indexers.pipeline import run_index
    from indexers.progress import Progress

    root = settings.root_path
    walked = walk.walk(root, max_file_bytes=settings.max_file_bytes,
                       extra_ignore=settings.ignore, index_dir=index_base(settings))
    sources: dict[str, str] = {}
    for c in walked.files:
        if c.rel.endswith((".py", ".pyi")):
            try:
                sources[c.rel] = c.abs_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
    stripped, queries = docstring_set(sources, limit=limit)
    if not queries:
        raise NotFound(
            f"found no documented Python function under {root} to ask about (each needs a "
            "docstring whose first sentence has 3 or more words); write a query file instead")
    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-"))
    copy = tmp / root.name
    for c in walked.files:
        dest = copy / c.rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if c.rel in stripped:
            dest.write_text(stripped[c.rel], encoding="utf-8")
        else:
            shutil.copyfile(c.abs_path, dest)
    name = f"{settings.collection_name[:40]}-docstrings"
    s2 = replace(settings, root=str(copy), index_dir=str(index_base(settings)), collection=name)
    run_index(s2, progress=Progress(quiet=quiet))
    return s2, queries, tmp


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rag-eval", description=__doc__.split("\n\n")[0],
        epilog="Query file: one JSON object a line, {\"id\", \"query\", \"gold\": [{\"path\", "
               "\"start_line\", \"end_line\"}]}; paths relative to the root. A result is "
               "relevant when it is in the gold file and covers at least half of the gold lines.")
    ap.add_argument("queries", nargs="?", help="the query file (JSONL)")
    ap.add_argument("--root", help="repository root (default: the enclosing git root)")
    ap.add_argument("--config", metavar="FILE", help="a TOML file with any subset of the knobs")
    ap.add_argument("--index-dir", help="where the index lives (default <root>/.rag)")
    ap.add_argument("--k", type=int, default=10, help=f"results per query, 1-{MAX_K} (default 10)")
    ap.add_argument("--tau", type=float, default=0.0,
                    help="confidence threshold (default 0: measure the ranking itself)")
    ap.add_argument("--fusion", help="convex, rrf, dense or lexical (default: rag_query's)")
    ap.add_argument("--rerank", action="store_true", help="rerank with query.reranker_model")
    ap.add_argument("--file-level", action="store_true",
                    help="relevance by file only (is the right file in the top k?)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--out", metavar="RUN.jsonl", help="write the run file (the kit's format)")
    ap.add_argument("--docstrings", nargs="?", const=200, type=int, metavar="N",
                    help="no query file: ask up to N (200) questions made from the repository's "
                         "Python docstrings, with the docstrings hidden from a temporary index")
    ap.add_argument("--save-queries", metavar="FILE",
                    help="with --docstrings: also write the questions (they are only fair "
                         "against an index without docstrings)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    return ap


def _run(args: argparse.Namespace) -> int:
    from rag_mcp.deps import build_deps  # the same wiring as the server (reranker included)

    if not 1 <= args.k <= MAX_K:
        raise InvalidArgument(f"--k must be from 1 to {MAX_K}")
    if not 0.0 <= args.tau <= 1.0:
        raise InvalidArgument("--tau must be between 0 and 1")
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
        deps.handle.get()  # no index: say how to build it before asking anything
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
