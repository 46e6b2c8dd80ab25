"""Stream management over the protocol: create (idempotent), describe, metadata, delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage
from jetsdk.codec.replica_fetch import FLAG_WAKE, ReplicaFetchRequest, encode_replica_fetch_request
from jetserver.server import Server
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio


async def test_hello(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        info = await c.hello()
    assert info["protocol"] == 1
    assert info["server_id"] == "s1"
    assert info["max_message_bytes"] == 1024 * 1024
    assert info["max_frame_bytes"] == 16 * 1024 * 1024


async def test_create_is_idempotent_and_conflicts_are_stream_exists(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        first = await c.create_stream(name="orders", subject="orders.*", partitions=2)
        assert first["created"] is True
        info = first["stream"]
        assert info["name"] == "orders"
        assert [p["subject"] for p in info["partitions"]] == ["orders.*", "orders.*.1"]
        assert info["partitions"][0]["leader"] == "s1"
        again = await c.create_stream(name="orders", subject="orders.*", partitions=2)
        assert again["created"] is False
        assert again["stream"] == info
        with pytest.raises(ServerError) as err:
            await c.create_stream(name="orders", subject="other")
        assert err.value.code == ErrorCode.STREAM_EXISTS
        with pytest.raises(ServerError) as err:
            await c.create_stream(name="orders", subject="orders.*", partitions=3)
        assert err.value.code == ErrorCode.STREAM_EXISTS


@pytest.mark.parametrize(
    ("request_fields", "field", "fragment"),
    [
        ({"name": "_x", "subject": "s"}, "name", "must not start"),
        ({"name": "a b", "subject": "s"}, "name", "may only hold"),
        ({"name": "ok", "subject": "a..b"}, "subject", "empty token"),
        ({"name": "ok", "subject": "a.>.b"}, "subject", "last token"),
        ({"name": "ok", "subject": "a.>", "partitions": 2}, "partitions", "one partition"),
        (
            {"name": "ok", "subject": "s", "replication_factor": 2},
            "replication_factor",
            "replication factor 2 needs a cluster; this server runs alone",
        ),
    ],
)
async def test_create_validation(
    jet: Server, request_fields: dict[str, object], field: str, fragment: str
) -> None:
    async with await RawClient.connect(jet.address) as c:
        with pytest.raises(ServerError) as err:
            await c.create_stream(**request_fields)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    assert err.value.error.details["field"] == field
    assert fragment in err.value.error.message


async def test_metadata_describe_and_list_offsets(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="a", subject="a")
        await c.create_stream(name="b", subject="b", group="g", compact=True)
        meta = await c.metadata()
        assert meta["servers"] == [{"id": "s1", "address": jet.address, "live": True}]
        assert [s["name"] for s in meta["streams"]] == ["a", "b"]
        assert meta["streams"][1]["group"] == "g"
        assert meta["streams"][1]["compact"] is True
        only = await c.metadata(["b", "missing"])
        assert [s["name"] for s in only["streams"]] == ["b"]
        results = await c.produce(
            "a", 0, [ProduceMessage(b"x"), ProduceMessage(b"y")], ack_policy=AckPolicy.ALL
        )
        assert [r.offset for r in results] == [0, 1]
        d = await c.describe("a")
        p0 = d["partitions"][0]
        assert p0["leo"] == 2
        assert p0["log_start"] == 0
        assert p0["segments"] == 1
        assert p0["size_bytes"] > 0
        assert p0["hw"] == 2  # ALL acks: flushed, so committed
        assert (await c.list_offsets("a", 0, "earliest"))["offset"] == 0
        latest = await c.list_offsets("a", 0, "latest")
        assert latest == {"offset": 2, "hw": 2, "log_start": 0}
        ts = results[1].timestamp
        assert (await c.list_offsets("a", 0, "timestamp", ts))["offset"] in (0, 1)
        assert (await c.list_offsets("a", 0, "timestamp", ts + 10**12))["offset"] == 2
        with pytest.raises(ServerError) as err:
            await c.describe("missing")
        assert err.value.code == ErrorCode.STREAM_NOT_FOUND
        with pytest.raises(ServerError) as err:
            await c.list_offsets("a", 5)
        assert err.value.code == ErrorCode.PARTITION_NOT_FOUND


async def test_delete_removes_data(jet: Server, tmp_path: Path) -> None:
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="gone", subject="gone")
        await c.produce("gone", 0, [ProduceMessage(b"x")])
        streams_dir = tmp_path / "data" / "streams"
        assert [p.name for p in streams_dir.iterdir() if p.name.startswith("gone-")]
        assert await c.delete_stream("gone") == {"deleted": True}
        assert not [p for p in streams_dir.iterdir() if p.name.startswith("gone")]
        with pytest.raises(ServerError) as err:
            await c.fetch("gone", 0, 0)
        assert err.value.code == ErrorCode.STREAM_NOT_FOUND
        with pytest.raises(ServerError) as err:
            await c.delete_stream("gone")
        assert err.value.code == ErrorCode.STREAM_NOT_FOUND
        # Re-created: a new, empty stream.
        await c.create_stream(name="gone", subject="gone")
        header, records = await c.fetch("gone", 0, 0)
        assert header.hw == 0
        assert records == []


async def test_unknown_api_and_bad_json(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        with pytest.raises(ServerError) as err:
            await c.request(99, b"{}")
        assert err.value.code == ErrorCode.UNSUPPORTED_API
        # Fetch sessions are for servers of a cluster.
        wake = ReplicaFetchRequest(session_id=1, max_wait_ms=0, max_bytes=0, flags=FLAG_WAKE)
        with pytest.raises(ServerError) as err:
            await c.request(Api.REPLICA_FETCH, encode_replica_fetch_request(wake))
        assert err.value.code == ErrorCode.UNSUPPORTED_API
        with pytest.raises(ServerError) as err:
            await c.call_json(2, {"name": 5, "subject": "x"})
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
        # The connection is still usable after request-level errors.
        assert (await c.hello())["protocol"] == 1
