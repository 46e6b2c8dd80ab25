"""The durability report's raw material: one JSON line per fault run.

``nox -s faults`` (tools/fault_campaign.py) names a file in ``JET_FAULT_REPORT``; a fault
test's final check appends what it counted there (runs without the variable write
nothing).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from itertools import pairwise

import orjson

REPORT_ENV = "JET_FAULT_REPORT"
"""If set, :meth:`Scenario.verify` appends one JSON line per run to this file (read by
``nox -s faults``, tools/fault_campaign.py)."""


def longest_gap(times: Iterable[float]) -> float:
    """The longest time between two consecutive acks (seconds; 0 with fewer than two)."""
    ordered = sorted(times)
    return max((b - a for a, b in pairwise(ordered)), default=0.0)


def write_report(**fields: float | int) -> None:
    """Append ``fields`` (and the test's node id) to the report file, if one is named."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], **fields}
    with open(path, "ab") as f:
        f.write(orjson.dumps(line) + b"\n")
