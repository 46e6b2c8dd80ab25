"""``AnswerAtCommit`` (broker/direct.py): one answer per request, its commit's or its
timeout's, whichever comes first; the timer gone once its commit answered."""

from __future__ import annotations

import asyncio

import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import decode_produce_response
from jetserver.broker.direct import AnswerAtCommit

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _codes(written: list[bytes]) -> list[list[tuple[int, int]]]:
    return [[(r.error_code, r.offset) for r in decode_produce_response(w)] for w in written]


async def test_the_commit_answers_and_cancels_the_timer() -> None:
    written: list[bytes] = []
    answer = AnswerAtCommit(written.append)
    answer.timer = timer = asyncio.get_running_loop().call_later(60.0, answer.expire)
    answer.settle(0, 0, 7, 1)
    assert timer.cancelled()
    assert answer.timer is None
    answer.expire()  # (had it run anyway: nothing more)
    assert _codes(written) == [[(ErrorCode.NONE, 7)]]


async def test_the_timeout_answers_once_and_the_late_commit_nothing() -> None:
    written: list[bytes] = []
    answer = AnswerAtCommit(written.append)
    fired = asyncio.Event()

    def expire() -> None:
        answer.expire()
        fired.set()

    answer.timer = asyncio.get_running_loop().call_later(0.01, expire)
    await asyncio.wait_for(fired.wait(), 10.0)
    answer.settle(0, 0, 7, 1)  # the fsync returned at last
    assert _codes(written) == [[(ErrorCode.TIMEOUT, -1)]]
    assert answer.timer is None
