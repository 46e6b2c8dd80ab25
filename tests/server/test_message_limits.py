"""A stream's ``max_message_bytes`` is changed by UpdateStream and holds at every entry
(issue 39, item 4; spec/protocol.md, "Stream settings" and "16 UpdateStream").

Direct Produce on the jet port, a NATS request, and a hostile raw-socket NATS publisher
(plain PUBs without a reply, above the limit, between ones below it) all meet the
stream's current limit; the server keeps serving another stream meanwhile. A stream's
limit is at most the server's ``limits.max_message_bytes`` and at most NATS's
``max_payload`` less the envelope allowance (a bigger one could never arrive by NATS).
Before, UpdateStream refused ``max_message_bytes`` (a fixed setting) and CreateStream
accepted a limit above NATS's ``max_payload``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.limits import ENVELOPE_ALLOWANCE_BYTES
from jetsdk.codec.messages import ProduceMessage
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError
from support.raw_nats import pub, send_frames

pytestmark = pytest.mark.anyio

SERVER_LIMIT = 4000
"""The server's ``limits.max_message_bytes`` in these tests."""
HOSTILE_ROUNDS = 50


async def _update(c: RawClient, name: str, **settings: Any) -> dict[str, Any]:
    answer = await c.call_json(Api.UPDATE_STREAM, {"name": name, "settings": settings})
    config: dict[str, Any] = answer["stream"]["config"]
    return config


async def _nats_error(nc: NatsClient, subject: str, size: int) -> dict[str, Any] | None:
    """The error of a NATS request of ``size`` bytes (None: stored)."""
    reply = await nc.request(subject, b"n" * size, timeout=10)
    error: dict[str, Any] | None = orjson.loads(reply.data).get("error")
    return error


async def _publish_raw(url: str, subject: str, sizes: list[int]) -> None:
    """PUB each size from a raw NATS socket, no reply subject; wait for the PONG."""
    await send_frames(url, [pub(subject, b"h" * size) for size in sizes])


async def test_update_stream_changes_the_limit_at_every_entry(
    nats_server: NatsServer, tmp_path: Path, nc: NatsClient
) -> None:
    async with (
        running_server(
            nats_server.url, tmp_path / "data", limits__max_message_bytes=SERVER_LIMIT
        ) as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="lim", subject="lim", max_message_bytes=1000)
        await c.create_stream(name="other", subject="other")

        # Raised: 1500 bytes now fit on the jet port and by NATS; 2500 do not.
        assert (await _update(c, "lim", max_message_bytes=2000))["max_message_bytes"] == 2000
        results = await c.produce(
            "lim", 0, [ProduceMessage(b"d" * 1500), ProduceMessage(b"d" * 2500)]
        )
        assert [r.error_code for r in results] == [0, ErrorCode.MESSAGE_TOO_LARGE]
        assert await _nats_error(nc, "lim", 1500) is None
        error = await _nats_error(nc, "lim", 2500)
        assert error is not None
        assert error["code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert "2000" in error["description"]

        # Lowered: 800 bytes are refused at every entry; 100 bytes are stored.
        await _update(c, "lim", max_message_bytes=500)
        results = await c.produce(
            "lim", 0, [ProduceMessage(b"d" * 800), ProduceMessage(b"d" * 100)]
        )
        assert [r.error_code for r in results] == [ErrorCode.MESSAGE_TOO_LARGE, 0]
        error = await _nats_error(nc, "lim", 800)
        assert error is not None
        assert error["code"] == ErrorCode.MESSAGE_TOO_LARGE
        replica = server.streams.replica("lim", 0)
        rejected = replica.messages_rejected
        # A hostile publisher: oversized plain PUBs (nothing to answer) among small ones.
        await _publish_raw(nats_server.url, "lim", [800, 100] * HOSTILE_ROUNDS)
        # The other stream is served meanwhile, and after.
        reply = orjson.loads((await nc.request("other", b"fine", timeout=10)).data)
        assert reply["offset"] == 0
        before = [1500, 1500, 100]  # stored above, in order
        records = await c.collect("lim", 0, len(before) + HOSTILE_ROUNDS)
        assert [len(r.value) for r in records] == before + [100] * HOSTILE_ROUNDS
        assert replica.messages_rejected - rejected == HOSTILE_ROUNDS

        # Null: the server's limit.
        config = await _update(c, "lim", max_message_bytes=None)
        assert config["max_message_bytes"] is None
        results = await c.produce("lim", 0, [ProduceMessage(b"d" * SERVER_LIMIT)])
        assert results[0].error_code == 0
        # Above the server's limit: refused, naming the field; the stream keeps its limit.
        with pytest.raises(ServerError) as refused:
            await _update(c, "lim", max_message_bytes=SERVER_LIMIT + 1)
        assert refused.value.code == ErrorCode.INVALID_ARGUMENT
        assert refused.value.error.details == {"field": "max_message_bytes"}
        assert "limits.max_message_bytes" in refused.value.error.message
        results = await c.produce("lim", 0, [ProduceMessage(b"d" * (SERVER_LIMIT + 1))])
        assert results[0].error_code == ErrorCode.MESSAGE_TOO_LARGE


async def test_stream_limit_is_at_most_nats_max_payload(tmp_path: Path) -> None:
    max_payload = 256 * 1024
    room = max_payload - ENVELOPE_ALLOWANCE_BYTES
    with NatsServer(max_payload=max_payload) as small:
        async with (
            running_server(small.url, tmp_path / "data") as server,
            await RawClient.connect(server.address) as c,
        ):
            with pytest.raises(ServerError) as refused:
                await c.create_stream(name="big", subject="big", max_message_bytes=room + 1)
            assert refused.value.code == ErrorCode.INVALID_ARGUMENT
            assert refused.value.error.details == {"field": "max_message_bytes"}
            assert str(max_payload) in refused.value.error.message
            await c.create_stream(name="big", subject="big", max_message_bytes=room)
            with pytest.raises(ServerError) as refused:
                await _update(c, "big", max_message_bytes=room + 1)
            assert refused.value.code == ErrorCode.INVALID_ARGUMENT
            assert refused.value.error.details == {"field": "max_message_bytes"}
            # The largest message the stream allows arrives by NATS, envelope and all.
            results = await c.produce("big", 0, [ProduceMessage(b"v" * room)])
            assert results[0].error_code == 0
            records = await c.collect("big", 0, 1)
            assert len(records[0].value) == room
