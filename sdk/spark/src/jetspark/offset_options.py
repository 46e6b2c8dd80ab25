"""The source's offset options as JSON: ``startingOffsets``/``endingOffsets`` (offsets per
partition) and ``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp`` (times per
partition), in Spark's Kafka connector's format ``{"stream": {"0": value, ...}}``.

Pure code: no I/O, no Spark. :mod:`jetspark.options` uses these while checking options;
:mod:`jetspark._read` resolves the parsed values against the server.
"""

from __future__ import annotations

import re
from typing import Literal

import orjson

from jetspark.errors import OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "TIMESTAMP_STRATEGIES",
    "OffsetSpec",
    "TimestampSpec",
    "check_name",
    "parse_offset_spec",
    "parse_timestamp_spec",
]

EARLIEST = -2
"""In a startingOffsets/endingOffsets JSON: the partition's first stored offset."""
LATEST = -1
"""In a startingOffsets/endingOffsets JSON: the partition's high watermark."""

OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
"""``"earliest"``, ``"latest"``, or ``{stream: {partition: offset}}`` where an offset may be
:data:`EARLIEST` (-2) or :data:`LATEST` (-1)."""
TimestampSpec = dict[str, dict[int, int]]
"""``{stream: {partition: ms since the epoch}}``."""

TIMESTAMP_STRATEGIES = ("error", "latest")
"""Values of startingOffsetsByTimestampStrategy: what a start by time does for a partition
with no record stored at or after the time (as Spark's Kafka source)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_name(option: str, name: str) -> None:
    """Raise :class:`OptionError` for ``option`` unless ``name`` is a valid stream (or
    group) name."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name.encode()) > 255:
        raise OptionError(option, f"bad name {name!r}")


def parse_offset_spec(option: str, text: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or ``{"stream": {"0": 12, "1": -2}}``.

    Raises:
        OptionError: anything else (a bad stream name, partition or offset).
    """
    word = text.strip()
    if word.lower() in ("earliest", "latest"):
        return "earliest" if word.lower() == "earliest" else "latest"
    return _per_partition(
        option,
        text,
        'neither earliest, latest nor JSON like {"s": {"0": 5}}',
        "offset",
        EARLIEST,
        ">= 0, -2 (earliest) or -1 (latest)",
    )


def parse_timestamp_spec(option: str, text: str) -> TimestampSpec:
    """Parse ``{"stream": {"0": 1700000000000, "1": ...}}``: a time in ms since the epoch
    per partition.

    Raises:
        OptionError: not such JSON, or a time below 0.
    """
    return _per_partition(
        option,
        text,
        'not JSON like {"s": {"0": 1700000000000}}',
        "timestamp",
        0,
        ">= 0 (ms since the epoch)",
    )


def _per_partition(
    option: str, text: str, expected: str, what: str, least: int, rule: str
) -> dict[str, dict[int, int]]:
    """``text`` as JSON ``{stream: {partition: integer}}`` (else: "``text`` is
    ``expected``"), each integer (a ``what``) at least ``least`` (else: "must be ``rule``").

    Raises:
        OptionError: naming the first thing that is not so.
    """
    try:
        obj = orjson.loads(text.strip())
    except orjson.JSONDecodeError:
        raise OptionError(option, f"{text!r} is {expected}") from None
    if not isinstance(obj, dict) or not obj:
        raise OptionError(
            option, f"JSON must be a non-empty object {{stream: {{partition: {what}}}}}"
        )
    out: dict[str, dict[int, int]] = {}
    for stream, parts in obj.items():
        check_name(option, stream)
        if not isinstance(parts, dict) or not parts:
            raise OptionError(option, f"stream {stream!r}: expected a non-empty object")
        out[stream] = {}
        for part, value in parts.items():
            try:
                number = int(part)
            except ValueError:
                number = -1
            if number < 0 or str(number) != part:
                raise OptionError(option, f"stream {stream!r}: bad partition {part!r}")
            if not isinstance(value, int) or isinstance(value, bool):
                raise OptionError(option, f"{stream}/{part}: {what} {value!r} is not an integer")
            if value < least:
                raise OptionError(option, f"{stream}/{part}: {what} {value} must be {rule}")
            out[stream][number] = value
    return out
