"""Which files of a repository get indexed: git's ignore rules plus rag-mcp's own skip rules.

Path rules, first match names the reason counted in ``WalkResult.skipped`` (a pruned directory
counts once; nothing under it is listed):

- a DokuWiki data folder (``indexers.wiki``) keeps only ``pages/`` and ``media/``: its state
  folders (attic, cache, index, meta, locks, ...) and files are ``wiki_state``;
- directories by name: ``vcs`` (.git ...), ``vendored`` (node_modules, bower_components, vendor,
  .venv, venv), ``build_output`` (build, dist, target, out, caches, ``*.egg-info``; bin/obj only
  next to a .NET project file), ``index_dir``; then by content marker once listed: a
  ``pyvenv.cfg`` or ``conda-meta`` inside means ``vendored``, a ``CACHEDIR.TAG`` ``build_output``.
  ``third_party`` is kept on purpose: it is often first-party or patched source.
- ``gitignore`` / ``ragignore`` (the patterns: ``indexers.ignore_rules``): nested .gitignore
  files, .git/info/exclude, .ragignore at any level (after .gitignore at the same level, so it
  can re-include), then ``extra_ignore`` (root-relative, highest precedence). A root inside a work
  tree also gets the ignore files above it, though the root itself is never judged: asking for a
  folder indexes it. The user's global core.excludesFile is not read, so the index does not
  depend on who builds it. A nested repository is walked as a plain folder.
- files: ``secret`` (see ``secret_file_reason``), ``client_config`` (an assistant's MCP
  configuration, which ``rag-mcp config --write`` may put in the repository, and its backups:
  indexing it would report the index stale the moment it is written, and it may hold a token),
  ``lock_file``, ``minified``, ``generated`` and ``binary_ext`` by name, ``bad_name`` (not UTF-8,
  a backslash, a drive-like ``c:`` at the root: span IDs could not name it), ``long_path`` (over
  ``MAX_PATH_LEN`` characters); documents (PDF, office formats) pass, to be read or named by the
  pipeline (``rag_mcp.index.documents``);
- after an lstat: ``symlink`` / ``symlink_outside`` (never followed), ``special`` (fifo, socket,
  device), ``empty``, ``too_large``, ``hard_link`` (a file with other names, which the reader
  refuses), ``unreadable``.
Content rules run later on the bytes the pipeline reads: ``check_content``.
"""

from __future__ import annotations

import collections
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from indexers.ignore_rules import Stack, encode, first_match, parse_ignore, read_ignore_file
from indexers.wiki import WikiTrees
from rag_mcp.config import find_git_root
from rag_mcp.errors import InvalidArgument
from rag_mcp.index.spans import MAX_PATH_LEN

_DIR_REASONS = {
    **dict.fromkeys((".git", ".hg", ".svn", ".bzr"), "vcs"),
    **dict.fromkeys(("node_modules", "bower_components", "vendor", ".venv", "venv"), "vendored"),
    **dict.fromkeys((
        "build", "dist", "target", "out", ".next", ".nuxt", ".svelte-kit", ".angular", "coverage",
        "htmlcov", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
        "__pycache__", ".gradle", ".eggs", ".cache", ".parcel-cache", ".turbo", ".dart_tool",
        ".terraform",
    ), "build_output"),
}
# A file or folder with this name inside a directory marks the whole directory.
_DIR_MARKERS = {"pyvenv.cfg": "vendored", "conda-meta": "vendored", "CACHEDIR.TAG": "build_output"}
# bin/ and obj/ are real source in many non-.NET trees, so they need a project file beside them.
_DOTNET_OUTPUT = frozenset({"bin", "obj"})
_DOTNET_PROJECTS = (".csproj", ".fsproj", ".vbproj")

