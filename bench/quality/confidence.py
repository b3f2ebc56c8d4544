"""Does ``low_confidence`` tell a question the corpus cannot answer from one it can?

An assistant trusts a hit unless ``rag_query`` says ``low_confidence``. This bench asks two kinds
of questions through rag_query's own path (``QueryService``, the calibrated default tau):

- on-topic: every question of the evaluation kit's four sets, against its own corpus; the
  share flagged should be small (a flagged on-topic answer makes the assistant rephrase for
  nothing), and MRR@10 at tau = 0 shows the ranking is what it was;
- off-topic: ``offtopic.jsonl`` beside this file, 92 questions from fifteen domains that no
  code or software documentation answers (cooking, geography, law, pets, ...), phrased as
  people ask ("how do I ...", "what is the ...", "can you explain ...", bare keywords), asked
  against a documentation index (the kit's FastAPI docs) and code indexes (the docstring and
  CoSQA corpora); the share flagged should be large. Its ``split`` field halves it: "dev"
  questions may be looked at while designing, "holdout" ones only measured.

It also takes the question frames apart: each off-topic question that opens with a frame ("how
do I", "can you explain") is asked whole, as its frame alone and as the rest alone, and the
top hit's cosine and lexical share are printed for each, so that what carries the score shows.

    .venv/bin/python -m bench.quality.confidence [--sets docs,cosqa,...] [--no-write]

Indexes come from bench/quality/sets.py (int8, bench/.work/index); a missing one is built.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from bench._report import WORK, md_table, write_section
from bench.quality.sets import (
    EvalSet,
    add_kit_arg,
    is_built,
    load_set,
    settings_for,
    use_kit,
)
from indexers.pipeline import run_index
from rag_mcp.deps import Deps, build_deps
from rag_mcp.eval.metrics import LineSpan, score_query
from rag_mcp.eval.run import eval_settings
from rag_mcp.index.lexical import tokenize
from rag_mcp.search.fusion import Calibration, calibration_for, coverage_shift, logistic
from rag_mcp.search.records import QueryParams
from rag_mcp.search.retrieve import Filters

BACKEND = "onnx-int8"
OFFTOPIC = Path(__file__).with_name("offtopic.jsonl")
SETS = ("docs", "cosqa", "docstring", "swebench_lite")
#: the indexes the off-topic questions are asked against: one of documentation, two of code
OFFTOPIC_INDEXES = ("docs", "docstring", "cosqa")
FEATURES = WORK / "confidence"
MODEL = "all-MiniLM-L6-v2"
#: the most on-topic questions of one set that --fit lets the flag catch (the goal allows 5%)
FIT_ON_TOPIC = 0.025
#: what --fit tries: the coverage's weight, and the flag threshold
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
FLAGS = tuple(round(0.0025 * i, 4) for i in range(1, 81))
#: question frames, longest first: what a person puts around the words that carry the topic
FRAMES = re.compile(
    r"^(how do i|how can i|how long should i|how long does it take to|how often should i|"
    r"how often do|how many|how much|how long do|how far is|how did|how do|"
    r"what is the difference between|what is the best way to|what is the best time of year to|"
    r"what is the|what is a|what is|what are the|what are my|what are|what should i|"
    r"what makes|what causes|what started|can you explain|can you recommend|why does my|"
    r"why does|why do|why is my|who was|who won|who painted|who directed|who composed|"
    r"when did|when is|where is|which|is it|do i need|should i)\b",
    re.IGNORECASE)


@dataclass
class Asked:
    """One question asked against one index."""

    set: str
    qid: str
    query: str
    flagged: bool
    top_score: float
    top_cos: float
    top_lex: float
    #: the share of the query's lexical terms that occur nowhere in the corpus
    absent_terms: float
    rr: float | None = None  # reciprocal rank at tau = 0, on-topic only
    #: more of the top hit and the query, for the confidence fit: raw, kind, n_terms,
    #: coverage (the query's BM25 bound over the bound with absent terms counted at the rarest
    #: idf), median and 10th cosine of the dense candidates
    more: dict[str, float | str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)


def ask(deps: Deps, ev_name: str, q: dict, gold: bool) -> Asked:
    text = q["query"]
    ans = deps.queries.query(QueryParams(query=text, k=10, tau=None))
    got = deps.repo().retriever.retrieve(text, Filters())
    top = got.hits[0] if got.hits else None
    tokens = list(dict.fromkeys(tokenize(text)))
    lexical = got.index.lexical
    absent = sum(1 for t in tokens if lexical.upper_bound([t]) == 0.0)
    dense = sorted((h.cos for h in got.hits if h.dense_rank is not None), reverse=True)
    # the top hit's score before the query's coverage entered it: what --fit starts from
    shift = coverage_shift(got.calibration, got.coverage)
    more: dict[str, float | str] = {
        "raw": top.raw if top else 0.0, "kind": top.span.kind if top else "",
        "n_terms": len(tokens), "coverage": got.coverage,
        "logit0": _logit(top.score) - shift if top else -30.0,
        "best_cos": dense[0] if dense else 0.0,
        "cos_median": statistics.median(dense) if dense else 0.0,
        "cos_10": dense[9] if len(dense) > 9 else 0.0}
    rr = None
    if gold:
        golds = [LineSpan.of(g) for g in q["gold"]]
        ranked = deps.queries.query(QueryParams(query=text, k=10, tau=0.0))
        results = [LineSpan(h.path, h.start_line, h.end_line) for h in ranked.hits]
        rr = score_query(golds, results)["MRR@10"]
        answered = [LineSpan(h.path, h.start_line, h.end_line) for h in ans.hits]
        more["rr_default"] = score_query(golds, answered)["MRR@10"]
    return Asked(ev_name, str(q["id"]), text, ans.low_confidence,
                 ans.hits[0].score if ans.hits else 0.0, top.cos if top else 0.0,
                 top.lex if top else 0.0, absent / len(tokens) if tokens else 1.0, rr,
                 more=more,
                 extra={k: str(q[k]) for k in ("domain", "frame", "split", "part") if k in q})


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1.0 - 1e-12)
    return math.log(p / (1.0 - p))


def offtopic_questions() -> list[dict]:
    return [orjson.loads(line) for line in OFFTOPIC.read_bytes().splitlines() if line.strip()]


def frame_parts(questions: list[dict]) -> list[dict]:
    """Each framed question as its frame alone and as the rest alone."""
    out = []
    for q in questions:
        m = FRAMES.match(q["query"])
        if m is None:
            continue
        rest = q["query"][m.end():].strip(" ?")
        out.append({**q, "id": f"{q['id']}-frame", "query": m.group(0), "part": "frame"})
        if rest:
            out.append({**q, "id": f"{q['id']}-rest", "query": rest, "part": "rest"})
    return out


def features(model: str) -> Path:
    """Where the per-question features of ``model``'s indexes are kept."""
    return FEATURES if model == MODEL else FEATURES.with_name(f"confidence-{model}")


