"""The evaluation sets of ../shared/eval and their indexes, for the quality bench.

The kit is copied to ``bench/.work/eval`` (the shared folder is read-only; SWE-bench has to be
unpacked). Every corpus is indexed with the real pipeline into one ``index.dir``
(``bench/.work/index``), so the embedding cache there is shared: a vector is computed once per
(model, text) across corpora, backends' reruns and SWE-bench's 30 overlapping snapshots.

    .venv/bin/python -m bench.quality_sets [--backends onnx-int8,onnx] [--sets docs,cosqa]

indexes everything up front (slow: embedding is the whole cost; run it in the background).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench._report import WORK
from indexers.pipeline import RunStats, run_index
from rag_mcp.config import Settings, load_settings

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "eval"
EVAL = WORK / "eval"
INDEX = WORK / "index"
SETS = ("docs", "cosqa", "docstring", "swebench_lite")
BACKENDS = ("onnx-int8", "onnx")
SHORT = {"onnx": "fp32", "onnx-int8": "int8", "torch": "torch", "test-hash-64": "hash"}
#: tokens of a span the default pipeline's model reads (embed.max_tokens of configs/default.toml)
DEFAULT_READ = load_settings({}, environ={}).embed_max_tokens


@dataclass(frozen=True)
class EvalSet:
    name: str
    dir: Path
    queries: list[dict]

    @property
    def corpora(self) -> list[str]:
        """Sub-corpora in first-use order ("" = the set's own corpus/ folder)."""
        return list(dict.fromkeys(q.get("corpus", "") for q in self.queries))

    def corpus_dir(self, sub: str) -> Path:
        return self.dir / sub if sub else self.dir / "corpus"

    @property
    def score_root(self) -> Path:
        """The --corpus argument of score.py for this set."""
        return self.dir if any(q.get("corpus") for q in self.queries) else self.dir / "corpus"


def ensure_kit() -> Path:
    """Copy the kit (once) and unpack SWE-bench Lite into it."""
    if not EVAL.exists():
        if not SHARED.is_dir():
            sys.exit(f"no evaluation kit at {SHARED}")
        shutil.copytree(SHARED, EVAL)
        subprocess.run(["chmod", "-R", "u+w", str(EVAL)], check=True)
    if not (EVAL / "sets" / "swebench_lite" / "queries.jsonl").exists():
        subprocess.run([sys.executable, "make_swebench_set.py", "--unpack"], cwd=EVAL,
                       check=True, stdout=subprocess.DEVNULL)
    return EVAL


def load_set(name: str) -> EvalSet:
    d = ensure_kit() / "sets" / name
    with (d / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line) for line in fh if line.strip()]
    return EvalSet(name, d, queries)


def collection(set_name: str, sub: str, backend: str, model: str = "all-MiniLM-L6-v2") -> str:
    tag = SHORT.get(backend, backend)
    if model != "all-MiniLM-L6-v2":
        tag = f"{tag}-{SHORT.get(model, model.split('/')[-1])}"
    base = sub.split("/")[0] if sub else set_name
    return f"{base}-{tag}"[:63].replace("__", "-").strip("-_.")


def settings_for(ev: EvalSet, sub: str, backend: str, *, model: str = "all-MiniLM-L6-v2",
                 index_dir: Path = INDEX, **extra: object) -> Settings:
    over: dict[str, object] = {
        "root": str(ev.corpus_dir(sub)), "index_dir": str(index_dir),
        "collection": collection(ev.name, sub, backend, model), "embed_backend": backend,
        "embed_model": model, "log_dir": str(WORK / "logs"),
    }
    if backend == "onnx":
        # fp32 is the reference: the model as sentence-transformers runs it, spans read whole
        over["embed_max_tokens"] = 0
    over.update(extra)
    return load_settings(over, environ={})


def index_all(set_names: list[str], backends: list[str], *, quiet: bool = False,
              **extra: object) -> dict[str, list[RunStats]]:
    """Index every corpus of the sets; ``extra`` are settings (e.g. another index_dir)."""
    out: dict[str, list[RunStats]] = {}
    for backend in backends:
        for name in set_names:
            ev = load_set(name)
            for sub in ev.corpora:
                s = settings_for(ev, sub, backend, **extra)  # type: ignore[arg-type]
                t0 = time.perf_counter()
                st = run_index(s)
                out.setdefault(f"{name}/{backend}", []).append(st)
                if not quiet:
                    rate = st.embedded / st.embed_seconds if st.embed_seconds else 0.0
                    print(f"{name} {sub or '-'} {backend}: {st.spans_total} spans, "
                          f"{st.embedded} embedded ({rate:.1f}/s), "
                          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    a = ap.parse_args(argv)
    index_all(a.sets.split(","), a.backends.split(","))


if __name__ == "__main__":
    main()