_LOCK_FILES = frozenset("""
    package-lock.json npm-shrinkwrap.json yarn.lock pnpm-lock.yaml bun.lock bun.lockb poetry.lock
    Pipfile.lock pdm.lock uv.lock Cargo.lock Gemfile.lock composer.lock go.sum go.work.sum mix.lock
    pubspec.lock Podfile.lock Package.resolved packages.lock.json flake.lock deno.lock
    gradle.lockfile conda-lock.yml
""".split())
_MINIFIED_NAMES = (".min.js", ".min.mjs", ".min.css")
_GENERATED_NAMES = (
    "_pb2.py", "_pb2.pyi", "_pb2_grpc.py", ".pb.go", ".pb.gw.go", ".pb.cc", ".pb.h", ".map",
    ".g.dart", ".freezed.dart",
)
_BINARY_EXTS = frozenset("." + e for e in """
    png jpg jpeg gif bmp ico icns tif tiff webp avif heic psd xcf ai sketch fig raw cr2 nef
    zip tar gz tgz bz2 xz zst lz4 lzma 7z rar jar war ear whl egg deb rpm apk ipa dmg iso msi cab
    ttf otf woff woff2 eot
    o obj a lib so dylib dll exe bin pyc pyo pyd class dex wasm elc beam ko node
    mp3 mp4 m4a m4v wav flac ogg oga opus aac mid midi avi mov mkv webm wmv flv
    sqlite sqlite3 db db3 mdb parquet feather arrow avro orc npy npz pkl pickle h5 hdf5
    onnx pt pth ckpt safetensors tflite gguf swp swo
""".split())
_BINARY_NAMES = frozenset({".ds_store", ".coverage"})

_SECRET_NAMES = frozenset("""
    .netrc _netrc .pgpass .pypirc .git-credentials .envrc .s3cfg .vault-token htpasswd .htpasswd
    credentials.json application_default_credentials.json secrets.yml secrets.yaml secrets.json
    users.auth.php
""".split())
_SECRET_IN_DIR = frozenset({(".aws", "credentials"), (".docker", "config.json"),
                            (".kube", "config")})
_SECRET_SUFFIXES = (
    ".pem", ".key", ".p12", ".pfx", ".p8", ".ppk", ".jks", ".keystore", ".bks", ".kdbx", ".gpg",
    ".tfvars", ".tfvars.json", ".tfstate", ".tfstate.backup",
)
_KEY_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
_JSON_KEY_PREFIXES = ("service-account", "service_account", "client_secret")
# .env.example and friends are committed on purpose to document the variables with placeholder
# values, and they are useful to a reader; every other .env* / *.env file is treated as live.
_ENV_TEMPLATES = frozenset({"example", "sample", "template", "dist"})


def secret_file_reason(rel: str) -> str | None:
    """``"secret"`` when the path names a credential file by convention, else None."""
    parent, _, name = rel.lower().rpartition("/")
    if (name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)
            or (name.startswith(_KEY_PREFIXES) and not name.endswith(".pub"))
            or (name.startswith(_JSON_KEY_PREFIXES) and name.endswith(".json"))
            or (parent.rpartition("/")[2], name) in _SECRET_IN_DIR):
        return "secret"
    if name == ".env" or name.startswith(".env.") or name.endswith(".env"):
        return None if _ENV_TEMPLATES.intersection(name.split(".")) else "secret"
    return None


#: assistants' project-level MCP configuration files (``rag-mcp config --write`` targets)
CLIENT_CONFIGS = frozenset({".mcp.json", ".cursor/mcp.json", ".vscode/mcp.json",
                            ".gemini/settings.json", ".codex/config.toml"})
#: the backup ``rag-mcp config --write`` makes of a file it changes: ``<name>.bak-<time>``
_CONFIG_BACKUP = re.compile(r"\.bak-\d{8}-\d{6}$")


def client_config_reason(rel: str) -> str | None:
    """``"client_config"`` for an assistant's MCP configuration file or its backup."""
    if rel in CLIENT_CONFIGS:
        return "client_config"
    base, _, _ = rel.rpartition(".bak-")
    return "client_config" if base in CLIENT_CONFIGS and _CONFIG_BACKUP.search(rel) else None


def _name_reason(name: str) -> str | None:
    if name in _LOCK_FILES:
        return "lock_file"
    low = name.lower()
    if low.endswith(_MINIFIED_NAMES):
        return "minified"
    if low.endswith(_GENERATED_NAMES) or ".generated." in low:
        return "generated"
    dot = low.rfind(".")
    if (dot > 0 and low[dot:] in _BINARY_EXTS) or low in _BINARY_NAMES:
        return "binary_ext"
    return None


