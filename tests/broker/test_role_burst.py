"""jetserver.broker.role_burst: the collector paused while a burst of role changes applies."""

from __future__ import annotations

import gc
import time

import anyio
import anyio.lowlevel
import pytest

from jetserver.broker.role_burst import ROLE_BURST_MIN, RoleBurst

pytestmark = pytest.mark.anyio


@pytest.mark.usefixtures("collector")
async def test_the_collector_is_off_until_every_applier_applied() -> None:
    burst = RoleBurst(ROLE_BURST_MIN)
    async with anyio.create_task_group() as tg:
        tg.start_soon(burst.collector_paused)
        await anyio.lowlevel.checkpoint()  # the task starts
        assert not gc.isenabled()
        for _ in range(ROLE_BURST_MIN - 1):
            burst.applied()
        await anyio.lowlevel.checkpoint()
        assert not gc.isenabled()  # one still applies
        burst.applied()
        with anyio.fail_after(5.0):
            await burst.done.wait()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # what the burst made lives on, frozen


@pytest.mark.usefixtures("collector")
async def test_the_collector_is_off_from_the_turn_that_hands_the_burst_out() -> None:
    """The woken appliers run before the burst's task first wakes (often all of them in
    one turn): the collector is off before they run, not from the task's start (until
    2026-11-29 they ran with it on)."""
    burst = RoleBurst(ROLE_BURST_MIN)
    burst.pause_collector()  # the reconcile's turn, before any applier runs
    assert not gc.isenabled()
    for _ in range(ROLE_BURST_MIN):
        burst.applied()  # every role change applied in that same turn
    assert not gc.isenabled()
    with anyio.fail_after(5.0):
        await burst.collector_paused()  # its task: the burst is done, the pause ends
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("collector")
async def test_a_pause_whose_task_never_ran_ends_at_the_stop() -> None:
    burst = RoleBurst(ROLE_BURST_MIN)
    burst.pause_collector()
    burst.pause_collector()  # once
    assert not gc.isenabled()
    burst.resume_collector()  # StreamManager.stop: the task was cancelled before it ran
    assert gc.isenabled()
    burst.resume_collector()  # again: nothing
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
async def test_the_collector_resumes_after_the_bound_if_an_applier_never_counts() -> None:
    burst = RoleBurst(ROLE_BURST_MIN)
    with anyio.fail_after(5.0):
        async with anyio.create_task_group() as tg:
            tg.start_soon(burst.collector_paused, 0.05)
            await anyio.lowlevel.checkpoint()
            assert not gc.isenabled()
    assert gc.isenabled()
    assert burst.left == ROLE_BURST_MIN


async def test_the_longest_stall_of_the_loop_during_the_burst_is_handed_over() -> None:
    stalls: list[float] = []
    burst = RoleBurst(1, on_stall=stalls.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(burst.collector_paused)
        await anyio.sleep(0.05)  # the task waits in its ticks
        time.sleep(0.3)  # noqa: ASYNC251 - the loop held, as by a turn of many role changes
        await anyio.sleep(0.05)
        burst.applied()
    assert len(stalls) == 1
    assert 0.2 <= stalls[0] == burst.longest_stall_s


async def test_a_burst_applied_in_the_turn_that_handed_it_out_counts_that_turn() -> None:
    """The role changes of a burst may all run before its task first wakes (the old
    appliers ran a failover's in one turn): that turn is the stall."""
    stalls: list[float] = []
    burst = RoleBurst(2, on_stall=stalls.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(burst.collector_paused)
        time.sleep(0.3)  # noqa: ASYNC251 - the turn that applies every role change
        burst.applied()
        burst.applied()
    assert len(stalls) == 1
    assert stalls[0] >= 0.25


@pytest.mark.usefixtures("collector")
async def test_a_few_role_changes_on_a_server_holding_many_pause_and_freeze() -> None:
    """A new stream's 100 first roles on a server holding thousands of partitions: the
    collector is off while they apply and what they made is frozen after (see gc_pause)."""
    small = RoleBurst(3, held=3)
    small.pause_collector()
    assert gc.isenabled()  # a small server: left alone
    small.resume_collector()
    burst = RoleBurst(3, held=ROLE_BURST_MIN + 3)
    burst.pause_collector()
    assert not gc.isenabled()
    for _ in range(3):
        burst.applied()
    with anyio.fail_after(5.0):
        await burst.collector_paused()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