def measure(sets: list[str], model: str = MODEL, built_only: bool = False,
            skipped: list[str] | None = None) -> tuple[list[Asked], list[Asked]]:
    """(on-topic, off-topic) questions asked; per-question features saved as JSONL (the rows
    of sets not asked this time are kept, so ``--saved`` can report every set). With
    ``built_only`` corpora without an index are skipped (and named in ``skipped``)."""
    skipped = skipped if skipped is not None else []
    on: list[Asked] = []
    off: list[Asked] = []
    questions = offtopic_questions()
    parts = frame_parts(questions)
    for name in sets:
        ev: EvalSet = load_set(name)
        for sub in ev.corpora:
            settings = settings_for(ev, sub, BACKEND, model=model)
            if built_only and not is_built(settings):
                skipped.append(sub.split("/")[0] or name)
                continue
            run_index(settings)  # nothing to do when the index is current
            deps = build_deps(eval_settings(settings, 10))
            try:
                for q in ev.queries:
                    if q.get("corpus", "") == sub:
                        on.append(ask(deps, name, q, gold=True))
                if name in OFFTOPIC_INDEXES and not sub:
                    off.extend(ask(deps, name, q, gold=False) for q in questions)
                    off.extend(ask(deps, name, q, gold=False) for q in parts)
            finally:
                deps.close()
        print(f"{name}: {sum(1 for a in on if a.set == name)} on-topic asked", flush=True)
    where = features(model)
    where.mkdir(parents=True, exist_ok=True)
    for label, rows in (("ontopic", on), ("offtopic", off)):
        path = where / f"{label}.jsonl"
        kept = [line for line in (path.read_bytes().splitlines() if path.exists() else [])
                if line and orjson.loads(line)["set"] not in sets]  # other sets' last run
        path.write_bytes(b"".join(line + b"\n" for line in kept)
                         + b"".join(orjson.dumps(a.__dict__) + b"\n" for a in rows))
    return on, off


