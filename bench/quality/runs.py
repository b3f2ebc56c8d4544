"""Runs of one system on one evaluation set, and their scores, for the quality bench.

Our systems go through ``rag_mcp.eval.run.run_eval`` (what ``rag-eval`` runs: QueryService with
k = 10, tau = 0, budgets lifted), one index per corpus. Baselines come from
bench/quality/windows.py. Every run is saved in the kit's run-file format under
``bench/.work/runs/`` (so ``score.py`` can check it) with each hit's calibrated score and each
query's latency.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench._report import WORK
from bench.quality.sets import EvalSet, settings_for
from rag_mcp.deps import build_deps
from rag_mcp.eval.metrics import FileLines, LineSpan, cost, mean, score_query
from rag_mcp.eval.run import eval_settings, run_eval
from rag_mcp.eval.sets import EvalQuery

RUNS = WORK / "runs"


@dataclass
class Run:
    set: str
    system: str
    results: dict[str, list[LineSpan]]
    scores: dict[str, list[float]] = field(default_factory=dict)
    took_ms: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def path(self) -> Path:
        return run_path(self.set, self.system)

    def save(self) -> None:
        RUNS.mkdir(parents=True, exist_ok=True)
        rows = []
        for qid, res in self.results.items():
            sc = self.scores.get(qid, [])
            hits = [{"path": r.path, "start_line": r.start_line, "end_line": r.end_line,
                     **({"score": sc[i]} if i < len(sc) else {})} for i, r in enumerate(res)]
            row: dict[str, Any] = {"id": qid, "results": hits}
            if qid in self.took_ms:
                row["took_ms"] = self.took_ms[qid]
            rows.append(orjson.dumps(row))
        self.path.write_bytes(b"\n".join(rows) + b"\n")

    @staticmethod
    def load(set_name: str, system: str) -> Run | None:
        path = run_path(set_name, system)
        if not path.exists():
            return None
        run = Run(set_name, system, {})
        for line in path.read_bytes().splitlines():
            row = orjson.loads(line)
            run.results[row["id"]] = [LineSpan.of(r) for r in row["results"]]
            run.scores[row["id"]] = [r["score"] for r in row["results"] if "score" in r]
            if "took_ms" in row:
                run.took_ms[row["id"]] = row["took_ms"]
        return run


def run_path(set_name: str, system: str) -> Path:
    return RUNS / f"{set_name}.{re.sub(r'[^A-Za-z0-9.+-]+', '_', system).strip('_')}.jsonl"


def eval_queries(qs: list[dict[str, Any]]) -> list[EvalQuery]:
    return [EvalQuery(str(q["id"]), q["query"], tuple(LineSpan.of(g) for g in q["gold"]))
            for q in qs]


def service_run(ev: EvalSet, backend: str, system: str, *, fusion: str | None = None,
                rerank: bool | None = None, limit: int | None = None, pool: int | None = None,
                cache: bool = True, passes: int = 1, k: int = 10, tau: float | None = 0.0,
                **extra: object) -> Run:
    """Our retrieval through rag-eval's path; ``passes`` > 1 asks everything again (cache).
    ``k`` and ``tau`` are rag_query's (None: the calibrated tau); ``extra`` are settings."""
    run = Run(ev.name, system, {})
    t0 = time.perf_counter()
    queries = ev.queries[:limit] if limit else ev.queries
    for sub in dict.fromkeys(q.get("corpus", "") for q in queries):
        over: dict[str, object] = dict(extra)
        if not cache:
            over["cache_size"] = 0
        deps = build_deps(eval_settings(settings_for(ev, sub, backend, **over), k))
        if pool is not None:
            deps.repo().retriever.POOL = pool
        try:
            qs = eval_queries([q for q in queries if q.get("corpus", "") == sub])
            for _ in range(passes):
                report = run_eval(deps.queries, qs, k=k, tau=tau, fusion=fusion, rerank=rerank)
            for o in report.outcomes:
                run.results[o.query.id] = o.results
                run.scores[o.query.id] = o.scores
                run.took_ms[o.query.id] = o.took_ms
        finally:
            deps.close()
    run.seconds = time.perf_counter() - t0
    run.save()
    return run


def score_run(ev: EvalSet, run: Run, *, file_level: bool = False, k: int = 10,
              tau: float | None = None, queries: list[dict[str, Any]] | None = None
              ) -> dict[str, float]:
    """The kit's metrics over ``queries`` (default: all); ``k``/``tau`` cut each list first."""
    lines: dict[str, FileLines] = {}
    rows = []
    qs = queries if queries is not None else ev.queries
    for q in qs:
        sub = q.get("corpus", "")
        fl = lines.setdefault(sub, FileLines(ev.corpus_dir(sub)))
        res = run.results.get(q["id"], [])[:k]
        if tau is not None:
            sc = run.scores.get(q["id"], [])
            kept = [r for r, s in zip(res, sc, strict=False) if s >= tau]
            res = kept or res[:1]  # rag_query keeps the best guess when nothing passes
        gold = [LineSpan.of(g) for g in q["gold"]]
        m = score_query(gold, res, lines_of=fl, file_level=file_level)
        m.update({f"{key}_k": v for key, v in cost(res, fl).items() if key.endswith("@10")})
        rows.append(m)
    out = mean(rows, n=len(qs))
    for key in ("tok@10", "file_tok@10"):
        out[f"{key}_k"] = sum(r.get(f"{key}_k", 0.0) for r in rows) / max(len(qs), 1)
    took = [run.took_ms[q["id"]] for q in qs if q["id"] in run.took_ms]
    if took:
        s = sorted(took)
        out["p50_ms"] = s[len(s) // 2]
        out["p95_ms"] = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return out
