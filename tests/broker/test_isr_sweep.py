"""Issue 34: one ISR check per server (``broker.isr_sweep``), not a task per leader.

The sweep runs on a real event loop with stand-in leaders (each says what its check found)
and a stand-in control plane that records each ``propose_isrs`` call and answers it when
the test says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import attrs
import pytest

from jetserver.broker.isr_sweep import IsrSweep
from jetserver.replication.control import IsrChange
from jetserver.testing import wait_until_async
from support.control_plane import RecordingControl

pytestmark = pytest.mark.anyio

BOUND_S = 10.0
"""Bound on every wait."""
POLL_S = 0.005
LEADERS = 300


@attrs.define(eq=False)
class Leader:
    """A leader whose check proposes ``ask`` while it is set, else waits ``wait_s``."""

    name: int
    ask: bool = True
    wait_s: float = 3600.0
    leading: bool = True
    checks: list[float] = attrs.field(factory=list)
    answers: list[bool] = attrs.field(factory=list)

    def isr_check(self, now: float) -> IsrChange | float | None:
        self.checks.append(now)
        if not self.leading:
            return None
        if self.ask:
            self.ask = False
            return IsrChange("s", self.name, 1, ("a", "b"), 0)
        return self.wait_s

    async def isr_answered(self, change: IsrChange, accepted: bool) -> float | None:
        self.answers.append(accepted)
        return self.wait_s if self.leading else None


class Control(RecordingControl):
    """Records each batch; answers every change of a batch once :attr:`go` is set."""

    def __init__(self, accept: bool = True) -> None:
        super().__init__("s1")
        self.accept = accept
        self.batches: list[list[IsrChange]] = []
        self.go = anyio.Event()

    async def propose_isrs(self, changes: Sequence[IsrChange]) -> list[bool]:
        self.batches.append(list(changes))
        await self.go.wait()
        return [self.accept for _ in changes]


async def test_the_leaders_due_together_are_checked_in_one_round_and_proposed_in_one_call() -> None:
    sweep, control = IsrSweep(interval_s=0.05), Control()
    leaders = [Leader(i) for i in range(LEADERS)]
    now = anyio.current_time()
    for leader in leaders:
        sweep.add(leader, now, 0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep.run, control)
        await wait_until_async(lambda: control.batches, BOUND_S, "a batch", interval_s=POLL_S)
        assert sweep.rounds == 1
        assert sweep.checks == LEADERS
        assert [len(b) for b in control.batches] == [LEADERS]
        # Woken while its change is in flight: checked again once the answer came.
        sweep.wake(leaders[0], anyio.current_time())
        leaders[1].leading = False  # its role ends meanwhile: its answer is dropped
        sweep.remove(leaders[1])
        control.go.set()
        await wait_until_async(
            lambda: len(leaders[0].checks) == 2, BOUND_S, "the woken leader checked again",
            interval_s=POLL_S,
        )  # fmt: skip
        assert leaders[1].answers == []  # removed: its answer is not carried out
        assert all(leader.answers == [True] for leader in leaders if leader is not leaders[1])
        assert [len(leader.checks) for leader in leaders[1:]] == [1] * (LEADERS - 1)
        assert len(sweep) == LEADERS - 1
        tg.cancel_scope.cancel()


async def test_a_refused_change_is_checked_again_after_the_interval_not_at_a_wake() -> None:
    interval = 0.3
    sweep, control = IsrSweep(interval_s=interval), Control(accept=False)
    control.go.set()
    leader = Leader(0, wait_s=0.0)
    sweep.add(leader, anyio.current_time(), 0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep.run, control)
        await wait_until_async(lambda: leader.answers, BOUND_S, "an answer", interval_s=POLL_S)
        answered = anyio.current_time()
        sweep.wake(leader, answered)  # a fetch: not before the pause ends
        leader.wait_s = 3600.0
        await wait_until_async(
            lambda: len(leader.checks) == 2, BOUND_S, "checked again", interval_s=POLL_S
        )
        assert leader.checks[1] - answered >= interval * 0.9
        assert leader.answers == [False]
        tg.cancel_scope.cancel()


async def test_an_idle_leader_is_checked_when_it_said_and_a_wake_brings_it_forward() -> None:
    sweep, control = IsrSweep(), Control()
    leader = Leader(0, ask=False, wait_s=3600.0)
    sweep.add(leader, anyio.current_time(), 3600.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep.run, control)
        await anyio.sleep(0.1)
        assert leader.checks == []
        sweep.wake(leader, anyio.current_time())
        await wait_until_async(lambda: leader.checks, BOUND_S, "checked", interval_s=POLL_S)
        assert sweep.rounds == 1
        assert control.batches == []
        tg.cancel_scope.cancel()


async def test_leaders_due_microseconds_apart_are_checked_in_one_round() -> None:
    """A failover's new leaders join the sweep one after the other, each due an interval
    after its role was taken: they are checked together, not in a round each."""
    sweep, control = IsrSweep(), Control()
    leaders = [Leader(i, ask=False) for i in range(LEADERS)]
    now = anyio.current_time()
    for i, leader in enumerate(leaders):
        sweep.add(leader, now, 0.1 + i * 5e-5)  # 15 ms from the first to the last
    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep.run, control)
        await wait_until_async(
            lambda: all(leader.checks for leader in leaders), BOUND_S, "all checked",
            interval_s=POLL_S,
        )  # fmt: skip
        assert sweep.checks == LEADERS
        assert sweep.rounds == 1
        tg.cancel_scope.cancel()