def saved(sets: list[str], model: str = "all-MiniLM-L6-v2") -> tuple[list[Asked], list[Asked]]:
    """The questions of the last run (bench/.work/confidence), for ``sets``."""
    def load(label: str) -> list[Asked]:
        rows = [Asked(**orjson.loads(line))
                for line in (features(model) / f"{label}.jsonl").read_bytes().splitlines()
                if line]
        return [a for a in rows if a.set in sets]
    return load("ontopic"), load("offtopic")


def _rate(rows: list[Asked]) -> str:
    return f"{sum(a.flagged for a in rows) / len(rows):.1%}" if rows else "-"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(on: list[Asked], off: list[Asked]) -> tuple[str, bool]:
    whole = [a for a in off if "part" not in a.extra]
    by_set: dict[str, list[Asked]] = defaultdict(list)
    for a in on:
        by_set[a.set].append(a)
    rows: list[list[object]] = []
    met = True
    for name, asked in by_set.items():
        mine = [a for a in whole if a.set == name]
        mrr = sum(a.rr or 0.0 for a in asked) / len(asked)
        mrr_default = sum(float(a.more.get("rr_default", 0.0)) for a in asked) / len(asked)
        flagged_on = sum(a.flagged for a in asked) / len(asked)
        met &= flagged_on <= 0.05
        rows.append([name, len(asked), _rate(asked), mrr, mrr_default,
                     _median([a.top_score for a in asked]), len(mine) or "-", _rate(mine),
                     _median([a.top_score for a in mine]) if mine else "-"])
    on_met = met
    flagged_off = sum(a.flagged for a in whole) / len(whole) if whole else 0.0
    met &= flagged_off >= 0.90
    table = md_table(["set (index)", "on-topic questions", "flagged", "MRR@10 (tau 0)",
                      "MRR@10 (default tau)",
                      "median top score", "off-topic questions", "flagged",
                      "median top score"], rows)
    splits = md_table(["off-topic questions", "asked", "flagged"], [
        [split, len(sel), _rate(sel)] for split in ("dev", "holdout", "all")
        for sel in [[a for a in whole if split == "all" or a.extra.get("split") == split]]])
    frames: dict[str, list[Asked]] = defaultdict(list)
    for a in whole:
        frames[a.extra.get("frame", "")].append(a)
    frame_table = md_table(["question frame", "asked", "flagged", "median top score"], [
        [frame, len(sel), _rate(sel), _median([a.top_score for a in sel])]
        for frame, sel in sorted(frames.items(), key=lambda kv: -len(kv[1]))])
    parts_rows: list[list[object]] = []
    for name in OFFTOPIC_INDEXES:
        for part in ("whole", "frame", "rest"):
            sel = [a for a in off if a.set == name and a.extra.get("part", "whole") == part
                   and (part != "whole" or FRAMES.match(a.query))]
            if not sel:
                continue
            parts_rows.append([name, part, len(sel), _rate(sel),
                               _median([a.top_score for a in sel]),
                               _median([a.top_cos for a in sel]),
                               _median([a.top_lex for a in sel]),
                               _median([a.absent_terms for a in sel])])
    parts = md_table(["index", "asked as", "questions", "flagged", "median top score",
                      "median top cosine", "median top lexical share",
                      "median share of terms absent from the corpus"], parts_rows)
    why = _why(on, off)
    text = (f"{table}\n\nOff-topic questions flagged, all indexes: {flagged_off:.1%} "
            f"(goal >= 90%: {'met' if flagged_off >= 0.90 else 'missed'}); on-topic flagged at "
            f"most 5% in every set: {'met' if on_met else 'missed'}.\n\n{splits}\n\n"
            f"By question frame (off-topic):\n\n{frame_table}\n\n"
            f"Framed off-topic questions taken apart:\n\n{parts}\n\n{why}")
    return text, met


