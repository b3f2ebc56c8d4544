"""What an index run has to do: the files that changed, were touched or disappeared.

Two ways to find out. ``from_walk`` lists the whole tree (``indexers.walk``) and compares every
file with the catalog of the current generation by size and mtime, then by content hash. When a
file watcher already knows which paths changed, ``from_paths`` looks only at those (a folder stands
for everything under it), so a one-file edit costs a few stats instead of a walk of the tree.

Files skipped for their content (binary, generated, secret) never enter the catalog; they are
remembered in the manifest by size and mtime (``skipped_files``) so an unchanged tree is a no-op
instead of re-reading them on every run.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from indexers import walk
from rag_mcp.config import Settings, index_base
from rag_mcp.index.catalog import FileRecord
from rag_mcp.index.spans import content_hash

# rel -> (size, mtime_ns, reason) of a file skipped after reading it
SkippedFiles = dict[str, tuple[int, int, str]]


@dataclass
class ChangeSet:
    changed: list[walk.Candidate] = field(default_factory=list)  # new or different content
    touched: list[walk.Candidate] = field(default_factory=list)  # same content, new mtime
    deleted: list[str] = field(default_factory=list)  # in the catalog, gone or now ignored
    present: int = 0  # files that pass the path rules after this run
    skipped_paths: Counter[str] = field(default_factory=Counter)  # by reason, path-level rules
    skipped_files: SkippedFiles = field(default_factory=dict)  # content skips still valid

    @property
    def empty(self) -> bool:
        return not (self.changed or self.touched or self.deleted)


def skipped_from_manifest(manifest: Mapping[str, object] | None) -> SkippedFiles:
    raw = manifest.get("skipped_files") if manifest else None
    if not isinstance(raw, dict):
        return {}
    out: SkippedFiles = {}
    for rel, v in raw.items():
        if isinstance(v, list) and len(v) == 3:
            out[str(rel)] = (int(v[0]), int(v[1]), str(v[2]))
    return out


def _same(c: walk.Candidate, size: int, mtime_ns: int) -> bool:
    return c.size == size and c.mtime_ns == mtime_ns


def diff(cands: Iterable[walk.Candidate], old: Mapping[str, FileRecord],
         skipped: SkippedFiles, out: ChangeSet) -> None:
    """Sort candidates into changed and touched; keep the content skips that still hold."""
    for c in cands:
        rec = old.get(c.rel)
        if rec is None:
            prev = skipped.get(c.rel)
            if prev is not None and _same(c, prev[0], prev[1]):
                out.skipped_files[c.rel] = prev  # still the same binary/generated/secret file
            else:
                out.changed.append(c)
        elif _same(c, rec.size, rec.mtime_ns):
            continue
        else:
            try:
                data = c.abs_path.read_bytes()
            except OSError:
                out.changed.append(c)  # the chunking thread records it as unreadable
                continue
            (out.touched if content_hash(data) == rec.content_hash else out.changed).append(c)


def _matcher(settings: Settings) -> walk.IgnoreMatcher:
    return walk.IgnoreMatcher(Path(settings.root), settings.ignore,
                              index_dir=index_base(settings),
                              max_file_bytes=settings.max_file_bytes)


def from_walk(settings: Settings, old: Mapping[str, FileRecord], skipped: SkippedFiles,
              on_progress: Callable[[int], None] | None = None) -> ChangeSet:
    walked = walk.walk(Path(settings.root), max_file_bytes=settings.max_file_bytes,
                       extra_ignore=settings.ignore, index_dir=index_base(settings),
                       on_progress=on_progress)
    out = ChangeSet(present=len(walked.files), skipped_paths=Counter(walked.skipped))
    diff(walked.files, old, skipped, out)
    here = {c.rel for c in walked.files}
    out.deleted = [p for p in old if p not in here]
    return out


def _files_under(m: walk.IgnoreMatcher, rel: str) -> list[str]:
    """Every file below folder ``rel`` that the walk would list (ignored folders pruned)."""
    found: list[str] = []
    todo = [rel]
    while todo:
        d = todo.pop()
        try:
            with os.scandir(m.root / d) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except OSError:
            continue
        for name, is_dir in entries:
            child = f"{d}/{name}"
            if m.is_ignored(child, is_dir):
                continue
            (todo if is_dir else found).append(child)
    return found


def _norm(rel: str) -> str | None:
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    return None if not parts or ".." in parts else "/".join(parts)


def from_paths(settings: Settings, paths: Iterable[str], old: Mapping[str, FileRecord],
               skipped: SkippedFiles, skipped_paths: Mapping[str, int]) -> ChangeSet:
    """Changes among ``paths`` only (repo-relative files or folders); the rest is assumed as is.

    Path-level skip counts are carried over from the previous run: they only change with a walk.
    """
    m = _matcher(settings)
    old_sorted = sorted(old)
    skipped_sorted = sorted(skipped)
    look: set[str] = set()
    for raw in paths:
        rel = _norm(raw)
        if rel is None:
            continue
        look.add(rel)
        # a folder (still there, or gone) stands for everything that was or is under it
        prefix = rel + "/"
        for known in (old_sorted, skipped_sorted):
            i = bisect.bisect_left(known, prefix)
            while i < len(known) and known[i].startswith(prefix):
                look.add(known[i])
                i += 1
        try:
            is_dir = stat.S_ISDIR((m.root / rel).lstat().st_mode)
        except OSError:
            is_dir = False
        if is_dir and not m.is_ignored(rel, True):
            look.update(_files_under(m, rel))
    out = ChangeSet(skipped_paths=Counter(skipped_paths))
    out.skipped_files = {k: v for k, v in skipped.items() if k not in look}
    cands: list[walk.Candidate] = []
    for rel in sorted(look):
        got = m.check(rel)
        if isinstance(got, walk.Candidate):
            cands.append(got)
        elif rel in old:
            out.deleted.append(rel)
    diff(cands, old, skipped, out)
    # files outside ``look`` are assumed still there; inside it, the candidates are what is
    seen = sum(1 for k in look if k in old or k in skipped)
    out.present = len(old) + len(skipped) - seen + len(cands)
    return out
