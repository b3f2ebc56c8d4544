"""What is indexed and how stale it is, for ``rag-index --status``/``--spans`` and the server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexers import walk
from rag_mcp.config import Settings, index_base
from rag_mcp.errors import IndexUnavailable, NotFound
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog, FileRecord
from rag_mcp.index.handle import index_command
from rag_mcp.index.spans import content_hash


@dataclass(frozen=True, slots=True)
class Staleness:
    changed: list[str]
    added: list[str]
    deleted: list[str]

    @property
    def count(self) -> int:
        return len(self.changed) + len(self.added) + len(self.deleted)


def staleness(settings: Settings, indexed: dict[str, FileRecord]) -> Staleness:
    """Files that differ from the index now: changed content, new files, deleted files."""
    walked = walk.walk(Path(settings.root), max_file_bytes=settings.max_file_bytes,
                       extra_ignore=settings.ignore, index_dir=index_base(settings))
    changed: list[str] = []
    added: list[str] = []
    for c in walked.files:
        rec = indexed.get(c.rel)
        if rec is None:
            # Never indexed: new, unless it is content we skip (binary without an extension...)
            try:
                data = c.abs_path.read_bytes()
            except OSError:
                continue
            if walk.check_content(c.rel, data) is None:
                added.append(c.rel)
        elif rec.size != c.size or rec.mtime_ns != c.mtime_ns:
            try:
                if content_hash(c.abs_path.read_bytes()) != rec.content_hash:
                    changed.append(c.rel)
            except OSError:
                changed.append(c.rel)
    present = {c.rel for c in walked.files}
    deleted = sorted(p for p in indexed if p not in present)
    return Staleness(changed, added, deleted)


def _open(settings: Settings) -> tuple[dict[str, Any], Catalog]:
    pointer = gen.read_pointer(settings.index_path)
    if pointer is None:
        raise IndexUnavailable(
            f"no index for {settings.root}; build it with `{index_command(settings)}`")
    manifest = gen.read_manifest(pointer.dir)
    return manifest, Catalog(pointer.dir / gen.CATALOG, readonly=True)


def index_status(settings: Settings) -> dict[str, Any]:
    """The ``--status`` object: root, counts by language/kind, skipped, model, stale files."""
    manifest, catalog = _open(settings)
    try:
        counts = catalog.counts()
        stale = staleness(settings, catalog.files())
    finally:
        catalog.close()
    return {
        "root": settings.root,
        "index_dir": str(settings.index_path),
        "generation": manifest["generation"],
        "files": counts["files"],
        "spans": counts["spans"],
        "by_language": counts["by_language"],
        "by_kind": counts["by_kind"],
        "skipped": manifest.get("skipped", {}),
        "fallback": counts["fallback"],
        "model": manifest.get("model"),
        "backend": manifest.get("backend"),
        "dim": manifest.get("dim"),
        "embed_max_tokens": manifest.get("embed_max_tokens", 0),
        "chunker_version": manifest.get("chunker_version"),
        "schema_version": manifest.get("schema_version"),
        "store": manifest.get("store"),
        "last_indexed_at": manifest.get("created_at"),
        "git_head": manifest.get("git_head"),
        "stale_files": stale.count,
        "stale": {"changed": stale.changed[:50], "added": stale.added[:50],
                  "deleted": stale.deleted[:50]},
    }


def list_spans(settings: Settings, path: str | None) -> list[dict[str, Any]]:
    """Spans of one file (or all), in file order, as ``--spans`` prints them."""
    _manifest, catalog = _open(settings)
    try:
        if path:
            rel = _rel(settings, path)
            rows = catalog.of_path(rel)
            if not rows and catalog.file(rel) is None:
                raise NotFound(f"{rel} is not in the index (ignored, skipped, or new since the "
                               f"last run of `{index_command(settings)}`)")
        else:
            rows = catalog.all_spans()
    finally:
        catalog.close()
    out = []
    for r in rows:
        sp = r.span
        item: dict[str, Any] = {
            "id": sp.id, "path": sp.path, "start_line": sp.start_line, "end_line": sp.end_line,
            "kind": sp.kind, "language": sp.language, "symbol": sp.symbol, "parent": sp.parent,
            "heading": sp.heading, "preview": sp.preview, "bytes": sp.byte_len,
        }
        out.append(item)
    return out


def _rel(settings: Settings, path: str) -> str:
    """A user-given path (absolute, relative to cwd, or repo-relative) as a repo-relative one."""
    root = Path(settings.root)
    p = Path(path)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p, root / p]
    for c in candidates:
        try:
            return c.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
    return p.as_posix()
