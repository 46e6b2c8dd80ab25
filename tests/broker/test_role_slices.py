"""jetserver.broker.role_slices: a burst of role changes handed out in slices of bounded
loop time, new leaderships first, so the loop serves other work between the slices."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import attrs
import pytest

from jetserver.broker.role_burst import ROLE_BURST_MIN
from jetserver.broker.role_slices import FIRST_SLICE, leaders_first, wake_in_slices
from jetserver.broker.running import RunningPartition
from jetserver.broker.streams import StreamManager
from jetserver.config.server import ServerConfig, ServerSection
from jetserver.infra.lazy_event import LazyEvent
from jetserver.metadata.model import PartitionAssignment
from jetserver.metadata.store import MetadataStore
from jetserver.replication.core import ROLE_FOLLOWER, ROLE_LEADER

pytestmark = pytest.mark.anyio

ME = "s1"


def _assignment(partition: int, leader: str) -> PartitionAssignment:
    replicas = (leader, *(s for s in ("s1", "s2", "s3") if s != leader))
    return PartitionAssignment(
        partition=partition, leader=leader, replicas=replicas, isr=replicas, leader_epoch=1
    )


@attrs.define(eq=False)
class _Ticker:
    """Counts loop turns: one step per turn while it runs."""

    turns: int = 0

    async def run(self) -> None:
        while True:
            await anyio.lowlevel.checkpoint()
            self.turns += 1


@attrs.define(eq=False)
class _Clock:
    """A clock that moves only when told (each role change's cost)."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@attrs.define(eq=False)
class _Opened:
    """What the slices read and set of a running partition."""

    wanted: Any
    wake: LazyEvent = attrs.field(factory=LazyEvent)


def test_leaders_first_keeps_each_groups_order() -> None:
    woken = [_Opened((_assignment(p, "s2" if p % 3 else ME), ())) for p in range(9)]
    ordered = cast(list[_Opened], leaders_first(cast(Any, woken), ME))
    assert [o.wanted[0].partition for o in ordered] == [0, 3, 6, 1, 2, 4, 5, 7, 8]


async def test_a_burst_is_woken_a_slice_per_turn_each_within_the_bound() -> None:
    """1,000 appliers of 1 ms each and slices of 50 ms: the first slice (FIRST_SLICE)
    measures the rate, every later one holds at most 50 of them; the loop turns between."""
    clock, ticker = _Clock(), _Ticker()
    woken = [_Opened(None) for _ in range(1000)]
    ran: list[tuple[int, int]] = []  # (loop turn, applier)

    async def applier(i: int) -> None:
        await woken[i].wake.wait()
        clock.now += 0.001
        ran.append((ticker.turns, i))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker.run)
        for i in range(len(woken)):
            tg.start_soon(applier, i)
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # every applier waits
        with anyio.fail_after(10.0):
            slices = await wake_in_slices(cast(Any, woken), slice_s=0.05, clock=clock)
            while len(ran) < len(woken):
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    assert [i for _, i in ran] == list(range(1000))  # in the order handed
    per_turn: dict[int, int] = {}
    for turn, _ in ran:
        per_turn[turn] = per_turn.get(turn, 0) + 1
    sizes = list(per_turn.values())
    assert sizes[0] == FIRST_SLICE
    # 0.05 s of 1 ms each: 50 a slice (49 when the float division falls just below).
    assert all(49 <= size <= 50 for size in sizes[1:-1]), sizes
    assert sizes[-1] <= 50
    assert slices == len(sizes) >= 1 + -(-(1000 - FIRST_SLICE) // 50)


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

    async def apply_assignment(self, a: PartitionAssignment, addresses: dict[str, str]) -> None:
        # A role change that waits for nothing (as most in a failover's): no loop turn.
        self.role = ROLE_LEADER if a.leader == ME else ROLE_FOLLOWER
        self.log.append((self.ticker.turns, self.role, self.partition))


@pytest.mark.usefixtures("collector")
async def test_a_reconciles_burst_lets_the_loop_turn_and_leads_first(tmp_path: Path) -> None:
    """A StreamManager's reconcile hands 600 replicas new targets at once (every other one
    now led here, the others following s2): the appliers run over several loop turns
    (e793e834 woke all 600 in the reconcile's turn: they ran in one), and every leadership
    is taken before any follower change."""
    config = ServerConfig(server=ServerSection(id=ME, data_dir=str(tmp_path)))
    manager = StreamManager(config, MetadataStore(tmp_path / "metadata.json"), cast(Any, None))
    ticker = _Ticker()
    applied: list[tuple[int, str, int]] = []
    running = [
        RunningPartition(cast(Any, _Replica(p, ticker, applied)), stream_id="id")
        for p in range(600)
    ]
    assert len(running) >= ROLE_BURST_MIN
    async with anyio.create_task_group() as tg:
        manager._tg = tg
        tg.start_soon(manager.role_summary.run)
        for r in running:
            tg.start_soon(manager._applier, r)
        tg.start_soon(ticker.run)
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # every applier waits for a target
        for r in running:  # what plan.retarget(..., wake=False) does
            p = r.replica.partition
            r.wanted = (_assignment(p, ME if p % 2 else "s2"), ())
        manager._hand_out(running, opened=False)
        with anyio.fail_after(10.0):
            while len(applied) < len(running):
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    turns = {turn for turn, _, _ in applied}
    assert len(turns) >= 2, "the whole burst ran in one loop turn"
    roles = [role for _, role, _ in applied]
    assert roles == [ROLE_LEADER] * 300 + [ROLE_FOLLOWER] * 300