# ---- content rules ------------------------------------------------------------------------------

_PRIVATE_KEY = re.compile(
    rb"^(?:-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-)", re.M)
_TOKEN_FILES = frozenset({".npmrc", ".yarnrc", ".yarnrc.yml"})
_TOKEN_LINE = re.compile(
    rb"^[ \t]*(?:\S*:)?(?:_authToken|_auth|_password|npmAuthToken|npmAuthIdent)[ \t]*[=:][ \t]*"
    rb"[\"']?([^\s\"']*)", re.M)
_ENV_REFERENCE = re.compile(rb"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_GENERATED_MARK = re.compile(
    rb"@generated\b|do not edit|<auto-generated|"
    rb"\b(?:this|the) (?:file|code) (?:is|was|has been) (?:automatically |auto-?)generated", re.I)
_COMMENT_STARTS = (b"//", b"#", b"/*", b"*", b"--", b"<!--", b";", b"%", b"{-", b"(*")
_MINIFIABLE = (".js", ".mjs", ".cjs", ".css")
# Bytes that never occur in text; high bytes are judged by UTF-8 decoding instead.
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\b\x1b")
_TEXTISH = bytes(b for b in range(256) if b not in _CONTROL)


def check_content(rel: str, data: bytes) -> str | None:
    """Reason to skip a file once read (``binary``, ``secret``, ``generated``, ``minified``,
    ``empty``); None means index it. Looks only at the first few KB except for line lengths."""
    if not data:
        return "empty"
    name = rel.rpartition("/")[2].lower()
    if _PRIVATE_KEY.search(data, 0, 1024):
        return "secret"
    if name in _TOKEN_FILES and any(
        m.group(1) and not _ENV_REFERENCE.fullmatch(m.group(1)) for m in _TOKEN_LINE.finditer(data)
    ):
        return "secret"
    sample = data[:8192]
    if b"\0" in sample:
        return "binary"
    odd = len(sample.translate(None, _TEXTISH))
    # A cut multi-byte character at the end of the sample costs one replacement, not a verdict.
    odd += sample.decode("utf-8", "replace").count("\ufffd")
    if odd * 10 > len(sample) * 3:
        return "binary"
    for line in sample[:2048].splitlines()[:12]:
        line = line.lstrip()
        if line.startswith(_COMMENT_STARTS) and _GENERATED_MARK.search(line):
            return "generated"
    if name.endswith(_MINIFIABLE) and len(data) >= 1024:
        if len(data) / (data.count(b"\n") + 1) > 300:
            return "minified"
    return None


def _git_common_dir(top: Path) -> Path | None:
    """The folder holding ``info/exclude``: .git itself, or what a .git file points to."""
    dotgit = top / ".git"
    if dotgit.is_dir():
        return dotgit
    try:
        text = dotgit.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = top / text[7:].strip()
    try:  # a linked worktree keeps info/ in the main repository's common dir
        return gitdir / (gitdir / "commondir").read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return gitdir


# ---- the matcher and the walk -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Candidate:
    """A file that passed the path-level rules; its content has not been read yet."""

    rel: str
    abs_path: Path
    size: int
    mtime_ns: int


@dataclass
class WalkResult:
    files: list[Candidate]
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)


def _parts(rel: str) -> list[str]:
    return [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]


