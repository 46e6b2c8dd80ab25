"""Partitions whose replica on this server cannot open (spec/protocol.md, DescribeStream).

A partition that fails to open at start (too many open files, a damaged disk...) is
*offline* here: the other partitions serve, DescribeStream shows the reason, metrics count
it, and Produce and Fetch to it fail at once with PARTITION_OFFLINE instead of waiting for a
timeout. It comes back when a later attempt to open it succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import ApiError
from jetserver.infra.resources import describe_open_error
from jetserver.logs import fields

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class OfflinePartitions:
    """(stream, partition) -> why it cannot open."""

    reasons: dict[tuple[str, int], str] = attrs.field(factory=dict)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.reasons)

    def get(self, key: tuple[str, int]) -> str | None:
        """The reason, or None if the partition is not offline."""
        return self.reasons.get(key)

    def check(self, name: str, partition: int) -> None:
        """Raise PARTITION_OFFLINE (not retriable: a request must not wait for it) if the
        partition is offline."""
        reason = self.reasons.get((name, partition))
        if reason is not None:
            raise ApiError(
                ErrorCode.PARTITION_OFFLINE,
                f"partition {name}/{partition} is offline on this server: {reason}",
                {"stream": name, "partition": partition, "offline": reason},
            )

    def failed(self, name: str, partition: int, exc: BaseException) -> None:
        """Opening the partition failed with ``exc``."""
        reason = describe_open_error(exc)
        if self.reasons.get((name, partition)) != reason:
            log.error(
                "partition offline: cannot open its log",
                extra=fields(stream=name, partition=partition, error=reason),
            )
        self.reasons[(name, partition)] = reason

    def opened(self, name: str, partition: int) -> None:
        """The partition is open (or gone): no longer offline."""
        self.reasons.pop((name, partition), None)
