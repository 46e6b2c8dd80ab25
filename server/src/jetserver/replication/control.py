"""What replication needs from the control plane (spec/cluster.md, "Interfaces").

``jetserver.cluster.Controller`` implements it over the metadata Raft; tests and the
simulation use their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
import attrs


@attrs.frozen
class IsrChange:
    """An ISR change a partition leader proposes (UpdateIsr)."""

    stream: str
    partition: int
    leader_epoch: int
    """The leadership proposing it."""
    isr: tuple[str, ...]
    """The ISR proposed."""
    partition_epoch: int | None = None
    """The partition epoch it was computed from (compare-and-set; None: not checked)."""


class ControlPlane(Protocol):
    """ISR changes and silent-leader reports, as the data plane sends them."""

    server_id: str

    async def propose_isr(
        self,
        stream: str,
        partition: int,
        leader_epoch: int,
        isr: tuple[str, ...],
        *,
        partition_epoch: int | None = None,
    ) -> bool:
        """Propose ``isr`` as the partition leader of ``leader_epoch``; True once applied,
        False if refused (stale epoch, not the leader)."""
        ...

    async def propose_isrs(self, changes: Sequence[IsrChange]) -> list[bool]:
        """:meth:`propose_isr` for many partitions at once (one server's ISR sweep): each
        change's outcome, in order."""
        ...

    async def report_leader_silent(
        self, stream: str, partition: int, leader_epoch: int, reporter: str
    ) -> None:
        """Tell the metadata leader that the leader of ``leader_epoch`` is silent; with
        ``reporter`` = that leader, that it gave up the epoch and asks for the next one."""
        ...


def server_heard_of(controller: object) -> Callable[[str], float | None] | None:
    """The controller's ``server_heard_at`` (when a server last answered its liveness
    probes), or None for a control plane without liveness probes."""
    heard = getattr(controller, "server_heard_at", None)
    return heard if callable(heard) else None


def server_down_of(controller: object) -> Callable[[str], bool] | None:
    """The controller's ``server_down`` (True if its liveness probes find a server down),
    or None for a control plane without liveness probes."""
    down = getattr(controller, "server_down", None)
    return down if callable(down) else None


def server_gone_of(controller: object) -> Callable[[str], bool] | None:
    """The controller's ``server_gone`` (True if its last liveness probe of a server was
    refused: nothing listens, the process is gone), or None for a control plane without
    it."""
    gone = getattr(controller, "server_gone", None)
    return gone if callable(gone) else None


def report_hold_of(controller: object) -> Callable[[str], anyio.Event | None] | None:
    """The controller's ``report_hold`` (an event set when reports about a gone server's
    partitions are no longer held while the metadata leader's takeover elects them; None
    while not held), or None for a control plane without it."""
    hold = getattr(controller, "report_hold", None)
    return hold if callable(hold) else None


def leave_isr_of(controller: object) -> Callable[[str, int], Awaitable[bool]] | None:
    """The controller's ``leave_isr`` (take this server out of a partition's ISR: its log
    was found damaged), or None for a control plane without it."""
    leave = getattr(controller, "leave_isr", None)
    return leave if callable(leave) else None


def hand_over_of(controller: object) -> Callable[[str, int, int], Awaitable[bool]] | None:
    """The controller's ``hand_over`` (give a leadership this server cannot take, its log
    being damaged, to another ISR member), or None for a control plane without it."""
    hand = getattr(controller, "hand_over", None)
    return hand if callable(hand) else None


def server_down_event_of(controller: object) -> Callable[[str], anyio.Event] | None:
    """The controller's ``server_down_event`` (an event set once its liveness view finds a
    server down), or None for a control plane without it."""
    event = getattr(controller, "server_down_event", None)
    return event if callable(event) else None


def server_up_event_of(controller: object) -> Callable[[str], anyio.Event] | None:
    """The controller's ``server_up_event`` (an event set once its liveness view finds a
    server not down), or None for a control plane without it."""
    event = getattr(controller, "server_up_event", None)
    return event if callable(event) else None


def server_stopping_of(controller: object) -> bool:
    """True once the controller's server began a graceful stop (its ``stopping``): a replica
    handed a follower role outside the ISR then does not fetch. Its fetches, caught up,
    would have the new leader add it back to the ISR it just left by the handoff, after its
    exits from the ISRs were planned: a stopped member in the ISR holds the HW back until
    the lag bound (spec/cluster.md, "Graceful shutdown")."""
    return bool(getattr(controller, "stopping", False))
