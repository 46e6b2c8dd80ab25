"""Writes tests/support/durations.json, the measured seconds the parallel suite's scheduler
orders its units by (tests/support/parallel.py), from the output of pytest runs with
``--durations=0``:

    python tests/support/durations.py LOG [LOG ...]     # from the repository's root

A test's seconds are the sum of its setup, call and teardown (the first test of a group
bears its shared fixture's start); with several logs, the median over the logs that list
it. Only tests of :data:`MIN_S` or more are kept: the rest count parallel.DEFAULT_TEST_S.
A test the table held that no log lists (CI prints only the slowest 100: a test of 4-6 s
drops in and out of that list from run to run) keeps its seconds while its file exists,
so that the tests of a few seconds that fill the shared groups stay in the table.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import orjson

OUT = Path(__file__).with_name("durations.json")
ROOT = Path(__file__).resolve().parents[2]
"""The repository (node ids are relative to it)."""
MIN_S = 1.0
"""Tests shorter than this (in every log) are left out of the table."""
LINE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$")


def seconds_in(text: str) -> dict[str, float]:
    """``{node id: seconds}`` from one log's durations block (phases summed)."""
    found: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if match := LINE.match(line):
            found[match.group(3)] += float(match.group(1))
    return dict(found)


def table(
    logs: list[str], previous: dict[str, float] | None = None, root: Path = ROOT
) -> dict[str, float]:
    """The median seconds of each test over ``logs``, of tests of :data:`MIN_S` or more,
    sorted by node id; with the ``previous`` table's entries for tests no log lists whose
    file still exists under ``root``."""
    runs: dict[str, list[float]] = defaultdict(list)
    for text in logs:
        for nodeid, seconds in seconds_in(text).items():
            runs[nodeid].append(seconds)
    medians = {n: round(statistics.median(s), 1) for n, s in runs.items()}
    kept = {
        n: s
        for n, s in (previous or {}).items()
        if n not in runs and (root / n.split("::", 1)[0]).is_file()
    }
    return {n: s for n, s in sorted({**kept, **medians}.items()) if s >= MIN_S}


def main(paths: list[str]) -> None:
    if not paths:
        sys.exit(__doc__)
    previous = orjson.loads(OUT.read_bytes()) if OUT.is_file() else {}
    found = table([Path(p).read_text(errors="replace") for p in paths], previous)
    OUT.write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"{len(found)} tests, {sum(found.values()):.0f} s -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
