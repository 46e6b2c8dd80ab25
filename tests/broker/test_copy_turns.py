"""A partition's order of NATS copies (``CopyTurns``): each request's copies after the
previous request's, a given-up turn passed on, a late one overtaking only after its wait
timed out; and a turn with nothing before it is checked and finished without a future.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from jetserver.broker.copy_turns import CopyTurns

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


async def _waiting(turns: CopyTurns, turn: int, timeout_s: float = BOUND_S) -> asyncio.Task[bool]:
    """A task waiting for ``turn``, started and parked."""
    task = asyncio.get_running_loop().create_task(turns.wait(turn, timeout_s))
    await asyncio.sleep(0)
    assert not task.done()
    return task


def _count_futures(
    monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop
) -> list[object]:
    """A list that gets an entry for every future ``loop.create_future`` makes from now on."""
    made: list[object] = []
    create_future = loop.create_future

    def counted() -> asyncio.Future[object]:
        made.append(None)
        return create_future()

    monkeypatch.setattr(loop, "create_future", counted)
    return made


async def test_a_turn_goes_once_every_earlier_turn_finished() -> None:
    turns = CopyTurns()
    first, second, third = turns.take(), turns.take(), turns.take()
    assert (first, second, third) == (0, 1, 2)
    assert turns.is_next(first)
    assert not turns.is_next(second)
    waiting_third = await _waiting(turns, third)
    waiting_second = await _waiting(turns, second)
    turns.finish(first)
    with anyio.fail_after(BOUND_S):
        assert await waiting_second
    await asyncio.sleep(0)
    assert not waiting_third.done(), "a turn went before the one ahead of it finished"
    turns.finish(second)
    with anyio.fail_after(BOUND_S):
        assert await waiting_third


async def test_a_given_up_turn_is_passed_on_once_the_turns_before_it_finished() -> None:
    turns = CopyTurns()
    first, second, third = turns.take(), turns.take(), turns.take()
    turns.finish(second)  # given up while the first one's copies are still due
    assert not turns.is_next(third)
    waiting_third = await _waiting(turns, third)
    await asyncio.sleep(0)
    assert not waiting_third.done()
    turns.finish(first)
    with anyio.fail_after(BOUND_S):
        assert await waiting_third
    assert turns.is_next(third)


async def test_a_turn_that_waited_too_long_goes_and_lets_the_later_ones_go() -> None:
    turns = CopyTurns()
    stuck, late, after = turns.take(), turns.take(), turns.take()
    with anyio.fail_after(BOUND_S):
        assert not await turns.wait(late, 0.01)
    waiting_after = await _waiting(turns, after)
    turns.finish(late, overtake=True)  # published anyway: the later ones need not wait
    with anyio.fail_after(BOUND_S):
        assert await waiting_after
    turns.finish(stuck)  # comes at last: changes nothing
    turns.finish(after)
    assert turns.is_next(turns.take())


async def test_a_turn_with_nothing_before_it_makes_no_future(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    made = _count_futures(monkeypatch, loop)
    turns = CopyTurns()
    for _ in range(3):
        turn = turns.take()
        assert await turns.wait(turn, BOUND_S)
        turns.finish(turn)
    assert made == []


async def test_a_turn_that_waits_parks_on_one_future_of_the_given_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wait makes one future and one timer (``asyncio.wait`` made a second future, a
    set and a done callback per wait, and looked the running loop up: a getpid system
    call each on Python 3.11). Failed before: two futures per wait."""
    loop = asyncio.get_running_loop()
    made = _count_futures(monkeypatch, loop)
    turns = CopyTurns()
    first, second = turns.take(), turns.take()
    waiting = loop.create_task(turns.wait(second, BOUND_S, loop))
    await asyncio.sleep(0)
    assert not waiting.done()
    turns.finish(first)
    with anyio.fail_after(BOUND_S):
        assert await waiting
    assert len(made) == 1
    turns.finish(second)
    third, fourth = turns.take(), turns.take()
    assert await turns.wait(third, BOUND_S, loop)  # nothing before it: no future
    with anyio.fail_after(BOUND_S):
        assert not await turns.wait(fourth, 0.01, loop)  # the third is not finished
    assert len(made) == 2
