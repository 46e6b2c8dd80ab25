"""jetserver.observe.held.Held: an async context kept open by a task of its own (the
sampler's clients per server and the console's live tables are held so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import attrs
import pytest

from jetserver.observe.held import Held

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


@attrs.define
class Context:
    """Which tasks entered and exited :func:`context` (ids)."""

    entered_by: int | None = None
    exited_by: int | None = None


@asynccontextmanager
async def context(
    state: Context,
    *,
    fail_enter: BaseException | None = None,
    fail_exit: BaseException | None = None,
) -> AsyncIterator[Context]:
    """An async context that records the tasks entering and exiting it in ``state``, and
    raises ``fail_enter`` instead of entering or ``fail_exit`` once exited."""
    await anyio.lowlevel.checkpoint()
    if fail_enter is not None:
        raise fail_enter
    state.entered_by = anyio.get_current_task().id
    try:
        yield state
    finally:
        state.exited_by = anyio.get_current_task().id
    if fail_exit is not None:
        raise fail_exit


async def test_the_value_is_held_until_closing_and_exited_by_the_task_that_entered_it() -> None:
    state = Context()
    held: Held[Context] = Held()
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(held.run, lambda: context(state), OSError)
            await held.ready.wait()
            assert held.value is state
            assert not held.ended
            assert state.exited_by is None
            held.closing.set()
    assert held.ended
    assert held.value is None
    assert held.error is None
    assert state.entered_by is not None
    assert state.exited_by == state.entered_by
    assert state.entered_by != anyio.get_current_task().id


async def test_an_error_it_catches_is_kept_and_ready_is_set() -> None:
    failure = OSError("refused")
    held: Held[Context] = Held()
    with anyio.fail_after(BOUND_S):
        await held.run(lambda: context(Context(), fail_enter=failure), (ValueError, OSError))
    assert held.ready.is_set()
    assert held.ended
    assert held.value is None
    assert held.error is failure


async def test_an_error_while_exiting_is_caught_too() -> None:
    failure = OSError("gone")
    held: Held[Context] = Held()
    held.closing.set()
    with anyio.fail_after(BOUND_S):
        await held.run(lambda: context(Context(), fail_exit=failure), OSError)
    assert held.ended
    assert held.value is None
    assert held.error is failure


async def test_any_other_error_propagates_and_ready_is_still_set() -> None:
    held: Held[Context] = Held()
    with anyio.fail_after(BOUND_S), pytest.raises(ValueError, match="bad"):
        await held.run(lambda: context(Context(), fail_enter=ValueError("bad")), OSError)
    assert held.ready.is_set()
    assert held.ended
    assert held.error is None
