"""Span IDs whose path holds a secret: shown masked, found again from the masked form.

A file named after a token (``keys/ghp_....txt``) stays indexed and searchable, but its path is
repository text like any other: hits, span IDs, titles, URLs and logs show
``keys/[REDACTED:github_pat].txt:1-9:ab12cd34ef56``. A client passes that ID back unchanged;
:func:`unmask_path` maps the masked path to the indexed one (the digest and lines then pick the
span as usual). Two indexed paths that mask alike are told apart by the digest.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Protocol

from rag_mcp.search.redact import MARKER_PREFIX, redact


class _Files(Protocol):
    def files(self) -> Mapping[str, object]: ...


# catalog -> {masked path: [indexed paths]}, built on the first masked ID a catalog is asked for
# (one pass over its file list) and dropped with the catalog (a new generation gets a new one).
_MASKED: weakref.WeakKeyDictionary[object, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def is_masked(path: str) -> bool:
    return MARKER_PREFIX in path


def unmask_path(catalog: _Files, masked: str) -> list[str]:
    """The indexed paths that show as ``masked`` (none when it names no indexed file)."""
    table = _MASKED.get(catalog)
    if table is None:
        table = {}
        for path in catalog.files():
            shown = redact(path)[0]
            if shown != path:
                table.setdefault(shown, []).append(path)
        _MASKED[catalog] = table
    return table.get(masked, [])
