"""The metadata state machine, request validation and persistence (pure parts, real files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.error_codes import ErrorCode
from jetserver.errors import ApiError
from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.ops import CreateStream, DeleteStream, Op, apply
from jetserver.metadata.store import MetadataStore, load_state
from jetserver.metadata.validate import (
    spec_from_request,
    validate_stream_name,
    validate_subject,
)


def create(name: str, subject: str = "s", partitions: int = 1, **kw: Any) -> CreateStream:
    spec = StreamSpec(name=name, subject=subject, partitions=partitions, **kw)
    return CreateStream(spec, f"id-{name}", 123, tuple(("s1",) for _ in range(partitions)))


def test_create_is_idempotent_for_same_settings() -> None:
    s1, r1 = apply(MetadataState(), create("orders", "orders"))
    assert r1.ok
    assert r1.created
    s2, r2 = apply(s1, create("orders", "orders"))
    assert r2.ok
    assert not r2.created
    assert s2.streams == s1.streams
    assert r2.stream == r1.stream


def test_create_with_other_settings_is_stream_exists() -> None:
    s1, _ = apply(MetadataState(), create("orders", "orders"))
    s2, r = apply(s1, create("orders", "other"))
    assert r.error_code == ErrorCode.STREAM_EXISTS
    assert "subject" in r.message
    _, r = apply(s1, create("orders", "orders", compact=True))
    assert r.error_code == ErrorCode.STREAM_EXISTS
    assert s2.streams == s1.streams


def test_delete_then_delete_again() -> None:
    s1, _ = apply(MetadataState(), create("a"))
    s2, r = apply(s1, DeleteStream("a"))
    assert r.ok
    assert "a" not in s2.streams
    s3, r = apply(s2, DeleteStream("a"))
    assert r.error_code == ErrorCode.STREAM_NOT_FOUND
    assert s3.streams == s2.streams


def test_partition_assignments() -> None:
    _, r = apply(MetadataState(), create("p", "x", partitions=3))
    assert r.stream is not None
    assert [a.partition for a in r.stream.partitions] == [0, 1, 2]
    assert all(a.leader == "s1" and a.isr == ("s1",) for a in r.stream.partitions)


ops_strategy = st.lists(
    st.one_of(
        st.builds(
            create,
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["x", "y"]),
            st.integers(1, 3),
        ),
        st.builds(DeleteStream, st.sampled_from(["a", "b", "c"])),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops_strategy)
def test_replay_is_deterministic_and_serializable(ops: list[Op]) -> None:
    state = MetadataState()
    for op in ops:
        state, _ = apply(state, op)
    # Replaying the same ops (round-tripped through JSON) gives the same state.
    replayed = MetadataState()
    for op in ops:
        replayed, _ = apply(replayed, op_from_dict(orjson.loads(orjson.dumps(op.to_dict()))))
    assert replayed == state
    assert MetadataState.from_dict(orjson.loads(orjson.dumps(state.to_dict()))).streams == (
        state.streams
    )


@settings(max_examples=100, deadline=None)
@given(ops_strategy)
def test_applying_an_op_twice_changes_nothing_more(ops: list[Op]) -> None:
    state = MetadataState()
    for op in ops:
        once, _ = apply(state, op)
        twice, _ = apply(once, op)
        assert twice.streams == once.streams
        state = once


@pytest.mark.parametrize(
    "name",
    ["orders", "a", "A-b_c.d", "x" * 255, "0day"],
)
def test_good_names(name: str) -> None:
    assert validate_stream_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "non-empty"),
        (".", "must not start"),
        ("..", "must not start"),
        (".hidden", "must not start"),
        ("_x", "must not start"),
        ("__offsets", "reserved"),
        ("a b", "may only hold"),
        ("a/b", "may only hold"),
        ("x" * 256, "limit is 255"),
        (5, "non-empty string"),
    ],
)
def test_bad_names(name: Any, fragment: str) -> None:
    with pytest.raises(ApiError) as info:
        validate_stream_name(name)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    assert info.value.details["field"] == "name"
    assert fragment in info.value.message


def test_internal_names_need_the_flag() -> None:
    assert validate_stream_name("__offsets", internal=True) == "__offsets"
    with pytest.raises(ApiError):
        validate_stream_name("offsets", internal=True)


@pytest.mark.parametrize("subject", ["a", "a.b", "a.*", "a.>", ">", "*.b.*", "a.*.>"])
def test_good_subjects(subject: str) -> None:
    assert validate_subject(subject) == subject


@pytest.mark.parametrize(
    ("subject", "fragment"),
    [
        ("", "non-empty"),
        ("a..b", "empty token"),
        (".a", "empty token"),
        ("a.", "empty token"),
        ("a b", "whitespace"),
        ("a.>.b", "last token"),
        ("a*", "whole tokens"),
        ("a.b>", "whole tokens"),
    ],
)
def test_bad_subjects(subject: str, fragment: str) -> None:
    with pytest.raises(ApiError) as info:
        validate_subject(subject)
    assert fragment in info.value.message


def test_spec_from_request_defaults_and_errors() -> None:
    spec = spec_from_request({"name": "o", "subject": "o"})
    assert spec.partitions == 1
    assert spec.replication_factor == 1
    assert spec.group is None
    assert spec.segment_max_bytes == 268435456
    assert spec.delete_retention_s == 86400
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o", "replication_factor": 3})
    assert info.value.message == "replication factor 3 needs a cluster; this server runs alone"
    assert info.value.details == {"field": "replication_factor"}
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o.>", "partitions": 2})
    assert info.value.details == {"field": "partitions"}
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o", "partitions": 0})
    assert info.value.details == {"field": "partitions"}
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o", "compact": "yes"})
    assert info.value.details == {"field": "compact"}
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o", "group": "a b"})
    assert info.value.details == {"field": "group"}
    with pytest.raises(ApiError) as info:
        spec_from_request({"name": "o", "subject": "o", "retention_max_age_s": -1})
    assert info.value.details == {"field": "retention_max_age_s"}


async def _propose_all(store: MetadataStore, ops: list[Op]) -> None:
    for op in ops:
        await store.propose(op)


@pytest.mark.anyio
async def test_store_persists_atomically_and_reloads(tmp_path: Path) -> None:
    store = MetadataStore.open(tmp_path)
    await _propose_all(store, [create("a"), create("b", partitions=2), DeleteStream("a")])
    assert not (tmp_path / "metadata.json.tmp").exists()
    reloaded = MetadataStore.open(tmp_path)
    assert reloaded.state.streams == store.state.streams
    assert set(reloaded.state.streams) == {"b"}


def test_corrupt_metadata_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text("{not json")
    from jetserver.metadata.store import MetadataCorrupt

    with pytest.raises(MetadataCorrupt):
        load_state(tmp_path / "metadata.json")


def test_durability_written_needs_replication_factor_1() -> None:
    spec = spec_from_request({"name": "w", "subject": "w", "durability": "written"})
    assert spec.durability == "written"
    with pytest.raises(ApiError, match="replication_factor 1") as info:
        spec_from_request(
            {"name": "w", "subject": "w", "durability": "written", "replication_factor": 3},
            cluster_size=3,
        )
    assert info.value.details == {"field": "durability"}
