"""The byte-exact vectors of spec/vectors/ (written by tools/gen_vectors.py and
tests/storage/storage_vectors.py), read by the tests of every codec they pin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

VECTORS = Path(__file__).resolve().parents[2] / "spec" / "vectors"
"""The directory of the vector files."""


def load_vectors(name: str) -> dict[str, Any]:
    """The JSON document of ``spec/vectors/<name>`` (``cases`` and, in some, ``invalid``)."""
    data: dict[str, Any] = orjson.loads((VECTORS / name).read_bytes())
    return data
