"""Rows cut into Arrow batches of uneven sizes, as Spark may hand them to a sink."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

COLUMN_TYPES = {"partition": pa.int32(), "offset": pa.int64()}
"""The optional columns a row may carry, with their Arrow types."""


def arrow_batches(
    rows: list[dict[str, Any]], rng: random.Random, steps: Sequence[int]
) -> list[pa.RecordBatch]:
    """``rows`` (``value``, ``key`` and optionally ``partition`` and ``offset``, as the
    first row of a batch has them) in batches whose sizes ``rng`` draws from ``steps``."""
    out, i = [], 0
    while i < len(rows):
        step = rng.choice(steps)
        part = rows[i : i + step]
        columns = {
            "value": pa.array([r["value"] for r in part], pa.binary()),
            "key": pa.array([r["key"] for r in part], pa.binary()),
        }
        for name, type_ in COLUMN_TYPES.items():
            if name in part[0]:
                columns[name] = pa.array([r[name] for r in part], type_)
        out.append(pa.RecordBatch.from_pydict(columns))
        i += step
    return out