def _why(on: list[Asked], off: list[Asked]) -> str:
    """What carries an off-topic question's score, in words, from this run's medians."""
    def med(name: str, part: str, attr: str) -> float:
        sel = [a for a in off if a.set == name and a.extra.get("part", "whole") == part
               and (part != "whole" or FRAMES.match(a.query))]
        return _median([getattr(a, attr) for a in sel])

    out = []
    if any(a.set == "docs" for a in off):
        out.append(
            f"On the documentation index the top hit of a framed off-topic question has a "
            f"lexical share of {med('docs', 'whole', 'top_lex'):.2f} (median) although "
            f"{med('docs', 'whole', 'absent_terms'):.0%} of its terms occur nowhere in the "
            f"corpus, and its frame alone gets {med('docs', 'frame', 'top_lex'):.2f}: BM25 is "
            "divided by the best score the corpus could give the query's terms, and a term no "
            "span contains adds nothing to that bound, so the words that make the question "
            "off-topic do not count against a match while a frame word the corpus has (\"do\", "
            "\"best\", \"way\", \"long\") fills the share. Prose spans weigh the lexical share "
            "most (0.6), so the frame carries the score there.")
    code = [name for name in ("cosqa", "docstring") if any(a.set == name for a in off)]
    if code:
        cos = ", ".join(f"{med(n, 'whole', 'top_cos'):.2f} ({n})" for n in code)
        out.append(
            f"On code indexes the cosine carries it: code spans weigh the cosine 0.8, and "
            f"the model gives an unrelated question a top cosine of {cos} (median), which the "
            "calibrated curve maps to about the default tau of 0.02 by itself, frame or not.")
    whole = [float(a.more.get("coverage", 1.0)) for a in off if "part" not in a.extra]
    ontopic = [float(a.more.get("coverage", 1.0)) for a in on]
    if whole and ontopic:
        out.append(
            f"Neither signal says the corpus lacks the question's words; the query's lexical "
            f"coverage does (the share of its BM25 information the corpus has: median "
            f"{_median(whole):.2f} for these off-topic questions, {_median(ontopic):.2f} for "
            f"the on-topic ones, {sum(c < 1 for c in ontopic) / len(ontopic):.0%} of which "
            "lack any term), and it lowers every score of the query by one logit shift.")
    return " ".join(out)


def predicted(a: Asked, cal: Calibration) -> bool:
    """Whether rag_query would flag ``a`` under ``cal`` (its top hit is the answer's best)."""
    logit0 = float(a.more.get("logit0", -30.0))
    score = logistic(logit0 + coverage_shift(cal, float(a.more.get("coverage", 1.0))))
    return score < cal.flag_threshold


def _share(rows: list[Asked], cal: Calibration) -> float:
    return sum(predicted(a, cal) for a in rows) / len(rows) if rows else 0.0


