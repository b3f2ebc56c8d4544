"""The starter set of ``rag-eval --docstrings``: questions made from a repository's own
documentation, asked against an index of a copy with that documentation hidden.

Python docstrings are read by ``rag_mcp.eval.sets``; other languages' doc comments by
``indexers.doc_comments`` (it needs the chunker). The copy keeps every line number, so a missed
question points at the user's real function.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from indexers import walk
from indexers.doc_comments import COMMENTS, strip_doc_comments
from indexers.languages import code_language_for_path
from rag_mcp.config import Settings, index_base
from rag_mcp.errors import NotFound
from rag_mcp.eval.sets import Documented, EvalQuery, docstring_set, strip_docstrings


def write_documented_copy(settings: Settings, dest: Path, limit: int) -> list[EvalQuery]:
    """Copy the repository's indexable files to ``dest`` with their documentation hidden (line
    numbers kept) and return up to ``limit`` questions made from it: Python docstrings, and the
    comment right above a function in every other language the chunker parses."""
    root = settings.root_path
    walked = walk.walk(root, max_file_bytes=settings.max_file_bytes,
                       extra_ignore=settings.ignore, index_dir=index_base(settings))
    sources: dict[str, str] = {}
    languages: dict[str, str] = {}
    for c in walked.files:
        lang = code_language_for_path(c.rel)
        if lang is None or lang != "python" and lang not in COMMENTS:
            continue
        try:
            sources[c.rel] = c.abs_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        languages[c.rel] = lang

    def strip(rel: str, text: str) -> tuple[str, list[Documented]]:
        lang = languages[rel]
        if lang == "python":
            return strip_docstrings(text)
        return strip_doc_comments(text, lang, budget_chars=settings.chunk_chars)

    stripped, queries = docstring_set(sources, limit=limit, strip=strip)
    if not queries:
        raise NotFound(
            f"found no documented function under {root} to ask about (each needs a docstring "
            "or a comment right above it whose first sentence has 3 or more words); write a "
            "query file instead")
    for c in walked.files:
        out = dest / c.rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if c.rel in stripped:
            out.write_text(stripped[c.rel], encoding="utf-8")
        else:
            shutil.copyfile(c.abs_path, out)
    return queries


@contextlib.contextmanager
def docstring_index(settings: Settings, limit: int, *, quiet: bool
                    ) -> Iterator[tuple[Settings, list[EvalQuery]]]:
    """Index a copy of the repository with its documentation hidden; yield the settings of that
    index and the questions, and delete both the copy and its index afterwards.

    The copy lives in a temporary folder; its index goes under the repository's own index
    folder (its own collection), so the embedding cache there is shared and a second run embeds
    only what changed.
    """
    from indexers.pipeline import run_index
    from indexers.progress import Progress

    tmp = Path(tempfile.mkdtemp(prefix="rag-eval-"))
    copy = tmp / settings.root_path.name
    indexed: Settings | None = None
    try:
        queries = write_documented_copy(settings, copy, limit)
        name = f"{settings.collection_name[:40]}-docstrings"
        indexed = replace(settings, root=str(copy), index_dir=str(index_base(settings)),
                          collection=name)
        run_index(indexed, progress=Progress(quiet=quiet))
        yield indexed, queries
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if indexed is not None:
            shutil.rmtree(indexed.index_path, ignore_errors=True)
