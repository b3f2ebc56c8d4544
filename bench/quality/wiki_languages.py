"""Questions in one language over wiki pages in another: each embedding model, dense and hybrid.

The pages are real DokuWiki pages and their translations, from Debian's ``dokuwiki`` package
(downloaded once at bench time with ``apt-get download``; the product downloads nothing): the
English ``wiki:syntax``, ``wiki:dokuwiki`` and ``wiki:welcome`` pages, and the help texts of the
wiki and its plugins (``inc/lang/<lang>/*.txt``, ``lib/plugins/*/lang/<lang>/*.txt``), which
DokuWiki ships translated. They are laid out as wikis (``data/pages/...``), one per language
(en, de, fr, and ru for the help texts), plus a bilingual one (``mix``: the English pages and
the German ones under ``de:``, as translation plugins lay them out).

``bench/quality/wiki_questions.json`` holds 61 targets (35 sections of the English pages, 26
help pages that exist in all three languages), each asked once in English, German and French;
the help pages are asked in Russian too, over the Russian and the English wiki (a script other
than Latin, whose words the keyword leg must take whole). Gold: the lines of the section's
answer (English pages) or the whole help page. Every question runs against every wiki its page
exists in, so "de>en" is German questions over English pages; in ``mix``, ``(other)`` marks
questions whose answer exists only in the other language.

    .venv/bin/python -m bench.quality.wiki_languages [--models bge-small-en-v1.5,...] [--reuse]
        [--no-write]

Results are kept in bench/.work/wiki_languages/results.json; ``--reuse`` measures only the
models not there yet.

Prints markdown and rewrites the "wiki-languages" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

from bench._report import WORK, md_table, write_section
from bench.quality.runs import score_run, service_run
from bench.quality.sets import EvalSet, index_all

NAME = "wiki_languages"
HERE = Path(__file__).resolve().parent
ROOT = WORK / "wiki_languages"
SET = ROOT / "set"
LANGS = ("en", "de", "fr")
#: every wiki built: the three languages, and Russian (help texts only)
WIKIS = (*LANGS, "ru")
BACKEND = "onnx-int8"
MODELS = ("all-MiniLM-L6-v2", "bge-small-en-v1.5", "multilingual-e5-small")
#: (questions, pages) pairs in the order of the table; "x>mix(other)" = answer only in English
PAIRS = ("en>en", "de>de", "fr>fr", "de>en", "fr>en", "en>de", "en>fr", "de>fr", "fr>de",
         "ru>ru", "ru>en", "de>mix(other)", "de>mix(same)", "en>mix(same)")
CROSS = ("de>en", "fr>en", "en>de", "en>fr", "de>fr", "fr>de")


def fetch() -> Path:
    """Debian's dokuwiki package, unpacked once under bench/.work."""
    tree = ROOT / "dokuwiki"
    if tree.is_dir():
        return tree
    dl = ROOT / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    if not list(dl.glob("dokuwiki_*.deb")):
        subprocess.run(["apt-get", "download", "-q", "dokuwiki"], cwd=dl, check=True,
                       capture_output=True)
    deb = sorted(dl.glob("dokuwiki_*.deb"))[-1]
    tmp = tree.with_name("dokuwiki.part")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
    tmp.rename(tree)
    return tree


def pages(tree: Path, lang: str) -> dict[str, Path]:
    """page ID -> source file of one language."""
    out: dict[str, Path] = {}
    if lang == "en":
        for f in sorted((tree / "var/lib/dokuwiki/data/pages/wiki").glob("*.txt")):
            out[f"wiki:{f.stem}"] = f
    for f in sorted((tree / f"usr/share/dokuwiki/inc/lang/{lang}").glob("*.txt")):
        out[f"help:{f.stem}"] = f
    for f in sorted((tree / "var/lib/dokuwiki/lib/plugins").glob(f"*/lang/{lang}/*.txt")):
        out[f"plugins:{f.parent.parent.parent.name}:{f.stem}"] = f
    return out


def gold_lines(lines: list[str], start: str | None, until: str | None) -> tuple[int, int]:
    """1-based lines from the first containing ``start`` to the first (from there) containing
    ``until`` (without it: to the end of that paragraph); no ``start``: the whole page."""
    if not start:
        return 1, len(lines)
    a = next(i for i, ln in enumerate(lines) if start in ln)
    if until:
        b = next(i for i, ln in enumerate(lines) if i >= a and until in ln)
    else:
        b = a
        while b + 1 < len(lines) and lines[b + 1].strip():
            b += 1
    return a + 1, b + 1


def _place(src: Path, wiki: str, page_id: str) -> str:
    rel = "data/pages/" + page_id.replace(":", "/") + ".txt"
    dest = SET / wiki / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return rel


