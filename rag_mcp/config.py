"""One configuration, read once: default.toml < config file < RAG_* environment < CLI flags.

Every knob is a row of ``KNOBS``: its TOML key, environment variable, flag and constraint. The
defaults live only in ``configs/default.toml``. An invalid value raises ``ConfigError`` naming the
key, the environment variable and the flag, whichever source it came from.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import configs
from rag_mcp.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class Knob:
    attr: str
    key: str
    env: str
    flag: str | None
    type: str  # int | float | bool | str | list | paths | choice | tau
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    secret: bool = False


KNOBS: tuple[Knob, ...] = (
    Knob("root", "repo.root", "RAG_REPO_ROOT", "--root", "str"),
    Knob("roots", "repo.roots", "RAG_ROOTS", "--root", "paths"),
    Knob("index_dir", "index.dir", "RAG_INDEX_DIR", "--index-dir", "str"),
    Knob("collection", "index.collection", "RAG_COLLECTION", "--collection", "str"),
    Knob("max_file_bytes", "index.max_file_bytes", "RAG_MAX_FILE_BYTES", "--max-file-bytes",
         "int", 1, 1 << 31),
    Knob("chunk_chars", "index.chunk_chars", "RAG_CHUNK_CHARS", "--chunk-chars", "int", 200,
         100_000),
    Knob("window_lines", "index.window_lines", "RAG_WINDOW_LINES", "--window-lines", "int", 2,
         10_000),
    Knob("window_overlap", "index.window_overlap", "RAG_WINDOW_OVERLAP", "--window-overlap",
         "int", 0, 9_999),
    Knob("ignore", "index.ignore", "RAG_IGNORE", "--ignore", "list"),
    Knob("embed_model", "embed.model", "RAG_EMBED_MODEL", "--model", "str"),
    Knob("embed_backend", "embed.backend", "RAG_EMBED_BACKEND", "--embed-backend", "choice",
         choices=("onnx", "onnx-int8", "torch")),
    Knob("embed_batch", "embed.batch_size", "RAG_EMBED_BATCH", "--embed-batch", "int", 1, 4096),
    Knob("embed_threads", "embed.threads", "RAG_EMBED_THREADS", "--embed-threads", "int", 0, 1024),
    Knob("embed_max_tokens", "embed.max_tokens", "RAG_EMBED_MAX_TOKENS", "--embed-max-tokens",
         "int", 0, 100_000),
    Knob("model_cache", "embed.cache_dir", "RAG_MODEL_CACHE", None, "str"),
    Knob("chroma_url", "store.chroma_url", "RAG_CHROMA_URL", "--chroma-url", "str"),
    Knob("chroma_tenant", "store.chroma_tenant", "RAG_CHROMA_TENANT", None, "str"),
    Knob("chroma_database", "store.chroma_database", "RAG_CHROMA_DATABASE", None, "str"),
    Knob("chroma_token", "store.chroma_token", "RAG_CHROMA_TOKEN", None, "str", secret=True),
    Knob("k", "query.k", "RAG_K", "--k", "int", 1, 20),
    Knob("tau", "query.tau", "RAG_TAU", "--tau", "tau", 0.0, 1.0),
    Knob("max_spans", "query.max_spans", "RAG_MAX_SPANS_PER_ANSWER", "--max-spans", "int", 1, 20),
    Knob("max_bytes", "query.max_bytes", "RAG_MAX_BYTES", "--max-bytes", "int", 256, 1 << 24),
    Knob("max_query_chars", "query.max_query_chars", "RAG_MAX_QUERY_CHARS", None, "int", 16,
         1 << 20),
    Knob("join_gap", "query.join_gap", "RAG_JOIN_GAP", None, "int", -1, 1000),
    Knob("join_max_lines", "query.join_max_lines", "RAG_JOIN_MAX_LINES", None, "int", 1,
         100_000),
    Knob("test_penalty", "query.test_penalty", "RAG_TEST_PENALTY", None, "float", 0.0, 1.0),
    Knob("rerank", "query.rerank", "RAG_RERANK", "--rerank", "bool"),
    Knob("reranker_model", "query.reranker_model", "RAG_RERANKER_MODEL", None, "str"),
    Knob("rerank_candidates", "query.rerank_candidates", "RAG_RERANK_CANDIDATES", None, "int", 2,
         200),
    Knob("cache_ttl", "cache.ttl_seconds", "RAG_CACHE_TTL", None, "float", 0, 86_400),
    Knob("cache_size", "cache.size", "RAG_CACHE_SIZE", None, "int", 0, 1_000_000),
    Knob("local_llm", "llm.enabled", "RAG_LOCAL_LLM", None, "bool"),
    Knob("llm_host", "llm.host", "OLLAMA_HOST", None, "str"),
    Knob("llm_model", "llm.model", "RAG_LLM_MODEL", None, "str"),
    Knob("llm_timeout", "llm.timeout_seconds", "RAG_LLM_TIMEOUT", None, "float", 0.1, 3600),
    Knob("llm_context_tokens", "llm.context_tokens", "RAG_LLM_CONTEXT_TOKENS", None, "int", 512,
         1 << 20),
    Knob("log_dir", "log.dir", "RAG_LOG_DIR", "--log-dir", "str"),
    Knob("log_queries", "log.queries", "RAG_LOG_QUERIES", None, "choice",
         choices=("plain", "hash", "off")),
    Knob("log_max_bytes", "log.max_bytes", "RAG_LOG_MAX_BYTES", None, "int", 1024, 1 << 34),
    Knob("log_backups", "log.backups", "RAG_LOG_BACKUPS", None, "int", 0, 100),
    Knob("http_host", "http.host", "RAG_HTTP_HOST", "--host", "str"),
    Knob("http_port", "http.port", "RAG_HTTP_PORT", "--port", "int", 0, 65535),
    Knob("http_token", "http.token", "RAG_HTTP_TOKEN", None, "str", secret=True),
    Knob("http_allowed_origins", "http.allowed_origins", "RAG_HTTP_ALLOWED_ORIGINS", None, "list"),
    Knob("http_max_body", "http.max_body_bytes", "RAG_HTTP_MAX_BODY", None, "int", 1024, 1 << 30),
    Knob("watch_debounce_ms", "watch.debounce_ms", "RAG_WATCH_DEBOUNCE_MS", None, "int", 0,
         60_000),
)

KNOBS_BY_ATTR = {k.attr: k for k in KNOBS}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob, parsed and validated; ``root`` is absolute and resolved, and ``roots`` holds
    every served root (``root`` first), absolute, resolved and distinct."""

    root: str
    roots: tuple[str, ...]
    index_dir: str
    collection: str
    max_file_bytes: int
    chunk_chars: int
    window_lines: int
    window_overlap: int
    ignore: tuple[str, ...]
    embed_model: str
    embed_backend: str
    embed_batch: int
    embed_threads: int
    embed_max_tokens: int
    model_cache: str
    chroma_url: str
    chroma_tenant: str
    chroma_database: str
    chroma_token: str
    k: int
    tau: float | None
    max_spans: int
    max_bytes: int
    max_query_chars: int
    join_gap: int
    join_max_lines: int
    test_penalty: float
    rerank: bool
    reranker_model: str
    rerank_candidates: int
    cache_ttl: float
    cache_size: int
    local_llm: bool
    llm_host: str
    llm_model: str
    llm_timeout: float
    llm_context_tokens: int
    log_dir: str
    log_queries: str
    log_max_bytes: int
    log_backups: int
    http_host: str
    http_port: int
    http_token: str
    http_allowed_origins: tuple[str, ...]
    http_max_body: int
    watch_debounce_ms: int

    @property
    def root_path(self) -> Path:
        return Path(self.root)

    def for_root(self, root: str) -> Settings:
        """The settings of one served repository (its own index, logs shared)."""
        return replace(self, root=root, roots=(root,))

    @property
    def index_path(self) -> Path:
        """The folder holding this repository's index generations."""
        return index_base(self) / self.collection_name

    @property
    def collection_name(self) -> str:
        return self.collection or collection_name_for(self.root_path)

    @property
    def log_path(self) -> Path:
        if self.log_dir:
            p = Path(self.log_dir).expanduser()
            return p if p.is_absolute() else self.root_path / p
        checkout_logs = Path(__file__).resolve().parent.parent / "logs"
        if checkout_logs.is_dir() and os.access(checkout_logs, os.W_OK):
            return checkout_logs
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(state) / "rag-mcp" / "logs"

    @property
    def model_cache_path(self) -> Path:
        if self.model_cache:
            return Path(self.model_cache).expanduser()
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(cache) / "rag-mcp"

    def index_config_hash(self) -> str:
        """Hash of the knobs that shape the index; a change means a rebuild."""
        parts = [
            self.embed_model,
            str(self.max_file_bytes),
            str(self.chunk_chars),
            str(self.window_lines),
            str(self.window_overlap),
            ",".join(self.ignore),
        ]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]

    def public_dict(self) -> dict[str, Any]:
        """The settings with secrets masked, for --show-config and health output."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if KNOBS_BY_ATTR[f.name].secret and value:
                value = "***"
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


def index_base(settings: Settings) -> Path:
    p = Path(settings.index_dir).expanduser()
    return p if p.is_absolute() else settings.root_path / p


def collection_name_for(root: Path) -> str:
    """A Chroma-valid collection name from the root folder's name and its absolute path."""
    base = "".join(c if c.isalnum() or c in "-_" else "-" for c in root.name)[:40].strip("-_")
    digest = hashlib.sha1(str(root).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{base or 'repo'}-{digest}"


def find_git_root(start: Path) -> Path | None:
    """The enclosing git work tree of ``start``, found by walking up to a ``.git`` entry."""
    cur = start.resolve()
    for p in (cur, *cur.parents):
        if (p / ".git").exists():
            return p
    return None


def default_root(cwd: Path | None = None) -> Path:
    cwd = (cwd or Path.cwd()).resolve()
    return find_git_root(cwd) or cwd


def _resolve_root(value: str, cwd: Path | None, knob: Knob) -> str:
    root = Path(value).expanduser()
    if not root.is_absolute():
        root = (cwd or Path.cwd()) / root
    root = root.resolve()
    if not root.is_dir():
        raise ConfigError(f"repository root {root} is not a directory; check {_describe(knob)}")
    return str(root)


def _describe(knob: Knob) -> str:
    flag = f", flag {knob.flag}" if knob.flag else ""
    return f"{knob.key} (env {knob.env}{flag})"


def _bad(knob: Knob, value: object, why: str) -> ConfigError:
    shown = "***" if knob.secret else repr(value)
    return ConfigError(f"invalid value {shown} for {_describe(knob)}: {why}")


def _parse(knob: Knob, value: Any, from_text: bool) -> Any:
    """Convert one raw value (TOML value or environment/flag string) to the knob's type."""
    t = knob.type
    if t == "str":
        if not isinstance(value, str):
            raise _bad(knob, value, "must be a string")
        return value
    if t in ("list", "paths"):
        if from_text and isinstance(value, str):
            sep = os.pathsep if t == "paths" else ","  # a path list, like PATH
            return tuple(v.strip() for v in value.split(sep) if v.strip())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise _bad(knob, value, "must be a list of strings")
    if t == "bool":
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
        raise _bad(knob, value, "must be true or false (1/0, yes/no, on/off)")
    if t == "choice":
        if isinstance(value, str) and value in knob.choices:
            return value
        raise _bad(knob, value, f"must be one of {', '.join(knob.choices)}")
    if t == "tau" and isinstance(value, str) and value.strip().lower() in ("auto", ""):
        return None
    num: float
    try:
        if isinstance(value, bool):
            raise ValueError
        if t == "int":
            num = int(value.strip()) if isinstance(value, str) else int(value)
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
        else:
            num = float(value.strip()) if isinstance(value, str) else float(value)
            if num != num:  # NaN
                raise ValueError
    except (TypeError, ValueError):
        kind = {"int": "an integer", "tau": 'a number or "auto"'}.get(t, "a number")
        raise _bad(knob, value, f"must be {kind}") from None
    if (knob.lo is not None and num < knob.lo) or (knob.hi is not None and num > knob.hi):
        raise _bad(knob, value, f"must be between {knob.lo:g} and {knob.hi:g}")
    return num


def _flatten(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    by_key = {k.key: k for k in KNOBS}
    out: dict[str, Any] = {}
    for section, body in doc.items():
        if not isinstance(body, Mapping):
            raise ConfigError(f"{source}: [{section}] must be a table")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in by_key:
                raise ConfigError(f"{source}: unknown key {key}; see configs/default.toml")
            out[by_key[key].attr] = value
    return out


def _load_toml_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return _flatten(tomllib.load(fh), str(path))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist (RAG_CONFIG / --config)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def defaults() -> dict[str, Any]:
    return _flatten(tomllib.loads(configs.read_text("default.toml")), "configs/default.toml")


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Build the frozen ``Settings``. ``overrides`` are CLI values keyed by attribute name;
    ``None`` values mean "flag not given"."""
    env = os.environ if environ is None else environ
    raw: dict[str, tuple[Any, bool]] = {a: (v, False) for a, v in defaults().items()}
    level = dict.fromkeys(raw, 0)  # which source won: default 0, file 1, env 2, flag 3
    cfg = config_file or env.get("RAG_CONFIG")
    if cfg:
        for a, v in _load_toml_file(Path(cfg).expanduser()).items():
            raw[a], level[a] = (v, False), 1
    for knob in KNOBS:
        if knob.env in env:
            raw[knob.attr], level[knob.attr] = (env[knob.env], True), 2
    for attr, value in (overrides or {}).items():
        if value is None:
            continue
        if attr not in KNOBS_BY_ATTR:
            raise ConfigError(f"unknown setting {attr!r}")
        raw[attr], level[attr] = (value, isinstance(value, str)), 3
    missing = [k.key for k in KNOBS if k.attr not in raw]
    if missing:
        raise ConfigError(f"configs/default.toml lacks {', '.join(missing)}")
    values = {a: _parse(KNOBS_BY_ATTR[a], v, t) for a, (v, t) in raw.items()}

    # repo.roots wins over repo.root when it comes from the same or a later source: a single
    # --root flag then overrides RAG_ROOTS, and several --root flags set both.
    if values["roots"] and level["roots"] >= level["root"]:
        roots = [_resolve_root(r, cwd, KNOBS_BY_ATTR["roots"]) for r in values["roots"]]
    elif values["root"]:
        roots = [_resolve_root(values["root"], cwd, KNOBS_BY_ATTR["root"])]
    else:
        roots = [str(default_root(cwd))]
    values["roots"] = tuple(dict.fromkeys(roots))
    values["root"] = values["roots"][0]
    if values["collection"] and len(values["roots"]) > 1:
        raise _bad(KNOBS_BY_ATTR["collection"], values["collection"],
                   "one collection name cannot hold several roots; leave it empty so each root "
                   "gets its own")
    if 0 < values["embed_max_tokens"] < 16:
        raise _bad(KNOBS_BY_ATTR["embed_max_tokens"], values["embed_max_tokens"],
                   "0 (the model's window) or at least 16")
    if values["window_overlap"] >= values["window_lines"]:
        raise _bad(KNOBS_BY_ATTR["window_overlap"], values["window_overlap"],
                   "must be smaller than index.window_lines")
    if values["collection"]:
        name = values["collection"]
        ok = 3 <= len(name) <= 63 and name[0].isalnum() and name[-1].isalnum() and all(
            c.isalnum() or c in "-_." for c in name)
        if not ok:
            raise _bad(KNOBS_BY_ATTR["collection"], name,
                       "3-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric")
    return Settings(**values)


def is_loopback(host: str) -> bool:
    """True for addresses that never leave this machine (127.0.0.0/8, ::1, localhost)."""
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def git_head(root: Path) -> str | None:
    """The current commit of a git checkout, for the manifest; None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
