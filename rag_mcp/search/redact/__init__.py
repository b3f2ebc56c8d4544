"""Mask credentials in text before it leaves the server.

Three detectors feed one list of candidate ranges, most specific first:

* :mod:`.tokens`: secrets with a recognisable shape (vendor prefixes, key blocks, JWTs,
  ``Bearer``/``Basic`` values), 90 formats;
* :mod:`.context`: secrets told by where they stand (URL and query-string passwords, header
  values, command-line passwords, ``.pgpass`` lines, an AWS secret key in prose);
* :mod:`.assign`: a credential's name given a literal (``password = "..."``, ``TOKEN=...``).

Only the secret itself becomes ``[REDACTED:<kind>]``: keys, quotes, URL hosts and surrounding
code stay readable. A marker is never mistaken for a secret (its kind name follows a colon, and
"[" starts no value), so redacting twice changes nothing. Thresholds were set with
``bench/safety/redaction_fp.py`` on millions of lines of real code; the planted corpus in
``tests/fixtures/secrets`` says what must be caught.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from rag_mcp.search.redact import assign, context, tokens

MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True, slots=True)
class Redaction:
    kind: str
    start: int
    end: int


def _candidates(text: str) -> list[tuple[int, int, int, str]]:
    cands = tokens.find(text)
    low = text.lower()
    if len(low) != len(text):  # a few non-ASCII letters lower-case to two characters
        low = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    cands += context.find(text, low)
    for kw in assign.KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            if hit := assign.judge(text, low, kw, i):
                cands.append((2, hit[1], hit[2], hit[0]))
            i = low.find(kw, i + len(kw))
    return cands


def find_secrets(text: str) -> list[Redaction]:
    """Every secret in ``text``: non-overlapping, sorted by start."""
    # Specific kinds first, then earlier and longer; ``starts``/``ends`` keep the taken ranges
    # disjoint and sorted.
    starts: list[int] = []
    ends: list[int] = []
    out: list[Redaction] = []
    for _, s, e, kind in sorted(_candidates(text), key=lambda c: (c[0], c[1], c[1] - c[2])):
        i = bisect_right(starts, s)
        if s >= e or (i and ends[i - 1] > s) or (i < len(starts) and starts[i] < e):
            continue
        starts.insert(i, s)
        ends.insert(i, e)
        out.append(Redaction(kind, s, e))
    return sorted(out, key=lambda r: r.start)


def redact(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with each secret replaced by ``[REDACTED:<kind>]``, and the counts by kind."""
    counts: dict[str, int] = {}
    # Removing a secret can expose another: a value rejected as a placeholder because of what
    # a nested token held may pass once that token is gone. Passes repeat until nothing is found.
    for _ in range(4):
        found = find_secrets(text)
        if not found:
            break
        parts: list[str] = []
        last = 0
        for r in found:
            parts += (text[last : r.start], f"{MARKER_PREFIX}{r.kind}]")
            last = r.end
            counts[r.kind] = counts.get(r.kind, 0) + 1
        text = "".join(parts) + text[last:]
    return text, counts


def redact_label(value: str | None) -> str | None:
    """A symbol, heading or path with any secret masked: Markdown headings and docstring-derived
    labels are repository text too ("## Rotate ghp_... before release")."""
    return redact(value)[0] if value else value


def redact_id(span_id: str) -> str:
    """A span ID as shown to a client: a secret in its path (``keys/ghp_....txt:1-9:ab12...``)
    masked. :func:`rag_mcp.search.redact.ids.unmask_path` finds the span again from the masked
    ID."""
    head, sep, tail = span_id.rpartition(":")
    path, sep2, lines = head.rpartition(":")
    if not sep or not sep2:
        return redact(span_id)[0]
    shown = redact(path)[0]
    return span_id if shown == path else f"{shown}:{lines}:{tail}"
