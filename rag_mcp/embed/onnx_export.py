"""The ONNX export: local weights traced to ONNX once, fused, with plain layer norms, and
quantized to int8; each step checked against the previous one before it is published.

Cache layout: ``cache_dir/onnx/<model-slug>-<key>/`` holds ``model.onnx`` (fp32, fused by ONNX
Runtime's BERT optimizer, layer norms written out as plain operators), ``model.int8.onnx``
(dynamic int8) and ``meta.json``. ``key`` hashes the content of the weight, config and tokenizer
files plus ``RECIPE``, so new weights or a new export recipe get a new folder and an old folder
is never reused wrongly. Files are written under a temporary name and renamed; a lock file keeps
two processes from exporting at once. Exporting imports torch and transformers; running the
exported file (``rag_mcp.embed.onnx_runtime``) does not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rag_mcp.embed import onnx_runtime as runtime
from rag_mcp.embed.batching import TokenCounter
from rag_mcp.embed.catalog import require_torch
from rag_mcp.embed.models import ModelSpec, offline, slug, weights_digest
from rag_mcp.errors import Internal, InvalidArgument

log = logging.getLogger(__name__)

#: bump when the export, fusion or quantization recipe changes: it renames the cache folder
RECIPE = "r2"  # r2: layer norms as plain operators (plain_layer_norms)
FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
#: transformer families whose exported graph ORT's BERT fusions understand
_FUSABLE = {"bert", "roberta", "xlm-roberta", "distilbert", "camembert", "electra", "mpnet"}
_CHECK_TEXTS = (
    "def add(a, b):\n    return a + b",
    "How do I parse command line options?",
    "x " * 400,  # longer than the window: checks truncation and long sequences
)


def export_dir(model: str, spec: ModelSpec, cache_dir: Path) -> Path:
    digest = weights_digest(spec.path, cache_dir)
    key = hashlib.sha256(f"{digest}|{RECIPE}".encode()).hexdigest()[:16]
    return cache_dir / "onnx" / f"{slug(model)}-{key}"


def ensure_onnx(model: str, spec: ModelSpec, cache_dir: Path, *, quantized: bool) -> Path:
    """The path of the exported model, exporting (and quantizing) it first if needed."""
    folder = export_dir(model, spec, cache_dir)
    target = folder / (INT8_FILE if quantized else FP32_FILE)
    if target.is_file():
        return target
    require_torch(f"exporting {model!r} to ONNX (once per model)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot create the model cache {folder}: {exc.strerror}; set embed.cache_dir "
            "(env RAG_MODEL_CACHE) to a writable folder") from None
    with _file_lock(folder / ".lock"):
        if target.is_file():  # another process finished while we waited
            return target
        meta = _read_meta(folder)
        fp32 = folder / FP32_FILE
        if not fp32.is_file():
            log.info("exporting %s to ONNX in %s (once per model)", model, folder)
            meta.update(export_fp32(spec, fp32))
        if quantized:
            meta.update(_quantize(spec, fp32, target))
        meta.update(model=model, recipe=RECIPE, source=str(spec.path))
        _atomic_write(folder / "meta.json", json.dumps(meta, indent=2).encode())
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+b") as fh:
        if sys.platform == "win32":  # no flock: poll a one-byte region lock
            import msvcrt

            while True:
                try:
                    msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
                    break
                except OSError:
                    time.sleep(0.2)
            try:
                yield
            finally:
                msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                log.info("waiting for another process exporting the model into %s",
                         path.parent)
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _tmp(dest: Path) -> Path:
    return dest.with_name(f".{dest.stem}.{os.getpid()}.tmp.onnx")


def _atomic_write(dest: Path, data: bytes) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)


def _read_meta(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _drop_hint(record: logging.LogRecord) -> bool:
    # quantize_dynamic advises "pre-processing" (shape inference) that a fused BERT graph lacks
    # nothing from; it is not advice for our users
    return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # the exporter and the optimizer warn and may print; stdout can be an MCP JSON-RPC channel
    root = logging.getLogger()
    # ORT's quantizer logs through the root logger, whose first use would call basicConfig()
    # and so reconfigure the host's logging
    guard = None if root.handlers else logging.NullHandler()
    if guard:
        root.addHandler(guard)
    root.addFilter(_drop_hint)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(_drop_hint)
        if guard:
            root.removeHandler(guard)


def export_fp32(spec: ModelSpec, dest: Path, *, fuse: bool = True) -> dict[str, Any]:
    """Trace the transformer to ONNX, fuse it, check it against torch, then publish it."""
    offline()
    t0 = time.perf_counter()
    import inspect  # here with torch: loading an already exported model needs neither

    import torch
    from transformers import AutoModel

    # eager attention exports as plain MatMul/Softmax, which ORT fuses into its Attention kernel;
    # the SDPA export does not fuse (measured: 0 of 6 attention blocks)
    net = AutoModel.from_pretrained(str(spec.transformer), attn_implementation="eager").eval()
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(net.forward).parameters:
        names.append("token_type_ids")

    class Hidden(torch.nn.Module):
        # keyword call: transformers 5 rejects these positionally ("multiple values for use_cache")
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, *inputs: Any) -> Any:
            return self.net(**dict(zip(names, inputs, strict=True))).last_hidden_state

    tok = TokenCounter(spec)
    feed = runtime.feed(tok.encode(_CHECK_TEXTS), tok.pad_id, names)
    raw, fused = _tmp(dest.with_name("raw.onnx")), _tmp(dest)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    try:
        with _quiet(), torch.no_grad():
            # reference first: after tracing, this process's model computes different outputs
            # (cosine 0.96 to the true ones, measured with transformers 5 and torch 2.13)
            expected = net(**{n: torch.from_numpy(v) for n, v in feed.items()})
            expected = runtime.pool(expected.last_hidden_state.numpy(), feed["attention_mask"],
                             spec.pooling)
            sample = tuple(torch.from_numpy(feed[n][:2, :16]) for n in names)
            torch.onnx.export(Hidden(), sample, str(raw), input_names=names,
                              output_names=["last_hidden_state"], dynamic_axes=axes,
                              opset_version=17, dynamo=False)
        fusions = _optimize(raw, fused, net.config if fuse else None)
        fusions["PlainLayerNorm"] = _rewrite(fused, plain_layer_norms)
        chosen, check = fused, _agreement(fused, feed, expected, spec.pooling)
        if check < 0.9999:
            log.warning("fused ONNX graph disagrees with torch (cos %.6f); keeping it unfused",
                        check)
            chosen, fusions = raw, {}
            check = _agreement(raw, feed, expected, spec.pooling)
        if check < 0.9999:
            raise Internal(f"the ONNX export of {spec.name} disagrees with torch (cosine "
                           f"{check:.5f}); use embed.backend = \"torch\"")
        os.replace(chosen, dest)
    finally:
        for p in (raw, fused):
            p.unlink(missing_ok=True)
    return {"exported": time.strftime("%Y-%m-%dT%H:%M:%S"), "inputs": names,
            "export_seconds": round(time.perf_counter() - t0, 2), "fusions": fusions,
            "fp32_vs_torch_min_cos": check, "torch": torch.__version__}


def _optimize(src: Path, dest: Path, config: Any) -> dict[str, int]:
    """Fuse attention, GELU and layer norms with ORT's transformer optimizer when it applies."""
    if getattr(config, "model_type", "") not in _FUSABLE:
        dest.write_bytes(src.read_bytes())
        return {}
    from onnxruntime.transformers import optimizer

    with _quiet():
        opt = optimizer.optimize_model(
            str(src), model_type="bert", num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size), use_gpu=False)
        opt.save_model_to_file(str(dest))
    stats = opt.get_fused_operator_statistics()
    return {k: int(v) for k, v in stats.items() if v}


