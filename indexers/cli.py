"""``rag-index``: build, update, inspect the index of a repository."""

from __future__ import annotations

import argparse
import atexit
import errno
import gc
import logging
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from indexers.progress import Progress
from rag_mcp.config import Settings, find_git_root, index_base, load_settings
from rag_mcp.errors import IndexUnavailable, InvalidArgument, RagError
from rag_mcp.search.redact import redact_id, redact_label

EPILOG = """\
examples:
  rag-index                         index the git repository around the current directory
  rag-index ~/src/app               index another repository (its index goes to ~/src/app/.rag)
  rag-index --rebuild               throw the index away and build it again
  rag-index --status                what is indexed, when, with which model, how stale
  rag-index --status --json         the same as one JSON object
  rag-index --spans src/app.py      the spans of one file, with their IDs
  rag-index --spans --json | head   every span, one JSON object a line
  rag-index --watch                 keep the index fresh while you edit
  rag-index --list-models           the embedding models available offline
  rag-index --model multilingual    embed with the multilingual model (other languages)

exit codes: 0 done, 2 bad arguments or configuration, 3 file not in the index,
5 index missing or unusable, 75 another rag-index holds the index, 130 interrupted.
Configuration: configs/default.toml < --config FILE < RAG_* variables < flags.
"""

