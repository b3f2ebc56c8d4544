"""Question sets for ``rag-eval``: loading and checking query files, and building a starter set.

A query file is JSONL, one object a line: ``{"id", "query", "gold": [{"path", "start_line",
"end_line"}, ...]}``, extra fields kept (the evaluation kit's format, ../shared/eval/README.md).

The starter set follows CodeSearchNet (Husain et al., 2019): the first sentence of a function's
documentation is the query, the function is the gold span, and that documentation is hidden from
the index of that run, so the question cannot be answered by finding its own text. Python
docstrings are read here (``strip_docstrings``); other languages' doc comments by a ``Stripper``
the indexer passes in (``indexers.doc_comments``, which needs the chunker). Documentation is
blanked in place, never deleted, so line numbers stay those of the user's files and a missed
query points at the real function.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rag_mcp.errors import InvalidArgument
from rag_mcp.eval.metrics import LineSpan
from rag_mcp.index.spans import is_test_file

MAX_REPORTED = 10  # problems listed in one error message
# Folders whose functions are distractors, never questions (CodeSearchNet's filter).
NON_LIBRARY = frozenset({"tests", "test", "testing", "examples", "example", "docs", "doc",
                         "benchmarks", "bench", "scripts"})
_ROLE = re.compile(r":[\w:.-]+:`~?([^`]*)`")
_TICKS = re.compile(r"`+([^`]*)`+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True, slots=True)
class EvalQuery:
    id: str
    query: str
    gold: tuple[LineSpan, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        gold = [{"path": g.path, "start_line": g.start_line, "end_line": g.end_line}
                for g in self.gold]
        return {"id": self.id, "query": self.query, "gold": gold, **self.extra}


def _check_gold(raw: object) -> tuple[tuple[LineSpan, ...] | None, str]:
    if not isinstance(raw, list) or not raw:
        return None, "'gold' must be a non-empty list of {path, start_line, end_line}"
    out: list[LineSpan] = []
    for i, g in enumerate(raw):
        if not isinstance(g, dict):
            return None, f"gold[{i}] must be an object with path, start_line, end_line"
        path = g.get("path")
        if not isinstance(path, str) or not path.strip():
            return None, f"gold[{i}].path must be a non-empty string"
        start, end = g.get("start_line"), g.get("end_line")
        for name, v in (("start_line", start), ("end_line", end)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                return None, f"gold[{i}].{name} must be an integer >= 1"
        assert isinstance(start, int) and isinstance(end, int)
        if end < start:
            return None, f"gold[{i}].end_line ({end}) is before start_line ({start})"
        out.append(LineSpan.of(g))
    return tuple(out), ""


def parse_queries(lines: Iterable[str], source: str = "queries") -> list[EvalQuery]:
    """Parse and check a query file; every problem is reported with its line number."""
    queries: list[EvalQuery] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            problems.append(f"line {n}: not valid JSON ({str(exc).split(':')[0]})")
            continue
        if not isinstance(obj, dict):
            problems.append(f"line {n}: expected a JSON object, got {type(obj).__name__}")
            continue
        qid, text = obj.get("id"), obj.get("query")
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():
            problems.append(f"line {n}: 'id' must be a non-empty string")
            continue
        qid = str(qid)
        if qid in first_line:
            problems.append(f"line {n}: duplicate id {qid!r} (first on line {first_line[qid]})")
            continue
        first_line[qid] = n
        if not isinstance(text, str) or not text.strip():
            problems.append(f"line {n}: 'query' must be a non-empty string")
            continue
        gold, why = _check_gold(obj.get("gold"))
        if gold is None:
            problems.append(f"line {n}: {why}")
            continue
        extra = {k: v for k, v in obj.items() if k not in ("id", "query", "gold")}
        queries.append(EvalQuery(qid, text, gold, extra))
    if problems:
        more = len(problems) - MAX_REPORTED
        shown = "; ".join(problems[:MAX_REPORTED]) + (f"; and {more} more" if more > 0 else "")
        raise InvalidArgument(f"{source}: {shown}")
    if not queries:
        raise InvalidArgument(f"{source}: no queries (one JSON object a line: id, query, gold)")
    return queries


def load_queries(path: Path) -> list[EvalQuery]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument(f"query file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"query file {path} cannot be read ({type(exc).__name__})") from None
    return parse_queries(text.splitlines(), path.name)


def dump_queries(queries: Iterable[EvalQuery]) -> bytes:
    return b"".join(orjson.dumps(q.to_json()) + b"\n" for q in queries)


# -- the starter set from docstrings -----------------------------------------------------------

def first_sentence(doc: str) -> str:
    """The docstring's first sentence, reST roles and backticks unwrapped, no final period."""
    para = doc.strip().split("\n\n", 1)[0]
    text = " ".join(para.split())
    text = _SENTENCE_END.split(text, 1)[0]
    text = _TICKS.sub(r"\1", _ROLE.sub(r"\1", text))
    return text.rstrip(".").strip()


def _docstring_node(body: list[ast.stmt]) -> ast.Expr | None:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def _trivial(body: list[ast.stmt]) -> bool:
    """Only pass, ``...`` or ``raise NotImplementedError`` once the docstring is gone."""
    for st in body:
        if isinstance(st, ast.Pass):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue
        if isinstance(st, ast.Raise) and "NotImplementedError" in ast.unparse(st):
            continue
        return False
    return True


