"""The source trees an A/B benchmark compares: this one (A) and, with
``JET_BENCH_AGAINST=<another jet work tree>``, that one (B)."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
"""This work tree."""


def compared_trees() -> dict[str, Path]:
    """``{"A": this tree}``, plus ``"B"`` when ``JET_BENCH_AGAINST`` names another."""
    trees = {"A": HERE}
    against = os.environ.get("JET_BENCH_AGAINST")
    if against:
        trees["B"] = Path(against).resolve()
    return trees


def tree_paths(tree: Path) -> list[Path]:
    """What a server process running ``tree``'s code needs on its PYTHONPATH."""
    return [tree, tree / "sdk/python/src", tree / "server/src"]
