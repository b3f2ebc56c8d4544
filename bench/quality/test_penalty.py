"""How much test code should lose: `query.test_penalty` swept on the kit's sets that hold test
code, then the held-out sets checked at 0 and at the default.

Run after `python -m bench.quality.sets` (the kit's indexes) and, for the held-out rows,
`python -m bench.quality.heldout` (their sets and indexes); a held-out set missing here is
listed as such. CoSQA and docs hold no test code, so the penalty cannot move them and they are
left out. Writes the "test-penalty" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import time

import orjson

from bench._report import md_table, write_section
from bench.quality.heldout import BACKEND, HERE, SOURCES
from bench.quality.runs import score_run, service_run
from bench.quality.sets import EvalSet, add_kit_arg, load_set, use_kit
from rag_mcp.config import load_settings

KIT_SETS = ("docstring", "swebench_lite")
SWEEP = (0.0, 0.02, 0.05, 0.1, 0.2)


def metrics(ev: EvalSet, penalty: float, **extra: object) -> dict[str, float]:
    return score_run(ev, service_run(ev, BACKEND, f"hybrid-tp{penalty}", test_penalty=penalty,
                                     **extra))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-write", action="store_true", help="print only")
    add_kit_arg(ap)
    a = ap.parse_args(argv)
    use_kit(a.kit)
    t0 = time.perf_counter()
    default = load_settings({}, environ={}).test_penalty
    rows: list[list[object]] = []
    for name in KIT_SETS:
        ev = load_set(name)
        for p in SWEEP:
            m = metrics(ev, p)
            label = f"{p:g}" + (" (default)" if p == default else "")
            rows.append([name, label, m["MRR@10"], m["hit@5"], m["hit@10"], f"{m['tok@5']:,.0f}"])
            print(rows[-1], flush=True)
    held: list[list[object]] = []
    for src in SOURCES:
        d = HERE / "sets" / src.slug
        if not (d / "queries.jsonl").is_file():
            held.append([src.label, "-", "-", "-", "not built here"])
            continue
        qs = [orjson.loads(line) for line in (d / "queries.jsonl").read_bytes().splitlines()
              if line.strip()]
        ev = EvalSet(src.slug, d, qs)
        off, on = (metrics(ev, p, index_dir=HERE / "index") for p in (0.0, default))
        held.append([src.label, off["MRR@10"], on["MRR@10"], f"{on['MRR@10'] - off['MRR@10']:+.3f}",
                     f"hit@10 {off['hit@10']:.3f} -> {on['hit@10']:.3f}"])
        print(held[-1], flush=True)
    body = (
        "## Test code second: `query.test_penalty`\n\n"
        "`python -m bench.quality.test_penalty` (after `bench.quality.sets` and "
        "`bench.quality.heldout`)\n\n"
        "The hybrid (int8) through rag-eval's path, k = 10, tau = 0, with code spans of test "
        "files, test folders and test modules losing the penalty from their raw fused score "
        "(docs/RETRIEVAL.md, \"Test code second\"). The kit's sets that hold test code (the "
        "docstring set's requests and click, SWE-bench's whole repositories); CoSQA and docs "
        "hold none. The default is the smallest value on the kit's plateau.\n\n"
        + md_table(["set", "test_penalty", "MRR@10", "hit@5", "hit@10", "tok@5"], rows)
        + f"\n\nHeld-out sets (BENCHMARKS.md, \"Held-out sets\") at 0 and at the default "
        f"{default:g}:\n\n"
        + md_table(["set", "MRR@10 at 0", "MRR@10 at the default", "change", "hit@10"], held)
        + "\n"
    )
    print(body)
    print(f"(ran {time.perf_counter() - t0:.0f} s)")
    if not a.no_write:
        write_section("test-penalty", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
