"""AST-aware code chunker: one span per definition, small statements merged, big units split.

The language facts live in ``queries/<lang>.scm`` and the table in ``languages.py``; this module
is one generic loop keyed on the query's capture names:

- ``@definition.<kind>`` + ``@name`` (+ ``@parent``, a Go receiver type): a definition. Kinds
  ``function``, ``method`` and ``macro`` are leaves (nested functions stay inside them); every
  other kind (class, struct, impl, module, namespace, ...) is a container whose members get
  spans of their own while its header and fields make the container's own spans; the one
  holding its signature carries ``("head", "1")`` in its meta (its members follow it).
- ``@doc`` (comments, decorators, attributes): joins the definition right below it.
- ``@block`` (statement lists): a unit over the budget is cut only between their children.
  ``@doc`` and ``@block`` patterns list plain node types (checked when the grammar loads).
- ``@export`` (a name a re-export publishes: Rust ``pub use``, ``export { A } from``): the
  statement's span carries the names as ``("exports", "A B")`` in its meta.

Symbols are dotted paths: ``Indexer.run``, ``Outer.Inner.m``, Go ``Store.Get`` (receiver),
Rust ``Span.len`` (``impl Span``), and a C++ out-of-line ``Cache::find`` is ``Cache.find``:
``::`` is always written ``.`` so one convention serves every language.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple

from indexers.code_tiles import Draft, preview_of, tile
from indexers.languages import grammar, parser_for
from rag_mcp.index.spans import Chunk

if TYPE_CHECKING:
    from tree_sitter import Node

    from indexers.languages import Grammar

#: bump when the spans produced for the same file change; the index rebuilds on a mismatch
CHUNKER_VERSION = "code-5"

_LEAF_KINDS = frozenset({"function", "method", "macro"})
#: containers whose functions are not methods
_NAMESPACE_KINDS = frozenset({"module", "namespace"})
# A tree whose ERROR nodes cover more than this share of the non-blank lines is not worth
# chunking by its AST: line windows serve such a file better than spans around garbage.
_MAX_ERROR_SHARE = 0.25

_TOK, _DOC, _STMT, _DEF = 0, 1, 2, 3  # item kinds; when items merge the higher kind wins


class ParseFailed(Exception):
    """The file cannot be chunked by its syntax tree; the caller falls back to line windows.

    ``reason`` is a short stable word (``parse_error``, ``grammar_unavailable``, ``too_deep``)
    recorded as the fallback reason of the file's spans.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Def(NamedTuple):
    kind: str  # the capture's suffix: function, class, impl, ...
    name: str
    signature_row: int


class _Scope(NamedTuple):
    """The container whose members are being laid out."""

    symbol: str
    parent: str | None
    signature: str
    signature_row: int
    kind: str


@dataclass(slots=True)
class _Item:
    """Lines at one level of the layout: a definition, statement, comment or token."""

    first: int
    last: int
    kind: int
    nodes: list[Node]
    definition: _Def | None


def chunk_code(text: str, language: str, *, budget_chars: int = 1500) -> list[Chunk]:
    """Split a source file into definition spans; raises ``ParseFailed`` for an unusable tree.

    Every non-blank line lies in exactly one chunk; chunks are sorted, 1-based and inclusive,
    numbered like ``rag_mcp.index.spans.split_lines``.
    ``language`` is a name from ``CODE_LANGUAGES``.
    """
    # split_lines would also drop a final "" and each "\r": only blank lines and line lengths
    # differ (by one), and blank lines never bound a span, so the cheaper split is enough here
    lines = text.split("\n")
    if not any(line.strip() for line in lines):
        return []
    try:
        found = grammar(language)
        parser = parser_for(language)
    except KeyError:
        raise ValueError(f"unknown code language {language!r}; see CODE_LANGUAGES") from None
    except ImportError as exc:
        raise ParseFailed("grammar_unavailable") from exc
    # tree-sitter counts rows at "\n" only, like split_lines, so a row is a line number minus one
    # whatever the encoding and line endings (and its lexer skips a leading BOM)
    source = text.encode("utf-8", "surrogatepass")
    root = parser.parse(source).root_node
    layout = _Layout(found, source, lines, budget_chars)
    try:
        layout.find_definitions(root)
        if root.has_error:
            _check_usable(found, root, lines, layout.holds_definition)
        drafts = layout.run(root)
    except RecursionError:
        raise ParseFailed("too_deep") from None
    return tile(drafts, lines)


