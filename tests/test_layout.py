"""The floor plan as tests: who may import what, no import circles, and module and function size.

docs/DESIGN.md draws the layout these rules keep: the core (``rag_mcp`` minus ``serve/``) imports
neither ``indexers`` nor ``tools``; only ``serve/`` knows the MCP SDK; only the vector-store
adapter knows chromadb; product modules stay small enough to read in one sitting.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rag_mcp", "indexers", "tools")

#: longest product module, and longest function, in lines (the review's "~450" and "~80")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
#: modules allowed to be longer, each with its reason (tables and generated data)
LONG_MODULES: dict[str, str] = {}
LONG_FUNCTIONS: dict[str, str] = {}


def modules() -> dict[str, Path]:
    """Every product module by dotted name."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``path``, lazy ones included (a circle
    hidden inside a function is still a circle); ``if TYPE_CHECKING`` blocks are skipped."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            yield child
            yield from walk(child)

    for node in walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base]) if base else ".".join(up)
            yield base, node.lineno
            for a in node.names:  # ``from pkg import module``
                yield f"{base}.{a.name}", node.lineno


def offenders(rule: str, may: Callable[[str], bool], banned: tuple[str, ...]) -> list[str]:
    found = []
    for name, path in modules().items():
        if may(name):
            continue
        for target, line in imports(path):
            if target.split(".")[0] in banned or any(target.startswith(b + ".") or target == b
                                                     for b in banned):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target} ({rule})")
    return found


def test_only_serve_imports_the_mcp_sdk_tools_and_the_watcher() -> None:
    assert offenders("only rag_mcp.serve imports mcp",
                     lambda n: n.startswith("rag_mcp.serve"), ("mcp",)) == []
    assert offenders("the core imports no tools or indexers",
                     lambda n: not n.startswith("rag_mcp") or n.startswith("rag_mcp.serve"),
                     ("tools", "indexers")) == []
    assert offenders("only serve/ and the indexer CLI start a watcher",
                     lambda n: n.startswith(("rag_mcp.serve", "indexers")),
                     ("indexers.watch",)) == []


def test_only_the_store_adapter_knows_chromadb() -> None:
    assert offenders("only rag_mcp.index.store* imports chromadb",
                     lambda n: n.startswith("rag_mcp.index.store"),
                     ("chromadb", "chromadb_rust_bindings", "hnswlib")) == []


def test_tools_and_indexers_do_not_import_each_other() -> None:
    assert offenders("tools never load the indexer", lambda n: not n.startswith("tools"),
                     ("indexers",)) == []
    assert offenders("the indexer never loads the tools", lambda n: not n.startswith("indexers"),
                     ("tools",)) == []


def test_no_import_circles_among_product_modules() -> None:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for target, _ in imports(path):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    # a package's __init__ importing its own submodules is not a circle between modules
    cycles = [c for c in cycles if not all(x.startswith(c[0]) or c[0].startswith(x) for x in c)]
    assert cycles == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_and_functions_stay_small(name: str) -> None:
    path = modules()[name]
    rel = str(path.relative_to(ROOT))
    text = path.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert n <= MAX_MODULE_LINES or rel in LONG_MODULES, f"{rel} has {n} lines"
    long = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and f"{rel}:{node.name}" not in LONG_FUNCTIONS:
                long.append(f"{node.name} ({length} lines)")
    assert long == [], f"{rel}: {', '.join(long)}"


def test_the_core_stays_shallow() -> None:
    """At most ~12 modules directly in rag_mcp/: config, errors, logging, the public API."""
    top = [p.name for p in (ROOT / "rag_mcp").glob("*.py")]
    assert len(top) <= 12, sorted(top)
