"""The SDK checks create_stream's settings with the server's own checker (issue 31, item 2).

A bad value raises :class:`~jetsdk.InvalidArgument` naming the request key before anything
is sent; a bad body that reaches the server (bypassing the check) comes back as the same
error type and field.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from jetsdk import Client, InvalidArgument
from jetsdk.client_requests import create_stream_body
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import encode_json
from jetsdk.codec.stream_settings import MAX_DURATION_S, MAX_SEGMENT_MAX_BYTES
from support.jet_dev import JetDev

pytestmark = pytest.mark.anyio

GOOD: dict[str, Any] = {
    "partitions": 1,
    "replication_factor": 1,
    "compact": False,
    "group": None,
    "retention_max_age": None,
    "retention_max_bytes": None,
    "retention_max_messages": None,
    "segment_max_bytes": None,
    "segment_max_age": None,
    "delete_retention": None,
    "max_message_bytes": None,
    "min_isr": None,
    "durability": None,
    "duplicate_window": None,
    "no_nats_copies": False,
}


@pytest.mark.parametrize(
    ("argument", "value", "field"),
    [
        ("duplicate_window", 1e300, "duplicate_window_s"),
        ("duplicate_window", math.nan, "duplicate_window_s"),
        ("duplicate_window", -1.0, "duplicate_window_s"),
        ("segment_max_bytes", 2**40, "segment_max_bytes"),
        ("segment_max_bytes", 100, "segment_max_bytes"),
        ("segment_max_age", math.inf, "segment_max_age_s"),
        ("segment_max_age", 0.0, "segment_max_age_s"),
        ("retention_max_age", 2**63, "retention_max_age_s"),
        ("retention_max_bytes", 2**63, "retention_max_bytes"),
        ("retention_max_messages", 0, "retention_max_messages"),
        ("retention_max_messages", 2.0, "retention_max_messages"),
        ("delete_retention", -math.inf, "delete_retention_s"),
        ("max_message_bytes", 2**64, "max_message_bytes"),
        ("partitions", 0, "partitions"),
        ("partitions", True, "partitions"),
        ("replication_factor", 2**63, "replication_factor"),
        ("min_isr", 2, "min_isr"),  # above the replication factor
        ("durability", "always", "durability"),
        ("durability", "written", None),  # fine at replication factor 1
        ("compact", 1, "compact"),
        ("no_nats_copies", 1, "no_nats_copies"),
        ("no_nats_copies", True, None),  # fine at replication factor 1
    ],
)
def test_create_stream_body_refuses_what_the_server_refuses(
    argument: str, value: object, field: str | None
) -> None:
    args = {**GOOD, argument: value}
    if field is None:
        assert create_stream_body("s", None, **args)
        return
    with pytest.raises(InvalidArgument) as err:
        create_stream_body("s", None, **args)
    assert err.value.field == field
    assert field in str(err.value)


def test_the_largest_values_are_accepted() -> None:
    body = create_stream_body(
        "s",
        None,
        **{
            **GOOD,
            "duplicate_window": MAX_DURATION_S,
            "segment_max_bytes": MAX_SEGMENT_MAX_BYTES,
            "retention_max_bytes": 2**63 - 1,
        },
    )
    assert b'"segment_max_bytes":2147483647' in body


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_checked_before_sending_and_mapped_alike_from_the_server(
    jet_dev: JetDev,
) -> None:
    name = f"settings-{uuid.uuid4().hex[:8]}"
    async with Client(jet_dev.servers) as client:
        with pytest.raises(InvalidArgument) as local:
            await client.create_stream(name, duplicate_window=1e300)
        assert local.value.field == "duplicate_window_s"
        # The same body sent raw (as another SDK could): the server's answer maps to the
        # same type and field.
        body = {"op_id": uuid.uuid4().hex, "name": name, "subject": name}
        body["duplicate_window_s"] = 1e300
        with pytest.raises(InvalidArgument) as remote:
            await client.request_any(Api.CREATE_STREAM, encode_json(body))
        assert remote.value.field == "duplicate_window_s"
        assert str(local.value) in str(remote.value)  # one checker, one message
        with pytest.raises(InvalidArgument) as unknown:
            await client.request_any(
                Api.CREATE_STREAM, encode_json({**body, "duplicate_window_s": 1, "ttl": 5})
            )
        assert unknown.value.field == "ttl"
        info = await client.create_stream(name, duplicate_window=MAX_DURATION_S)
        assert info.config["duplicate_window_s"] == MAX_DURATION_S
