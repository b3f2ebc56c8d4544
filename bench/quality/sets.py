"""The evaluation sets of the evaluation kit and their indexes, for the quality bench.

The kit (a folder holding ``score.py``, ``bm25_baseline.py`` and ``sets/``; here ../shared/eval)
is named by ``--kit DIR`` or the environment variable ``RAG_EVAL_KIT``, and copied once to
``bench/.work/eval`` (the kit may be read-only; SWE-bench has to be unpacked). Every corpus is
indexed with the real pipeline into one ``index.dir`` (``bench/.work/index``), so the embedding
cache there is shared: a vector is computed once per (model, text) across corpora, backends'
reruns and SWE-bench's 30 overlapping snapshots.

    .venv/bin/python -m bench.quality.sets --kit ../shared/eval [--backends onnx-int8,onnx] \\
        [--sets docs,cosqa]

indexes everything up front (slow: embedding is the whole cost; run it in the background).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench._report import WORK
from indexers.pipeline import RunStats, run_index
from rag_mcp.config import Settings, load_settings

#: the environment variable naming the kit's folder (``--kit DIR`` wins over it)
KIT_ENV = "RAG_EVAL_KIT"
EVAL = WORK / "eval"
_KIT_SOURCE = EVAL / ".kit-source"  # the folder the copy was made from
_kit_flag: str | None = None
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


def add_kit_arg(ap: argparse.ArgumentParser) -> None:
    """The ``--kit DIR`` option of every script that reads the evaluation sets."""
    ap.add_argument("--kit", metavar="DIR",
                    help=f"the evaluation kit's folder (default: ${KIT_ENV}), e.g. ../shared/eval; "
                         "copied once into bench/.work/eval")


def use_kit(flag: str | None) -> None:
    """Take the kit from ``--kit`` (None: from the environment) for this process."""
    global _kit_flag
    _kit_flag = flag


def kit_source() -> Path:
    """The kit's folder, from ``--kit DIR`` or ``RAG_EVAL_KIT``; exits saying which is missing."""
    raw = _kit_flag or os.environ.get(KIT_ENV, "")
    if not raw:
        sys.exit(f"no evaluation kit given: pass --kit DIR or set {KIT_ENV}=DIR, DIR being the "
                 "kit's folder (it holds score.py and sets/; here ../shared/eval)")
    path = Path(raw).expanduser().resolve()
    if not (path / "score.py").is_file() or not (path / "sets").is_dir():
        sys.exit(f"{path} is not the evaluation kit (no score.py and sets/ in it); "
                 f"check --kit DIR or {KIT_ENV}")
    return path


def ensure_kit() -> Path:
    """The work copy of the kit: copied (once) from ``kit_source()``, SWE-bench Lite unpacked.

    An existing copy is used as it is unless a kit was named that it was not copied from."""
    named = _kit_flag or os.environ.get(KIT_ENV)
    if EVAL.exists() and named and _KIT_SOURCE.is_file():
        src, made_from = kit_source(), _KIT_SOURCE.read_text(encoding="utf-8")
        if made_from != str(src):
            sys.exit(f"{EVAL} was copied from {made_from}, not {src}: delete it to copy this "
                     "kit (bench/.work/index then holds the indexes of the other kit's sets)")
    if not EVAL.exists():
        src = kit_source()
        shutil.copytree(src, EVAL)
        subprocess.run(["chmod", "-R", "u+w", str(EVAL)], check=True)
        _KIT_SOURCE.write_text(str(src), encoding="utf-8")
    if not (EVAL / "sets" / "swebench_lite" / "queries.jsonl").exists():
        subprocess.run([sys.executable, "make_swebench_set.py", "--unpack"], cwd=EVAL,
                       check=True, stdout=subprocess.DEVNULL)
    return EVAL


def load_set(name: str) -> EvalSet:
    if name == "wiki_languages":  # built from Debian's dokuwiki package, not part of the kit
        from bench.quality.wiki_languages import load

        return load()
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


def is_built(settings: Settings) -> bool:
    """Whether the corpus of ``settings`` has a published index (a generation to open)."""
    return (settings.index_path / "CURRENT").is_file()


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
    ap.add_argument("--model", default="all-MiniLM-L6-v2",
                    help="embedding model (`rag-index --list-models`); indexes of each model are "
                         "kept apart")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    index_all(a.sets.split(","), a.backends.split(","), model=a.model)


if __name__ == "__main__":
    main()
