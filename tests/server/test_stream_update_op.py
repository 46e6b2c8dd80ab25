"""The UpdateStream metadata op and its request check (issue 36, item 6)."""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.stream_settings import SettingError, check_update, repair_stored
from jetserver.errors import ApiError
from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.op_codec import op_from_dict
from jetserver.metadata.ops import CreateStream, UpdateStream, apply
from jetserver.metadata.stream_update import update_op


def _state() -> MetadataState:
    spec = StreamSpec(name="orders", subject="orders", partitions=2, retention_max_messages=10)
    state, result = apply(MetadataState(), CreateStream(spec, "id1", 1, (("s1",), ("s1",))))
    assert result.ok
    return state


def test_update_changes_only_the_named_settings_and_round_trips() -> None:
    state = _state()
    op = UpdateStream("orders", (("retention_max_bytes", 4096), ("retention_max_messages", None)))
    assert op_from_dict(op.to_dict()) == op
    after, result = apply(state, op)
    assert result.ok
    spec = after.streams["orders"].spec
    assert (spec.retention_max_bytes, spec.retention_max_messages) == (4096, None)
    assert spec.partitions == 2
    assert after.streams["orders"].partitions == state.streams["orders"].partitions
    again, result = apply(after, op)  # idempotent
    assert result.ok
    assert again.streams == after.streams


def test_update_of_a_missing_stream_or_setting_is_refused() -> None:
    state = _state()
    _, result = apply(state, UpdateStream("nope", (("retention_max_bytes", 1),)))
    assert result.error_code == ErrorCode.STREAM_NOT_FOUND
    _, result = apply(state, UpdateStream("orders", (("colour", 1),)))
    assert result.error_code == ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"partitions": 4}, "partitions"),
        ({"replication_factor": 3}, "replication_factor"),
        ({"compact": True}, "compact"),
        ({"duplicate_window_s": 10}, "duplicate_window_s"),
        ({"max_message_bytes": 0}, "max_message_bytes"),
        ({"segment_max_bytes": None}, "segment_max_bytes"),
        ({"retention_max_bytes": 0}, "retention_max_bytes"),
        ({"retention_max_age_s": float("nan")}, "retention_max_age_s"),
        ({"retention_max_messages": True}, "retention_max_messages"),
        ({"typo_s": 1}, "typo_s"),
        ({"no_nats_copies": None}, "no_nats_copies"),
        ({"no_nats_copies": 1}, "no_nats_copies"),
    ],
)
def test_request_check_names_the_setting(settings: dict[str, object], field: str) -> None:
    with pytest.raises(SettingError) as caught:
        check_update(settings)
    assert caught.value.field == field
    with pytest.raises(ApiError) as refused:
        update_op({"name": "orders", "settings": settings}, _state().streams)
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert refused.value.details == {"field": field}


def test_request_for_a_missing_stream_or_without_settings() -> None:
    with pytest.raises(ApiError) as caught:
        update_op({"name": "nope", "settings": {"retention_max_bytes": 5}}, _state().streams)
    assert caught.value.code == ErrorCode.STREAM_NOT_FOUND
    with pytest.raises(ApiError) as caught:
        update_op({"name": "orders", "settings": {}}, _state().streams)
    assert caught.value.details == {"field": "settings"}


def test_no_nats_copies_updates_on_one_replica_only() -> None:
    """Issue 39: the setting turns on and off live at replication factor 1; a replicated
    stream (or one in a group) refuses it, and stored metadata holding it there is repaired
    to off (its copies carry failover)."""
    state = _state()
    op = update_op({"name": "orders", "settings": {"no_nats_copies": True}}, state.streams)
    after, result = apply(state, op)
    assert result.ok
    assert after.streams["orders"].spec.no_nats_copies is True
    replicated = StreamSpec(name="r", subject="r", replication_factor=3)
    grouped = StreamSpec(name="r", subject="r", group="g")
    for spec, placed in ((replicated, (("s1", "s2", "s3"),)), (grouped, (("s1",),))):
        known, result = apply(MetadataState(), CreateStream(spec, "id2", 1, placed))
        assert result.ok
        with pytest.raises(ApiError) as refused:
            update_op({"name": "r", "settings": {"no_nats_copies": True}}, known.streams)
        assert refused.value.details == {"field": "no_nats_copies"}
        stored = {**spec.to_dict(), "no_nats_copies": True}
        assert StreamSpec.from_dict(stored).no_nats_copies is False
        assert repair_stored(stored)[1] == ["no_nats_copies: stored value True is now False"]
