"""The answer of an RF 3 ALL request served in one step (broker/produce_replicated.py,
``AnswerAtHw``): written once, by whatever settles it first (its commit, a failure, an ack
through NATS, its timeout), and the request leaves the Produce service's waiting ones."""

from __future__ import annotations

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.messages import decode_produce_response
from jetserver.broker.direct import NOT_LEADER, ProduceCompletion
from jetserver.broker.produce_replicated import AnswerAtHw


def _waiting_one() -> tuple[ProduceCompletion, dict[str, ProduceCompletion], list[bytes]]:
    completion = ProduceCompletion("s", 0, results=[None], remaining=1)
    waiting = {"7": completion}
    written: list[bytes] = []
    completion.on_done = AnswerAtHw(completion, "7", waiting, written.append)
    return completion, waiting, written


def test_its_commit_answers_once_and_it_leaves_the_waiting_requests() -> None:
    completion, waiting, written = _waiting_one()
    completion.settle(0, 0, 41, 123)
    completion.settle(0, 0, 99, 456)  # (an ack through NATS after it: ignored)
    completion.fail_unsettled(NOT_LEADER)  # (the leadership's end after it: nothing)
    assert waiting == {}
    assert len(written) == 1
    [result] = decode_produce_response(written[0])
    assert (result.error_code, result.offset) == (ErrorCode.NONE, 41)


def test_its_timeout_answers_timeout_and_a_later_commit_nothing() -> None:
    completion, waiting, written = _waiting_one()
    answer = completion.on_done
    assert isinstance(answer, AnswerAtHw)
    answer.expire()
    completion.settle(0, 0, 41, 123)
    assert waiting == {}
    assert len(written) == 1
    [result] = decode_produce_response(written[0])
    assert result.error_code == ErrorCode.TIMEOUT
