"""The simulated partition's vocabulary: scenario settings, messages, the in-memory log.

Part of the seeded replication simulation (:mod:`.simulation`).
"""

from __future__ import annotations

import random
from typing import NamedTuple

import attrs

from jetserver.metadata.model import MetadataState, PartitionAssignment
from jetserver.metadata.ops import Op
from jetserver.storage import EpochEntry, LeaderEpochCache

from .invariants import Rec

STREAM = "orders"
"""The simulated stream (one partition)."""
CTL = "ctl"
CLIENT = "client"
NOT_LEADER = "NOT_LEADER"
OUT_OF_RANGE = "OUT_OF_RANGE"
NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"


@attrs.frozen
class Step:
    """One scripted fault: at ``at`` seconds, ``kind`` (crash, power_loss, stop, isolate,
    pause, fsync_fail) on ``nodes`` (a leader/follower role name such as ``leader`` or
    ``follower1`` is resolved from the metadata at that moment), lasting ``length``."""

    at: float
    kind: str
    nodes: tuple[str, ...]
    length: float = 1.0


@attrs.frozen
class SimConfig:
    """One simulated scenario (times in virtual seconds)."""

    replicas: int = 3
    min_isr: int = 2
    durability: str = "flushed"
    duration_s: float = 6.0
    settle_s: float = 4.0
    loss: float = 0.02
    delay_min_s: float = 0.0005
    delay_max_s: float = 0.006
    faults_per_s: float = 1.0
    power_loss: bool = True
    produce_interval_s: float = 0.01
    fsync_min_s: float = 0.0005
    fsync_max_s: float = 0.004
    lag_max_s: float = 0.6
    silence_s: float = 0.25
    fetch_max_wait_s: float = 0.1
    hw_news_delay_s: float = 0.005
    """``[replication] hw_news_delay_s``: a parked fetch with HW news alone waits this."""
    request_timeout_s: float = 0.2
    fetch_max_records: int = 50
    isr_check_s: float = 0.05
    vote_window_s: float = 1.0
    meta_interval_s: float = 0.2
    checkpoint_interval_s: float = 0.3
    retry_s: float = 0.02
    fsync_fail: float = 0.0
    """Chance that one fsync fails (its unsynced records are dropped, as Linux does)."""
    stops: bool = True
    """Graceful stops (handoff, then leave the ISR) among the faults, sometimes two at
    once."""
    handoff_s: float = 0.3
    """How long a stopping node waits for its handoffs before it closes its replica."""
    register_retry_s: float = 0.1
    script: tuple[Step, ...] = ()
    """Faults at fixed times (a regression scenario) in place of random ones."""


# ------------------------------------------------------------------------ messages


@attrs.frozen
class Meta:
    """The metadata as the controller's state machine applied it (the real ops)."""

    state: MetadataState

    @property
    def version(self) -> int:
        return self.state.applied

    @property
    def a(self) -> PartitionAssignment:
        return self.state.streams[STREAM].partitions[0]


@attrs.frozen
class Propose:
    """A metadata op from a node (handoff, leaving the ISR, registration)."""

    sender: str
    op: Op
    rid: int = 0


@attrs.frozen
class Registered:
    rid: int


class SimPending(NamedTuple):
    """An ALL ack waiting in the replica core."""

    offset: int
    rid: int


@attrs.frozen
class Fetch:
    rid: int
    sender: str
    offset: int
    flushed: int
    epoch: int


@attrs.frozen
class FetchReply:
    rid: int
    error: str | None
    records: tuple[Rec, ...] = ()
    hw: int = -1


@attrs.frozen
class EpochQuery:
    rid: int
    sender: str
    epoch: int
    current_epoch: int


@attrs.frozen
class EpochReply:
    rid: int
    error: str | None
    epoch: int = -1
    end: int = -1


@attrs.frozen
class ProposeIsr:
    rid: int
    sender: str
    epoch: int
    isr: tuple[str, ...]
    partition_epoch: int


@attrs.frozen
class IsrReply:
    rid: int
    accepted: bool


@attrs.frozen
class Silent:
    sender: str
    epoch: int


@attrs.frozen
class Produce:
    rid: int
    value: str


@attrs.frozen
class ProduceReply:
    rid: int
    error: str | None
    offset: int = -1


# ------------------------------------------------------------------------ the log


@attrs.define
class SimLog:
    """An in-memory partition log with the storage engine's epoch cache and crash model."""

    records: list[Rec] = attrs.field(factory=list)
    flushed: int = 0
    hw: int = 0
    hw_checkpoint: int = 0
    generation: int = 0
    epochs: LeaderEpochCache = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.epochs = LeaderEpochCache(None, lambda: len(self.records))

    @property
    def leo(self) -> int:
        return len(self.records)

    def append(self, recs: list[Rec]) -> None:
        for rec in recs:
            assert rec.offset == len(self.records), (rec, len(self.records))
            if rec.epoch != self.epochs.latest_epoch:
                self.epochs.assign(rec.epoch, rec.offset)
            self.records.append(rec)

    def truncate_to(self, offset: int) -> None:
        # Like the server's follower: Log.truncate_to, then drop epoch entries at or past
        # the offset even when no record is cut (an epoch this replica led without
        # appending anything leaves an entry at its LEO).
        self.epochs.truncate_from_end(offset)
        if offset >= self.leo:
            return
        del self.records[offset:]
        self.hw = min(self.hw, offset)
        self.flushed = min(self.flushed, offset)
        self.generation += 1
        self.epochs.truncate_from_end(offset)

    def crash(self, rng: random.Random, power_loss: bool) -> None:
        keep = self.leo
        if power_loss:
            keep = self.flushed + rng.randint(0, self.leo - self.flushed)
        del self.records[keep:]
        self.generation += 1
        entries: list[EpochEntry] = []
        for rec in self.records:
            if not entries or entries[-1].epoch != rec.epoch:
                entries.append(EpochEntry(rec.epoch, rec.offset))
        self.epochs = LeaderEpochCache(None, lambda: len(self.records), entries)
        # Reopen: the active segment is fsynced, the HW comes from its checkpoint.
        self.flushed = self.leo
        self.hw = min(self.hw_checkpoint, self.leo)
