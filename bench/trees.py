"""The source trees an A/B benchmark compares: this one (A) and, with
``JET_BENCH_AGAINST=<another jet work tree>``, that one (B)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

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


def child_figures(
    module: str, args: list[str], tree: Path, timeout_s: float = 600
) -> dict[str, float]:
    """Run ``python -m module *args`` on ``tree``'s SDK and server (and this tree's
    ``bench``); the JSON object its last output line prints."""
    paths = [*map(str, tree_paths(tree)[1:]), str(HERE)]
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        timeout=timeout_s,
        check=True,
    )
    result: dict[str, float] = orjson.loads(proc.stdout.splitlines()[-1])
    return result


def compile_tree(tree: Path) -> None:
    """Byte-compile ``tree``'s packages into their ``__pycache__`` (as ``nox -s tests``
    does), so that a server process started on them loads them compiled, as an installed
    jet would. With PYTHONDONTWRITEBYTECODE set (as on these machines) nothing else writes
    them, and every server start compiled its modules again: 0.5 of the 1.8 CPU-s a
    50,000-partition restart took until ready. A tree it cannot write is left as it is."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *map(str, tree_paths(tree)[1:])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
