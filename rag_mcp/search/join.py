"""Adjacent hits of one file are returned as one hit: the line range that covers them.

A function split at statement boundaries, a docs section cut at paragraphs, a method and the
one after it: when the ranking puts neighbouring spans of a file among the answer, the reader
wants the contiguous range, once, not two halves in two slots. Joining keeps the order of the
ranking (a group stands where its best span ranked, with that span's score and label), frees
the other slots for the next hits, and never grows a range past ``max_lines``.

The groups cover the longest prefix of the ranking that fits in k ranges: the scan stops at
the first hit that would need a (k+1)-th. rag_query plans them for its largest k (20) and
answers with the first k, so asking for more never changes the first answers.

Focus: a code answer after the first three whose range is longer than ``focus_lines`` is
narrowed to at most ``focus_lines`` lines (``focus``): its best-ranked span, grown by the
group's other spans in rank order while the range stays that short; a best span longer than
that alone gives the window of its lines that holds the most of the query's terms
(``best_window``). The first three answers, the likeliest right, stay whole, and so does an
answer whose best span defines an identifier the question names (``defines``): asked for by
name, a definition is wanted whole.

Head: a type asked for by name whose best span holds only its head (the signature and what comes
before its first member: a class's doc comment and ``class Axios {``, ``impl Router {``) is not
yet its definition. The answer grows over the type's next spans (``grow_head``), whole, while
the range from the head stays within ``focus_lines``: the constructor or first method that
says what the type is made of, which the head alone does not.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass

from rag_mcp.index.catalog import Catalog
from rag_mcp.index.lexical import tokenize
from rag_mcp.index.spans import Span
from rag_mcp.search.rank import QUALIFIER


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a ranked hit lies: a file (``where``: repository and path) and its line range;
    ``joinable`` is False for a hit that may stand alone but must not join (under tau)."""

    where: Hashable
    start_line: int
    end_line: int
    joinable: bool = True


def plan_joins(hits: Sequence[Placed], k: int, *, gap: int, max_lines: int) -> list[list[int]]:
    """Groups of indexes into ``hits`` (ranked best first), at most ``k`` of them, each group
    best first, covering the longest prefix of ``hits`` that fits in ``k`` groups.

    A hit joins the first group of its file whose range it touches or overlaps, or is at most
    ``gap`` lines away from, when the joined range stays within ``max_lines``; a group that
    grows into reach of another takes it in, led by the better-ranked lead. A negative ``gap``
    joins nothing."""
    groups: list[list[int]] = []
    ranges: list[Placed] = []  # each group's joined range (joinable: its lead may take others)
    for i, h in enumerate(hits):
        g = _home(ranges, h, -1, gap, max_lines) if gap >= 0 and h.joinable else None
        if g is not None:
            groups[g].append(i)
            ranges[g] = _union(ranges[g], h)
            # the range grew: it may now reach a group that ranked after it (or before it)
            while (other := _home(ranges, ranges[g], g, gap, max_lines)) is not None:
                first, second = min(g, other), max(g, other)
                groups[first] += groups.pop(second)
                ranges[first] = _union(ranges[first], ranges.pop(second))
                g = first
            continue
        if len(groups) == k:
            break
        groups.append([i])
        ranges.append(h)
    return groups


def _union(a: Placed, b: Placed) -> Placed:
    return Placed(a.where, min(a.start_line, b.start_line), max(a.end_line, b.end_line), True)


def _home(ranges: list[Placed], h: Placed, skip: int, gap: int, max_lines: int) -> int | None:
    """The first group (not ``skip``) that ``h`` may join."""
    for g, r in enumerate(ranges):
        if (g != skip and r.joinable and r.where == h.where
                and h.start_line <= r.end_line + gap + 1 and h.end_line >= r.start_line - gap - 1
                and max(r.end_line, h.end_line) - min(r.start_line, h.start_line) < max_lines):
            return g
    return None


