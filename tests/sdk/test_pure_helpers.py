"""Pure helpers: addresses, subjects, start positions, metadata parsing, headers."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from jetsdk.client import datetime_to_ns, resolve_servers
from jetsdk.codec.record import Record
from jetsdk.consumer.positions import StartAt, parse_start, reset_offset, start_offset
from jetsdk.errors import InvalidArgument, MalformedFrame
from jetsdk.message import Message, new_message, normalize_headers
from jetsdk.metadata import StreamInfo, partition_subject
from jetsdk.subjects import is_literal, subject_matches
from jetsdk.transport import Address, parse_address


def test_parse_address() -> None:
    assert parse_address("h:1") == Address("h", 1)
    assert parse_address("h") == Address("h", 9292)
    assert parse_address("[::1]:5") == Address("::1", 5)
    assert str(Address("::1", 5)) == "[::1]:5"
    for bad in ("", ":1", "h:0", "h:x", "[::1"):
        with pytest.raises(InvalidArgument):
            parse_address(bad)


def test_resolve_servers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JET_SERVERS", "a:1, b:2")
    assert resolve_servers(None) == [Address("a", 1), Address("b", 2)]
    monkeypatch.delenv("JET_SERVERS")
    assert resolve_servers(None) == [Address("127.0.0.1", 9292)]
    with pytest.raises(InvalidArgument):
        resolve_servers([])


@pytest.mark.parametrize(
    ("pattern", "subject", "match"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("*.b", "x.b", True),
        ("a", "a.b", False),
        ("a", "a", True),
        ("a", "b", False),
        (">", "x", True),
        ("*.b", "a.b", True),
        ("a.*.1", "a.x.1", True),
    ],
)
def test_subject_matches(pattern: str, subject: str, match: bool) -> None:
    assert subject_matches(pattern, subject) is match


def test_subject_helpers() -> None:
    assert is_literal("a.b")
    assert not is_literal("a.*")
    assert partition_subject("orders", 0) == "orders"
    assert partition_subject("orders", 2) == "orders.2"


def test_start_positions() -> None:
    assert parse_start("earliest") == StartAt.earliest()
    assert parse_start(7) == StartAt.offset(7)
    moment = datetime(2024, 1, 1, tzinfo=UTC)
    assert parse_start(moment) == StartAt("timestamp", 1704067200 * 10**9)
    assert datetime_to_ns(moment) == 1704067200 * 10**9
    with pytest.raises(InvalidArgument):
        parse_start(-1)
    with pytest.raises(InvalidArgument):
        parse_start("soon")  # type: ignore[arg-type]
    assert start_offset(StartAt.latest(), log_start=3, hw=10) == 9
    assert start_offset(StartAt.latest(), log_start=0, hw=0) == 0
    assert start_offset(StartAt.new_only(), log_start=3, hw=10) == 10
    assert start_offset(StartAt.timestamp(5), log_start=0, hw=10, at_time=4) == 4


def test_reset_offset() -> None:
    assert reset_offset(2, "earliest", log_start=5, hw=9) == 5
    assert reset_offset(2, "latest", log_start=5, hw=9) == 9
    assert reset_offset(20, "earliest", log_start=5, hw=9) == 9
    assert reset_offset(2, "raise", log_start=5, hw=9) is None


def test_metadata_parsing_is_strict() -> None:
    good = {
        "name": "s",
        "subject": "s",
        "group": None,
        "partitions": [
            {"partition": 1, "subject": "s.1", "leader": "a", "replicas": ["a"], "isr": ["a"]},
            {"partition": 0, "subject": "s", "leader": None, "replicas": [], "isr": []},
        ],
        "replication_factor": 1,
        "compact": False,
    }
    info = StreamInfo.from_json(good)
    assert [p.partition for p in info.partitions] == [0, 1]
    assert info.partition(1) is not None
    assert StreamInfo.from_json(info.to_json()) == info
    with pytest.raises(MalformedFrame):
        StreamInfo.from_json({**good, "name": 5})
    with pytest.raises(MalformedFrame):
        StreamInfo.from_json({"subject": "s"})


def test_normalize_headers() -> None:
    mixed: dict[str, str | bytes] = {"a": "x", "b": b"y"}
    assert normalize_headers(mixed) == (("a", b"x"), ("b", b"y"))
    assert normalize_headers([("a", "1"), ("a", "2")]) == (("a", b"1"), ("a", b"2"))
    assert normalize_headers(None) == ()
    with pytest.raises(TypeError):
        normalize_headers({"a": 1})  # type: ignore[dict-item]


def test_new_message_builds_the_same_frozen_message() -> None:
    record = Record(offset=7, timestamp=1, leader_epoch=0, value=b"v", key=b"k")
    fast = new_message("s", 2, record, 3, None)
    assert type(fast) is Message
    assert fast == Message("s", 2, record, 3)
    assert (fast.offset, fast.key, fast.delivery_count, fast.stale) == (7, b"k", 3, False)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.partition = 1  # type: ignore[misc]