def _rewrite(path: Path, change: Callable[[Any], int]) -> int:
    """Apply ``change`` (ModelProto -> count) to the model file in place when it changes it."""
    import onnx

    model = onnx.load(str(path))
    count = int(change(model))
    if count:
        onnx.save(model, str(path))
    return count


def plain_layer_norms(model: Any) -> int:
    """Write layer norms out as the operators they are made of; returns how many were rewritten.

    ONNX Runtime's CPU kernels for ``LayerNormalization`` and ``SkipLayerNormalization`` take
    ~6.7 ns an element here, 2.3x the same arithmetic as plain vectorised operators (Add,
    ReduceMean, Sub, ReduceSumSquare, Sqrt, Reciprocal, Mul), which ORT leaves alone: its
    layer-norm fusion matches Pow or Div, not this form. A sixth of the int8 model's time went to
    layer norms; the fp32 vectors do not move (cosine 1.000000). Only nodes normalising the last
    axis over a constant scale, with no statistics outputs asked for, are rewritten.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    used = {name for node in graph.node for name in node.input}
    used |= {o.name for o in graph.output}
    nodes: list[Any] = []
    count = 0

    def const(name: str, value: Any) -> str:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def reduce(op: str, src: str, dst: str) -> Any:
        """``op`` over the last axis, keeping it (axes moved from attribute to input in 18)."""
        if opset >= 18:
            return helper.make_node(op, [src, const(dst + "_axes", np.array([-1]))], [dst])
        return helper.make_node(op, [src], [dst], axes=[-1])

    for node in graph.node:
        skip = node.op_type == "SkipLayerNormalization" and node.domain == "com.microsoft"
        plain = node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        scale = node.input[2] if skip else node.input[1] if len(node.input) > 1 else ""
        width = list(consts[scale].dims) if scale in consts else []
        stats = [o for o in node.output[1:3] if o and o in used]
        if not (skip or plain) or len(width) != 1 or stats or attrs.get("axis", -1) != -1:
            nodes.append(node)
            continue
        p = f"{node.name or 'ln'}_{count}/plain_ln/"
        count += 1
        eps = const(p + "eps", np.float32(attrs.get("epsilon", 1e-5)))
        inv_width = const(p + "inv_width", np.float32(1.0 / width[0]))
        shift = node.input[3 if skip else 2] if len(node.input) > (3 if skip else 2) else ""
        ops: list[Any] = []
        x = node.input[0]
        if skip:
            summed = node.output[3] if len(node.output) > 3 and node.output[3] else p + "sum"
            bias = node.input[4] if len(node.input) > 4 else ""
            if bias:
                ops.append(helper.make_node("Add", [x, bias], [p + "biased"]))
                x = p + "biased"
            ops.append(helper.make_node("Add", [x, node.input[1]], [summed]))
            x = summed

        ops += [
            reduce("ReduceMean", x, p + "mean"),
            helper.make_node("Sub", [x, p + "mean"], [p + "centred"]),
            reduce("ReduceSumSquare", p + "centred", p + "sq"),
            helper.make_node("Mul", [p + "sq", inv_width], [p + "var"]),
            helper.make_node("Add", [p + "var", eps], [p + "var_eps"]),
            helper.make_node("Sqrt", [p + "var_eps"], [p + "std"]),
            helper.make_node("Reciprocal", [p + "std"], [p + "inv_std"]),
            helper.make_node("Mul", [p + "centred", p + "inv_std"], [p + "normed"]),
        ]
        out = node.output[0]
        if shift:
            ops += [helper.make_node("Mul", [p + "normed", scale], [p + "scaled"]),
                    helper.make_node("Add", [p + "scaled", shift], [out])]
        else:
            ops.append(helper.make_node("Mul", [p + "normed", scale], [out]))
        nodes += ops
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
    return count


def _quantize(spec: ModelSpec, fp32: Path, dest: Path) -> dict[str, Any]:
    """Dynamic int8: weights per output channel in 7 bits, activations per tensor at run time."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    t0 = time.perf_counter()
    tmp = _tmp(dest)
    try:
        with _quiet():
            # per-channel: mean cosine to fp32 0.992 vs 0.945 per-tensor (measured on code).
            # reduce_range: 7-bit weights cannot saturate the u8*s8 pair sums of AVX2 without
            # VNNI, so the vectors do not depend on which x86 CPU built the index; same accuracy.
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                             reduce_range=True,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        tok, ref = TokenCounter(spec), runtime.session(fp32, 0)
        names = [i.name for i in ref.get_inputs()]
        feed = runtime.feed(tok.encode(_CHECK_TEXTS), tok.pad_id, names)
        expected = runtime.pool(ref.run(None, feed)[0], feed["attention_mask"], spec.pooling)
        check = _agreement(tmp, feed, expected, spec.pooling)
        if check < 0.95:
            raise Internal(f"int8 quantization of {spec.name} lost too much (cosine "
                           f"{check:.3f} to fp32); use embed.backend = \"onnx\"")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return {"quantize_seconds": round(time.perf_counter() - t0, 2), "int8_vs_fp32_min_cos": check}


def _agreement(path: Path, feed: dict[str, np.ndarray], expected: np.ndarray, mode: str) -> float:
    got = runtime.pool(runtime.session(path, 0).run(None, feed)[0], feed["attention_mask"], mode)
    return float((got * expected).sum(axis=1).min())