def build() -> EvalSet:
    tree = fetch()
    targets = json.loads((HERE / "wiki_questions.json").read_text(encoding="utf-8"))["targets"]
    shutil.rmtree(SET, ignore_errors=True)
    found = {lang: pages(tree, lang) for lang in WIKIS}
    rows: list[dict] = []

    def gold(wiki: str, rel: str, t: dict, english: bool) -> list[dict]:
        lines = (SET / wiki / rel).read_text(encoding="utf-8").split("\n")
        if not english:
            return [{"path": rel, "start_line": 1, "end_line": len(lines)}]
        return [{"path": rel, "start_line": s, "end_line": e}
                for s, e in (gold_lines(lines, x.get("from"), x.get("until"))
                             for x in (t, *t.get("also", ())))]

    for lang in WIKIS:
        rels = {pid: _place(src, lang, pid) for pid, src in found[lang].items()}
        for t in targets:
            if t["page"] in rels:
                g = gold(lang, rels[t["page"]], t, lang == "en")
                rows += [{"id": f"{t['id']}.{q}>{lang}", "query": t[q], "corpus": lang,
                          "qlang": q, "pair": f"{q}>{lang}", "gold": g}
                         for q in WIKIS if q in t and f"{q}>{lang}" in PAIRS]
    mixed = {"en": {pid: _place(src, "mix", pid) for pid, src in found["en"].items()},
             "de": {pid: _place(src, "mix", f"de:{pid}") for pid, src in found["de"].items()}}
    for t in targets:
        golds = {lang: gold("mix", mixed[lang][t["page"]], t, lang == "en")
                 for lang in ("en", "de") if t["page"] in mixed[lang]}
        for q in ("en", "de"):
            where = "same" if q in golds else "other"
            rows.append({"id": f"{t['id']}.{q}>mix", "query": t[q], "corpus": "mix",
                         "qlang": q, "pair": f"{q}>mix({where})",
                         "gold": [g for gs in golds.values() for g in gs]})
    with (SET / "queries.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return EvalSet(NAME, SET, rows)


def load() -> EvalSet:
    """The set as built (building it the first time): ``bench.quality.sets.load_set`` knows it
    by name, so the kit's tools (indexing, calibration) take it like a kit set."""
    if not (SET / "queries.jsonl").is_file():
        return build()
    rows = [json.loads(x) for x in (SET / "queries.jsonl").open(encoding="utf-8")]
    return EvalSet(NAME, SET, rows)


def measure(ev: EvalSet, model: str) -> dict[str, dict[str, dict[str, float]]]:
    """pair -> fusion -> MRR@10, hit@5 and n, for one model."""
    index_all([ev.name], [BACKEND], quiet=True, model=model)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for fusion in ("dense", "hybrid"):
        run = service_run(ev, BACKEND, f"{fusion} ({model})",
                          fusion=None if fusion == "hybrid" else fusion, model=model)
        for pair in PAIRS:
            qs = [q for q in ev.queries if q["pair"] == pair]
            m = score_run(ev, run, queries=qs)
            out.setdefault(pair, {})[fusion] = {"MRR@10": m["MRR@10"], "hit@5": m["hit@5"],
                                                "n": len(qs)}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--reuse", action="store_true",
                    help="keep the models already in results.json; measure only the others")
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args(argv)
    ev = build()
    models = a.models.split(",")
    saved = ROOT / "results.json"
    known = json.loads(saved.read_text()) if a.reuse and saved.is_file() else {}
    res = {m: known[m] if m in known else measure(ev, m) for m in models}
    saved.write_text(json.dumps({**known, **res}, indent=1))
    head = ["questions > pages (n)", *(f"{m} {f}" for m in models for f in ("dense", "hybrid"))]
    rows: list[list[object]] = [[f"{p} ({res[models[0]][p]['dense']['n']:.0f})",
             *(f"{res[m][p][f]['MRR@10']:.3f} / {res[m][p][f]['hit@5']:.3f}"
               for m in models for f in ("dense", "hybrid"))] for p in PAIRS]
    mean: list[list[object]] = [["cross-lingual mean hit@5",
             *(f"{sum(res[m][p][f]['hit@5'] for p in CROSS) / len(CROSS):.3f}"
               for m in models for f in ("dense", "hybrid"))]]
    n_pages = {w: len(list((SET / w).rglob("*.txt"))) for w in (*WIKIS, "mix")}
    body = f"""## Questions in one language, wiki pages in another

`python -m bench.quality.wiki_languages --models {a.models}`

Real DokuWiki pages and their translations from Debian's `dokuwiki` package: one wiki per
language (pages: {", ".join(f"{w} {n}" for w, n in n_pages.items())}; `mix` holds the English
pages and the German ones under `de:`). 61 questions, each written in English, German and French
for one section of the English pages (35) or one help page that exists in every language (26),
the 26 help-page questions in Russian too (`ru>ru`, `ru>en`: Cyrillic);
`de>en` = German questions over the English wiki; in `mix`, `(other)` = the answer exists only in
English, `(same)` = a German version exists too (either counts). Cells: MRR@10 / hit@5, k = 10,
int8, spans read to the default 160 tokens; hybrid with each model's own calibration row.
Small wikis (about 100 spans each): chance alone puts a page in the top 5 about 5% of the time.

{md_table(head, rows + mean)}
"""
    print(body)
    if not a.no_write:
        write_section("wiki-languages", body)


if __name__ == "__main__":
    main()
