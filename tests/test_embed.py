"""Embedding backends against the bundled all-MiniLM-L6-v2: real model, real export, no mocks.

The ONNX export (seconds) and the sentence-transformers load (seconds) happen once per module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rag_mcp.embed import HASH_MODEL, load_embedder, model_identity
from rag_mcp.embed.batching import MAX_BATCH_TOKENS, plan_batches
from rag_mcp.embed.models import offline, resolve_model
from rag_mcp.embed.onnx_runtime import OnnxEmbedder
from rag_mcp.errors import InvalidArgument

ROOT = Path(__file__).resolve().parent.parent
MODEL = "all-MiniLM-L6-v2"

TEXTS = [
    "def read_config(path):\n    with open(path) as fh:\n        return json.load(fh)",
    "How do I retry a failed HTTP request?",
    "class LRUCache:\n    \"\"\"Least recently used cache.\"\"\"\n    def __init__(self, size):\n"
    "        self.size = size\n        self.data = OrderedDict()",
    "x",
    "",
    "Grüße aus Köln — ünïcödé, 日本語のテキスト, emoji 🙂",
    "    return sum(a * b for a, b in zip(xs, ys))  # dot product\n" * 40,  # > 256 tokens
]


def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=-1)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def onnx_fp32(cache_dir: Path) -> OnnxEmbedder:
    e = load_embedder(MODEL, "onnx", cache_dir=cache_dir, batch_size=4)
    assert isinstance(e, OnnxEmbedder)
    return e


@pytest.fixture(scope="module")
def onnx_int8(cache_dir: Path, onnx_fp32: OnnxEmbedder) -> OnnxEmbedder:
    e = load_embedder(MODEL, "onnx-int8", cache_dir=cache_dir, batch_size=4)
    assert isinstance(e, OnnxEmbedder)
    return e


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """sentence-transformers itself, the ground truth for the fp32 backends."""
    offline()  # module-scoped, so the autouse monkeypatch has not run yet
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(resolve_model(MODEL)), device="cpu")
    return np.asarray(st.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True))


def test_onnx_fp32_matches_sentence_transformers(onnx_fp32, reference):
    got = onnx_fp32.embed_documents(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert cos(got, reference).min() > 1 - 1e-4
    assert np.abs(got - reference).max() < 1e-4


def test_query_path_matches_document_path(onnx_fp32, reference):
    for i, text in enumerate(TEXTS):
        q = onnx_fp32.embed_query(text)
        assert q.shape == (384,) and q.dtype == np.float32
        assert float(q @ reference[i]) > 1 - 1e-4


def test_vectors_are_unit_length(onnx_fp32, onnx_int8):
    for e in (onnx_fp32, onnx_int8):
        norms = np.linalg.norm(e.embed_documents(TEXTS), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)


def test_int8_agrees_with_fp32(onnx_fp32, onnx_int8):
    a, b = onnx_fp32.embed_documents(TEXTS), onnx_int8.embed_documents(TEXTS)
    agree = cos(a, b)
    real = [i for i, t in enumerate(TEXTS) if len(t) > 1]
    assert agree[real].min() > 0.98
    # one or two tokens ("x", "") give int8 too little to average over: 0.96-0.98 measured
    assert agree.min() > 0.95
    assert not np.allclose(a, b, atol=1e-4)  # really a different model file
    assert onnx_int8.path.name == "model.int8.onnx"
    assert onnx_int8.path.stat().st_size < onnx_fp32.path.stat().st_size / 3


def test_order_restored_after_length_sorting(onnx_fp32):
    # lengths deliberately out of order, batch_size 4 so several length-sorted batches run
    texts = [TEXTS[i] for i in (6, 3, 0, 5, 1, 4, 2, 6, 3)]
    docs = onnx_fp32.embed_documents(texts)
    for i, text in enumerate(texts):
        assert float(docs[i] @ onnx_fp32.embed_query(text)) > 1 - 1e-5, i


def test_truncation_at_the_model_window(onnx_fp32):
    from tokenizers import Tokenizer

    assert onnx_fp32.max_tokens == 256
    vocab = Tokenizer.from_file(str(resolve_model(MODEL) / "tokenizer.json")).get_vocab()
    whole = sorted((i, w) for w, i in vocab.items() if w.isascii() and w.isalpha() and len(w) > 3)
    words = [w for _, w in whole[1000:1600]]  # each one token
    long_text = " ".join(words)
    assert onnx_fp32.count_tokens([long_text]) == [602]  # counted before truncation
    full = onnx_fp32.embed_query(long_text)
    # 254 words fill the window after [CLS] and [SEP]; what follows must not matter
    assert float(full @ onnx_fp32.embed_query(" ".join(words[:254]))) > 1 - 1e-5
    assert float(full @ onnx_fp32.embed_query(" ".join(words[:234]))) < 1 - 1e-4
    assert float(full @ onnx_fp32.embed_documents([long_text, "short"])[0]) > 1 - 1e-5


def test_documents_read_to_max_tokens(onnx_fp32, cache_dir):
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(resolve_model(MODEL) / "tokenizer.json")).get_vocab()
    whole = sorted((i, w) for w, i in vocab.items() if w.isascii() and w.isalpha() and len(w) > 3)
    words = [w for _, w in whole[2000:2300]]  # each one token
    long_text, short = " ".join(words), "def f(x):\n    return x + 1"
    cut, whole_window = (onnx_fp32.embed_documents([long_text, short], n) for n in (128, 0))
    # 126 words and [CLS] ... [SEP] fill 128 tokens: the span reads as its first 126 words
    assert float(cut[0] @ onnx_fp32.embed_query(" ".join(words[:126]))) > 1 - 1e-5
    assert float(cut[0] @ whole_window[0]) < 1 - 1e-3
    assert float(cut[1] @ whole_window[1]) > 1 - 1e-6  # a short span is not touched
    # above the window the limit changes nothing; torch cuts the same way and the query stays whole
    assert float(onnx_fp32.embed_documents([long_text], 10_000)[0] @ whole_window[0]) > 1 - 1e-6
    torch_e = load_embedder(MODEL, "torch", cache_dir=cache_dir)
    assert float(torch_e.embed_documents([long_text], 128)[0] @ cut[0]) > 1 - 1e-5
    assert float(torch_e.embed_query(long_text) @ whole_window[0]) > 1 - 1e-5
    hashed = load_embedder(HASH_MODEL, "onnx", cache_dir=cache_dir)
    assert not np.array_equal(hashed.embed_documents([long_text], 16),
                              hashed.embed_documents([long_text]))


def test_count_tokens_matches_the_model_tokenizer(onnx_fp32):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(resolve_model(MODEL) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()  # this tokenizer.json pads everything to 128
    want = [len(tok.encode(t).ids) for t in TEXTS]
    assert onnx_fp32.count_tokens(TEXTS) == want
    assert want[4] == 2 and want[6] > 256  # "" is [CLS] [SEP]; the long text is not cut


def test_empty_batch(onnx_fp32):
    assert onnx_fp32.embed_documents([]).shape == (0, 384)


def test_export_is_cached_and_onnx_load_does_not_import_torch(onnx_fp32, onnx_int8, cache_dir):
    fp32, int8 = onnx_fp32.path, onnx_int8.path
    stamps = (fp32.stat().st_mtime_ns, int8.stat().st_mtime_ns)
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from rag_mcp.embed import load_embedder\n"
        "for backend in ('onnx', 'onnx-int8'):\n"
        f"    e = load_embedder({MODEL!r}, backend, cache_dir=Path(sys.argv[1]))\n"
        "    assert e.embed_query('open a file').shape == (384,)\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers')\n"
        "         if m in sys.modules]\n"
        "print(','.join(heavy) or 'clean')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script, str(cache_dir)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean"
    assert (fp32.stat().st_mtime_ns, int8.stat().st_mtime_ns) == stamps  # not re-exported
    assert sorted(p.name for p in fp32.parent.iterdir() if p.suffix == ".onnx") == [
        "model.int8.onnx", "model.onnx"]  # no temporary files left behind


def test_torch_backend_matches_reference(cache_dir, reference):
    torch_e = load_embedder(MODEL, "torch", cache_dir=cache_dir, batch_size=3)
    assert (torch_e.dim, torch_e.max_tokens, torch_e.backend) == (384, 256, "torch")
    assert cos(torch_e.embed_documents(TEXTS), reference).min() > 1 - 1e-5
    assert float(torch_e.embed_query(TEXTS[1]) @ reference[1]) > 1 - 1e-5


def test_embed_query_is_thread_safe(onnx_fp32):
    want = onnx_fp32.embed_documents(TEXTS)
    got: dict[tuple[int, int], np.ndarray] = {}

    def worker(t: int) -> None:
        for _ in range(3):
            for i, text in enumerate(TEXTS):
                got[(t, i)] = onnx_fp32.embed_query(text)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 4 * len(TEXTS)
    for (_t, i), v in got.items():
        assert float(v @ want[i]) > 1 - 1e-5


def test_model_identity():
    fp32 = model_identity(MODEL, "onnx")
    assert fp32 == model_identity(MODEL, "torch")  # same vectors
    assert fp32 == model_identity(f"sentence-transformers/{MODEL}", "onnx")  # alias
    assert model_identity(MODEL, "onnx-int8") != fp32
    # reading spans to fewer tokens makes other vectors; the window itself or more does not
    assert model_identity(MODEL, "onnx", max_tokens=128) == fp32 + "|w128"
    assert model_identity(MODEL, "onnx", max_tokens=256) == fp32
    assert model_identity(MODEL, "onnx", max_tokens=1000) == fp32
    assert fp32.startswith(MODEL + "|")
    assert model_identity(str(resolve_model(MODEL)), "onnx").split("|")[1:] == \
        fp32.split("|")[1:]  # the same weights by path: the same digest


def test_hash_model_is_deterministic_and_light(tmp_path):
    e = load_embedder(HASH_MODEL, "onnx", cache_dir=tmp_path)
    assert (e.name, e.backend, e.dim) == (HASH_MODEL, "hash", 64)
    texts = ["def parse_args(argv)", "parse args", "", "completely different words"]
    a, b = e.embed_documents(texts), load_embedder(HASH_MODEL, "torch",
                                                   cache_dir=tmp_path).embed_documents(texts)
    assert a.shape == (4, 64) and a.dtype == np.float32
    assert np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0)
    assert float(a[0] @ a[1]) > float(a[0] @ a[3])  # shared words pull vectors together
    assert np.array_equal(e.embed_query(texts[0]), a[0])
    assert list(tmp_path.iterdir()) == []  # nothing exported
    # the same vectors in another process, whatever its hash seed, and no torch/onnx imported
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rag_mcp.embed import HASH_MODEL, load_embedder\n"
        "e = load_embedder(HASH_MODEL, 'onnx', cache_dir=Path('.'))\n"
        "print(json.dumps(e.embed_query('def parse_args(argv)').tolist()))\n"
        "assert not {'torch', 'onnxruntime', 'tokenizers'} & set(sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert np.array_equal(np.array(json.loads(out.stdout), dtype=np.float32), a[0])


@pytest.mark.parametrize("model", ["no-such-model-xyz", "someone/not-cached-anywhere",
                                   "/nonexistent/model/folder", "./relative/missing"])
def test_missing_model_gives_a_clear_error(model, tmp_path):
    with pytest.raises(InvalidArgument) as info:
        load_embedder(model, "onnx", cache_dir=tmp_path)
    msg = info.value.message
    assert "--list-models" in msg and "local" in msg and "RAG_EMBED_MODEL" in msg
    assert info.value.__cause__ is None  # no chained traceback for an expected failure


def test_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(InvalidArgument, match="not a sentence-transformers model folder"):
        load_embedder(str(tmp_path), "onnx", cache_dir=tmp_path)


def test_unknown_backend(tmp_path):
    with pytest.raises(InvalidArgument, match="RAG_EMBED_BACKEND"):
        load_embedder(MODEL, "tensorflow", cache_dir=tmp_path)


def test_plan_batches_sorts_caps_and_covers_every_text():
    lengths = [5, 300, 7, 7, 120, 1, 256, 9, 64, 3]
    batches = plan_batches(lengths, batch_size=3, max_tokens=600)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # each text exactly once
    widths = [max(lengths[i] for i in b) for b in batches]
    assert widths == sorted(widths)  # batches go from short to long
    for b in batches:
        assert 1 <= len(b) <= 3
        assert len(b) * max(lengths[i] for i in b) <= 600 or len(b) == 1
    assert [lengths[i] for i in batches[0]] == [1, 3, 5]
    assert plan_batches([], 4) == []
    # the default: at most MAX_BATCH_TOKENS padded tokens a call, a few long spans or many short
    mixed = [150] * 40 + [12] * 40
    sizes = []
    for b in plan_batches(mixed, 32):
        assert len(b) * max(mixed[i] for i in b) <= MAX_BATCH_TOKENS
        sizes.append(len(b))
    assert max(sizes) == 32 and min(sizes) < 8  # short texts fill a batch, long ones do not


@pytest.mark.slow
def test_two_processes_export_once(tmp_path):
    """The export lock: racing loaders into an empty cache export once and agree."""
    script = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from rag_mcp.embed import load_embedder\n"
        f"e = load_embedder({MODEL!r}, 'onnx', cache_dir=Path(sys.argv[1]))\n"
        "print(' '.join(f'{x:.6f}' for x in e.embed_query('open a file')[:8]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    assert sum(err.count("exporting all-MiniLM-L6-v2 to ONNX") for _, err in outs) == 1
    assert outs[0][0] == outs[1][0]
    (folder,) = (tmp_path / "onnx").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "meta.json", "model.onnx"]


def test_exported_layer_norms_are_plain_operators(onnx_fp32, onnx_int8):
    """ORT's layer-norm kernels are slower than the same arithmetic as plain operators, so the
    export writes them out; ORT must not fuse them back when it loads the graph."""
    import onnx
    import onnxruntime as ort

    meta = json.loads((onnx_fp32.path.parent / "meta.json").read_text())
    assert meta["fusions"]["PlainLayerNorm"] == 12  # 2 per layer, 6 layers
    for path in (onnx_fp32.path, onnx_int8.path):
        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        assert not ops & {"LayerNormalization", "SkipLayerNormalization"}, path.name
        assert "ReduceSumSquare" in ops
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(path.parent / f"{path.stem}.loaded.onnx")
        try:
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            loaded = {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node}
        finally:
            Path(so.optimized_model_filepath).unlink(missing_ok=True)
        assert not loaded & {"LayerNormalization", "SkipLayerNormalization",
                             "SimplifiedLayerNormalization"}, path.name


def _ln_graph(op: str, opset: int, *, bias: bool, outputs: int) -> tuple[bytes, dict]:
    """One fused layer-norm node over a (2, 5, 8) input with random constants."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    width = 8
    consts = {"gamma": rng.normal(size=width), "beta": rng.normal(size=width),
              "bias": rng.normal(size=width)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()]
    skip = op == "SkipLayerNormalization"
    ins = ["x", "skip", "gamma", "beta"] + (["bias"] if bias else []) if skip else \
        ["x", "gamma"] + (["beta"] if bias else [])
    names = ["x", "skip"] if skip else ["x"]
    shape, stat = [2, 5, width], [2, 5, 1]
    # ``outputs``: how many of the node's outputs exist; with 4 (SkipLayerNormalization), the
    # statistics are left unnamed and only the output and the residual sum are read
    outs = [("y", shape), ("mean", stat), ("inv_std", stat), ("sum", shape)][:outputs]
    if outputs == 4:
        outs[1:3] = [("", stat), ("", stat)]
    node = helper.make_node(op, ins, [o for o, _ in outs],
                            domain="com.microsoft" if skip else "", epsilon=1e-6)
    graph = helper.make_graph(
        [node], "ln", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, dims) for o, dims in outs if o],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    feed = {n: rng.normal(size=shape).astype(np.float32) * 3 + 1 for n in names}
    return model.SerializeToString(), feed


