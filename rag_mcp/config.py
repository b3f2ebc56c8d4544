"""One configuration, read once: default.toml < config file < RAG_* environment < CLI flags.

Every knob is a field of ``Settings`` that declares its TOML key, environment variable, flag and
bounds (a ``Knob``); ``KNOBS`` is the table read from those fields. The defaults live only in
``configs/default.toml``. An invalid value raises ``ConfigError`` naming the key, the
environment variable and the flag, whichever source it came from.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import configs
from rag_mcp.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class Knob:
    """Where one setting comes from (TOML key, environment variable, flag) and what it accepts.

    Declared on its ``Settings`` field; ``attr`` and ``type`` are filled in from that field (its
    name, and its Python type read as int, float, bool, str, list, paths, choice or tau).
    """

    key: str
    env: str
    flag: str | None = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    secret: bool = False
    paths: bool = False  # a list of folders: split like PATH in the environment
    attr: str = field(default="", kw_only=True)
    type: str = field(default="", kw_only=True)


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob, parsed and validated; ``root`` is absolute and resolved, and ``roots`` holds
    every served root (``root`` first), absolute, resolved and distinct.

    Each field declares its knob; the defaults live only in configs/default.toml.
    """

    # [repo]
    root: Annotated[str, Knob("repo.root", "RAG_REPO_ROOT", "--root")]
    roots: Annotated[tuple[str, ...], Knob("repo.roots", "RAG_ROOTS", "--root", paths=True)]
    # [index]
    index_dir: Annotated[str, Knob("index.dir", "RAG_INDEX_DIR", "--index-dir")]
    collection: Annotated[str, Knob("index.collection", "RAG_COLLECTION", "--collection")]
    max_file_bytes: Annotated[int, Knob("index.max_file_bytes", "RAG_MAX_FILE_BYTES",
                                        "--max-file-bytes", 1, 1 << 31)]
    chunk_chars: Annotated[int, Knob("index.chunk_chars", "RAG_CHUNK_CHARS", "--chunk-chars",
                                     200, 100_000)]
    window_lines: Annotated[int, Knob("index.window_lines", "RAG_WINDOW_LINES",
                                      "--window-lines", 2, 10_000)]
    window_overlap: Annotated[int, Knob("index.window_overlap", "RAG_WINDOW_OVERLAP",
                                        "--window-overlap", 0, 9_999)]
    ignore: Annotated[tuple[str, ...], Knob("index.ignore", "RAG_IGNORE", "--ignore")]
    # [embed]
    embed_model: Annotated[str, Knob("embed.model", "RAG_EMBED_MODEL", "--model")]
    embed_backend: Annotated[str, Knob("embed.backend", "RAG_EMBED_BACKEND", "--embed-backend",
                                       choices=("onnx", "onnx-int8", "torch"))]
    embed_batch: Annotated[int, Knob("embed.batch_size", "RAG_EMBED_BATCH", "--embed-batch",
                                     1, 4096)]
    embed_threads: Annotated[int, Knob("embed.threads", "RAG_EMBED_THREADS", "--embed-threads",
                                       0, 1024)]
    embed_max_tokens: Annotated[int, Knob("embed.max_tokens", "RAG_EMBED_MAX_TOKENS",
                                          "--embed-max-tokens", 0, 100_000)]
    model_cache: Annotated[str, Knob("embed.cache_dir", "RAG_MODEL_CACHE")]
    # [store]
    chroma_url: Annotated[str, Knob("store.chroma_url", "RAG_CHROMA_URL", "--chroma-url")]
    chroma_tenant: Annotated[str, Knob("store.chroma_tenant", "RAG_CHROMA_TENANT")]
    chroma_database: Annotated[str, Knob("store.chroma_database", "RAG_CHROMA_DATABASE")]
    chroma_token: Annotated[str, Knob("store.chroma_token", "RAG_CHROMA_TOKEN", secret=True)]
    # [query]
    k: Annotated[int, Knob("query.k", "RAG_K", "--k", 1, 20)]
    tau: Annotated[float | None, Knob("query.tau", "RAG_TAU", "--tau", 0.0, 1.0)]
    max_spans: Annotated[int, Knob("query.max_spans", "RAG_MAX_SPANS_PER_ANSWER", lo=1, hi=20)]
    max_bytes: Annotated[int, Knob("query.max_bytes", "RAG_MAX_BYTES", lo=256, hi=1 << 24)]
    max_query_chars: Annotated[int, Knob("query.max_query_chars", "RAG_MAX_QUERY_CHARS",
                                         lo=16, hi=1 << 20)]
    join_gap: Annotated[int, Knob("query.join_gap", "RAG_JOIN_GAP", lo=-1, hi=1000)]
    join_max_lines: Annotated[int, Knob("query.join_max_lines", "RAG_JOIN_MAX_LINES",
                                        lo=1, hi=100_000)]
    focus_lines: Annotated[int, Knob("query.focus_lines", "RAG_FOCUS_LINES", lo=0, hi=100_000)]
    test_penalty: Annotated[float, Knob("query.test_penalty", "RAG_TEST_PENALTY",
                                        lo=0.0, hi=1.0)]
    rank: Annotated[bool, Knob("query.rank", "RAG_RANK")]
    rerank: Annotated[bool, Knob("query.rerank", "RAG_RERANK", "--rerank")]
    reranker_model: Annotated[str, Knob("query.reranker_model", "RAG_RERANKER_MODEL")]
    rerank_candidates: Annotated[int, Knob("query.rerank_candidates", "RAG_RERANK_CANDIDATES",
                                           lo=2, hi=200)]
    # [cache]
    cache_ttl: Annotated[float, Knob("cache.ttl_seconds", "RAG_CACHE_TTL", lo=0, hi=86_400)]
    cache_size: Annotated[int, Knob("cache.size", "RAG_CACHE_SIZE", lo=0, hi=1_000_000)]
    # [llm]
    local_llm: Annotated[bool, Knob("llm.enabled", "RAG_LOCAL_LLM")]
    llm_host: Annotated[str, Knob("llm.host", "OLLAMA_HOST")]
    llm_model: Annotated[str, Knob("llm.model", "RAG_LLM_MODEL")]
    llm_timeout: Annotated[float, Knob("llm.timeout_seconds", "RAG_LLM_TIMEOUT",
                                       lo=0.1, hi=3600)]
    llm_context_tokens: Annotated[int, Knob("llm.context_tokens", "RAG_LLM_CONTEXT_TOKENS",
                                            lo=512, hi=1 << 20)]
    # [log]
    log_dir: Annotated[str, Knob("log.dir", "RAG_LOG_DIR", "--log-dir")]
    log_queries: Annotated[str, Knob("log.queries", "RAG_LOG_QUERIES",
                                     choices=("plain", "hash", "off"))]
    log_max_bytes: Annotated[int, Knob("log.max_bytes", "RAG_LOG_MAX_BYTES",
                                       lo=1024, hi=1 << 34)]
    log_backups: Annotated[int, Knob("log.backups", "RAG_LOG_BACKUPS", lo=0, hi=100)]
    stats_tool: Annotated[str, Knob("log.stats_tool", "RAG_STATS_TOOL",
                                    choices=("off", "stdio", "all"))]
    # [links]
    wiki_url: Annotated[str, Knob("links.wiki_url", "RAG_WIKI_URL")]
    docs_url: Annotated[str, Knob("links.docs_url", "RAG_DOCS_URL")]
    docs_dir: Annotated[str, Knob("links.docs_dir", "RAG_DOCS_DIR")]
    docs_style: Annotated[str, Knob("links.docs_style", "RAG_DOCS_STYLE",
                                    choices=("mkdocs", "html"))]
    # [http]
    http_host: Annotated[str, Knob("http.host", "RAG_HTTP_HOST", "--host")]
    http_port: Annotated[int, Knob("http.port", "RAG_HTTP_PORT", "--port", 0, 65535)]
    http_token: Annotated[str, Knob("http.token", "RAG_HTTP_TOKEN", secret=True)]
    http_allowed_origins: Annotated[tuple[str, ...], Knob("http.allowed_origins",
                                                          "RAG_HTTP_ALLOWED_ORIGINS")]
    http_max_body: Annotated[int, Knob("http.max_body_bytes", "RAG_HTTP_MAX_BODY",
                                       lo=1024, hi=1 << 30)]
    http_trusted_proxies: Annotated[tuple[str, ...], Knob("http.trusted_proxies",
                                                          "RAG_HTTP_TRUSTED_PROXIES")]
    http_header_timeout: Annotated[float, Knob("http.header_timeout_seconds",
                                                "RAG_HTTP_HEADER_TIMEOUT", lo=0.1, hi=3600)]
    http_body_timeout: Annotated[float, Knob("http.body_timeout_seconds",
                                              "RAG_HTTP_BODY_TIMEOUT", lo=0.1, hi=3600)]
    http_max_connections: Annotated[int, Knob("http.max_connections", "RAG_HTTP_MAX_CONNECTIONS",
                                              lo=2, hi=65_536)]
    url_template: Annotated[str, Knob("http.url_template", "RAG_URL_TEMPLATE")]
    # [watch]
    watch_debounce_ms: Annotated[int, Knob("watch.debounce_ms", "RAG_WATCH_DEBOUNCE_MS",
                                           lo=0, hi=60_000)]

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


