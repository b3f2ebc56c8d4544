"""Synthetic repositories for indexing tests that need real work to do (crashes, updates)."""

from __future__ import annotations

from pathlib import Path


def write_repo(root: Path, n_files: int, variant: int = 0) -> None:
    """``n_files`` modules of 12 functions each (7 packages); ``variant`` changes the first
    function of every module, so a new variant is a real edit of each file."""
    for i in range(n_files):
        p = root / f"pkg{i % 7}" / f"mod{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        funcs = []
        for j in range(12):
            v = variant if j == 0 else 0
            doc = f"Function {j} of module {i}, variant {v}."
            funcs.append(f"def func_{i}_{j}(x):\n    {doc!r}\n    return x * {j} + {v}\n")
        p.write_text("\n\n".join(funcs) + "\n")
