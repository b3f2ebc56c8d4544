"""The embedding models side by side: retrieval on every kit set, cross-lingual retrieval on the
DokuWiki set, embedding cost per span and size, to choose the default with numbers.

For each model (``rag-index --list-models``): every set of the kit indexed with it (int8, spans
read to the default ``embed.max_tokens``), then dense only and the default hybrid through
rag-eval's path (k = 10, tau = 0), scored by the kit's rule; the cross-lingual mean of
bench/quality/wiki_languages.py; spans per CPU second (process CPU time over all threads) at one
and two threads, the models taking turns on the same 400 texts (200 code spans of requests and
click as bench/speed/embed_throughput.py cuts them, 200 doc sections of the kit's docs corpus),
so a neighbour's load falls on all of them alike; the model file's size.

    .venv/bin/python -m bench.quality.models --kit ../shared/eval \\
        [--models bge-small-en-v1.5,all-MiniLM-L6-v2,multilingual-e5-small] [--sets ...] \\
        [--skip multilingual-e5-small:cosqa,...] [--reuse] [--quality-only]

Indexing is the whole cost (the embedding cache in bench/.work/index keeps every vector, so a
rerun embeds nothing new). Results are saved in bench/.work/models.json; ``--reuse`` measures
only what is not there yet (a model, set or speed added later), ``--skip`` leaves model:set
pairs out (shown as not measured); ``--quality-only`` leaves the wiki and the speed run to a
later ``--reuse`` run, which times every model side by side; ``--built-only`` indexes nothing
and asks only the questions whose corpus already has an index with the model. Each quality cell
records the commit it was measured at, and the report names those commits. Prints markdown and
rewrites the "models" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import replace
from typing import Any

from bench._report import WORK, git_rev, md_table, write_section
from bench.quality import wiki_languages
from bench.quality.runs import Run, score_run, service_run
from bench.quality.sets import (
    DEFAULT_READ,
    SETS,
    add_kit_arg,
    ensure_kit,
    index_all,
    is_built,
    load_set,
    settings_for,
    use_kit,
)
from rag_mcp.config import load_settings
from rag_mcp.embed import catalog, load_embedder

BACKEND = "onnx-int8"
OUT = WORK / "models.json"


Quality = dict[str, dict[str, dict[str, Any]]]


def quality(models: list[str], sets: list[str], skip: set[tuple[str, str]],
            known: Quality, built_only: bool = False) -> Quality:
    """model -> "set|fusion" -> MRR@10, hit@5, tok@5, queries asked and the commit measured at
    (``known`` entries are kept). ``built_only``: index nothing, ask each set's questions whose
    corpus already has an index with the model (a cell then holds fewer questions than the set)."""
    out: Quality = {m: dict(known.get(m, {})) for m in models}
    rev = git_rev()
    for model in models:
        todo = [s for s in sets
                if (model, s) not in skip and f"{s}|hybrid" not in out[model]]
        if not todo:
            continue
        if not built_only:
            t0 = time.perf_counter()
            index_all(todo, [BACKEND], quiet=True, model=model)
            print(f"{model}: indexed in {time.perf_counter() - t0:.0f} s", flush=True)
        for name in todo:
            ev = load_set(name)
            if built_only:
                ev = replace(ev, queries=[
                    q for q in ev.queries if is_built(settings_for(
                        ev, q.get("corpus", ""), BACKEND, model=model))])
                if not ev.queries:
                    continue
            for fusion in ("dense", "hybrid"):
                run = service_run(ev, BACKEND, f"{fusion} ({model})",
                                  fusion=None if fusion == "hybrid" else fusion, model=model)
                m = score_run(ev, run)
                out.setdefault(model, {})[f"{name}|{fusion}"] = {
                    **{k: m[k] for k in ("MRR@10", "hit@5", "tok@5", "file_tok@5")},
                    "queries": len(ev.queries), "commit": rev}
                print(f"  {name} {fusion}: MRR@10 {m['MRR@10']:.3f} hit@5 {m['hit@5']:.3f} "
                      f"({len(ev.queries)} questions)", flush=True)
    return out


def common_rows(models: list[str], sets: list[str], q: Quality) -> list[list[object]]:
    """Per set whose cells hold different questions: every model's MRR@10 (dense / hybrid) and
    hit@5 (hybrid) over the questions all of them were asked, from the saved runs."""
    rows: list[list[object]] = []
    for name in sets:
        counts = {q[m][f"{name}|hybrid"].get("queries") for m in models
                  if f"{name}|hybrid" in q.get(m, {})}
        if len(counts) < 2:
            continue
        ev = load_set(name)
        runs = {(m, f): Run.load(name, f"{f} ({m})") for m in models for f in ("dense", "hybrid")}
        got = {key: run for key, run in runs.items() if run is not None}
        have = [m for m in models if (m, "dense") in got and (m, "hybrid") in got]
        ids = set.intersection(*(set(got[(m, "hybrid")].results) for m in have))
        qs = [x for x in ev.queries if x["id"] in ids]
        for m in have:
            d, h = (score_run(ev, got[(m, f)], queries=qs) for f in ("dense", "hybrid"))
            rows.append([f"{name} ({len(qs)} of {len(ev.queries)} q)", m,
                         f"{d['MRR@10']:.3f} / {h['MRR@10']:.3f}", f"{h['hit@5']:.3f}"])
    return rows


def texts(n: int) -> list[str]:
    """``n`` code spans and ``n`` doc sections, prefixed as the indexer prefixes them."""
    from bench.speed.embed_throughput import corpus
    from indexers.docs import chunk_doc

    root = ensure_kit() / "sets" / "docs" / "corpus"
    docs: list[str] = []
    for f in sorted(root.rglob("*.md")):
        src = f.read_text(encoding="utf-8", errors="replace")
        lines = src.split("\n")
        rel = str(f.relative_to(root))
        for ch in chunk_doc(src, "markdown", path=rel):
            body = "\n".join(lines[ch.start_line - 1:ch.end_line])
            docs.append(f"{rel}\n{ch.heading or ''}\n{body}")
    random.Random(0).shuffle(docs)
    return corpus(n) + docs[:n]


def speed(models: list[str], n: int, rounds: int) -> dict[str, dict[str, float]]:
    """model -> "t1"/"t2" -> spans per CPU second (and per wall second)."""
    sample = texts(n)
    cache = load_settings({}, environ={}).model_cache_path
    out: dict[str, dict[str, float]] = {m: {} for m in models}
    for threads in (1, 2):
        loaded = {m: load_embedder(m, BACKEND, cache_dir=cache, threads=threads)
                  for m in models}
        for emb in loaded.values():
            emb.embed_documents(sample[:16], DEFAULT_READ)  # warm up
        cpu, wall = dict.fromkeys(models, 0.0), dict.fromkeys(models, 0.0)
        for _ in range(rounds):
            for m, emb in loaded.items():
                c0, w0 = time.process_time(), time.perf_counter()
                for i in range(0, len(sample), 128):  # the indexer's slices
                    emb.embed_documents(sample[i:i + 128], DEFAULT_READ)
                cpu[m] += time.process_time() - c0
                wall[m] += time.perf_counter() - w0
        total = len(sample) * rounds
        for m in models:
            out[m][f"cpu_t{threads}"] = total / cpu[m]
            out[m][f"wall_t{threads}"] = total / wall[m]
    return out


def size_mb(model: str) -> float:
    entry = catalog.lookup(model)
    if entry is None:
        return float("nan")
    path = catalog.locate(entry)[entry.files[0][0].rsplit("/", 1)[-1]]
    return path.stat().st_size / 1e6


def _cell(q: Quality, m: str, key: str, what: str, fmt: str = "{:.3f}") -> str:
    got = q.get(m, {}).get(key)
    return fmt.format(got[what]) if got else "-"


def report(models: list[str], sets: list[str], q: Quality, sp: dict, wiki: dict,
           load: tuple[float, float], skip: set[tuple[str, str]]) -> str:
    base = models[0]
    skipped = f" --skip {','.join(f'{m}:{s}' for m, s in sorted(skip))}" if skip else ""
    # the mean is taken over the sets every model was measured on, so the rows compare
    common = [s for s in sets if all(f"{s}|hybrid" in q.get(m, {}) for m in models)]
    n_q = {s: max((q[m][f"{s}|hybrid"].get("queries") or 0 for m in models
                   if f"{s}|hybrid" in q.get(m, {})), default=0) for s in sets}

    def fewer(m: str, s: str) -> str:  # a cell asked fewer questions than the set's others
        n = q.get(m, {}).get(f"{s}|hybrid", {}).get("queries")
        return f" ({n} q)" if n and n < n_q[s] else ""

    label = {s: f"{s} ({n_q[s]} q)" if n_q[s] else s for s in sets}
    head = ["model", *(f"{label[s]} dense / hybrid" for s in sets),
            f"mean hybrid MRR@10 ({', '.join(common) or 'no set'})",
            "cross-lingual hit@5 (wiki, hybrid)", "spans / CPU s (1 thread)", "(2 threads)",
            "CPU ms / span", "x first", "weights MB"]
    rows: list[list[object]] = []
    for m in models:
        mean = sum(q[m][f"{s}|hybrid"]["MRR@10"] for s in common) / max(1, len(common))
        pairs = wiki_languages.CROSS
        cross = (f"{sum(wiki[m][p]['hybrid']['hit@5'] for p in pairs) / len(pairs):.3f}"
                 if m in wiki else "-")
        t1, t2 = sp.get(m, {}).get("cpu_t1"), sp.get(m, {}).get("cpu_t2")
        rows.append([m, *(f"{_cell(q, m, f'{s}|dense', 'MRR@10')} / "
                          f"{_cell(q, m, f'{s}|hybrid', 'MRR@10')}{fewer(m, s)}" for s in sets),
                     f"{mean:.3f}" if common else "-", cross,
                     f"{t1:.1f}" if t1 else "-", f"{t2:.1f}" if t2 else "-",
                     f"{1000 / t1:.0f}" if t1 else "-",
                     f"{t1 / sp[base]['cpu_t1']:.2f}x" if t1 and base in sp else "-",
                     f"{size_mb(m):.0f}"])
    hits: list[list[object]] = [
        [m, *(f"{_cell(q, m, f'{s}|dense', 'hit@5')} / {_cell(q, m, f'{s}|hybrid', 'hit@5')}"
              for s in sets),
         *(_cell(q, m, f"{s}|hybrid", "tok@5", "{:,.0f}") for s in sets[:1])] for m in models]
    revs = sorted({c.get("commit", "(not recorded)") for m in models
                   for c in q.get(m, {}).values()})
    measured = f"commit {revs[0]}" if len(revs) == 1 else f"commits {', '.join(revs)}"
    same = common_rows(models, sets, q)
    same_md = ("" if not same else "\nWhere the models were asked different numbers of questions "
               "(a corpus not indexed with every model in time), every model on the questions all "
               "were asked (MRR@10 dense / hybrid, hit@5 hybrid):\n\n"
               + md_table(["set", "model", "MRR@10", "hit@5"], same) + "\n")
    return f"""## Embedding models side by side