def fit(on: list[Asked], off: list[Asked], cal: Calibration) -> tuple[Calibration, str]:
    """The coverage weight and flag threshold that flag the most off-topic questions of the dev
    half while each on-topic set keeps at most FIT_ON_TOPIC flagged (ties: the fewer on-topic
    flagged, then the lower threshold); and a table of what it predicts, holdout included."""
    by_set: dict[str, list[Asked]] = defaultdict(list)
    for a in on:
        by_set[a.set].append(a)
    whole = [a for a in off if "part" not in a.extra]
    dev = [a for a in whole if a.extra.get("split") == "dev"]
    holdout = [a for a in whole if a.extra.get("split") == "holdout"]
    best: tuple[tuple[float, float, float], Calibration] | None = None
    for weight in WEIGHTS:
        for flag in FLAGS:
            c = replace(cal, coverage_weight=weight, flag=flag)
            worst = max(_share(rows, c) for rows in by_set.values())
            if worst > FIT_ON_TOPIC:
                continue
            key = (_share(dev, c), -worst, -flag)
            if best is None or key > best[0]:
                best = (key, c)
    chosen = best[1] if best is not None else cal
    rows: list[list[object]] = []
    for label, c in (("today's row", cal), ("fitted", chosen)):
        rows.append([label, c.coverage_weight, c.flag_threshold,
                     *(f"{_share(r, c):.1%}" for r in by_set.values()),
                     f"{_share(dev, c):.1%}", f"{_share(holdout, c):.1%}"])
    table = md_table(["row", "coverage_weight", "flag", *(f"{n} on-topic" for n in by_set),
                      "off-topic dev", "off-topic holdout"], rows)
    return chosen, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--built-only", action="store_true",
                    help="skip the corpora that have no index yet instead of building them "
                         "(SWE-bench's 30 snapshots take hours on a busy machine)")
    ap.add_argument("--saved", action="store_true",
                    help="report the questions saved by the last run instead of asking again")
    ap.add_argument("--model", default=MODEL, help="the embedding model of the indexes")
    ap.add_argument("--fit", action="store_true",
                    help="fit the model's coverage_weight and flag threshold and print the "
                         "row (from the saved questions with --saved)")
    add_kit_arg(ap)
    args = ap.parse_args(argv)
    use_kit(args.kit)
    sets = args.sets.split(",")
    skipped: list[str] = []
    on, off = (saved(sets, args.model) if args.saved
               else measure(sets, args.model, args.built_only, skipped))
    text, met = report(on, off)
    if skipped:
        text += (f"\n\nNot indexed on this machine, so not asked: {len(skipped)} corpora ("
                 + ", ".join(sorted(skipped)) + ").")
    if args.fit:
        cal = calibration_for(args.model)
        chosen, table = fit(on, off, cal)
        print(f"{args.model}: coverage_weight={chosen.coverage_weight}, flag={chosen.flag} "
              f"(tau {cal.tau}; a {cal.a}, b {cal.b})\n\n{table}\n")
        text += (f"\n\nFitted by `--fit` for {args.model} (on-topic: every set above; "
                 f"off-topic: the dev half; at most {FIT_ON_TOPIC:.1%} of a set's on-topic "
                 f"questions flagged), against the row in use:\n\n{table}")
    print(text)
    if args.no_write:
        return 0
    if set(sets) != set(SETS):
        text += ("\n\nThis run measured " + ", ".join(sets) + " only (python -m "
                 "bench.quality.confidence --sets " + ",".join(sets) + ").")
    section = "confidence" if args.model == MODEL else f"confidence-{args.model}"
    title = "Low confidence" + ("" if args.model == MODEL else f", {args.model}")
    command = "python -m bench.quality.confidence" + (
        "" if args.model == MODEL else f" --model {args.model}")
    write_section(section, f"## {title}: on-topic and off-topic questions\n\n`{command}`\n\n"
                  "Every question of the evaluation kit's sets against its own corpus "
                  "(on-topic), and 92 questions no code or software documentation answers "
                  "(bench/quality/offtopic.jsonl: fifteen domains, natural question frames and "
                  "bare keywords) against a documentation index and two code indexes "
                  "(off-topic), through rag_query's path with the calibrated default tau. "
                  "Goal: at least 90% of the off-topic questions flagged `low_confidence`, at "
                  "most 5% of each set's on-topic questions.\n\n" + text)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
