"""Shared bits of the benchmark scripts: machine facts and a section writer for BENCHMARKS.md.

Each benchmark owns one section of docs/BENCHMARKS.md, delimited by HTML comments, and rewrites
only that section, so scripts can run in any order without clobbering each other.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "docs" / "BENCHMARKS.md"
WORK = ROOT / "bench" / ".work"

_HEADER = """# Benchmarks

Every number here was printed by a script in `bench/`; each section names the command that
reproduces it. Machines are shared and noisy, so compare the ratios measured in one run rather
than absolute times across sections.
"""


def machine() -> str:
    """One line describing where the numbers were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu}), "
            f"Python {platform.python_version()}")


def git_rev() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=False)
        return out.stdout.strip() or "uncommitted"
    except OSError:
        return "unknown"


def pct(values: list[float], q: float) -> float:
    """Percentile by linear interpolation (q in 0..100); 0.0 for an empty list."""
    if not values:
        return 0.0
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def write_section(name: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace (or append) the section called ``name`` in docs/BENCHMARKS.md."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = f"{start}\n{body.rstrip()}\n\n_Measured {machine()}, commit {git_rev()}._\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def md_table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