def _check_usable(found: Grammar, root: Node, lines: list[str],
                  holds_definition: Callable[[Node], bool]) -> None:
    """Raise ``ParseFailed`` when too much of the file is garbage to the parser.

    Garbage is what ERROR nodes cover, except ERROR nodes the parser recovered definitions
    inside: a conditional-compilation line in a parameter list (``#if`` in C, C++, C#) makes
    it wrap a whole file, or the rest of it, in one ERROR node whose functions all parse; the
    small ERROR nodes around the ``#if`` itself still count."""
    from tree_sitter import QueryCursor

    errors = QueryCursor(found.errors).captures(root).get("error", [])
    covered, reach = 0, -1
    spans = sorted((node.start_point[0], _last_row(node)) for node in errors
                   if not holds_definition(node))
    for first, last in spans:
        if last > reach:
            covered += last - max(first, reach + 1) + 1
            reach = last
    if covered > _MAX_ERROR_SHARE * sum(1 for line in lines if line.strip()):
        raise ParseFailed("parse_error")


def _last_row(node: Node) -> int:
    """The row of a node's last character (a node ending at column 0 ends on the row before)."""
    end = node.end_point
    if end[1] == 0 and end[0] > node.start_point[0]:
        return end[0] - 1
    return end[0]


def _clean_name(raw: bytes) -> str:
    """A name as the symbol writes it: quotes and sigils off (``'fresh'``, Ruby ``:fresh``),
    whitespace collapsed, ``::`` written ``.``."""
    name = " ".join(raw.decode("utf-8", "replace").split())
    return name.strip("\"'`").lstrip(":").replace("::", ".")


