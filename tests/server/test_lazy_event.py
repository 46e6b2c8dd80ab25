"""LazyEvent: anyio.Event's behaviour, with no event allocated until someone waits."""

from __future__ import annotations

from typing import TypeVar

import anyio
import pytest

from jetserver.infra.lazy_event import LazyEvent

T = TypeVar("T")

pytestmark = pytest.mark.anyio


async def _wait_and_note(
    event: LazyEvent, woken: list[T], name: T, within: float | None = None
) -> None:
    """Wait for ``event`` (with ``within``: a timed wait, which must see it set), then
    append ``name`` to ``woken``."""
    if within is None:
        await event.wait()
    else:
        assert await event.wait_within(within) is True
    woken.append(name)


async def test_waiters_wake_on_set_and_later_waits_return_at_once() -> None:
    event = LazyEvent()
    assert not event.is_set()
    woken: list[int] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(_wait_and_note, event, woken, i)
            await anyio.wait_all_tasks_blocked()
            assert woken == []
            event.set()
        assert sorted(woken) == [0, 1, 2]
        assert event.is_set()
        await event.wait()  # already set: returns
        event.set()  # idempotent


def test_no_event_allocated_until_a_wait() -> None:
    event = LazyEvent()
    event.set()
    assert event.is_set()
    assert event._futures is None


async def test_a_timed_wait_wakes_on_set_in_order_or_times_out() -> None:
    event = LazyEvent()
    assert await event.wait_within(0.01) is False  # not set: the timer ends it
    woken: list[int] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(_wait_and_note, event, woken, i, 5)
            await anyio.wait_all_tasks_blocked()
            event.set()
        assert woken == [0, 1, 2]  # in the order they came
        assert await event.wait_within(5) is True  # already set: at once
    assert event._futures is None


async def test_a_cancelled_wait_leaves_no_waiter_and_a_later_set_wakes_the_rest() -> None:
    event = LazyEvent()
    woken: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                tg.start_soon(_wait_and_note, event, woken, "kept")
                await anyio.wait_all_tasks_blocked()
                async with anyio.create_task_group() as inner:
                    inner.start_soon(_wait_and_note, event, woken, "cancelled")
                    await anyio.wait_all_tasks_blocked()
                    assert event._futures is not None
                    assert len(event._futures) == 2
                    inner.cancel_scope.cancel()
                assert len(event._futures) == 1  # the cancelled waiter's future is gone
                assert not scope.cancel_called
            event.set()
        assert woken == ["kept"]
        assert event._futures is None


async def test_one_waiter_is_held_without_a_table_and_leaves_nothing_when_cancelled() -> None:
    """The common case (an idle partition's sequencer) costs one future, no table (issue
    34); a second waiter makes the table, and set wakes both."""
    event = LazyEvent()
    woken: list[str] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as alone:
            alone.start_soon(_wait_and_note, event, woken, "alone")
            await anyio.wait_all_tasks_blocked()
            assert event._futures is not None
            assert not isinstance(event._futures, dict)
            alone.cancel_scope.cancel()
        assert event._futures is None  # the only waiter was cancelled: nothing held
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait_and_note, event, woken, "first")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(_wait_and_note, event, woken, "second", 5)
            await anyio.wait_all_tasks_blocked()
            assert isinstance(event._futures, dict)
            event.set()
    assert sorted(woken) == ["first", "second"]
    assert event._futures is None