def _is_overload(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split(".")[-1] == "overload" for d in fn.decorator_list)


@dataclass(frozen=True, slots=True)
class Documented:
    name: str  # qualified: Class.method
    query: str
    start_line: int
    end_line: int


def _blank(lines: list[str], node: ast.Expr, only_statement: bool) -> None:
    """Hide one docstring in ``lines`` (edited in place) without moving any line."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    col, end_col = node.col_offset, node.end_col_offset or 0
    # ast columns are UTF-8 byte offsets
    head = lines[first].encode()[:col].decode(errors="replace")
    tail = lines[last].encode()[end_col:].decode(errors="replace")
    alone = not head.strip() and not tail.strip().lstrip(";").strip()
    if alone:
        indent = head
        lines[first] = (indent + "pass") if only_statement else ""
    else:
        lines[first] = head + "..." + (tail if first == last else "")
        if first != last:
            lines[last] = tail
            last -= 1
    for i in range(first + 1, last + 1):
        lines[i] = ""


def strip_docstrings(source: str) -> tuple[str, list[Documented]]:
    """``source`` with every docstring blanked (line numbers kept), and the documented
    top-level functions and methods that make good questions. Raises SyntaxError."""
    tree = ast.parse(source)
    lines = source.split("\n")
    found: list[Documented] = []
    edits: list[tuple[ast.Expr, bool]] = []

    def visit(body: list[ast.stmt], prefix: str, in_function: bool) -> None:
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = _docstring_node(node.body)
            if doc is not None:
                edits.append((doc, len(node.body) == 1))
            is_fn = not isinstance(node, ast.ClassDef)
            if is_fn and doc is not None and not in_function:
                _consider(node, doc, prefix)  # type: ignore[arg-type]
            visit(node.body, f"{prefix}{node.name}.", in_function or is_fn)

    def _consider(fn: ast.FunctionDef | ast.AsyncFunctionDef, doc: ast.Expr, prefix: str) -> None:
        name = fn.name
        if "test" in name.lower() or (name.startswith("__") and name.endswith("__")):
            return
        if _is_overload(fn) or _trivial(fn.body[1:]):
            return
        start = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        end = fn.end_lineno or fn.lineno
        doc_lines = (doc.end_lineno or doc.lineno) - doc.lineno + 1
        if end - start + 1 - doc_lines < 3:
            return
        query = first_sentence(str(doc.value.value))  # type: ignore[attr-defined]
        if len(query.split()) >= 3:
            found.append(Documented(prefix + name, query, start, end))

    module_doc = _docstring_node(tree.body)
    if module_doc is not None:
        edits.append((module_doc, False))
    visit(tree.body, "", False)
    for node, only in edits:
        _blank(lines, node, only)
    return "\n".join(lines), found


def is_library_path(rel: str) -> bool:
    if is_test_file(rel):
        return False
    return not any(p.lower() in NON_LIBRARY for p in rel.split("/")[:-1])


#: hides the documentation of one file: (rel path, text) -> (text, questions); raises
#: SyntaxError or ValueError for a file it cannot read, which is then indexed as it is
Stripper = Callable[[str, str], tuple[str, list[Documented]]]


def python_stripper(rel: str, text: str) -> tuple[str, list[Documented]]:
    return strip_docstrings(text)


def docstring_set(files: Mapping[str, str], *, limit: int = 200, id_prefix: str = "doc",
                  strip: Stripper = python_stripper
                  ) -> tuple[dict[str, str], list[EvalQuery]]:
    """Stripped texts of ``files`` (rel path -> source) and up to ``limit`` questions; ``strip``
    hides each file's documentation (Python docstrings by default).

    Queries whose text still occurs in the stripped corpus (say, in a comment) are dropped;
    identical questions are merged into one with several gold spans; the sample is chosen by a
    hash of the question, so it is stable from run to run.
    """
    stripped: dict[str, str] = {}
    by_query: dict[str, list[tuple[str, Documented]]] = {}
    for rel in sorted(files):
        try:
            text, docs = strip(rel, files[rel])
        except (SyntaxError, ValueError):
            continue  # indexed as it is; it cannot leak a question we do not ask
        stripped[rel] = text
        if is_library_path(rel):
            for d in docs:
                by_query.setdefault(d.query, []).append((rel, d))
    haystack = "\n".join(stripped.values()).lower()
    keys = sorted(by_query, key=lambda q: hashlib.sha1(q.encode()).hexdigest())
    chosen: list[str] = []
    for q in keys:
        if len(chosen) >= limit:
            break
        if q.lower() not in haystack:
            chosen.append(q)
    chosen.sort(key=lambda q: (by_query[q][0][0], by_query[q][0][1].start_line))
    queries = []
    for i, q in enumerate(chosen, 1):
        gold = tuple(LineSpan(rel, d.start_line, d.end_line) for rel, d in by_query[q])
        names = [d.name for _, d in by_query[q]]
        queries.append(EvalQuery(f"{id_prefix}-{i:05d}", q, gold, {"name": ", ".join(names)}))
    return stripped, queries
