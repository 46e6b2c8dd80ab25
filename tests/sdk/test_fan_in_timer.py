"""The answers of one loop turn's ProduceMany sections share one timer
(``jetsdk.producer.fan_in._Expiry``): a section answered in time has its callback called
from the loop; one not answered when the timer fires is resolved as timed out (its
callback called, its wait raising Timeout); once every request of the turn was answered,
the timer is dropped and resolves nothing."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest

from jetsdk.errors import Timeout
from jetsdk.producer.fan_in import SectionAnswer, _Expiry

pytestmark = pytest.mark.anyio

BOUND_S = 10.0


def _answers(
    loop: asyncio.AbstractEventLoop, n: int
) -> tuple[_Expiry, list[SectionAnswer], list[str]]:
    """``n`` answers of one timer, each with a callback that records its name."""
    answers: list[SectionAnswer] = []
    expiry = _Expiry(loop, answers)
    called: list[str] = []
    for i in range(n):
        answer = SectionAnswer(loop.create_future(), "mem", expiry)
        answers.append(answer)
        answer.when_done(lambda _f, name=f"a{i}": called.append(name), 0.05)
    return expiry, answers, called


async def test_a_section_not_answered_in_time_times_out_the_others_do_not(
    anyio_backend: str,
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("ProduceMany's fan-in runs on asyncio only")
    expiry, (late, early), called = _answers(asyncio.get_running_loop(), 2)
    expiry.requests = 2  # (each section a request of its own: the timer waits for both)
    expiry.arm()
    early._resolve(b"body", None)
    expiry.answered()
    assert called == []  # from the loop, not in the resolving task
    await early.wait(None)
    await anyio.lowlevel.checkpoint()
    assert called == ["a1"]
    with anyio.fail_after(BOUND_S), pytest.raises(Timeout):
        await late.wait(None)
    await anyio.lowlevel.checkpoint()
    assert called == ["a1", "a0"]
    assert early.body_now == b"body"
    assert late.body_now is None
    late._resolve(b"too late", None)  # an answer after the timeout is dropped
    assert late.body_now is None
    assert called == ["a1", "a0"]


async def test_the_timer_is_dropped_once_every_request_was_answered(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("ProduceMany's fan-in runs on asyncio only")
    expiry, answers, called = _answers(asyncio.get_running_loop(), 3)
    expiry.requests = 1
    expiry.arm()
    for answer in answers:
        answer._resolve(b"ok", None)
    expiry.answered()
    assert expiry.future.done()
    await anyio.lowlevel.checkpoint()
    assert called == ["a0", "a1", "a2"]
    await anyio.sleep(0.2)  # past the timeout: nothing more is called
    assert called == ["a0", "a1", "a2"]
    assert [a.body_now for a in answers] == [b"ok"] * 3
