"""Where a consumer starts, and where it resumes after an out-of-range offset (pure).

Start positions (Liftbridge's vocabulary):

========== ==============================================================================
earliest   the first offset still stored (log start)
latest     the last stored message (HW - 1), so it is delivered, then everything after it
new-only   only messages committed after the consumer starts (the HW)
offset     an explicit offset (an ``int``)
timestamp  the first message stored at or after a time (a ``datetime``, or
           :meth:`StartAt.timestamp` with ns since the epoch)
========== ==============================================================================

Reset policy, when a fetch offset is out of range (retention removed it, or the offset is
past the high watermark): ``"earliest"`` (default) resumes at the log start when below it,
``"latest"`` resumes at the HW, ``"raise"`` raises :class:`~jetsdk.errors.OffsetOutOfRange`
from the iterator. An offset past the HW always resumes at the HW unless the policy is
``"raise"``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import attrs

from jetsdk.client import datetime_to_ns
from jetsdk.errors import InvalidArgument

__all__ = [
    "ResetPolicy",
    "StartAt",
    "StartPosition",
    "parse_reset",
    "parse_start",
    "reset_offset",
    "start_offset",
]

StartKind = Literal["earliest", "latest", "new-only", "offset", "timestamp"]
ResetPolicy = Literal["earliest", "latest", "raise"]


@attrs.frozen
class StartAt:
    """A start position (see the module doc). Build with the class methods."""

    kind: StartKind
    """Which rule."""
    value: int = 0
    """The offset (kind ``offset``) or ns since the epoch (kind ``timestamp``)."""

    @classmethod
    def earliest(cls) -> StartAt:
        """The first stored offset."""
        return cls("earliest")

    @classmethod
    def latest(cls) -> StartAt:
        """The last stored message, then everything after it."""
        return cls("latest")

    @classmethod
    def new_only(cls) -> StartAt:
        """Only messages committed from now on."""
        return cls("new-only")

    @classmethod
    def offset(cls, offset: int) -> StartAt:
        """An explicit offset (>= 0)."""
        if offset < 0:
            raise InvalidArgument(f"offset must be >= 0, not {offset}", details={"field": "start"})
        return cls("offset", offset)

    @classmethod
    def timestamp(cls, moment: datetime | int) -> StartAt:
        """The first message at or after ``moment`` (a datetime, or int ns since the epoch)."""
        ns = datetime_to_ns(moment) if isinstance(moment, datetime) else int(moment)
        return cls("timestamp", ns)


StartPosition = StartAt | Literal["earliest", "latest", "new-only"] | int | datetime
"""What ``start=`` accepts: a :class:`StartAt`, one of the names, an offset, a datetime."""


def parse_start(start: StartPosition) -> StartAt:
    """Normalize ``start``.

    Raises:
        InvalidArgument: an unknown name, a negative offset, or another type.
    """
    if isinstance(start, StartAt):
        return start
    if isinstance(start, datetime):
        return StartAt.timestamp(start)
    if isinstance(start, int) and not isinstance(start, bool):
        return StartAt.offset(start)
    if start == "earliest":
        return StartAt.earliest()
    if start == "latest":
        return StartAt.latest()
    if start in ("new-only", "new_only"):
        return StartAt.new_only()
    raise InvalidArgument(
        f"bad start position {start!r} (earliest, latest, new-only, an offset or a datetime)",
        details={"field": "start"},
    )


def parse_reset(policy: str) -> ResetPolicy:
    """Validate a reset policy name.

    Raises:
        InvalidArgument: not earliest, latest or raise.
    """
    if policy == "earliest":
        return "earliest"
    if policy == "latest":
        return "latest"
    if policy == "raise":
        return "raise"
    raise InvalidArgument(
        f"bad reset policy {policy!r} (earliest, latest or raise)", details={"field": "reset"}
    )


def start_offset(start: StartAt, *, log_start: int, hw: int, at_time: int | None = None) -> int:
    """The first offset to fetch for ``start``.

    Args:
        log_start: the partition's log start offset.
        hw: its high watermark.
        at_time: for kind ``timestamp``, the ListOffsets answer for the time.
    """
    if start.kind == "earliest":
        return log_start
    if start.kind == "latest":
        return max(hw - 1, log_start)
    if start.kind == "new-only":
        return hw
    if start.kind == "offset":
        return start.value
    return hw if at_time is None else at_time


def reset_offset(offset: int, policy: ResetPolicy, *, log_start: int, hw: int) -> int | None:
    """Where to resume after ``offset`` was out of range; None means raise."""
    if policy == "raise":
        return None
    if offset > hw:
        return hw
    return log_start if policy == "earliest" else hw
