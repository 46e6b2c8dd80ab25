"""Bounded retries with exponential backoff for retriable errors."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import attrs

from jetsdk.errors import (
    JetConnectionError,
    JetError,
    NotLeader,
    ShuttingDown,
    Unavailable,
)

__all__ = [
    "DEFAULT_RETRY",
    "RetryPolicy",
    "is_retriable",
    "needs_metadata_refresh",
    "retry_calls",
]


_T = TypeVar("_T")


@attrs.frozen
class RetryPolicy:
    """How many times, and how patiently, a retriable request is sent again."""

    attempts: int = 10
    """Total attempts (first try included); 1 disables retries. The default spans about
    9 s of pauses: longer than a partition leader failover in a cluster."""
    backoff: float = 0.05
    """Pause before the first retry, seconds; doubles after each retry."""
    backoff_max: float = 2.0
    """Largest pause, seconds."""
    jitter: float = 0.2
    """Each pause is shortened by up to this fraction at random (spreads herds)."""

    def __attrs_post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.backoff < 0 or self.backoff_max < 0 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff, backoff_max must be >= 0 and jitter within [0, 1]")

    def delay(self, retry: int) -> float:
        """Pause before retry number ``retry`` (1 for the first retry)."""
        base = min(self.backoff * (2 ** (retry - 1)), self.backoff_max)
        return float(base * (1 - self.jitter * random.random()))


DEFAULT_RETRY = RetryPolicy()
"""The policy clients use unless told otherwise."""


def is_retriable(error: JetError) -> bool:
    """Whether ``error`` may go away if the request is sent again."""
    return error.retriable


def needs_metadata_refresh(error: JetError) -> bool:
    """True for errors after which the partition leader may have moved."""
    return isinstance(error, NotLeader | JetConnectionError | Unavailable | ShuttingDown)


async def retry_calls(
    attempt: Callable[[], Awaitable[_T]],
    policy: RetryPolicy,
    *,
    retry_if: Callable[[JetError], bool] = is_retriable,
    on_metadata_stale: Callable[[], None] | None = None,
) -> _T:
    """Await ``attempt()`` until it returns, sending it again after an error ``retry_if``
    accepts, at most ``policy.attempts`` times in all, with the policy's backoff between.
    ``on_metadata_stale`` is called before a retry after an error that says the leader
    may have moved.

    Raises:
        JetError: the last error.
    """
    tries = 0
    while True:
        try:
            return await attempt()
        except JetError as exc:
            tries += 1
            if tries >= policy.attempts or not retry_if(exc):
                raise
            if on_metadata_stale is not None and needs_metadata_refresh(exc):
                on_metadata_stale()
            await anyio.sleep(policy.delay(tries))