class IgnoreMatcher:
    """The walk's rules for single paths, for a file watcher. Ignore files are cached per
    directory: call ``reset()`` after a .gitignore/.ragignore changes."""

    def __init__(self, root: Path, extra_ignore: Sequence[str] = (), *,
                 index_dir: Path | None = None, max_file_bytes: int = 1_000_000) -> None:
        self.root = Path(os.path.realpath(root))
        self.max_file_bytes = max_file_bytes
        self._root_prefix = self.root.as_posix().rstrip("/") + "/"
        index = Path(index_dir) if index_dir is not None else Path(".rag")
        index_rel = os.path.relpath(os.path.realpath(self.root / index), self.root)
        outside = index_rel == ".." or index_rel.startswith("../")
        self._index_rel = None if outside else Path(index_rel).as_posix()
        top = find_git_root(self.root) or self.root
        self._top = top
        self._prefix = "" if top == self.root else self.root.relative_to(top).as_posix() + "/"
        self._extra = parse_ignore("\n".join(extra_ignore), self._prefix, "ragignore")
        self.wiki = WikiTrees(self.root)
        self.reset()

    def reset(self) -> None:
        """Forget cached ignore files and directory verdicts."""
        common = _git_common_dir(self._top)
        outer = (read_ignore_file(str(common / "info" / "exclude"), "", "gitignore")
                 if common else ())
        # When the root is a subfolder of a work tree, the ignore files above it still apply.
        parts = self._prefix.split("/")[:-1]
        for depth in range(len(parts)):
            base = "".join(p + "/" for p in parts[:depth])
            outer = self._own_rules(os.path.join(self._top, base), base) + outer
        self._outer = outer
        self._stacks: dict[str, Stack] = {}
        self._dir_verdicts: dict[str, str | None] = {}

    def _own_rules(self, folder: str, base: str, names: set[str] | None = None) -> Stack:
        # .ragignore comes after .gitignore at the same level, so it wins there
        rag = read_ignore_file(os.path.join(folder, ".ragignore"), base, "ragignore") if (
            names is None or ".ragignore" in names) else ()
        git = read_ignore_file(os.path.join(folder, ".gitignore"), base, "gitignore") if (
            names is None or ".gitignore" in names) else ()
        return rag + git

    def _stack(self, d: str, names: set[str] | None = None) -> Stack:
        """Rules that apply to the entries of directory ``d`` ("" is the root)."""
        stack = self._stacks.get(d)
        if stack is None:
            parent = self._stack(d.rpartition("/")[0]) if d else self._outer
            own = self._own_rules(os.path.join(self.root, d), self._prefix + (d + "/" if d else ""),
                                  names)
            stack = self._stacks[d] = own + parent if own else parent
        return stack

    def _path_reason(self, rel: str, name: str, is_dir: bool, stack: Stack,
                     dotnet: bool) -> str | None:
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:  # undecodable bytes arrive as surrogates from os
                return "bad_name"
        if name == ".git":  # a folder, or a file pointing elsewhere (worktree, submodule)
            return "vcs"
        wiki = self.wiki.state_reason(rel.rpartition("/")[0], name)
        if wiki and rel != self._index_rel:
            return wiki
        if is_dir:
            reason = _DIR_REASONS.get(name)
            if reason or (dotnet and name in _DOTNET_OUTPUT) or name.endswith(".egg-info"):
                return reason or "build_output"
            if rel == self._index_rel:
                return "index_dir"
        path = encode(self._prefix + rel)
        rule = first_match(self._extra, path, is_dir) or first_match(stack, path, is_dir)
        if rule is not None and not rule.negated:
            return rule.reason
        if "\\" in name or (rel[1:2] == ":" and "/" not in rel):
            # span IDs are POSIX paths relative to the root: the reader refuses a backslash
            # (a Windows separator) and "c:..." (a drive), so such a file's spans could be found
            # but never read back
            return "bad_name"
        if is_dir:
            return None
        if len(rel) > MAX_PATH_LEN:  # its span IDs would be over MAX_ID_LEN
            return "long_path"
        return secret_file_reason(rel) or client_config_reason(rel) or _name_reason(name)

    def _stat_reason(self, abs_path: str, st: os.stat_result) -> str | None:
        if stat.S_ISLNK(st.st_mode):
            inside = (os.path.realpath(abs_path) + "/").startswith(self._root_prefix)
            return "symlink" if inside else "symlink_outside"
        if not stat.S_ISREG(st.st_mode):
            return "special"
        if st.st_size == 0:
            return "empty"
        if st.st_size > self.max_file_bytes:
            return "too_large"
        if st.st_nlink > 1:
            # the reader refuses a file with other names (one may be outside the root)
            return "hard_link"
        # os.access costs a syscall; a world-readable file needs none (ACLs aside: the pipeline
        # still copes with a failed read).
        if st.st_mode & 0o444 != 0o444 and not os.access(abs_path, os.R_OK):
            return "unreadable"
        return None

    def _has_dotnet_project(self, d: str) -> bool:
        try:
            return any(n.endswith(_DOTNET_PROJECTS) for n in os.listdir(self.root / d))
        except OSError:
            return False

    def is_ignored(self, rel: str, is_dir: bool = False) -> str | None:
        """The path-level reason ``walk`` would skip ``rel`` (or an ancestor) for, else None;
        ``"outside_root"`` for a path with "..". Size, type and symlink need an lstat: ``check``."""
        parts = _parts(rel)
        if ".." in parts:
            return "outside_root"
        parent = ""
        for i, name in enumerate(parts):
            cur = f"{parent}/{name}" if parent else name
            last = i == len(parts) - 1
            if not last or is_dir:
                reason = self._dir_verdicts.get(cur, "?")
                if reason == "?":
                    dotnet = name in _DOTNET_OUTPUT and self._has_dotnet_project(parent)
                    reason = self._path_reason(cur, name, True, self._stack(parent), dotnet)
                    reason = reason or next((r for m, r in _DIR_MARKERS.items()
                                             if os.path.lexists(self.root / cur / m)), None)
                    self._dir_verdicts[cur] = reason
            else:
                reason = self._path_reason(cur, name, False, self._stack(parent), False)
            if reason:
                return reason
            parent = cur
        return None

    def check(self, rel: str) -> Candidate | str:
        """A ``Candidate`` for a file ``walk`` would index, else the reason it would skip it
        (``"directory"`` for a folder it would descend into)."""
        parts = _parts(rel)
        if ".." in parts:
            return "outside_root"
        rel = "/".join(parts)
        abs_path = self.root / rel
        try:
            st = abs_path.lstat()
        except OSError:
            return "unreadable"
        is_dir = stat.S_ISDIR(st.st_mode)
        reason = self.is_ignored(rel, is_dir) or ("directory" if is_dir else None)
        reason = reason or self._stat_reason(str(abs_path), st)
        return reason or Candidate(rel, abs_path, st.st_size, st.st_mtime_ns)


