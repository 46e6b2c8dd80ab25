"""Replication settings of one server: the ``[replication]`` section of the server
configuration (spec/cluster.md, "Replication")."""

from __future__ import annotations

import attrs

from jetserver.config.validators import non_negative, positive

DEFAULT_REPLICA_LAG_MAX_S = 10.0
DEFAULT_LEADER_SILENCE_S = 1.5
DEFAULT_FETCH_MAX_WAIT_S = 5.0
DEFAULT_FETCH_MAX_BYTES = 4 << 20
DEFAULT_ISR_CHECK_INTERVAL_S = 0.25
DEFAULT_RETRY_MIN_S = 0.05
DEFAULT_RETRY_MAX_S = 1.0
DEFAULT_REQUEST_SLACK_S = 1.0
DEFAULT_HW_NEWS_DELAY_S = 0.025


_positive = positive("replication")


@attrs.frozen
class ReplicationConfig:
    """How followers fetch and when the leader changes the ISR.

    Raises:
        ConfigError: a value that is not positive.
    """

    replica_lag_max_s: float = attrs.field(default=DEFAULT_REPLICA_LAG_MAX_S, validator=_positive)
    """A follower that has not caught up with the leader for this long leaves the ISR."""
    leader_silence_s: float = attrs.field(default=DEFAULT_LEADER_SILENCE_S, validator=_positive)
    """A follower that got no answer from its leader for this long reports it silent
    (and again after every further period of silence)."""
    fetch_max_wait_s: float = attrs.field(default=DEFAULT_FETCH_MAX_WAIT_S, validator=_positive)
    """Long-poll bound of a replica fetch."""
    hw_news_delay_s: float = attrs.field(
        default=DEFAULT_HW_NEWS_DELAY_S, validator=non_negative("replication")
    )
    """A parked replica fetch whose follower lacks only the HW (no records) is answered
    after this long, not at once: the HW rides with the next records if they come sooner
    (one round per message instead of two). A follower's HW trails the leader's by at most
    this plus one fetch round (0: answer the HW at once)."""
    fetch_max_bytes: int = attrs.field(default=DEFAULT_FETCH_MAX_BYTES, validator=_positive)
    """Soft bound on the records of one replica fetch (per partition). 4 MiB, not 1: every
    round costs the leader a request and an answer and the follower a write and an fsync;
    RF 3, ack ALL, 16 KiB and 256 KiB values on the dev VM: leader 4.0-4.7 -> 2.6-3.7 CPU
    ms/MiB, each follower 2.1-2.3 -> 1.2-1.7 (with the follower's writes in pieces of at
    most 1 MiB, :data:`jetserver.storage.files.WRITE_PIECE_BYTES`: in one 4 MiB write the
    follower cost more than before)."""
    isr_check_interval_s: float = attrs.field(
        default=DEFAULT_ISR_CHECK_INTERVAL_S, validator=_positive
    )
    """How often the leader looks for followers to drop from the ISR."""
    retry_min_s: float = attrs.field(default=DEFAULT_RETRY_MIN_S, validator=_positive)
    """First pause after a failed fetch (doubles up to ``retry_max_s``)."""
    retry_max_s: float = attrs.field(default=DEFAULT_RETRY_MAX_S, validator=_positive)
    """Longest pause between failed fetches."""
    request_slack_s: float = attrs.field(default=DEFAULT_REQUEST_SLACK_S, validator=_positive)
    """A replica request times out after its long-poll bound plus this."""
    scrub_on_clean_start: bool = False
    """CRC-check every replicated partition's whole log at every start, also after a clean
    stop, to find bit rot in sealed segments before the replica serves or leads with it
    (after an unclean stop it is always done). Costs one pass over the files at start:
    about 22 MB/s per partition on a 2-core VM (53 MB in 2.2-2.4 s)."""

    def backoff_s(self, failures: int) -> float:
        """Pause after ``failures`` consecutive failures (>= 1)."""
        return float(min(self.retry_min_s * 2 ** max(failures - 1, 0), self.retry_max_s))
