from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.group.errors import InvalidGroupRecord, UnsupportedGroupVersion
from jetsdk.group.records import (
    MAX_ID_BYTES,
    MAX_RECORD_BYTES,
    Checkpoint,
    FinalOffset,
    GroupRecord,
    Heartbeat,
    Join,
    Leave,
    OffsetCommit,
    Release,
    decode_record,
    encode_record,
    record_key,
)
from jetsdk.group.stream_partition import StreamPartition

ids = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters="\x7f"),
    min_size=1,
    max_size=20,
)
small = st.integers(min_value=0, max_value=2**40)
finals = st.builds(
    FinalOffset,
    stream=ids,
    partition=st.integers(0, 100),
    generation=small,
    offset=st.none() | small,
    metadata=st.text(max_size=10),
)


def _unique(entries: list[FinalOffset]) -> list[FinalOffset]:
    seen: dict[tuple[str, int], FinalOffset] = {}
    for e in entries:
        seen.setdefault((e.stream, e.partition), e)
    return list(seen.values())


records: st.SearchStrategy[GroupRecord] = st.one_of(
    st.builds(
        Join,
        group=ids,
        member=ids,
        subscriptions=st.dictionaries(ids, st.integers(1, 64), max_size=4),
        instance=st.none() | ids,
        assignors=st.lists(ids, min_size=1, max_size=3, unique=True).map(tuple),
        session_timeout_ms=st.integers(1, 86_400_000),
        release_timeout_ms=st.integers(1, 86_400_000),
        metadata=st.text(max_size=20),
    ),
    st.builds(Heartbeat, group=ids, member=ids, generation=small),
    st.builds(
        OffsetCommit,
        group=ids,
        member=ids,
        stream=ids,
        partition=st.integers(0, 65535),
        generation=small,
        offset=small,
        metadata=st.text(max_size=20),
    ),
    st.builds(
        Release,
        group=ids,
        member=ids,
        partitions=st.lists(finals, min_size=1, max_size=4).map(_unique),
    ),
    st.builds(
        Leave,
        group=ids,
        member=ids,
        temporary=st.booleans(),
        final_offsets=st.lists(finals, max_size=4).map(_unique),
    ),
    st.builds(
        Checkpoint,
        group=ids,
        member=ids,
        as_of=st.integers(-1, 2**40),
        state=st.fixed_dictionaries({"x": st.integers(0, 9)}),
    ),
)


@settings(max_examples=150, deadline=None)
@given(records)
def test_round_trip(record: GroupRecord) -> None:
    raw = encode_record(record)
    assert decode_record(raw) == record
    assert decode_record(memoryview(raw)) == record
    assert record_key(record) == record.group.encode()


def test_join_subscriptions_are_sorted_and_mapped() -> None:
    join = Join(group="g", member="m", subscriptions={"b": 2, "a": 1})
    assert join.subscriptions == (("a", 1), ("b", 2))
    assert join.subscription_map == {"a": 1, "b": 2}


def test_partition_helpers() -> None:
    commit = OffsetCommit(group="g", member="m", stream="s", partition=3, generation=1, offset=5)
    assert commit.stream_partition == StreamPartition("s", 3)
    assert OffsetCommit.of("g", "m", StreamPartition("s", 3), 1, 5) == commit
    with_text = OffsetCommit.of("g", "m", commit.stream_partition, 1, 5, "note")
    assert (with_text.metadata, with_text.offset, with_text.generation) == ("note", 5, 1)
    assert FinalOffset("s", 4, 1).stream_partition == StreamPartition("s", 4)
    assert str(StreamPartition("s", 4)) == "s[4]"


def _obj(**fields: object) -> bytes:
    base: dict[str, object] = {"v": 1, "type": "heartbeat", "group": "g", "member": "m"}
    base.update(fields)
    return orjson.dumps({k: v for k, v in base.items() if v is not ...})


def _join(**fields: object) -> bytes:
    """A join record, valid but for ``fields``."""
    valid: dict[str, object] = {
        "type": "join",
        "subscriptions": {"s": 1},
        "assignors": ["range"],
        "session_timeout_ms": 1000,
        "release_timeout_ms": 1000,
    }
    return _obj(**{**valid, **fields})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"not json", "json"),
        (b"[1, 2]", "json"),
        (_obj(v=...), "field"),
        (_obj(v=0), "limit"),
        (_obj(v=True), "field"),
        (_obj(type="dance"), "type"),
        (_obj(group=""), "limit"),
        (_obj(group="x" * (MAX_ID_BYTES + 1)), "limit"),
        (_obj(member="a\nb"), "field"),
        (_obj(member=7), "field"),
        (_obj(generation=-1), "limit"),
        (_obj(generation=1.5), "field"),
        (_obj(type="commit", stream="s", partition=0, generation=1, offset=-1), "limit"),
        (_obj(type="commit", stream="s", partition=70000, generation=1, offset=1), "limit"),
        (_obj(type="commit", stream="s", partition=0, generation=1), "field"),
        (_obj(type="release", partitions=[]), "field"),
        (_obj(type="release", partitions={}), "field"),
        (_obj(type="release", partitions=[1]), "field"),
        (
            _obj(
                type="release",
                partitions=[
                    {"stream": "s", "partition": 0, "generation": 1},
                    {"stream": "s", "partition": 0, "generation": 2},
                ],
            ),
            "field",
        ),
        (_obj(type="leave", temporary="yes"), "field"),
        (_join(subscriptions={"s": 0}), "limit"),
        (_join(assignors=[]), "limit"),
        (_join(assignors=["range", "range"]), "field"),
        (_join(session_timeout_ms=0), "limit"),
        (_obj(type="join", subscriptions=[], assignors=["range"]), "field"),
        (_obj(type="checkpoint", as_of=-2, state={}), "limit"),
        (_obj(type="checkpoint", as_of=0, state=[]), "field"),
    ],
)
def test_invalid_records_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidGroupRecord) as info:
        decode_record(raw)
    assert not isinstance(info.value, UnsupportedGroupVersion)
    assert info.value.reason == reason


def test_the_join_the_invalid_ones_differ_from_is_valid() -> None:
    assert isinstance(decode_record(_join()), Join)


def test_newer_version_is_not_skippable() -> None:
    with pytest.raises(UnsupportedGroupVersion) as info:
        decode_record(_obj(v=2, type="something-new"))
    assert info.value.version == 2


def test_oversized_record_is_refused() -> None:
    with pytest.raises(InvalidGroupRecord) as info:
        decode_record(b" " * (MAX_RECORD_BYTES + 1))
    assert info.value.reason == "limit"


def test_unknown_fields_and_null_defaults_are_accepted() -> None:
    raw = _obj(extra={"a": 1}, generation=None)
    assert decode_record(raw) == Heartbeat(group="g", member="m", generation=0)


def test_constructors_validate() -> None:
    with pytest.raises(InvalidGroupRecord):
        Heartbeat(group="g", member="")
    with pytest.raises(InvalidGroupRecord):
        Release(group="g", member="m", partitions=())
    with pytest.raises(InvalidGroupRecord):
        FinalOffset("s", 0, 1, offset=-5)
