"""Choose the fusion weights, fit the calibration of the score and choose the default tau.

Works offline on the candidate features of every evaluation query (bench/quality/features.py:
dense top 200, BM25 top 200 on the span body and on the name field, the cosine of every
candidate, relevance by the kit's rule), so hundreds of settings cost seconds:

1. grid over alpha (weight of the cosine for code spans), alpha_prose (for documentation and
   plain-text spans), the name-field weight of BM25 and ``terms`` (the query length in
   distinct terms beyond which the cosine's weight falls as terms / n, rag_mcp/search/fusion.py).
   The choice (bench/quality/fusion_search.py ``choose``): the best MRR@10 averaged over the sets,
   each set weighing the same, among the settings that beat both single legs on every set —
   the fused default's own requirement, used as a constraint — else the best mean. A
   leave-one-set-out pass shows what a set not used for the choice would get (the held-out
   sets are other libraries, languages and docs trees); docs is the kit's only prose set, so
   with docs held out nothing chooses alpha_prose and the tie-break gives it alpha's value. The
   other query-adaptive rules that were tried are scored the same way, and the chosen rule
   against both legs and the previous defaults with paired bootstrap intervals;
2. Platt scaling: a logistic curve from the fused score to P(relevant), fitted on the top-10
   candidates of every query, each set weighted equally;
3. tau: the largest threshold that keeps hit@5 within 2 points of tau = 0 on every set, which
   is the one that cuts the most returned tokens (tokens fall as tau rises); leave-one-set-out
   again: the tau chosen on the other sets, and what it costs the held-out one.

    .venv/bin/python -m bench.quality.calibrate [--backend onnx-int8] [--sets docs,cosqa,...]

Prints the ``CALIBRATIONS`` row for rag_mcp/search/fusion.py, draws docs/img/calibration-*.png and
rewrites the "quality-calibration" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench._report import ROOT, md_table, write_section
from bench.quality import features
from bench.quality.fusion_search import (
    ALPHAS,
    NAME_WEIGHTS,
    ONE_ALPHA,
    TERMS,
    TODAY,
    Q,
    Setting,
    beats_legs,
    choose,
    compare,
    family_table,
    grid,
    legs,
    load,
    mean_mrr,
    ranking,
    rule,
    rule_families,
    setting,
)
from bench.quality.sets import SETS, SHORT, add_kit_arg, load_set, use_kit
from rag_mcp.search.fusion import query_alpha

IMG = ROOT / "docs" / "img"
# Fine steps near 0: calibrated scores of the top hits sit mostly under 0.3 (few candidates of
# a query are relevant), so the useful thresholds are small.
TAUS = (*(round(x, 2) for x in np.arange(0.0, 0.1, 0.01)),
        *(round(x, 2) for x in np.arange(0.1, 0.91, 0.05)))


def variants(data: dict[str, list[Q]], n: dict[str, int], sets: list[str],
             terms: float) -> list[list[object]]:
    """Other normalisations and fusions, each at its own best setting (by mean MRR@10), on the
    same candidates and with the same length rule, one alpha for every span kind."""
    def by_max(q: Q, a: float, w: float) -> np.ndarray:
        keep, lex = q.legs(w)
        top = float(lex.max())
        return np.where(keep, a * q.cos + (1 - a) * (lex / top if top > 0 else lex), -np.inf)

    def rr(q: Q, wd: float) -> np.ndarray:
        keep, lex = q.legs(0.25)
        ranks = [np.argsort(np.argsort(-np.where(keep, x, -np.inf), kind="stable"))
                 for x in (q.cos, lex)]
        found = [keep, keep & (lex > 0)]
        return wd * np.where(found[0], 1 / (61 + ranks[0]), 0) + np.where(
            found[1], 1 / (61 + ranks[1]), 0) + np.where(keep, 0, -np.inf)

    def qa(q: Q, a: float) -> float:
        return query_alpha(rule(a, terms), q.nterms)

    families: dict[str, list[tuple[str, Callable[[Q], np.ndarray]]]] = {
        "convex, BM25 / upper bound": [
            (f"alpha={a:g}, w={w:g}", lambda q, a=a, w=w: q.fused(a, w, terms))
            for a, w in itertools.product(ALPHAS, NAME_WEIGHTS)],
        "convex, BM25 / best hit (min-max)": [
            (f"alpha={a:g}, w={w:g}", lambda q, a=a, w=w: by_max(q, qa(q, a), w))
            for a, w in itertools.product(ALPHAS, NAME_WEIGHTS)],
        "reciprocal rank fusion (k=60)": [
            (f"dense weight {wd:g}", lambda q, wd=wd: rr(q, wd)) for wd in (0.5, 1.0, 1.5, 2.0)],
    }
    out: list[list[object]] = []
    for family, settings in families.items():
        best: tuple[float, str, list[float]] | None = None
        for label, score in settings:
            ms = [ranking(data[s], score, n[s])["MRR@10"] for s in sets]
            if best is None or float(np.mean(ms)) > best[0]:
                best = (float(np.mean(ms)), label, ms)
        assert best is not None
        out.append([family, best[1], *(f"{m:.3f}" for m in best[2]), f"{best[0]:.3f}"])
    return out


def platt(data: dict[str, list[Q]], st: Setting) -> tuple[float, float]:
    """Logistic fit of P(relevant | fused score) on each query's top-10 candidates."""
    from sklearn.linear_model import LogisticRegression

    xs, ys, ws = [], [], []
    for qs in data.values():
        for q in qs:
            f = q.fused(*st)
            top = q.top(f, 10)
            xs.append(f[top])
            ys.append(q.rel[top])
            ws.append(np.full(len(top), 1.0 / (len(qs) * len(top))))
    x, y, sw = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    model = LogisticRegression(C=1e4, max_iter=5000).fit(x[:, None], y, sample_weight=sw * len(y))
    return float(model.coef_[0][0]), float(model.intercept_[0])


