"""A follower's series of failed fetches (:class:`Interruptions`): the pause after each,
and which one is worth a line at INFO.

The pause doubles per failure from ``retry_min_s`` up to ``retry_max_s``, less up to a
fifth at random: a server's followers of a killed leader all fail in the same moment, and
without the jitter they would retry together at every step. A fetch answered again ends
the series (:meth:`Interruptions.answered`).

The series' first failure is logged at INFO, except for the expected ones of a failover or
a create: the shared session's connection lost (the session logs that once for all its
partitions) and NOT_LEADER (the new leader has not taken its role yet): their line comes
only if the series lasts :data:`EXPECTED_INTERRUPTION_QUIET_S`. A failover of 1,000
leaderships logged 1,000 of them on each survivor.

Task safety: one follower's task.
"""

from __future__ import annotations

import logging
import random

import attrs

from jetsdk.errors import JetConnectionError, NotLeader
from jetserver.replication.config import ReplicationConfig

__all__ = ["BACKOFF_JITTER", "EXPECTED_INTERRUPTION_QUIET_S", "Interruptions"]

EXPECTED_INTERRUPTION_QUIET_S = 10.0
"""How long a series of expected failures (the session's connection lost, NOT_LEADER) lasts
before a follower logs it at INFO: longer than a failover takes."""
BACKOFF_JITTER = 0.2
"""Up to this fraction of each pause is taken off at random (Kafka's
``retry.backoff.jitter`` is 0.2 as well)."""


@attrs.define(eq=False)
class Interruptions:
    """One follower's current series of failed fetches."""

    config: ReplicationConfig
    """``retry_min_s`` and ``retry_max_s``."""
    failures: int = 0
    """Failures in a row (0: the last fetch was answered)."""
    _series_start: float = 0.0
    """When the series began (the caller's clock)."""
    _series_logged: bool = False
    """The series was logged at INFO."""

    def failed(self, exc: Exception, now: float, *, quiet: bool = False) -> tuple[int, float]:
        """One more failure at ``now``: the level to log it at and the seconds to pause.
        ``quiet``: never INFO (a timeout, which the fetch session logs once for all its
        partitions)."""
        self.failures += 1
        if self.failures == 1:
            self._series_start, self._series_logged = now, False
        expected = isinstance(exc, (NotLeader, JetConnectionError))
        due = not expected or now - self._series_start >= EXPECTED_INTERRUPTION_QUIET_S
        level = logging.DEBUG
        if due and not quiet and not self._series_logged:
            level, self._series_logged = logging.INFO, True
        pause = self.config.backoff_s(self.failures)
        return level, pause * (1.0 - BACKOFF_JITTER * random.random())

    def answered(self) -> None:
        """A fetch was answered and stored: the series is over."""
        self.failures = 0