@pytest.mark.parametrize(("op", "opset", "bias", "outputs"), [
    ("LayerNormalization", 17, True, 1),
    ("LayerNormalization", 17, False, 1),
    ("LayerNormalization", 18, True, 1),
    ("SkipLayerNormalization", 17, True, 1),
    ("SkipLayerNormalization", 18, False, 1),
    ("SkipLayerNormalization", 17, True, 4),  # the residual sum is read too
])
def test_plain_layer_norms_compute_what_the_fused_node_does(op, opset, bias, outputs):
    import onnx
    import onnxruntime as ort

    from rag_mcp.embed.onnx_export import plain_layer_norms

    blob, feed = _ln_graph(op, opset, bias=bias, outputs=outputs)
    model = onnx.load_from_string(blob)
    assert plain_layer_norms(model) == 1
    assert op not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model)

    def run(data: bytes) -> list[np.ndarray]:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feed)

    want, got = run(blob), run(model.SerializeToString())
    assert len(got) == len(want) == (2 if outputs == 4 else 1)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_plain_layer_norms_keep_nodes_whose_statistics_are_used():
    import onnx

    from rag_mcp.embed.onnx_export import plain_layer_norms

    blob, _ = _ln_graph("LayerNormalization", 17, bias=True, outputs=2)  # Mean is a graph output
    model = onnx.load_from_string(blob)
    assert plain_layer_norms(model) == 0
    assert [n.op_type for n in model.graph.node] == ["LayerNormalization"]


def test_embed_modules_import_only_down_and_torch_only_where_declared():
    """One concern a module and no import circle: each module of rag_mcp/embed imports only the
    modules listed above it in the package's docstring; only the torch path and the export
    import torch, transformers or sentence-transformers."""
    import ast
    import re

    import rag_mcp.embed as package

    order = re.findall(r"^- ``(\w+)``", package.__doc__ or "", re.M)
    folder = Path(package.__file__).parent
    assert sorted(order) == sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    heavy_allowed = {"torch_backend": {"torch", "sentence_transformers"},
                     "onnx_export": {"torch", "transformers"}}
    for pos, name in enumerate(order):
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                if node.module == "rag_mcp.embed":  # the package's front door, or a module
                    imported |= {f"rag_mcp.embed.{a.name}" for a in node.names
                                 if (folder / f"{a.name}.py").is_file()}
        ours = {m.rsplit(".", 1)[1] for m in imported if m.startswith("rag_mcp.embed.")}
        assert ours <= set(order[:pos]), (name, ours - set(order[:pos]))
        heavy = {m.split(".")[0] for m in imported} & {"torch", "transformers",
                                                         "sentence_transformers"}
        assert heavy <= heavy_allowed.get(name, set()), (name, heavy)