def joined_label(labels: Iterable[str | None], sep: str) -> str | None:
    """The label of a joined range: every distinct label of its parts (symbols or heading
    paths) in the order given (rag_query gives the best-ranked part's first, then the parts in
    line order), ``sep``-separated; None when no part has one."""
    seen = list(dict.fromkeys(label for label in labels if label))
    return sep.join(seen) if seen else None


def focus(members: Sequence[Placed], *, gap: int, max_lines: int) -> tuple[int, int]:
    """The line range of a group (``members`` best first, as ``plan_joins`` gives them) narrowed
    to at most ``max_lines`` lines: the best member's range, grown by the others in rank order
    while it stays within ``max_lines`` and each one touches it (at most ``gap`` lines away).
    Longer than ``max_lines`` only when the best member alone is."""
    start, end = members[0].start_line, members[0].end_line
    left = list(members[1:])
    grew = True
    while grew:
        grew = False
        for m in left:
            lo, hi = min(start, m.start_line), max(end, m.end_line)
            if (m.start_line <= end + gap + 1 and m.end_line >= start - gap - 1
                    and hi - lo < max_lines):
                start, end = lo, hi
                left.remove(m)
                grew = True
                break  # the next best first again: a range that grew may now reach it
    return start, end


def best_window(lines: Sequence[str], query: str, width: int) -> int:
    """Offset of the ``width`` consecutive lines of ``lines`` that hold the most of the query's
    terms (a line counts each distinct term once; the earliest such window on a tie, so a
    definition whose body says nothing about the query keeps its signature)."""
    if len(lines) <= width:
        return 0
    wanted = set(tokenize(query))
    score = [len(wanted.intersection(tokenize(line))) for line in lines]
    best = total = sum(score[:width])
    at = 0
    for i in range(width, len(score)):
        total += score[i] - score[i - width]
        if total > best:
            best, at = total, i - width + 1
    return at


def defines(label: str | None, names: Collection[str]) -> bool:
    """Whether a span's label (a symbol, or a joined one's ", "-separated symbols) defines an
    identifier the question names (``names``: ``rank.intent``'s, last components and qualified
    forms): ``Plot._setup`` for ``_setup`` or ``Plot._setup``, ``send`` for ``Session.send``."""
    for sym in (label or "").split(", "):
        sym = QUALIFIER.sub(".", sym).strip(".")
        if sym and (sym.rsplit(".", 1)[-1] in names
                    or any(sym == n or sym.endswith("." + n) for n in names)):
            return True
    return False


def grow_head(head: Span, end: int, spans: Sequence[Span], taken: Collection[str],
              max_lines: int) -> list[Span]:
    """The spans an answer led by a type's ``head`` (ending at line ``end``) grows over: the
    file's ``spans`` (in line order) after ``end`` that belong to the type (its members, or
    more of its head), while the range from the head's first line stays within ``max_lines``;
    it stops at a span another answer holds (``taken``: span IDs) or one that is not the
    type's."""
    out: list[Span] = []
    for sp in spans:
        if sp.start_line <= end:
            continue
        if (sp.id in taken or sp.end_line - head.start_line + 1 > max_lines
                or (sp.parent != head.symbol and sp.symbol != head.symbol)):
            break
        out.append(sp)
    return out


def head_members(head: Span, end: int, names: Collection[str], catalog: Catalog | None,
                 taken: Collection[str], max_lines: int) -> list[Span]:
    """The spans an answer whose best span is ``head`` (the group ending at line ``end``)
    grows over: ``grow_head`` over the file's spans in ``catalog`` when ``head`` is the head of
    a type the question names (``names``), else none."""
    if (catalog is None or head.kind != "code" or "head" not in dict(head.meta)
            or not defines(head.symbol, names)):
        return []
    return grow_head(head, end, [r.span for r in catalog.of_path(head.path)], taken, max_lines)
