"""Run the benchmarks: ``nox -s bench`` or ``python -m bench [NAME ...] [--quick]``.

Every benchmark module in this folder is named ``bench_<name>.py`` and exposes
``run(quick: bool) -> None``, which prints its measurements side by side with the
baseline it is compared against, and the ratio.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main() -> int:
    names = sorted(
        m.name[len("bench_") :]
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(names)})"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {names}")
    for name in args.names or names:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        module.run(quick=args.quick)
        print(f"--- {name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
