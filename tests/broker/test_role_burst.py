"""jetserver.broker.role_burst: the collector paused while a burst of role changes applies."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from jetserver.broker.role_burst import ROLE_BURST_MIN, RoleBurst

pytestmark = pytest.mark.anyio


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector on, nothing frozen, before and after (the burst freezes what exists)."""
    was = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()


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
async def test_the_collector_resumes_after_the_bound_if_an_applier_never_counts() -> None:
    burst = RoleBurst(ROLE_BURST_MIN)
    with anyio.fail_after(5.0):
        async with anyio.create_task_group() as tg:
            tg.start_soon(burst.collector_paused, 0.05)
            await anyio.lowlevel.checkpoint()
            assert not gc.isenabled()
    assert gc.isenabled()
    assert burst.left == ROLE_BURST_MIN
