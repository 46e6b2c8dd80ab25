"""Fills pytest's cache of rewritten test modules before a parallel run: ``nox -s tests``
runs it first.

    python tests/support/warm_rewrite.py [JOBS]

pytest rewrites the asserts of every test module and conftest it imports, and keeps the
result in ``__pycache__`` (``*-pytest-*.pyc``) unless bytecode writing is off. With
``PYTHONDONTWRITEBYTECODE`` set (as on the project's machines and CI) nothing is kept, and
each xdist worker rewrote all of them again: a worker's collection took 16.8 s of CPU
cold, 4.6 s with the cache (tests/, 2,958 tests, 2-core VM). Here ``JOBS`` collections
(default: the CPU count), each of a share of the test folders, run at once with bytecode
writing on, so that each module is rewritten once; the workers then read the cache
(pytest reads it even when it may not write it).

A failed or slow share only leaves its modules to be rewritten by the workers: this prints
what happened and exits 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
"""The tests/ directory."""
BOUND_S = 300.0
"""Bound on each share's collection."""


def shares(jobs: int) -> list[list[str]]:
    """The test folders (and top-level test files) in ``jobs`` shares of about as many
    test modules each (largest first, each to the share with the fewest so far)."""
    sizes: dict[str, int] = {}
    for entry in sorted(TESTS.iterdir()):
        if entry.is_dir() and entry.name not in ("support", "__pycache__"):
            sizes[str(entry)] = sum(1 for _ in entry.rglob("test_*.py"))
        elif entry.name.startswith("test_") and entry.suffix == ".py":
            sizes[str(entry)] = 1
    dealt: list[list[str]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for path in sorted(sizes, key=lambda p: -sizes[p]):
        share = load.index(min(load))
        dealt[share].append(path)
        load[share] += sizes[path]
    return [share for share in dealt if share]


def main(jobs: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    procs = [
        subprocess.Popen([*command, *share], env=env, cwd=TESTS.parent, stdout=subprocess.DEVNULL)
        for share in shares(jobs)
    ]
    for proc in procs:
        try:
            code = proc.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if code not in (0, 5):  # 5: a share without tests
            print(f"warm_rewrite: a collection exited {code}; its modules are rewritten later")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count() or 1)