def walk(root: Path, *, max_file_bytes: int = 1_000_000, extra_ignore: Sequence[str] = (),
         index_dir: Path | None = None,
         on_skip: Callable[[str, str], None] | None = None,
         on_progress: Callable[[int], None] | None = None) -> WalkResult:
    """List the files under ``root`` that pass the path rules, pruning skipped directories.

    Stats every entry, reads only ignore files. ``on_skip(rel, reason)`` sees every skip;
    ``on_progress(files found so far)`` is called after each directory.
    """
    if not os.path.isdir(root):
        raise InvalidArgument(f"repository root {root} is not a directory; pass an existing folder")
    m = IgnoreMatcher(root, extra_ignore, index_dir=index_dir, max_file_bytes=max_file_bytes)
    result = WalkResult(files=[])
    skipped = result.skipped
    root_dir = str(m.root)

    def skip(rel: str, reason: str) -> None:
        skipped[reason] += 1
        if on_skip is not None:
            on_skip(rel, reason)

    todo = [""]
    while todo:
        d = todo.pop()
        try:
            with os.scandir(os.path.join(root_dir, d)) as it:
                entries = list(it)
        except OSError:
            skip(d, "unreadable")
            continue
        names = {e.name for e in entries}
        marker = next((r for n, r in _DIR_MARKERS.items() if n in names), None) if d else None
        if marker:
            skip(d, marker)
            continue
        stack = m._stack(d, names)
        m.wiki.data_dir(d, names)
        dotnet = any(n.endswith(_DOTNET_PROJECTS) for n in names)
        for e in entries:
            rel = f"{d}/{e.name}" if d else e.name
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                reason = m._path_reason(rel, e.name, is_dir, stack, dotnet)
                if reason is None and is_dir:
                    todo.append(rel)
                    continue
                if reason is None:
                    st = e.stat(follow_symlinks=False)
                    reason = m._stat_reason(e.path, st)
            except OSError:
                reason = "unreadable"
            if reason:
                skip(rel, reason)
            else:
                result.files.append(Candidate(rel, Path(e.path), st.st_size, st.st_mtime_ns))
        if on_progress is not None:
            on_progress(len(result.files))
    result.files.sort(key=lambda c: c.rel)
    return result