class _Layout:
    """One file's layout pass: definitions from the query, drafts of spans out."""

    def __init__(self, found: Grammar, source: bytes, lines: list[str], budget: int) -> None:
        self.grammar = found
        self.source = source
        self.lines = lines
        self.budget = budget
        self.offsets = list(accumulate(map(len, lines), initial=0))
        self.defs: dict[int, _Def] = {}
        self.def_spans: list[tuple[int, int, int]] = []  # (start_byte, end_byte, id), sorted
        self.exports: list[tuple[int, int, str]] = []  # (byte, row, name): re-exported names
        self.drafts: list[Draft] = []
        #: the file's first non-blank row (a comment there is the file's header)
        self.head = next((row for row, line in enumerate(lines) if line.strip()), 0)

    def size(self, first: int, last: int) -> int:
        """Characters of rows ``first..last`` with their newlines."""
        return self.offsets[last + 1] - self.offsets[first] + last + 1 - first

    def run(self, root: Node) -> list[Draft]:
        """Lay the file out; ``find_definitions`` must have run on the same tree."""
        self.emit_level(self.collect(root), None)
        return self.drafts

    def find_definitions(self, root: Node) -> None:
        """Read the query's definitions. When two patterns capture the same node, the one
        written first in the query file wins (specific forms before general ones); when two
        definitions share a name node (``@decorator def f`` and ``def f``), the wider wins."""
        from tree_sitter import QueryCursor

        widest: dict[int, Node] = {}  # name node id -> widest definition naming it
        found: dict[int, tuple[Node, str, Node, list[Node] | None]] = {}
        pattern_of: dict[int, int] = {}  # definition node id -> the pattern that named it
        for pattern, captures in QueryCursor(self.grammar.definitions).matches(root):
            self.exports.extend((n.start_byte, n.start_point[0],
                                 _clean_name(self.source[n.start_byte : n.end_byte]))
                                for n in captures.get("export", ()))
            names = captures.get("name")
            if not names:
                continue
            for capture, nodes in captures.items():
                if not capture.startswith("definition."):
                    continue
                node, name_node = nodes[0], names[0]
                if pattern_of.get(node.id, pattern) < pattern:
                    continue
                known = widest.get(name_node.id)
                if known is not None and known.id != node.id:
                    # `@decorator def f` and `def f` both match: the wider (decorated) one wins
                    if known.end_byte - known.start_byte >= node.end_byte - node.start_byte:
                        continue
                    found.pop(known.id, None)
                previous = found.get(node.id)
                if previous is not None:
                    widest.pop(previous[2].id, None)
                widest[name_node.id] = node
                pattern_of[node.id] = pattern
                found[node.id] = (node, capture[11:], name_node, captures.get("parent"))
        source = self.source
        for node, kind, name_node, owner in found.values():
            name = _clean_name(source[name_node.start_byte : name_node.end_byte])
            if owner:
                name = f"{_clean_name(source[owner[0].start_byte : owner[0].end_byte])}.{name}"
            row = name_node.start_point[0]
            if row > node.start_point[0] and row == _last_row(node):
                row = node.start_point[0]  # `typedef struct {...} name;`: the name trails
            self.defs[node.id] = _Def(kind, name, row)
        self.def_spans = sorted((n.start_byte, n.end_byte, n.id) for n, *_ in found.values())
        self.exports.sort()  # in file order, once: every run of statements reads them

    def holds_definition(self, node: Node) -> bool:
        """Whether a definition other than ``node`` itself lies inside ``node``."""
        spans, start, end, own = self.def_spans, node.start_byte, node.end_byte, node.id
        index = bisect_left(spans, (start, -1, -1))
        while index < len(spans) and spans[index][0] < end:
            if spans[index][1] <= end and spans[index][2] != own:
                return True
            index += 1
        return False

    # -- one level of the layout ---------------------------------------------------------------

    def collect(self, parent: Node) -> list[_Item]:
        """The items of one level: ``parent``'s children, opening any that hold definitions."""
        raw: list[_Item] = []
        self.gather(parent, raw)
        merged: list[_Item] = []
        for item in raw:
            if merged and item.first <= merged[-1].last:
                _absorb(merged[-1], item)  # nodes sharing a line are one item
            else:
                merged.append(item)
        out: list[_Item] = []
        for item in merged:
            if item.kind == _DEF:
                first = item.first
                while out and out[-1].kind == _DOC and self.leads(out[-1], item, first):
                    item.first = out.pop().first  # comments/decorators right above it
            elif item.kind == _TOK and out:
                _absorb(out[-1], item)  # a closing `}` or `end` stays with what it closes
                continue
            out.append(item)
        return out

    def leads(self, doc: _Item, item: _Item, own: int) -> bool:
        """Whether a comment belongs to the definition after it (which starts at ``own``
        without its comments): right above it, or, when nothing is right above it, one blank
        line above it (JSDoc written ``/** ... */``, blank, ``res.send = function``), unless the
        comment opens the file (a licence or module header)."""
        if doc.last + 1 >= item.first:
            return True
        return (item.first == own and item.first - doc.last == 2
                and not self.lines[doc.last + 1].strip() and doc.first > self.head)

    def gather(self, parent: Node, out: list[_Item]) -> None:
        defs, docs = self.defs, self.grammar.doc_kinds
        for child in parent.children:
            if child.start_byte == child.end_byte:
                continue  # a MISSING node holds no text
            definition = defs.get(child.id)
            if definition is not None:
                kind = _DEF
            elif self.holds_definition(child):
                self.gather(child, out)  # `export ...`, `if TYPE_CHECKING:`, `#ifdef`, IIFEs
                continue
            elif child.kind_id in docs:
                kind = _DOC
            else:
                kind = _STMT if child.is_named else _TOK
            out.append(_Item(child.start_point[0], _last_row(child), kind, [child], definition))

    def emit_level(self, items: list[_Item], scope: _Scope | None) -> None:
        run: list[_Item] = []
        for item in items:
            if item.kind != _DEF:
                run.append(item)
                continue
            if run:
                self.emit_run(run, scope)
                run = []
            self.emit_definition(item, scope)
        if run:
            self.emit_run(run, scope)

    def emit_definition(self, item: _Item, scope: _Scope | None) -> None:
        definition = item.definition
        assert definition is not None
        symbol = f"{scope.symbol}.{definition.name}" if scope else definition.name
        parent = symbol.rpartition(".")[0] or None
        signature = preview_of(self.lines[definition.signature_row])
        kind = definition.kind
        if kind == "function" or kind == "method":
            # a method belongs to a type: declared in one, or named after one (`Cache::find`)
            in_type = scope is not None and scope.kind not in _NAMESPACE_KINDS
            kind = "method" if in_type or "." in definition.name else "function"
        node = item.nodes[0]
        if kind not in _LEAF_KINDS and self.holds_definition(node):
            members = self.collect(node)
            members[0].first = min(members[0].first, item.first)
            members[-1].last = max(members[-1].last, item.last)
            inner = _Scope(symbol, parent, signature, definition.signature_row, kind)
            self.emit_level(members, inner)
            return
        meta = (("def", kind),)
        if not self.too_big(item):
            self.drafts.append((item.first, item.last, symbol, parent, signature, "", meta))
            return
        for first, last in self.pack(item.first, item.last, self.cuts(item)):
            self.drafts.append((first, last, symbol, parent, signature, signature, meta))

    def emit_run(self, run: list[_Item], scope: _Scope | None) -> None:
        """Merge adjacent statements into spans up to the budget; split an oversized one."""
        cuts = [item.first for item in run[1:]]
        big = [item for item in run if self.too_big(item)]
        for item in big:
            cuts.extend(self.cuts(item))
        cuts.sort()
        for first, last in self.pack(run[0].first, run[-1].last, cuts):
            context = scope.signature if scope else ""
            for item in big:
                if not context and item.first <= last and first <= item.last and not (
                    first <= item.first and item.last <= last
                ):
                    context = preview_of(self.lines[item.first])  # a piece of a long statement
            exported = self.exported(first, last)
            if scope is None:
                preview = self.runpreview_of(run, first, last)
                self.drafts.append((first, last, None, None, preview, context, exported))
                continue
            meta: tuple[tuple[str, str], ...] = (("def", scope.kind), *exported)
            if first <= scope.signature_row <= last:
                preview = scope.signature
                meta = (*meta, ("head", "1"))  # the container's head: its members follow
            else:
                preview = self.runpreview_of(run, first, last)
            self.drafts.append((first, last, scope.symbol, scope.parent, preview, context, meta))

    def exported(self, first: int, last: int) -> tuple[tuple[str, str], ...]:
        """``(("exports", "A B"),)`` for the names re-exported on rows ``first..last``."""
        names = dict.fromkeys(name for _, row, name in self.exports if first <= row <= last)
        return (("exports", " ".join(names)),) if names else ()

    def runpreview_of(self, run: list[_Item], first: int, last: int) -> str:
        """The first line of the piece that is not a comment."""
        for item in run:
            if item.last >= first and item.kind != _DOC:
                row = max(item.first, first)
                if row <= last:
                    return preview_of(self.lines[row])
                break
        return preview_of(self.lines[first])

    # -- splitting units over the budget -------------------------------------------------------

    def too_big(self, item: _Item) -> bool:
        return self.size(item.first, item.last) > self.budget

    def cuts(self, item: _Item) -> list[int]:
        """Rows where a piece of the item may start: between statements of its blocks."""
        budget, docs, blocks = self.budget, self.grammar.doc_kinds, self.grammar.block_kinds
        rows: list[int] = []
        # only nodes over the budget are opened: a smaller one never needs a cut inside it
        stack = [node for node in item.nodes if node.end_byte - node.start_byte > budget]
        while stack:
            node = stack.pop()
            children = node.children
            if node.kind_id in blocks:
                end = -1  # last row of the previous statement
                leading = False  # whether that was a comment on lines of its own
                for child in children:
                    if not child.is_named:
                        continue
                    row = child.start_point[0]
                    if row > end >= 0 and not (leading and row == end + 1):
                        rows.append(row)  # a comment right above a statement stays with it
                    leading = row > end and (child.is_extra or child.kind_id in docs)
                    end = _last_row(child)
            stack.extend(child for child in children if child.end_byte - child.start_byte > budget)
        return sorted(row for row in rows if item.first < row <= item.last)

    def pack(self, first: int, last: int, cuts: list[int]) -> list[tuple[int, int]]:
        """Pieces of ``first..last`` cut only at ``cuts``: as few as the budget allows, even-sized.

        Plain greedy packing leaves a stub (often a lone ``return``) as the last piece; packing
        again towards the average size keeps the piece count and evens the sizes.
        """
        if not cuts or self.size(first, last) <= self.budget:
            return [(first, last)]
        pieces = self.greedy(first, last, cuts, self.budget)
        if len(pieces) > 1:
            limit = self.size(first, last) // len(pieces)
            step = max(1, self.budget // 16)
            while limit < self.budget:
                balanced = self.greedy(first, last, cuts, limit)
                if len(balanced) <= len(pieces):
                    return balanced
                limit += step
        return pieces

    def greedy(self, first: int, last: int, cuts: list[int], budget: int) -> list[tuple[int, int]]:
        """Pieces of ``first..last`` cut only at ``cuts``, each within ``budget`` if it can."""
        pieces: list[tuple[int, int]] = []
        start = best = first
        for cut in [*cuts, last + 1]:  # the end of the unit closes the last piece
            if cut <= start:
                continue
            if self.size(start, cut - 1) > budget:
                if best > start:  # close the piece at the last cut that fitted
                    pieces.append((start, best - 1))
                    start = best
                if self.size(start, cut - 1) > budget:  # one statement over the budget: whole
                    pieces.append((start, cut - 1))
                    start = cut
            best = cut
        if start <= last:
            pieces.append((start, last))
        return pieces


def _absorb(into: _Item, item: _Item) -> None:
    into.last = max(into.last, item.last)
    if item.kind > into.kind:
        into.kind = item.kind
        if item.kind == _DEF:  # the definition's node leads: it is the one laid out or split
            into.definition = item.definition
            into.nodes[:0] = item.nodes
            return
    into.nodes.extend(item.nodes)
