"""Error registry and the typed error attributes."""

from __future__ import annotations

import pickle

import pytest

from jetsdk import errors
from jetsdk.codec.error_codes import RETRIABLE, ErrorCode
from jetsdk.codec.messages import decode_error, encode_error
from support.exception_roots import outside


@pytest.mark.parametrize("code", [c for c in ErrorCode if c != ErrorCode.NONE])
def test_every_code_has_a_class_with_matching_retriable(code: ErrorCode) -> None:
    exc = errors.error_from_code(code, "boom")
    assert isinstance(exc, errors.JetError)
    assert exc.code == code
    assert exc.retriable == (code in RETRIABLE)
    assert type(exc) is not errors.ServerError or code == ErrorCode.UNKNOWN


def test_unknown_code_is_server_error_with_raw_code() -> None:
    exc = errors.error_from_code(999, "future")
    assert type(exc) is errors.ServerError
    assert exc.code == 999
    assert exc.code_name == "CODE_999"
    assert not exc.retriable


def test_none_is_not_an_error() -> None:
    with pytest.raises(ValueError):
        errors.error_from_code(ErrorCode.NONE)


def test_details_become_attributes() -> None:
    body = decode_error(
        encode_error(ErrorCode.OFFSET_OUT_OF_RANGE, "below", {"log_start": 5, "hw": 9})
    )
    exc = errors.error_from_body(body)
    assert isinstance(exc, errors.OffsetOutOfRange)
    assert (exc.log_start, exc.hw) == (5, 9)
    assert str(exc) == "below"
    leader = errors.error_from_code(ErrorCode.NOT_LEADER, "", {"leader": "s2"})
    assert isinstance(leader, errors.NotLeader)
    assert leader.leader == "s2"
    assert leader.retriable
    too_big = errors.error_from_code(ErrorCode.MESSAGE_TOO_LARGE, "", {"max_message_bytes": 7})
    assert isinstance(too_big, errors.MessageTooLarge)
    assert too_big.max_message_bytes == 7


def test_builtin_bases_and_pickling() -> None:
    assert issubclass(errors.Timeout, TimeoutError)
    assert issubclass(errors.JetConnectionError, ConnectionError)
    assert errors.JetConnectionError("x").retriable
    exc = errors.StreamNotFound("gone", details={"stream": "s"})
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is errors.StreamNotFound
    assert back.stream == "s"
    assert str(back) == "gone"


OUTSIDE_JET_ERROR = {
    # The codec is below jetsdk.errors (which imports the codec's error codes and
    # messages): its errors are ValueErrors, turned into MalformedFrame where the SDK
    # reads a frame.
    "jetsdk.codec.errors.CodecError",
    "jetsdk.codec.compression.CompressionError",
    "jetsdk.codec.frames.FrameTooLarge",
    "jetsdk.codec.stream_settings.SettingError",
    # The simulations' invariant checks are assertions.
    "jetsdk.group.invariants.InvariantViolation",
    "jetsdk.share.simulation.InvariantViolation",
}


def test_every_sdk_exception_has_the_one_root() -> None:
    assert outside("jetsdk", errors.JetError, OUTSIDE_JET_ERROR) == []
