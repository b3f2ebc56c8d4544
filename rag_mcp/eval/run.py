"""The evaluation core of ``rag-eval``: ask labelled queries through ``rag_query``'s path, score.

Every query goes through ``QueryService`` (what ``rag_query`` calls) with the response budgets
lifted and, unless asked otherwise, tau = 0, so the ranking itself is what is measured. The
scores follow the evaluation kit's rule (rag_mcp.eval.metrics); ``run_lines`` writes the kit's
run-file format, so ``score.py QUERIES RUN.jsonl`` prints the same numbers. ``evaluate`` is the
whole run of ``rag-eval`` on one index; the command line (arguments, printing) is
indexers/eval_cli.py, and the docstring starter set, which drives the indexer, is
indexers/eval_set.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from rag_mcp.config import Settings
from rag_mcp.errors import InvalidArgument
from rag_mcp.eval.metrics import FileLines, LineSpan, mean, score_query
from rag_mcp.eval.sets import EvalQuery
from rag_mcp.search.query import QueryService
from rag_mcp.search.records import QueryParams

log = logging.getLogger("rag_mcp.eval.run")


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
             tau: float | None = 0.0, fusion: str | None = None, rerank: bool | None = None,
             lines_of: Callable[[str], list[str] | None] | None = None,
             file_level: bool = False, min_overlap: float = 0.5) -> Report:
    """Ask every query through ``service`` and score it; one failed query never stops the run.

    ``tau=None`` applies rag_query's own default threshold (the calibrated one).
    """
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


def evaluate(settings: Settings, queries: Sequence[EvalQuery], *, k: int = 10,
             tau: float | None = 0.0, fusion: str | None = None, rerank: bool | None = None,
             file_level: bool = False) -> Report:
    """Ask ``queries`` of the index ``settings`` names, wired as the server wires ``rag_query``
    (reranker included), and score them against the repository's files."""
    from rag_mcp.deps import build_deps  # the composition root: the search stack, the model

    deps = build_deps(eval_settings(settings, k))
    try:
        deps.repo().handle.get()  # no index: say how to build it before asking anything
        return run_eval(deps.queries, queries, k=k, tau=tau, fusion=fusion, rerank=rerank,
                        lines_of=FileLines(settings.root), file_level=file_level)
    finally:
        deps.close()


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
