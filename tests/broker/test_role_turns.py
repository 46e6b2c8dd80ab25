"""jetserver.broker.role_turns: a burst of role changes starts a few per loop turn,
leaderships first, so the loop serves other work between the slices."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import attrs
import pytest

from jetserver.broker.role_turns import RoleTurns, takes_leadership
from jetserver.broker.running import RunningPartition
from jetserver.broker.streams import StreamManager
from jetserver.config import ServerConfig, ServerSection
from jetserver.metadata.model import PartitionAssignment
from jetserver.metadata.store import MetadataStore
from jetserver.replication.core import ROLE_FOLLOWER, ROLE_LEADER

pytestmark = pytest.mark.anyio

ME = "s1"


@attrs.define(eq=False)
class _Ticker:
    """Counts loop turns: one step per turn while it runs."""

    turns: int = 0

    async def run(self) -> None:
        while True:
            await anyio.lowlevel.checkpoint()
            self.turns += 1


async def test_waiters_start_a_slice_per_turn_leaders_before_the_others() -> None:
    turns = RoleTurns(per_turn=4)
    ticker = _Ticker()
    started: list[tuple[str, int]] = []

    async def change(kind: str, i: int) -> None:
        await turns.take(leading=kind == "lead")
        started.append((kind, i))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        await anyio.lowlevel.checkpoint()
        for i in range(10):  # the followers' changes come first
            tg.start_soon(change, "follow", i)
        for i in range(10):
            tg.start_soon(change, "lead", i)
        with anyio.fail_after(5.0):
            while len(started) < 20:
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    # The first four found the turn free; then the ten leaderships, then the rest.
    assert started[:4] == [("follow", i) for i in range(4)]
    assert started[4:14] == [("lead", i) for i in range(10)]
    assert started[14:] == [("follow", i) for i in range(4, 10)]
    assert turns.granted_turns == 4  # 16 waiters, 4 a turn
    assert turns.waiting == 0


async def test_a_waiter_cancelled_before_its_turn_is_skipped() -> None:
    turns = RoleTurns(per_turn=1)
    await turns.take(leading=False)  # this turn's one start
    with anyio.move_on_after(0.0):
        await turns.take(leading=True)
    with anyio.fail_after(5.0):
        await turns.take(leading=False)  # not behind the cancelled one forever
    assert turns.waiting == 0


@attrs.define(eq=False)
class _Replica:
    """What StreamManager's applier uses of a replica; records the loop turn of each
    role change."""

    partition: int
    ticker: _Ticker
    log: list[tuple[int, str, int]]
    stream: str = "s"
    closed: bool = False
    role: str = "none"
    assignment: PartitionAssignment | None = None
    leading: bool = False

    async def apply_assignment(self, a: PartitionAssignment, addresses: dict[str, str]) -> None:
        # A role change that waits for nothing (as most in a failover): no turn of the loop.
        self.role = ROLE_LEADER if a.leader == ME else ROLE_FOLLOWER
        self.assignment, self.leading = a, a.leader == ME
        self.log.append((self.ticker.turns, self.role, self.partition))


def _assignment(partition: int, leader: str) -> PartitionAssignment:
    others = tuple(s for s in ("s1", "s2", "s3") if s != leader)
    replicas = (leader, *others)
    return PartitionAssignment(
        partition=partition, leader=leader, replicas=replicas, isr=replicas, leader_epoch=1
    )


async def test_a_failover_burst_lets_the_loop_turn_between_slices_and_leads_first(
    tmp_path: Path,
) -> None:
    """A StreamManager's appliers woken at once by a reconcile (400 partitions: every
    other one now led here, the others following s2): the loop turns between the role
    changes (the old appliers ran all 400 in one turn), and every leadership is taken
    before the follower changes behind it."""
    config = ServerConfig(server=ServerSection(id=ME, data_dir=str(tmp_path)))
    manager = StreamManager(config, MetadataStore(tmp_path / "metadata.json"), cast(Any, None))
    ticker = _Ticker()
    applied: list[tuple[int, str, int]] = []
    running = [
        RunningPartition(cast(Any, _Replica(p, ticker, applied)), stream_id="id")
        for p in range(400)
    ]
    async with anyio.create_task_group() as tg:
        for r in running:
            tg.start_soon(manager._applier, r)
        tg.start_soon(ticker.run)
        await anyio.lowlevel.checkpoint()
        for r in running:  # what a reconcile's retarget does
            p = r.replica.partition
            r.wanted = (_assignment(p, "s2" if p % 2 else ME), ())
            r.wake.set()
        with anyio.fail_after(10.0):
            while len(applied) < len(running):
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    turns = {t for t, _role, _p in applied}
    assert len(turns) >= len(running) // manager.role_turns.per_turn - 1
    # The first slice found the turn free (in the order woken); every leadership behind
    # it was taken before every follower change behind it.
    roles = [role for _t, role, _p in applied[manager.role_turns.per_turn :]]
    assert roles == sorted(roles, key=lambda role: role != ROLE_LEADER)
    assert roles.count(ROLE_LEADER) == 200 - manager.role_turns.per_turn // 2
    assert sorted(p for _t, _r, p in applied) == list(range(400))


def test_only_a_new_epoch_led_here_counts_as_taking_a_leadership() -> None:
    replica = _Replica(0, _Ticker(), [])
    led = _assignment(0, ME)
    assert takes_leadership(cast(Any, replica), led, ME)  # nothing applied yet
    assert not takes_leadership(cast(Any, replica), _assignment(0, "s2"), ME)
    replica.assignment, replica.leading = led, True
    new_isr = attrs.evolve(led, isr=(ME, "s2"), partition_epoch=1)
    assert not takes_leadership(cast(Any, replica), new_isr, ME)  # same epoch, led here
    assert takes_leadership(cast(Any, replica), attrs.evolve(led, leader_epoch=2), ME)
    replica.leading = False  # e.g. stepped aside (damaged) or fenced in this epoch
    assert takes_leadership(cast(Any, replica), new_isr, ME)