def _kind(base: Any, knob: Knob, name: str) -> str:
    """How a field's Python type is parsed from TOML, the environment and flags."""
    if knob.choices:
        return "choice"
    if base == tuple[str, ...]:
        return "paths" if knob.paths else "list"
    if base == (float | None):
        return "tau"  # a number, or "auto" for the calibrated default
    for t in (bool, int, float, str):
        if base is t:
            return t.__name__
    raise TypeError(f"Settings.{name}: no parser for {base}")


def _knob_table() -> tuple[Knob, ...]:
    out = []
    for name, hint in get_type_hints(Settings, include_extras=True).items():
        knob = hint.__metadata__[0]
        out.append(replace(knob, attr=name, type=_kind(hint.__origin__, knob, name)))
    return tuple(out)


#: every knob, in the order of ``Settings``' fields
KNOBS: tuple[Knob, ...] = _knob_table()
KNOBS_BY_ATTR = {k.attr: k for k in KNOBS}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


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
    values["embed_model"] = _model_name(values["embed_model"])
    if 0 < values["embed_max_tokens"] < 16:
        raise _bad(KNOBS_BY_ATTR["embed_max_tokens"], values["embed_max_tokens"],
                   "0 (the model's window) or at least 16")
    if values["window_overlap"] >= values["window_lines"]:
        raise _bad(KNOBS_BY_ATTR["window_overlap"], values["window_overlap"],
                   "must be smaller than index.window_lines")
    for attr in ("wiki_url", "docs_url"):
        url = values[attr]
        if url and (not url.startswith(("http://", "https://")) or any(c.isspace() for c in url)):
            raise _bad(KNOBS_BY_ATTR[attr], url, "must be an http:// or https:// URL")
    if values["collection"]:
        name = values["collection"]
        ok = 3 <= len(name) <= 63 and name[0].isalnum() and name[-1].isalnum() and all(
            c.isalnum() or c in "-_." for c in name)
        if not ok:
            raise _bad(KNOBS_BY_ATTR["collection"], name,
                       "3-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric")
    return Settings(**values)


def _model_name(name: str) -> str:
    """An alias of a catalogued model (``bge-small``, ``multilingual``) as the model's own name,
    so the index records which model it was, whatever is installed later."""
    from rag_mcp.embed.catalog import resolve_alias
    from rag_mcp.errors import InvalidArgument

    try:
        return resolve_alias(name) if name else name
    except InvalidArgument as exc:
        raise _bad(KNOBS_BY_ATTR["embed_model"], name, exc.message) from None
