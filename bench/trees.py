"""The source trees an A/B benchmark compares: this one (A) and, with
``JET_BENCH_AGAINST=<another jet work tree>``, that one (B)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def running_tree(tree: Path) -> Iterator[None]:
    """PYTHONPATH set for ``tree``'s code while the block runs (processes started in it
    import that tree; a client in this process is this tree's), then restored."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(str(p) for p in tree_paths(tree))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
