"""Retrieval metrics with the evaluation kit's relevance rule, so our numbers compare with its.

The rule and the metrics are those of ``../shared/eval/score.py`` (tests/test_eval.py checks them
on hand-computed cases): a retrieved span is relevant to a gold span when it is in the same file
(paths compared after turning ``\\`` into ``/`` and dropping a leading ``./``) and covers at least
half of the gold line range. Over the first 10 results, averaged over every query (a query
without results scores 0):

* MRR@10: 1/rank of the first relevant result; hit@k: any relevant result in the top k;
  recall@k: the fraction of the gold spans found; P@k: relevant results in the top k, over k;
* nDCG@10: binary gains, each gold span credited once (to the first result matching it);
* cost: lines@k (distinct lines of the top-k spans), tok@k (~characters/4 of those lines) and
  file_tok@k (~tokens of the whole files they come from: the "open the matching files" cost).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

KS = (1, 3, 5, 10)
ORDER = ("MRR@10", "hit@1", "hit@3", "hit@5", "hit@10", "nDCG@10", "P@1", "P@3", "recall@5",
         "recall@10", "lines@5", "lines@10", "tok@5", "file_tok@5", "tok@10", "file_tok@10")
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True, slots=True)
class LineSpan:
    """A span of a file: path relative to the corpus root, 1-based inclusive lines."""

    path: str
    start_line: int
    end_line: int

    @staticmethod
    def of(d: Mapping[str, object]) -> LineSpan:
        start, end = int(d["start_line"]), int(d["end_line"])  # type: ignore[call-overload]
        if start > end:
            start, end = end, start
        return LineSpan(norm_path(str(d["path"])), start, end)


def norm_path(p: str) -> str:
    p = p.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p if os.path.isabs(p) else p.lstrip("/")


def is_match(r: LineSpan, g: LineSpan, min_overlap: float = 0.5) -> bool:
    """``r`` is relevant to gold ``g``: same path and ``min_overlap`` of g's lines covered."""
    if r.path != g.path:
        return False
    overlap = min(r.end_line, g.end_line) - max(r.start_line, g.start_line) + 1
    return overlap > 0 and overlap >= min_overlap * (g.end_line - g.start_line + 1)


def _file_level(gold: Sequence[LineSpan], results: Sequence[LineSpan]
                ) -> tuple[list[LineSpan], list[LineSpan]]:
    """Relevance by path only: each gold file once, files ranked by their first result."""
    g = [LineSpan(p, 1, 1) for p in dict.fromkeys(x.path for x in gold)]
    r = [LineSpan(p, 1, 1) for p in dict.fromkeys(x.path for x in results)]
    return g, r


def score_query(gold: Sequence[LineSpan], results: Sequence[LineSpan], *,
                lines_of: Callable[[str], list[str] | None] | None = None,
                file_level: bool = False, min_overlap: float = 0.5) -> dict[str, float]:
    """Every metric of one query; ``lines_of(path)`` (file lines or None) enables the token cost."""
    cost_results = list(results)
    if file_level:
        gold, results = _file_level(gold, results)
    top = list(results[:10])
    rel = [any(is_match(r, g, min_overlap) for g in gold) for r in top]
    first = next((i for i, x in enumerate(rel) if x), None)
    out: dict[str, float] = {"MRR@10": 0.0 if first is None else 1.0 / (first + 1)}
    for k in KS:
        out[f"hit@{k}"] = 1.0 if any(rel[:k]) else 0.0
        found = {gi for r in top[:k] for gi, g in enumerate(gold) if is_match(r, g, min_overlap)}
        out[f"recall@{k}"] = len(found) / len(gold) if gold else 0.0
    for k in (1, 3):
        out[f"P@{k}"] = sum(rel[:k]) / k
    credited: set[int] = set()
    dcg = 0.0
    for i, r in enumerate(top):
        for gi, g in enumerate(gold):
            if gi not in credited and is_match(r, g, min_overlap):
                credited.add(gi)
                dcg += 1.0 / math.log2(i + 2)
                break
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), 10)))
    out["nDCG@10"] = dcg / idcg if idcg else 0.0
    out.update(cost(cost_results, lines_of))
    return out


def cost(results: Sequence[LineSpan], lines_of: Callable[[str], list[str] | None] | None
         ) -> dict[str, float]:
    """lines@k, and with ``lines_of`` tok@k and file_tok@k, for k = 5 and 10."""
    out: dict[str, float] = {}
    for k in (5, 10):
        covered: dict[str, set[int]] = defaultdict(set)
        for r in results[:k]:
            covered[r.path].update(range(r.start_line, r.end_line + 1))
        out[f"lines@{k}"] = float(sum(len(v) for v in covered.values()))
        if lines_of is None:
            continue
        chars = fchars = 0
        for path, nums in covered.items():
            lines = lines_of(path)
            if lines is None:
                continue
            chars += sum(len(lines[i - 1]) + 1 for i in nums if 1 <= i <= len(lines))
            fchars += sum(len(x) + 1 for x in lines)
        out[f"tok@{k}"] = chars / CHARS_PER_TOKEN
        out[f"file_tok@{k}"] = fchars / CHARS_PER_TOKEN
    return out


def mean(per_query: Iterable[Mapping[str, float]], n: int | None = None) -> dict[str, float]:
    """Average every metric over ``n`` queries (default: the rows given), in the kit's order."""
    totals: dict[str, float] = defaultdict(float)
    count = 0
    for row in per_query:
        count += 1
        for k, v in row.items():
            if k in ORDER:
                totals[k] += float(v)
    n = count if n is None else n
    return {k: totals[k] / n for k in ORDER if k in totals} if n else {}


class FileLines:
    """Lines of corpus files, read once each (for the token cost), bounded to ``size`` files."""

    def __init__(self, root: str | os.PathLike[str], size: int = 4096) -> None:
        self.root = os.fspath(root)
        self.size = size
        self._cache: dict[str, list[str] | None] = {}

    def __call__(self, path: str) -> list[str] | None:
        if path not in self._cache:
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            try:
                with open(os.path.join(self.root, path), encoding="utf-8",
                          errors="replace") as fh:
                    self._cache[path] = fh.read().split("\n")
            except OSError:
                self._cache[path] = None
        return self._cache[path]