def calibrated(q: Q, st: Setting, a: float, b: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` candidates and their calibrated scores."""
    f = q.fused(*st)
    order = q.top(f, k)
    return order, 1 / (1 + np.exp(-(a * f[order] + b)))


def tau_sweep(data: dict[str, list[Q]], n: dict[str, int], st: Setting, a: float,
              b: float, k: int = 5) -> dict[str, list[tuple[float, float, float]]]:
    """Per set: (tau, hit@k, mean tokens returned) as rag_query applies tau (at least one hit)."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for s, qs in data.items():
        rows = []
        for tau in TAUS:
            hit = tokens = 0.0
            for q in qs:
                order, score = calibrated(q, st, a, b, k)
                keep = [i for i, sc in zip(order, score, strict=True) if sc >= tau]
                keep = keep or [int(order[0])]
                hit += float(q.rel[keep].any())
                tokens += float(q.bytes[keep].sum()) / 4
            rows.append((tau, hit / n[s], tokens / n[s]))
        out[s] = rows
    return out


def choose_tau(sweep: dict[str, list[tuple[float, float, float]]], slack: float = 0.02,
               sets: list[str] | None = None) -> float:
    """The largest tau (in grid order) before any of ``sets`` loses more than ``slack`` hit@5."""
    best = 0.0
    rows_of = [sweep[s] for s in (sets or list(sweep))]
    for i, tau in enumerate(TAUS):
        if all(rows[i][1] >= rows[0][1] - slack for rows in rows_of):
            best = tau
        else:
            break
    return best


def held_out(data: dict[str, list[Q]], n: dict[str, int], rows: list[dict], sets: list[str],
             s: str) -> dict[str, Any]:
    """Everything chosen without set ``s``, then measured on ``s``."""
    others = [x for x in sets if x != s]
    pick = choose(rows, others)
    st = setting(pick)
    a, b = platt({x: data[x] for x in others}, st)
    tau = choose_tau(tau_sweep({x: data[x] for x in others}, n, st, a, b))
    mine = tau_sweep({s: data[s]}, n, st, a, b)[s]
    at = next(r for r in mine if r[0] == tau)
    return {"st": st, "mrr": pick["sets"][s]["MRR@10"], "tau": tau,
            "beats": beats_legs(pick, [s]),
            "hit5_0": mine[0][1], "hit5": at[1], "tokens": at[2] / max(mine[0][2], 1e-9),
            "sweep": mine}


def generalizing_tau(tau: float, held: dict[str, dict], slack: float = 0.02) -> float:
    """The largest tau up to ``tau`` that keeps every held-out set (scored with the curve fitted
    without it) within ``slack`` of its hit@5 at tau = 0: a threshold that only holds on the
    sets it was chosen on is not a default."""
    for t in sorted((t for t in TAUS if t <= tau), reverse=True):
        i = TAUS.index(t)
        if all(h["sweep"][i][1] >= h["sweep"][0][1] - slack for h in held.values()):
            return t
    return 0.0


def plot_scores(data: dict[str, list[Q]], st: Setting, a: float, b: float, tau: float,
                path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(4 * len(data), 3.2), sharey=False)
    for ax, (s, qs) in zip(np.atleast_1d(axes), data.items(), strict=True):
        rel: list[float] = []
        irr: list[float] = []
        for q in qs:
            order, score = calibrated(q, st, a, b, 10)
            for i, sc in zip(order, score, strict=True):
                (rel if q.rel[i] else irr).append(sc)
        bins = np.linspace(0, 1, 26)
        ax.hist(irr, bins=bins, alpha=0.6, label="not relevant", density=True)
        ax.hist(rel, bins=bins, alpha=0.6, label="relevant", density=True)
        ax.axvline(tau, color="k", ls="--", lw=1, label=f"tau={tau:g}")
        ax.set_title(f"{s} (top-10 hits)")
        ax.set_xlabel("calibrated score")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tau(sweep: dict[str, list[tuple[float, float, float]]], tau: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for s, rows in sweep.items():
        t = [r[0] for r in rows]
        ax1.plot(t, [r[1] for r in rows], marker=".", label=s)
        ax2.plot(t, [r[2] / max(rows[0][2], 1e-9) for r in rows], marker=".", label=s)
    for ax in (ax1, ax2):
        ax.axvline(tau, color="k", ls="--", lw=1)
        ax.set_xlabel("tau")
    ax1.set_ylabel("hit@5")
    ax2.set_ylabel("tokens returned (share of tau = 0)")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fused(st: Setting) -> Callable[[Q], np.ndarray]:
    return lambda q: q.fused(*st)


def rule_section(data: dict[str, list[Q]], n: dict[str, int], best: dict,
                 held: dict[str, dict], sets: list[str]) -> str:
    """The query-adaptive rules tried, and the chosen one against the legs and the old default."""
    st = setting(best)
    alpha, w, terms, prose = st
    leg = legs(data, n, w)
    best_leg = {s: max(leg[s]) for s in sets}
    fams = family_table(data, n, rule_families(data, w, ALPHAS, TERMS[:-1], terms), best_leg)
    held_st = {s: h["st"] for s, h in held.items()}
    one = ONE_ALPHA
    systems: dict[str, Callable[[str], Callable[[Q], np.ndarray]]] = {
        f"before: alpha = {TODAY['alpha']:g}, BM25 of the lexical top list":
            lambda _s: (lambda q: q.fused(TODAY["alpha"], TODAY["w"], exact=False)),
        f"before: alpha = {one['alpha']:g} x min(1, {one['terms']:g} / terms), every kind":
            lambda _s: (lambda q: q.fused(one["alpha"], one["w"], one["terms"])),
        f"default: alpha = {alpha:g} code / {prose:g} prose x min(1, {terms:g} / terms)":
            lambda _s: _fused(st),
        "the same, chosen without this set": lambda s: _fused(held_st.get(s, st)),
    }
    return f"""### Query-adaptive weight

Every rule below is one or two numbers for all queries, at name weight w = {w:g}, on the same
candidates (dense top 50 + lexical top 50, BM25 read from the lexical top 200 unless stated).
MRR@10 of its best setting on all four sets, then of the setting chosen on the other three sets
(leave one set out); `*` = beats both single legs on that set (dense {", ".join(
        f"{s} {leg[s][0]:.3f}" for s in sets)}; lexical {", ".join(
        f"{s} {leg[s][1]:.3f}" for s in sets)}):

{md_table(["rule", "best on all sets", *sets, *(f"{s} held out" for s in sets)], fams)}

The chosen rule against the single legs and the defaults before it (hit@5 / hit@10 at tau = 0;
the difference in MRR@10 from the better leg with its paired 95 % bootstrap interval, and in
queries: the difference times n, 1.0 = one query moving from a miss to rank 1):

{md_table(["set", "system", "MRR@10", "hit@5", "hit@10", "vs the better leg"],
          compare(data, n, w, systems))}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="onnx-int8")
    ap.add_argument("--model", default="all-MiniLM-L6-v2",
                    help="the embedding model to calibrate (its indexes: bench.quality.sets "
                         "--model)")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--quick", action="store_true",
                    help="the row only: skip the comparison with other weighting rules and "
                         "fusions (most of the run on a busy machine)")
    add_kit_arg(ap)
    args = ap.parse_args(argv)
    use_kit(args.kit)
    features.use_model(args.model)
    sets = args.sets.split(",")
    data = {s: load(s, args.backend) for s in sets}
    n = {s: len(load_set(s).queries) for s in sets}
    rows = grid(data, n)
    best = choose(rows, sets)
    st = setting(best)
    alpha, w, terms, prose = st
    a, b = platt(data, st)
    sweep = tau_sweep(data, n, st, a, b)
    tau = choose_tau(sweep)
    held = {s: held_out(data, n, rows, sets, s) for s in sets} if len(sets) > 1 else {}
    tau_in_sample = tau
    tau = generalizing_tau(tau, held)
    tag = SHORT.get(args.backend, args.backend)
    if args.model != "all-MiniLM-L6-v2":
        tag = f"{tag}-{args.model}"
    if not args.no_write:  # the plots belong to the recorded section
        IMG.mkdir(parents=True, exist_ok=True)
        plot_scores(data, st, a, b, tau, IMG / f"calibration-scores-{tag}.png")
        plot_tau(sweep, tau, IMG / f"calibration-tau-{tag}.png")

    leg = legs(data, n, w)
    variant_rows = [] if args.quick else variants(data, n, sets, terms)
    table: list[list[object]] = [
        [s, f"{leg[s][0]:.3f}", f"{leg[s][1]:.3f}", f"{best['sets'][s]['MRR@10']:.3f}",
         f"{best['sets'][s]['gain']:.3f}"] for s in sets]
    loso: list[list[object]] = [[s, "{:g} / {:g} / {:g} / {:g}".format(*h["st"]),
             f"{h['mrr']:.3f}{'*' if h['beats'] else ''}",
             f"{h['mrr'] - best['sets'][s]['MRR@10']:+.3f}", f"{h['tau']:g}",
             f"{h['hit5_0']:.3f} -> {h['hit5']:.3f}", f"{h['tokens']:.0%}",
             f"{h['sweep'][TAUS.index(tau)][1]:.3f}"]
            for s, h in held.items()]
    top = sorted(rows, key=lambda r: -mean_mrr(r, sets))[:10]
    free = top[0]
    grid_rows: list[list[object]] = [
        [r["alpha"], r["prose"], r["w"], f"{r['terms']:g}",
         *(f"{r['sets'][s]['MRR@10']:.3f}" for s in sets), f"{mean_mrr(r, sets):.3f}",
         "yes" if beats_legs(r, sets) else "no"] for r in top]
    tau_rows: list[list[object]] = [
        [f"{t:g}", *(f"{sweep[s][i][1]:.3f} / {sweep[s][i][2]:,.0f}" for s in sets)]
        for i, t in enumerate(TAUS) if t <= 0.1 or t in (0.2, 0.3, 0.5, 0.7, 0.9)]
    row = (f'"{args.model}": Calibration(alpha={alpha:g}, a={a:.3f}, b={b:.3f}, '
           f'tau={tau:g}, terms={terms:g}, alpha_prose={prose:g}, '
           f'source="bench/quality/calibrate.py, {args.model}, {args.backend}, {", ".join(sets)}")')
    cmd = (f"python -m bench.quality.calibrate --model {args.model} --backend {args.backend} "
           f"--sets {','.join(sets)}{' --quick' if args.quick else ''}")
    others = ("(Run with --quick: the other weighting rules and fusions were not compared.)\n"
              if args.quick else f"""{rule_section(data, n, best, held, sets)}
Normalisations and fusions, each at its best setting on the same candidates, with the same
length rule and one alpha for every span kind (MRR@10):

{md_table(["fusion", "best setting", *sets, "mean"], variant_rows)}
""")
    body = f"""## Fusion weights, calibration and tau ({args.model}, {args.backend})

`{cmd}`

Offline on each query's candidates as rag_query sees them (dense top 50 + lexical top 50, each
candidate's BM25 read from the lexical top 200; replayed from recorded top-200 lists by
bench/quality/fusion_search.py), relevance by the kit's rule. `raw = a_q * cos + (1 - a_q) * lex +
(alpha_k - a_q) * best cos`, `lex` = BM25 (body + w * name) over its upper bound for the query,
`a_q = alpha_k * min(1, terms / n)` for a query of n distinct lexical terms, `alpha_k` = alpha
for code spans and alpha_prose for doc/text spans. The choice: the best MRR@10 averaged over the
sets among the settings that beat both single legs on every set (the fused default's
requirement, used as a constraint; {
    "met" if beats_legs(best, sets) else "no setting meets it, so the best mean"}).
Chosen: **alpha = {alpha:g} (code), alpha_prose = {prose:g} (doc/text), name weight w = {w:g},
terms = {terms:g}**, mean MRR@10 {mean_mrr(best, sets):.3f} (the unconstrained best:
{free["alpha"]:g} / {free["prose"]:g} / {free["terms"]:g}, {mean_mrr(free, sets):.3f});
Platt scaling `score = 1 / (1 + exp(-({a:.3f} * raw {b:+.3f})))`;
**tau = {tau:g}**: the largest tau keeping hit@5 within 2 points of tau = 0 on every set is
{tau_in_sample:g}; the default is the largest tau up to that which also keeps every held-out set
within 2 points when the curve and tau are fitted without it (table below).

MRR@10 of the single legs and of the chosen fusion (`x best leg` = fused over the better leg):

{md_table(["set", "dense", f"lexical (w={w:g})", "fused", "x best leg"], table)}

Leave one set out: alpha / w / terms / alpha_prose, Platt curve and tau chosen on the other
sets only (by the same constrained rule), then applied to the held-out set (MRR@10 against the
all-sets choice, `*` = still beats both legs; hit@5 at tau = 0 and at that fold's tau; tokens
returned in the top 5 as a share of tau = 0; hit@5 at the final default tau). docs is the only
prose set: held out, nothing is left to choose alpha_prose, which then takes alpha's value (the
tie-break), so its row measures the rule without the split, not a held-out split.

{md_table(["held-out set", "alpha / w / terms / prose", "MRR@10", "vs all-sets", "tau", "hit@5",
           "tokens", f"hit@5 at the default tau {tau:g}"], loso)}

{others}
Best settings by MRR@10 averaged over the sets (all name weights):

{md_table(["alpha", "alpha_prose", "w", "terms", *sets, "mean", "beats both legs"],
          grid_rows)}

tau sweep, hit@5 / mean tokens returned in the top 5 (rag_query keeps at least one hit):

{md_table(["tau", *sets], tau_rows)}

![scores](img/calibration-scores-{tag}.png)
![tau](img/calibration-tau-{tag}.png)

`rag_mcp/search/fusion.py`: `{row}`
"""
    print(body)
    if not args.no_write:
        write_section(f"quality-calibration-{tag}", body)


if __name__ == "__main__":
    main()
