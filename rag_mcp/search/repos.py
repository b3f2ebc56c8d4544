"""The served repositories: the record of one, their names, and which ones a request names.

A server serves one root by default and can be given several (``--root A --root B``,
``RAG_ROOTS``, ``repo.roots``). Each root keeps its own index and is one ``Repo``; the query
service searches them (``search.query``) and ``search.spanget.find_span`` finds which one holds
a span ID when the caller did not say.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_mcp.config import Settings
from rag_mcp.errors import InvalidArgument
from rag_mcp.index.handle import IndexHandle
from rag_mcp.index.spans import parse_span_id
from rag_mcp.search.freshness import Freshness
from rag_mcp.search.retrieve import Hit, Retriever

#: longest repository name; a longer one keeps its start and gets a hash of the whole path
MAX_NAME = 100
#: separates the repository from the span ID in ``fetch`` ids when several repos are served
QUALIFIER = ":"


@dataclass(frozen=True, slots=True, eq=False)
class Repo:
    """One served repository: its name, its own settings (root, index), its index handle and
    retriever, and, where the server keeps them, its freshness count and cross-encoder."""

    name: str
    settings: Settings
    handle: IndexHandle
    retriever: Retriever
    freshness: Freshness | None = None
    #: reorders this repository's top hits (``rerank=true``); None: no model configured
    reranker: Callable[[str, list[Hit]], list[Hit]] | None = None

    @property
    def root(self) -> Path:
        return Path(self.settings.root)


def _clean(part: str) -> str:
    # Names travel in tool arguments and in qualified ids: keep them to a safe alphabet (no ':').
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in part).strip("-") or "repo"


def _suffix(root: Path, n: int) -> str:
    parts = [p for p in root.parts if p not in ("/", "\\")][-n:] or [root.anchor]
    return "/".join(_clean(p) for p in parts)


def repo_names(roots: Sequence[str]) -> list[str]:
    """One name per root: its folder's name, or as many parent folders as it takes to tell two
    roots of the same name apart (``work/app``, ``oss/app``). Order-independent and stable."""
    paths = [Path(r) for r in roots]
    depth = [1] * len(paths)
    names = [_suffix(p, 1) for p in paths]
    for _ in range(max((len(p.parts) for p in paths), default=0)):
        clash = {n for n in names if names.count(n) > 1}
        if not clash:
            break
        for i, n in enumerate(names):
            if n in clash:
                depth[i] += 1
                names[i] = _suffix(paths[i], depth[i])
    out = []
    for p, n in zip(paths, names, strict=True):
        if len(n) > MAX_NAME or names.count(n) > 1:  # very long, or equal once cleaned
            digest = hashlib.sha1(str(p).encode("utf-8", "surrogatepass")).hexdigest()[:8]
            n = f"{n[: MAX_NAME - 9]}-{digest}"
        out.append(n)
    return out


def select(served: Sequence[str], wanted: str | Sequence[str] | None) -> list[str]:
    """The served repositories a ``repo`` argument names, in serving order; all when omitted."""
    if wanted is None:
        return list(served)
    asked = [wanted] if isinstance(wanted, str) else list(wanted)
    if not asked or not all(isinstance(a, str) for a in asked):
        raise InvalidArgument(f"repo must be a repository name or a list of them; served: "
                              f"{', '.join(served)}")
    unknown = [a for a in asked if a not in served]
    if unknown:
        shown = ", ".join(repr(u[:MAX_NAME]) for u in unknown[:5])
        raise InvalidArgument(f"unknown repo {shown}; this server serves: {', '.join(served)}")
    return [name for name in served if name in asked]


def qualify(repo: str, span_id: str) -> str:
    """A span ID that names its repository, for clients that can pass only an id (``fetch``)."""
    return f"{repo}{QUALIFIER}{span_id}"


def split_qualified(served: Sequence[str], id_: str) -> tuple[str | None, str]:
    """``(repo, span_id)`` of an id from ``qualify``; ``(None, id_)`` for a bare span ID.

    Repository names hold no ':', so a served name followed by ':' and a well-formed span ID can
    only be a qualified id (a path that starts with a served name and ':' is read as qualified).
    """
    head, sep, rest = id_.partition(QUALIFIER)
    if sep and head in served:
        try:
            parse_span_id(rest)
        except InvalidArgument:
            return None, id_
        return head, rest
    return None, id_