`python -m bench.quality.models --models {",".join(models)} --sets {",".join(sets)}{skipped}`

Every kit set indexed with each model (int8, spans read to {DEFAULT_READ} tokens, queries whole),
MRR@10 of dense only and of the default hybrid (each model's own calibration row) through
rag-eval's path, k = 10, tau = 0; quality cells measured at {measured}. Cross-lingual: the
mean hit@5 over the six cross-lingual pairs of the DokuWiki set ("Questions in one language,
wiki pages in another"). Speed: spans per CPU second of the model alone (process CPU time), the
models taking turns on the same 400 texts (200 code spans, 200 doc sections) in one run; load
average {load[0]:.1f} before, {load[1]:.1f} after, on a shared 2-core machine, so read the
ratios. The vectors are 384-dimensional for every model here, so the index takes the same
space. `-` = not measured; with `--reuse`, cells measured by an earlier run of this script are
kept (the load figures are this run's).

{md_table(head, rows)}

hit@5, dense / hybrid, and tokens the hybrid returns in its top 5 on {sets[0]}:

{md_table(["model", *(label[s] for s in sets), f"{sets[0]} tok@5"], hits)}
{same_md}"""


def save(results: dict[str, Any]) -> None:
    """Merge ``results`` into bench/.work/models.json as it is now: a run measuring other models
    or sets at the same time keeps its cells (quality merges per cell, wiki and speed per
    model)."""
    saved: dict[str, Any] = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for kind, per_model in results.items():
        into = saved.setdefault(kind, {})
        for model, got in per_model.items():
            into[model] = {**into.get(model, {}), **got} if kind == "quality" else got
    OUT.write_text(json.dumps(saved, indent=1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(e.name for e in catalog.CATALOG))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--spans", type=int, default=200, help="code spans and doc sections each")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="",
                    help="model:set pairs not to measure, comma-separated")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the results in bench/.work/models.json; measure only the rest")
    ap.add_argument("--quality-only", action="store_true",
                    help="measure the kit sets only, leaving the wiki and the speed run to a "
                         "later --reuse run (e.g. while other models' indexes are being built)")
    ap.add_argument("--built-only", action="store_true",
                    help="index nothing: ask only the questions whose corpus already has an "
                         "index with the model (SWE-bench's snapshots not all embedded yet)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    models, sets = a.models.split(","), a.sets.split(",")
    skip = {(p.split(":")[0], p.split(":")[1]) for p in a.skip.split(",") if ":" in p}
    known: dict[str, Any] = json.loads(OUT.read_text()) if a.reuse and OUT.is_file() else {}
    before = os.getloadavg()[0]
    q = quality(models, sets, skip, known.get("quality", {}), a.built_only)
    wiki = {m: known["wiki"][m] for m in models if m in known.get("wiki", {})}
    if len(wiki) < len(models) and not a.quality_only:
        wiki_set = wiki_languages.load()
        wiki.update({m: wiki_languages.measure(wiki_set, m) for m in models if m not in wiki})
    sp = {m: known["speed"][m] for m in models if m in known.get("speed", {})}
    if len(sp) < len(models) and not a.quality_only:
        sp = speed(models, a.spans, a.rounds)  # all of them again: side by side, one load
    save({"quality": q, "wiki": wiki, "speed": sp})
    body = report(models, sets, q, sp, wiki, (before, os.getloadavg()[0]), skip)
    print(body)
    if not a.no_write:
        write_section("models", body)


if __name__ == "__main__":
    main()