# flag -> settings attribute, for the knobs rag-index exposes
_KNOB_FLAGS = {
    "index_dir": "--index-dir", "collection": "--collection",
    "max_file_bytes": "--max-file-bytes", "chunk_chars": "--chunk-chars",
    "window_lines": "--window-lines", "window_overlap": "--window-overlap",
    "embed_model": "--model", "embed_backend": "--embed-backend", "embed_batch": "--embed-batch",
    "embed_threads": "--embed-threads", "embed_max_tokens": "--embed-max-tokens",
    "chroma_url": "--chroma-url",
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rag-index",
        description="Cut a repository into AST-aware code spans and heading-bounded doc spans, "
                    "embed them locally and store them for rag-mcp. Re-runs are incremental.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("path", nargs="?", help="repository root (default: the enclosing git root)")
    ap.add_argument("--root", help="same as PATH")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true", help="show what is indexed and how stale")
    mode.add_argument("--spans", nargs="?", const="", metavar="FILE",
                      help="list the spans of FILE (or of the whole index)")
    mode.add_argument("--watch", action="store_true",
                      help="index, then keep the index fresh as files change (Ctrl-C stops)")
    mode.add_argument("--list-models", action="store_true",
                      help="the embedding models this machine can use offline, and how to "
                           "install the others")
    ap.add_argument("--rebuild", action="store_true", help="ignore the existing index")
    ap.add_argument("--verify", action="store_true",
                    help="check every byte of the existing index, as a server does when it "
                         "opens it (a run that finds nothing to update checks sizes, small "
                         "files and the mtimes of large ones); repairs what it finds")
    ap.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress, only errors")
    ap.add_argument("--yes", action="store_true",
                    help="index a large folder that is no git repository without asking")
    ap.add_argument("--no-wait", action="store_true",
                    help="exit (code 75) instead of waiting when another rag-index runs")
    ap.add_argument("--config", metavar="FILE", help="a TOML file with any subset of the knobs")
    g = ap.add_argument_group("index settings (override configs/default.toml and RAG_*)")
    g.add_argument("--index-dir", help="where the index lives (default <root>/.rag)")
    g.add_argument("--collection", help="index name inside the store (default from the root)")
    g.add_argument("--max-file-bytes", help="skip larger files (default 1000000)")
    g.add_argument("--chunk-chars", help="span budget in characters (default 1500)")
    g.add_argument("--window-lines", help="line window for unparsed files (default 40)")
    g.add_argument("--window-overlap", help="overlap of line windows (default 10)")
    g.add_argument("--ignore", action="append", metavar="PATTERN",
                   help="extra gitignore-style pattern (repeatable)")
    g.add_argument("--model", help="embedding model: a name from --list-models, "
                                   "'multilingual', or a local sentence-transformers folder")
    g.add_argument("--embed-backend", help="onnx | onnx-int8 | torch")
    g.add_argument("--embed-batch", help="texts per model call")
    g.add_argument("--embed-threads", help="CPU threads for the model (0 = all)")
    g.add_argument("--embed-max-tokens",
                   help="tokens of each span the model reads (default 160; 0 = its whole window)")
    g.add_argument("--chroma-url", help="use a Chroma server instead of the embedded store")
    return ap


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {"root": args.root or args.path}
    for attr, flag in _KNOB_FLAGS.items():
        overrides[attr] = getattr(args, flag[2:].replace("-", "_"))
    if args.ignore:
        overrides["ignore"] = tuple(args.ignore)
    return load_settings(overrides, config_file=args.config)


def _top(d: dict[str, Any], n: int = 8) -> str:
    items = sorted(d.items(), key=lambda kv: -kv[1])
    shown = " · ".join(f"{k} {v:,}" for k, v in items[:n])
    return shown + (f" · +{len(items) - n} more" if len(items) > n else "") if items else "none"


#: documents named in the summary at most
MAX_NAMED = 20
NOT_READ = {
    "encrypted": "encrypted (needs a password to open)",
    "damaged_document": "damaged (the PDF cannot be parsed)",
    "no_text": "no text layer (a scanned PDF needs OCR first)",
    "unsupported_document": "format not read (of documents, PDF and .docx are; export it as "
                            "one of them or as Markdown)",
}


def render_summary(stats: Any) -> str:
    s = stats
    head = (f"Indexed {s.root} → generation {s.generation} in {s.seconds:.1f} s"
            if s.published else f"Index of {s.root} is up to date (generation {s.generation}, "
                                f"checked in {s.seconds:.2f} s)")
    rate = s.spans_added / s.seconds if s.seconds > 0 else 0.0
    embed_share = (s.embed_seconds / s.seconds * 100) if s.seconds > 0 else 0.0
    lines = [head]
    if s.rebuilt:
        lines.append(f"  rebuilt      {s.rebuilt}")
    lines += [
        f"  files        {s.files_total:,} indexed ({s.files_changed:,} new or changed, "
        f"{s.files_unchanged:,} unchanged, {s.files_deleted:,} deleted)",
        f"  spans        {s.spans_total:,} ({s.spans_added:,} new, {s.spans_removed:,} removed)"
        f" · {s.embedded:,} embedded · {s.vectors_reused:,} vectors reused",
        f"  speed        {rate:,.1f} spans/s · walk {s.walk_seconds:.2f} s · chunking "
        f"{s.chunk_seconds:.2f} s · embedding {s.embed_seconds:.1f} s ({embed_share:.0f}%)",
        f"  by language  {_top(s.by_language)}",
        f"  by kind      {_top(s.by_kind)}",
        f"  skipped      {_top(dict(s.skipped))}",
    ]
    if s.fallback:
        lines.append(f"  line windows {_top(dict(s.fallback))} (files)")
    for path, reason in list(s.not_read.items())[:MAX_NAMED]:
        lines.append(f"  not read     {path}: {NOT_READ.get(reason, reason)}")
    if len(s.not_read) > MAX_NAMED:
        lines.append(f"  not read     +{len(s.not_read) - MAX_NAMED} more (rag-index --json lists "
                     "them all)")
    return "\n".join(lines)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A ``--spans`` row as printed: labels, previews and file names are repository text, and a
    secret in one is masked like in the server's answers (the ID reads back there)."""
    out = {k: redact_label(v) if k in _TEXT_FIELDS and isinstance(v, str) else v
           for k, v in row.items()}
    out["id"] = redact_id(row["id"])
    return out


_TEXT_FIELDS = frozenset({"path", "symbol", "parent", "heading", "preview"})


def _repair(st: dict[str, Any]) -> str:
    """The run that repairs what ``--status`` found: damage only a full check sees needs one."""
    return f"rag-index --root {st['root']}" + (" --verify" if st.get("verified") else "")


def render_status(st: dict[str, Any]) -> str:
    if "stale_files" not in st:
        return (f"Index of {st['root']}\n  DAMAGED      {st['damaged']} — run "
                f"`{_repair(st)}` to repair it")
    stale = st["stale_files"]
    lines = [
        f"Index of {st['root']}",
        f"  generation   {st['generation']} · last indexed {st['last_indexed_at']}"
        + (f" · git {str(st['git_head'])[:10]}" if st.get("git_head") else ""),
        f"  model        {st['model']} ({st['backend']}, {st['dim']} dims"
        + (f", spans read to {st['embed_max_tokens']} tokens" if st.get("embed_max_tokens") else "")
        + f") · store {st['store']}",
        f"  files        {st['files']:,} · spans {st['spans']:,}",
        f"  by language  {_top(st['by_language'])}",
        f"  by kind      {_top(st['by_kind'])}",
        f"  skipped      {_top(st['skipped'])}",
        f"  stale now    {stale} file{'s' if stale != 1 else ''}"
        + ("" if not stale else f" — run `rag-index --root {st['root']}` to refresh"),
    ]
    for what in ("changed", "added", "deleted"):
        for p in st["stale"][what][:10]:
            lines.append(f"    {what:8} {p}")
    if st.get("damaged"):
        lines.append(f"  DAMAGED      {st['damaged']} — run `{_repair(st)}` to repair it")
    return "\n".join(lines)


#: files in a folder that is no git repository above which rag-index asks before indexing it
#: when no path was given (a home directory or a download folder, not a project)
LARGE_ROOT_FILES = 20_000


def _confirm_default_root(root: Path) -> None:
    """No path given and the current folder is no repository: ask before indexing a huge one."""
    if find_git_root(root) is not None:
        return
    n = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "node_modules"]
        n += len(filenames)
        if n > LARGE_ROOT_FILES:
            break
    if n <= LARGE_ROOT_FILES:
        return
    ask = (f"{root} is no git repository and holds more than {LARGE_ROOT_FILES:,} files")
    if sys.stdin.isatty() and sys.stderr.isatty():
        print(f"rag-index: {ask}. Index it all? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() in ("y", "yes"):
            return
    raise InvalidArgument(f"{ask}; name the folder to index (rag-index PATH), or pass --yes to "
                          "index this one")


def _damage(settings: Settings, verify: bool) -> str | None:
    """The damage a plain ``rag-index`` run would find and repair (with ``verify``, all that a
    server would refuse); None when there is none."""
    from rag_mcp.index import generation as gen
    from rag_mcp.index.handle import check_existing

    try:
        pointer = gen.read_pointer(settings.index_path)
        if pointer is not None:
            check_existing(settings, pointer, gen.read_manifest(pointer.dir), fully=verify)
    except IndexUnavailable as exc:
        return exc.message
    return None


def _under(name: str, base: Path) -> bool:
    """Whether ``name`` is ``base``, inside it, or one of the folders leading to it."""
    try:
        p = Path(name).absolute()
    except (OSError, ValueError):
        return False
    b = base.absolute()
    return p == b or b in p.parents or p in b.parents


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    c: BaseException | None = exc.__cause__ or exc.__context__
    while c is not None and len(out) < 8:
        out.append(c)
        c = c.__cause__ or c.__context__
    return out


def _storage_error(exc: BaseException, settings: Settings | None) -> RagError | None:
    """A failure to write the index, as a coded message with the fix (None: not one)."""
    base = index_base(settings) if settings is not None else None
    where = str(base) if base is not None else "the index folder"
    code = getattr(exc, "errno", None)
    text = str(exc).lower()
    if code in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in text or (
            "no space left" in text):
        return IndexUnavailable(
            f"disk full while writing the index in {where}; free some space there or put the "
            "index on another disk with --index-dir DIR (the previous index is unchanged)")
    if code == errno.EROFS or "readonly database" in text or "read-only file system" in text:
        return IndexUnavailable(
            f"{where} is on a read-only file system; write the index to a writable folder with "
            "--index-dir DIR (rag-mcp serves an intact index from a read-only disk)")
    if isinstance(exc, OSError) and code in (errno.EACCES, errno.EPERM, errno.ENOTDIR,
                                              errno.ENOENT, errno.EEXIST, errno.EISDIR):
        name = exc.filename if isinstance(exc.filename, str) else where
        if base is not None and not _under(str(name), base):
            return None  # not the index: a real bug, whose traceback helps
        return InvalidArgument(
            f"cannot write the index at {name} ({os.strerror(code or 0)}); choose a writable "
            "folder with --index-dir DIR (or RAG_INDEX_DIR)")
    if "unable to open database file" in text:
        return InvalidArgument(f"cannot open the index in {where}; choose a writable folder "
                               "with --index-dir DIR (or RAG_INDEX_DIR)")
    return None


def render_models(rows: list[dict[str, object]]) -> str:
    """``--list-models`` for people: one block per model."""
    out = []
    for r in rows:
        default = " (the default)" if r["default"] else ""
        out += [f"{r['model']}{default}  [{r['state']}]",
                f"    good for   {r['good for']}",
                f"    languages  {r['languages']}",
                f"    size       {r['size']}, from {r['package']} ({r['licence']})"]
        if r["aliases"]:
            out.append(f"    also named {r['aliases']}")
    out.append("Choose one with --model NAME, RAG_EMBED_MODEL or embed.model; changing it "
               "re-embeds the index once. Nothing is downloaded at run time.")
    return "\n".join(out)


def _print_status(settings: Settings, args: argparse.Namespace) -> int:
    """``rag-index --status``: what is indexed, how stale, and any damage with its fix."""
    from indexers.status import index_status

    damaged = _damage(settings, args.verify)
    try:
        st = index_status(settings)
        st["stale"] = {k: [redact_label(p) for p in v] for k, v in st["stale"].items()}
    except (sqlite3.DatabaseError, IndexUnavailable):
        if damaged is None:
            raise
        st = {"root": settings.root}  # too damaged to count: say what and how to fix
    st["damaged"], st["verified"] = damaged, args.verify
    print(orjson.dumps(st).decode() if args.json else render_status(st))
    return 0


def _print_spans(settings: Settings, args: argparse.Namespace) -> int:
    """``rag-index --spans [PATH]``: how the chunker cut the indexed files."""
    from indexers.status import list_spans

    rows = [_shown(r) for r in list_spans(settings, args.spans or None)]
    if args.json:
        out = sys.stdout
        for r in rows:
            out.write(orjson.dumps(r).decode() + "\n")
    else:
        for r in rows:
            label = r["symbol"] or r["heading"] or ""
            print(f"{r['id']}  {r['kind']:4} {r['language']:10} {label}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="rag-index: %(message)s")
    settings: Settings | None = None
    if args.list_models:  # needs no settings: a broken config must not hide the list
        from rag_mcp.embed.catalog import listing

        rows = listing()
        print(orjson.dumps(rows).decode() if args.json else render_models(rows))
        return 0
    try:
        settings = settings_from_args(args)
        several = len(settings.roots) > 1  # RAG_ROOTS or repo.roots name several repositories
        if several and (args.status or args.spans is not None or args.watch):
            raise InvalidArgument(
                f"{len(settings.roots)} repositories are configured (RAG_ROOTS / repo.roots); "
                "pick one with --root for --status, --spans or --watch")
        if args.status:
            return _print_status(settings, args)
        if args.spans is not None:
            return _print_spans(settings, args)
        if not (args.root or args.path or args.yes or os.environ.get("RAG_REPO_ROOT")
                or os.environ.get("RAG_ROOTS") or args.config):
            _confirm_default_root(Path(settings.root))
        progress = Progress(quiet=args.quiet or args.json)
        # At exit the interpreter's last collections walk every object the run left (the model,
        # numpy, tree-sitter, tantivy): ~0.06 s of a 0.9 s one-file update. Frozen objects are
        # skipped, and the memory goes back with the process. atexit, not here: main() also runs
        # inside other processes (tests), which must keep collecting.
        atexit.unregister(gc.freeze)
        atexit.register(gc.freeze)
        from indexers.pipeline import run_index

        if args.watch:
            from indexers.watch import watch_forever

            return watch_forever(settings, progress=progress, rebuild=args.rebuild)
        for root in settings.roots:  # one index per repository, in turn
            stats = run_index(settings.for_root(root) if several else settings,
                              rebuild=args.rebuild, wait=not args.no_wait, progress=progress,
                              verify=args.verify)
            if args.json:
                print(orjson.dumps(stats.to_dict()).decode())
            elif not args.quiet:
                print(render_summary(stats))
        return 0
    except BrokenPipeError:  # an OSError: before the storage errors (`--spans --json | head`)
        return 0
    except (OSError, sqlite3.OperationalError) as exc:
        err = _storage_error(exc, settings)
        if err is None:
            raise
        print(f"rag-index: {err.code}: {err.message}", file=sys.stderr)
        return err.exit_code
    except RagError as exc:
        # A store that failed to write says why only in its cause (Chroma: "database or disk
        # is full"): name the disk's state and the fix instead.
        err = next(filter(None, (_storage_error(c, settings) for c in _causes(exc))), None)
        exc = err or exc
        print(f"rag-index: {exc.code}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("rag-index: interrupted; the index is unchanged and the vectors computed so far "
              "are kept: run it again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
